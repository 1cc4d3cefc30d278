// simulator/calibration_store.h — calibrations that last: fitted once per cluster, used by every later plan.
//
// Owns `StoredCalibration` (a Calibration with where it comes from: the
// cluster's fingerprint, the timing method of the measurements, when it was
// fitted and from how many measured steps), its JSON form, the `CalibrationStore`
// interface (get/put by cluster fingerprint) with a file implementation for the
// CLI, and `find_calibration`, which returns the stored calibration of a
// cluster or says why a stored entry is refused. The service plugs its SQLite
// table in through the same interface.
// Data flow: tapp-cli calibrate | a verified optimize -> StoredCalibration ->
// store.put(fingerprint) ... later plan/optimize: find_calibration(store,
// cluster) -> CostModel::build(..., calibration).
// Thread safety: FileCalibrationStore writes each entry atomically (temp file +
// rename); one object is used by one thread.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "core/cluster.h"
#include "simulator/cost_model.h"

namespace tapp {

struct StoredCalibration {
  std::string cluster_fingerprint;  // core/cluster_fingerprint.h
  int timing_method = 0;            // the profiler's timing method the measurements were taken with
  std::string fitted_at;            // ISO 8601, UTC
  int measurements = 0;             // measured steps it was fitted on
  Calibration calibration;
};

// What a result says about the calibration its predictions used.
struct CalibrationUsed {
  bool fitted = false;  // false: default_calibration()
  std::string fitted_at;
  int measurements = 0;
  std::string cluster_fingerprint;
};
CalibrationUsed calibration_used(const std::optional<StoredCalibration>& stored);
nlohmann::json calibration_used_to_json(const CalibrationUsed& used);

nlohmann::json stored_calibration_to_json(const StoredCalibration& s);
// Parses and checks an entry for `cluster` measured with `timing_method`: a
// corrupt entry, one of another cluster or one of another timing method is an
// error saying so (never silently used).
Result<StoredCalibration> stored_calibration_from_json(const nlohmann::json& j, const Cluster& cluster,
                                                       int timing_method);

class CalibrationStore {
 public:
  virtual ~CalibrationStore() = default;
  virtual std::optional<std::string> get(const std::string& fingerprint) = 0;  // the entry's JSON text
  virtual Status put(const std::string& fingerprint, const std::string& entry_json) = 0;
};

// One <fingerprint>.json per cluster in `dir` (created on first put), e.g.
// default_cache_dir() + "/calibrations".
class FileCalibrationStore : public CalibrationStore {
 public:
  explicit FileCalibrationStore(std::string dir) : dir_(std::move(dir)) {}
  std::optional<std::string> get(const std::string& fingerprint) override;
  Status put(const std::string& fingerprint, const std::string& entry_json) override;
  std::string path_of(const std::string& fingerprint) const;

 private:
  std::string dir_;
};

// The cluster's stored calibration; nullopt when none is stored; an error when
// the stored entry is unreadable, of another cluster or another timing method.
Result<std::optional<StoredCalibration>> find_calibration(CalibrationStore& store, const Cluster& cluster,
                                                          int timing_method);
Status save_calibration(CalibrationStore& store, const StoredCalibration& s);

// default_cache_dir() + "/calibrations": where the CLI keeps them.
std::string default_calibration_dir();

// Now as ISO 8601 UTC ("2026-11-23T08:59:00Z").
std::string utc_now_iso8601();

}  // namespace tapp
