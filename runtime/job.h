// runtime/job.h — what the coordinator hands every worker (via the TCPStore).
//
// Owns `Job` (mode, layer graph, cluster of the devices used, placement,
// options, Gloo addresses) and its JSON form; the layer graph travels in the
// profiler's JSON layer-graph format (model/model_json.h), shapes re-inferred
// by the reader. What a worker writes back (`WorkerReport`) and how either
// travels is runtime/control_channel.h.
// Data flow: runtime.cpp -> ControlChannel::publish_job (job_to_json) -> store "job" -> worker.cpp.
// Thread safety: plain values. No LibTorch.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "core/cluster.h"
#include "runtime/runtime.h"

namespace tapp {

struct Job {
  std::string mode = "pipeline";  // "pipeline" | "bsp" | "hogwild"
  LayerGraph graph;
  Cluster cluster;  // rank r runs cluster.devices[r]
  Placement placement;  // pipeline: group_device indexes cluster.devices
  RunOptions options;
  std::vector<std::string> gloo_hosts;  // per rank: address its Gloo device binds
  std::string shm_name;  // hogwild: the shared parameter segment
  // Per rank: its slot of the compute gate in compute_gate_dir, -1 = not gated
  // (runtime/compute_gate.h). Empty: no rank is gated.
  std::string compute_gate_dir;
  std::vector<int> compute_gate_slot;
};

nlohmann::json job_to_json(const Job& job);
Result<Job> job_from_json(const nlohmann::json& j);

}  // namespace tapp
