#include "planners/stage_breakdown.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "simulator/task_graph.h"

namespace tapp {

const StageDeviceCost& StageCost::busiest() const {
  return *std::max_element(
      devices.begin(), devices.end(),
      [](const StageDeviceCost& a, const StageDeviceCost& b) { return a.compute_ms() < b.compute_ms(); });
}

Result<StageBreakdown> stage_breakdown(const LayerGraph& g, const Cluster& c, const CostModel& cost,
                                       const Placement& p, const std::vector<PipelineStage>& stages,
                                       int64_t batch_size) {
  auto tg = build_task_graph(g, p, c, batch_size);
  if (!tg) return tg.status();
  StageBreakdown b;
  if (Status fits = check_memory(p, g, c, batch_size); !fits) b.memory_error = fits.message();
  TaskTimes times;
  SimulateOptions options;
  options.timeline = false;
  b.report = simulate(*tg, cost, options, &times);
  if (!b.report.ok) return Status::error("the simulator could not replay the placement: " + b.report.message);

  std::vector<int> stage_of_layer(g.layers.size(), -1);
  for (size_t s = 0; s < stages.size(); ++s)
    for (int i = stages[s].first_layer; i < stages[s].end_layer; ++i) stage_of_layer[i] = static_cast<int>(s);
  std::vector<int> stages_on_device(c.num_devices(), 0);
  b.stages.resize(stages.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    StageCost& sc = b.stages[s];
    sc.stage = stages[s];
    for (int i = sc.stage.first_layer; i < sc.stage.end_layer; ++i)
      sc.param_bytes += g.layers[i].param_bytes();
    for (int d : sc.stage.devices) {
      sc.devices.push_back({});
      sc.devices.back().device = d;
      ++stages_on_device[d];
    }
  }
  auto share = [&](int segment, int device) -> StageDeviceCost* {
    const int s = stage_of_layer[tg->segments[segment].layers.front()];
    if (s < 0) return nullptr;
    for (StageDeviceCost& dc : b.stages[s].devices)
      if (dc.device == device) return &dc;
    return nullptr;
  };
  // Every task's replayed duration, to the stage (and device) that ran or sent it.
  std::vector<double> compute_on_device(c.num_devices(), 0);
  for (size_t t = 0; t < tg->tasks.size(); ++t) {
    const Task& task = tg->tasks[t];
    const double ms = times.end_ms[t] - times.start_ms[t];
    if (is_compute(task.kind)) {
      compute_on_device[task.device] += ms;
      if (StageDeviceCost* dc = share(task.segment, task.device)) {
        (task.kind == TaskKind::forward ? dc->forward_ms : dc->backward_ms) += ms;
        dc->micro_batches += task.kind == TaskKind::forward;
      }
    } else if (is_transfer(task.kind)) {
      // Activations are sent by the producing segment, gradients by the consuming one.
      const int sender = task.kind == TaskKind::transfer_activation ? task.segment : task.peer_segment;
      if (StageDeviceCost* dc = share(sender, task.device)) dc->send_ms += ms;
    }
  }
  // The StepReport counts all of a device's waiting for remote inputs as
  // communication; split it along the replay: the part while an input was on
  // the wire is communication, the rest (waiting for another stage's
  // compute: the pipeline's fill and drain) is bubble.
  std::vector<double> blocked(c.num_devices(), 0), on_wire(c.num_devices(), 0);
  for (int d = 0; d < c.num_devices(); ++d) {
    double prev_end = 0;
    for (int t : tg->device_order[d]) {
      const double start = times.start_ms[t];
      bool remote = false;
      double wire = 0;
      for (int dep : tg->deps(t)) {
        if (!is_transfer(tg->tasks[dep].kind)) continue;
        remote = true;
        const double from = std::max(prev_end, times.start_ms[dep]), to = std::min(start, times.end_ms[dep]);
        wire = std::max(wire, to - from);
      }
      if (remote) {
        blocked[d] += std::max(0.0, start - prev_end);
        on_wire[d] += std::max(0.0, wire);
      }
      prev_end = times.end_ms[t];
    }
  }
  for (StageCost& sc : b.stages)
    for (StageDeviceCost& dc : sc.devices) {
      const DeviceStats& st = b.report.devices[dc.device];
      // What the report adds beyond blocked receives: draining sends, allreduces, averaging.
      const double after_compute = std::max(0.0, st.comm_ms - blocked[dc.device]);
      dc.comm_ms = on_wire[dc.device] + after_compute;
      dc.bubble_ms = std::max(0.0, b.report.step_ms - st.busy_ms - dc.comm_ms);
      dc.report_comm_ms = st.comm_ms;
      dc.update_ms = std::max(0.0, st.busy_ms - compute_on_device[dc.device]);
      dc.peak_memory_bytes = st.peak_memory_bytes;
      sc.shares_device |= stages_on_device[dc.device] > 1;
    }
  return b;
}

nlohmann::json stage_breakdown_to_json(const StageBreakdown& b, const LayerGraph& g, const Cluster& c) {
  nlohmann::json j;
  j["step_ms"] = b.report.step_ms;
  j["comm_fraction"] = b.report.comm_fraction;
  j["memory_error"] = b.memory_error.empty() ? nlohmann::json() : nlohmann::json(b.memory_error);
  j["stages"] = nlohmann::json::array();
  for (const StageCost& sc : b.stages) {
    nlohmann::json layers = nlohmann::json::array(), devices = nlohmann::json::array();
    for (int i = sc.stage.first_layer; i < sc.stage.end_layer; ++i) layers.push_back(g.layers[i].name);
    for (const StageDeviceCost& dc : sc.devices)
      devices.push_back({{"device", c.devices[dc.device].name},
                         {"micro_batches", dc.micro_batches},
                         {"forward_ms", dc.forward_ms},
                         {"backward_ms", dc.backward_ms},
                         {"compute_ms", dc.compute_ms()},
                         {"send_ms", dc.send_ms},
                         {"comm_ms", dc.comm_ms},
                         {"report_comm_ms", dc.report_comm_ms},
                         {"bubble_ms", dc.bubble_ms},
                         {"bubble_fraction", b.report.step_ms > 0 ? dc.bubble_ms / b.report.step_ms : 0.0},
                         {"update_ms", dc.update_ms},
                         {"peak_memory_bytes", dc.peak_memory_bytes}});
    j["stages"].push_back({{"layers", layers},
                           {"param_bytes", sc.param_bytes},
                           {"shares_device", sc.shares_device},
                           {"devices", devices}});
  }
  return j;
}

}  // namespace tapp
