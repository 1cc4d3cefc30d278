// simulator/calibration_store.h — calibrations that last: fitted once per cluster, used by every later plan.
//
// Owns `StoredCalibration` (a Calibration with where it comes from: the
// cluster's fingerprint, the timing method of the measurements, when it was
// fitted and from how many measured steps, and the measured steps themselves,
// grouped by workload, so a later measurement can join them and the whole set
// be refitted: placer/calibration_update.h), its JSON form, and where it is
// kept: the same key -> JSON text store as measured profiles
// (model/profile_cache.h: files per user for the CLI, the job database for the
// server), under "calibration-<cluster fingerprint>". `choose_calibration`
// gives the calibration a prediction uses: the cluster's stored one, or the
// default when there is none or the stored one is refused (corrupt, another
// cluster, another timing method), with the reason.
// Data flow: tapp-cli calibrate | optimize's verification -> StoredCalibration
// -> save_calibration(store) ... later plan/optimize: choose_calibration(store,
// cluster) -> CostModel::build.
// A sample is a placement *of one graph at one batch size* with its measured
// step (simulator/calibration.h): replaying it needs that graph (kept as its
// JSON layer graph) and that graph's layer costs (the profile cache). The
// record keeps at most kMaxStoredSamples, the oldest dropped first.
// Thread safety: stateless functions; the store's own contract applies.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/cluster.h"
#include "core/step_report.h"
#include "model/layer_graph.h"
#include "model/profile_cache.h"
#include "simulator/calibration.h"
#include "simulator/cost_model.h"

namespace tapp {

// One measured step kept for refitting.
struct StoredSample {
  nlohmann::json placement;  // placement_to_json of its workload's graph
  double measured_ms = 0;
  std::vector<DeviceStats> devices;  // busy_ms per device (the fit's per-device rows)
};

// The kept samples of one model at one batch size on the cluster.
struct StoredWorkload {
  nlohmann::json model;           // model_to_json of the graph (to rebuild its task graphs)
  std::string graph_fingerprint;  // model/model_json.h; checked against `model` when read
  int64_t batch_size = 0;
  std::vector<StoredSample> samples;
};

inline constexpr int kMaxStoredSamples = 200;

struct StoredCalibration {
  std::string cluster_fingerprint;  // core/cluster_fingerprint.h
  int timing_method = 0;            // the profiler's timing method the measurements were taken with
  std::string fitted_at;            // ISO 8601, UTC
  int measurements = 0;             // measured steps it was fitted on
  Calibration calibration;
  std::vector<StoredWorkload> workloads;  // the kept measured steps (may be fewer than `measurements`)

  int stored_samples() const;
};

// Adds the ok samples of `graph` at `batch_size` to `s` (joining the workload
// of the same graph and batch size), then drops the oldest beyond
// kMaxStoredSamples. Returns how many were added.
int add_samples(StoredCalibration& s, const LayerGraph& graph, const Cluster& cluster, int64_t batch_size,
                const std::vector<CalibrationSample>& samples);

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
// corrupt entry, one of another cluster, one of another timing method or one
// in the older format without its samples (tapp-calibration-v1) is an error
// saying so (never silently used).
Result<StoredCalibration> stored_calibration_from_json(const nlohmann::json& j, const Cluster& cluster,
                                                       int timing_method);

// The store key of a cluster's calibration: "calibration-<fingerprint>".
std::string calibration_key(const std::string& cluster_fingerprint);

// The cluster's stored calibration; nullopt when none is stored; an error when
// the stored entry is unreadable, of another cluster or another timing method.
Result<std::optional<StoredCalibration>> find_calibration(ProfileCache& store, const Cluster& cluster,
                                                          int timing_method);
Status save_calibration(ProfileCache& store, const StoredCalibration& s);

// The calibration predictions on `cluster` use, and what to say about it.
// A stored fit is used from this many measurements on: fits from fewer
// overfit (a fit from 2 verified steps of replicated plans predicted the
// one-device plan 63% below its measured step; from 5, within 8%).
constexpr int kMinMeasurementsToUse = 3;

struct ChosenCalibration {
  Calibration calibration;  // the stored one, else default_calibration()
  CalibrationUsed used;
  std::string refused;  // why a stored one was not used ("" = none was refused)
  std::string waiting;  // a stored fit from fewer than kMinMeasurementsToUse: kept, not used yet
};
ChosenCalibration choose_calibration(ProfileCache& store, const Cluster& cluster);

// Now as ISO 8601 UTC ("2026-11-23T08:59:00Z").
std::string utc_now_iso8601();

}  // namespace tapp
