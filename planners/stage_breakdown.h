// planners/stage_breakdown.h — what each pipeline stage of a placement costs, from the simulator.
//
// Owns `stage_breakdown`: (layer graph, cluster, CostModel, placement, its
// stages from partition_export.h, batch) -> one simulated step (the task graph
// replayed by simulate(), with its per-task times) -> per stage and per device
// of the stage: forward and backward compute summed over the micro-batches it
// runs, the time its sends (activations forward, gradients back) spend on the
// wire, and the device's communication wait, bubble (idle: step - busy - comm)
// and peak memory as the StepReport counts them. No second cost model: every
// figure is the replay's or the StepReport's. A placement over a device's
// memory is still broken down; `memory_error` says which device and by how much.
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/placement.h"
#include "core/step_report.h"
#include "planners/partition_export.h"

namespace tapp {

struct LayerGraph;
struct Cluster;
class CostModel;

// One device's share of one stage.
struct StageDeviceCost {
  int device = 0;
  double forward_ms = 0, backward_ms = 0;  // this stage's compute tasks on this device, all its micro-batches
  double send_ms = 0;                      // this stage's transfers from this device, on the wire
  int micro_batches = 0;                   // of this stage on this device
  // The device's own figures (over every stage it runs), from the replay and the StepReport:
  double comm_ms = 0;    // waiting while an input was on the wire + draining its sends (+ allreduces)
  double bubble_ms = 0;  // the rest of the step it is not busy: waiting for other stages' compute
  double report_comm_ms =
      0;  // the StepReport's comm_ms: all waiting for remote inputs + draining (= comm + that wait)
  double update_ms = 0;  // optimizer update: busy beyond its compute tasks
  int64_t peak_memory_bytes = 0;
  double compute_ms() const { return forward_ms + backward_ms; }
};

struct StageCost {
  PipelineStage stage;
  std::vector<StageDeviceCost> devices;  // stage.devices order
  bool shares_device = false;  // a device of it runs another stage too: its device figures are shared
  int64_t param_bytes = 0;
  // The device of the stage with the most compute (the replica that sets its pace).
  const StageDeviceCost& busiest() const;
};

struct StageBreakdown {
  StepReport report;  // the simulated step (source "simulate")
  std::vector<StageCost> stages;
  std::string memory_error;  // check_memory's message when a device is over its memory; empty when it fits
};

Result<StageBreakdown> stage_breakdown(const LayerGraph& g, const Cluster& c, const CostModel& cost,
                                       const Placement& p, const std::vector<PipelineStage>& stages,
                                       int64_t batch_size);

// {"step_ms", "comm_fraction", "memory_error", "stages": [{"layers": [..], "param_bytes", "shares_device",
//   "devices": [{"device", "micro_batches", "forward_ms", "backward_ms", "compute_ms", "send_ms", "comm_ms",
//   "report_comm_ms", "bubble_ms", "bubble_fraction", "update_ms", "peak_memory_bytes"}]}]}
nlohmann::json stage_breakdown_to_json(const StageBreakdown& b, const LayerGraph& g, const Cluster& c);

}  // namespace tapp
