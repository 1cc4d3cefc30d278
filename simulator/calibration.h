// simulator/calibration.h — fits the simulator's corrections to measured steps.
//
// Data flow: (placement, measured StepReport) pairs + an uncalibrated CostModel
// -> calibrate() -> Calibration (per-device compute factors, per-task,
// per-layer, per-message and per-step overheads, wire factor, optimizer update
// cost) + the prediction error before and after.
// Method: the simulated step time is linear in these parameters along the
// critical path of the replay, and a device's busy time is linear in them over
// its tasks. calibrate() alternates: replay with the current parameters, read
// each sample's critical path, solve the relative-error least squares (ridge
// towards the defaults, parameters kept >= 0), until the path stops changing.
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/placement.h"
#include "simulator/cost_model.h"
#include "core/step_report.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

struct CalibrationSample {
  Placement placement;
  StepReport measured;  // ok, step_ms, devices[].busy_ms
};

struct AccuracyStats {
  int n = 0;
  double median_abs_rel_error = 0;  // median |predicted - measured| / measured
  double mean_abs_rel_error = 0;
  double max_abs_rel_error = 0;
  double spearman = 0;  // rank correlation of predicted and measured
};

// Spearman's rho with average ranks for ties; 0 when fewer than 2 values.
double spearman(const std::vector<double>& a, const std::vector<double>& b);
AccuracyStats accuracy(const std::vector<double>& predicted, const std::vector<double>& measured);

struct CalibrationResult {
  Calibration calibration;
  AccuracyStats before, after;  // on the samples used for fitting
  std::vector<double> predicted_before, predicted_after, measured;
  int iterations = 0;
};

struct CalibrationOptions {
  // Devices of the same kind, threads and host share one compute factor (their
  // speed differences are emulated exactly, so only the hardware needs a factor).
  bool tie_identical_devices = true;
  // Fitted by default: compute factors and the per-task, per-layer,
  // per-message, per-MB, per-step and optimizer-update costs. These three stay
  // at their starting values unless asked for: on this machine's measurements
  // (bench/sim_accuracy.sh) they lowered the in-sample error but raised the
  // leave-one-out error.
  bool fit_concurrency = false;
  bool fit_backward_extra = false;
  bool fit_first_task = false;
};

// Fits on the ok samples (at least 1). `base` supplies the uncalibrated costs;
// its own calibration is the starting point (and the ridge's pull).
Result<CalibrationResult> calibrate(const LayerGraph& g, const Cluster& c, const CostModel& base,
                                    int64_t batch_size, const std::vector<CalibrationSample>& samples,
                                    const CalibrationOptions& options = {});

// Samples of one model at one batch size on the cluster: a sample is a
// placement of *that* graph, replayed with *that* graph's layer costs.
struct CalibrationWorkload {
  const LayerGraph* graph = nullptr;
  const CostModel* base = nullptr;  // the graph's uncalibrated costs on the cluster
  int64_t batch_size = 32;
  std::vector<CalibrationSample> samples;
};
// One calibration fitted on the samples of several workloads on the same
// cluster (the corrections are the cluster's; the layer costs are each
// model's). The first workload's calibration is the starting point; the result's
// per-sample vectors run over the workloads' ok samples in order.
Result<CalibrationResult> calibrate(const Cluster& c, const std::vector<CalibrationWorkload>& workloads,
                                    const CalibrationOptions& options = {});

// Predicted step_ms of each placement under `cost` (failed simulations give 0).
std::vector<double> predict_steps(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch_size,
                                  const std::vector<Placement>& placements);

}  // namespace tapp
