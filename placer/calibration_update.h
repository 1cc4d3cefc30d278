// placer/calibration_update.h — measured steps join the cluster's calibration.
//
// Owns `join_calibration`: new samples (placements of this job's graph at its
// batch size, with their measured steps) are added to the samples the
// cluster's StoredCalibration keeps (simulator/calibration_store.h); the
// calibration is refitted on every kept sample it can replay and stored again
// under the cluster's fingerprint, so the next plan or optimize on the cluster
// predicts with it (its result says fitted, when, from how many measurements).
// What a refit needs of a sample (simulator/calibration.h): its placement, the
// graph the placement is of (kept with the samples as a JSON layer graph),
// that graph's layer costs on the cluster (this job's cost model; for another
// model, its profiles from the cache only: a workload whose profiles are no
// longer cached is kept but left out of this fit) and the batch size. The fit
// starts from default_calibration(), as `tapp-cli calibrate`'s does.
// A stored record that was refused (corrupt, another timing method, the older
// format without samples) is replaced by one fitted on the new samples alone,
// and the update says so. Failures are values (`error`), never exceptions.
// Data flow: samples -> find_calibration -> add_samples -> rebuild each
//            workload -> calibrate (all workloads) -> save_calibration.
// Thread safety: one call at a time per store (a read-modify-write of one entry).
#pragma once

#include <string>
#include <vector>

#include "simulator/calibration.h"

namespace tapp {

class ProfileCache;
class CostModel;
struct LayerGraph;
struct Cluster;

struct CalibrationUpdate {
  bool stored = false;
  int samples_added = 0;  // of this job
  int samples_kept = 0;   // in the stored record after the update
  int fitted_from = 0;    // samples the refit replayed (the record's `measurements`)
  std::string fitted_at;
  AccuracyStats before, after;   // on the fitted samples: default calibration vs refitted
  std::string replaced_refused;  // the previous record's refusal, when it was replaced
  std::string error;             // why nothing was stored ("" when stored)
};

// `uncalibrated`: this graph's costs on `cluster` (any calibration; the fit
// starts from the default). Samples that are not ok are ignored.
CalibrationUpdate join_calibration(ProfileCache& store, const LayerGraph& graph, const Cluster& cluster,
                                   int64_t batch_size, const CostModel& uncalibrated,
                                   const std::vector<CalibrationSample>& samples);

}  // namespace tapp
