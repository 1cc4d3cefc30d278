// service/sqlite_calibration_store.h — the simulator's CalibrationStore kept in the job database.
//
// Owns nothing but a reference to the JobStore: entries live in its key/value
// cache table under "calibration-<cluster fingerprint>", so every job of a
// server finds the calibration fitted on its cluster (by `tapp-cli calibrate`
// run against the same database's server, or by a verified job) and it
// survives restarts with the jobs.
// Data flow: find_calibration / save_calibration -> CalibrationStore::get/put
// -> JobStore::cache_get/put.
// Thread safety: as JobStore (every call is thread-safe).
#pragma once

#include "service/job_store.h"
#include "simulator/calibration_store.h"

namespace tapp::service {

class SqliteCalibrationStore : public CalibrationStore {
 public:
  explicit SqliteCalibrationStore(JobStore& store) : store_(store) {}
  std::optional<std::string> get(const std::string& fingerprint) override;
  Status put(const std::string& fingerprint, const std::string& entry_json) override;
  static std::string key_of(const std::string& fingerprint) { return "calibration-" + fingerprint; }

 private:
  JobStore& store_;
};

}  // namespace tapp::service
