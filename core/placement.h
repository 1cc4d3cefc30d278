// core/placement.h — where each layer runs and how the batch is pipelined.
//
// Owns `Placement`: layer -> group (partition), group -> device or devices
// (allocation: several devices = replicas of that stage, PipeDream-style: the
// micro-batches of a step go round-robin to the replicas and the group's
// gradients are all-reduced among them before the update), the number of
// micro-batches and the schedule; or, when its data-parallel
// mode is bsp or hogwild, the devices that each train a full replica (BSP:
// equal shares of the batch, gradients all-reduced; HOGWILD: lock-free
// updates of shared parameters, no exchange). `source` is only a label.
// Its JSON form names layers
// and devices by name (schemas/placement.schema.json). `check_memory` is the
// one place that decides whether a placement fits the devices' memory.
// Data flow: planner / TAPP policy -> Placement -> task graph -> simulator | runtime.
// Thread safety: plain values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp {

struct LayerGraph;
struct Cluster;
struct Device;

// gpipe: fill-drain; 1f1b: one forward one backward (PipeDream-flush);
// interleaved_1f1b: 1F1B over virtual stages (Megatron), for a device that
// holds several groups: its groups take turns by micro-batch chunk.
enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b };
std::string schedule_name(Schedule s);  // "gpipe" | "1f1b" | "interleaved_1f1b"
Result<Schedule> schedule_from_name(const std::string& name);

// Whether the whole model is replicated instead of pipelined, and how the
// replicas update: none (a pipeline), bsp (synchronous, gradients
// all-reduced), hogwild (asynchronous, shared parameters, local devices only).
enum class DataParallelMode { none, bsp, hogwild };
std::string data_parallel_mode_name(DataParallelMode m);  // "none" | "bsp" | "hogwild"
Result<DataParallelMode> data_parallel_mode_from_name(const std::string& name);

struct Placement {
  std::vector<int> layer_group;   // per layer
  std::vector<int> group_device;  // per group: its device (its first replica when replicated)
  // Per group (empty = no group replicated): the further devices that run a
  // replica of the group beside group_device[g]. Micro-batch m of the group
  // runs on replica m % replica_count(g); each replica sees whole micro-batches.
  std::vector<std::vector<int>> group_replicas;
  // Replicated groups: 1 = their gradients are all-reduced every step
  // (synchronous, equal to single-device training); K > 1 = each replica
  // updates on its own share and the replicas' parameters are averaged every
  // K steps (FedAvg-style, PipeLearn's aggregation_frequency).
  int aggregation_every = 1;
  int micro_batches = 1;
  Schedule schedule = Schedule::gpipe;
  std::string source;  // who proposed it: "policy", "dp", "uniform", "user", ... (a label only)
  // Data parallel (bsp, hogwild): every layer in group 0, group_device = the
  // replicas (each runs the whole model on ceil(batch / replicas) samples), micro_batches 1.
  DataParallelMode data_parallel = DataParallelMode::none;

  bool is_data_parallel() const { return data_parallel != DataParallelMode::none; }
  int num_groups() const { return static_cast<int>(group_device.size()); }
  int device_of_layer(int layer) const { return group_device[layer_group[layer]]; }  // first replica
  // group_device[g] followed by its further replicas.
  std::vector<int> devices_of_group(int g) const;
  int replica_count(int g) const {
    return 1 + (group_replicas.empty() ? 0 : static_cast<int>(group_replicas[g].size()));
  }
  bool has_replicated_groups() const;
  // The device that runs micro-batch m of group g (round-robin over its replicas).
  int device_of_micro_batch(int g, int m) const {
    const int r = replica_count(g);
    return r == 1 ? group_device[g] : (m % r == 0 ? group_device[g] : group_replicas[g][m % r - 1]);
  }
  std::vector<int> layer_devices() const;
  // Every layer on `device`, one group, no pipelining.
  static Placement single_device(int num_layers, int device, int micro_batches = 1);
  // Full replicas on `devices` in `mode` (bsp or hogwild; source the mode's name).
  static Placement replicas(int num_layers, const std::vector<int>& devices,
                            DataParallelMode mode = DataParallelMode::bsp);
  int64_t replica_share(int64_t batch_size) const;  // samples per replica
};

// Structural checks against a model and a cluster (sizes, indices, micro-batches
// between 1 and the batch size; replicas: distinct devices in a group, at
// least as many micro-batches as replicas, a replicated group that is one
// stage — never both before and after another group; aggregation_every >= 1).
// Errors name the field.
Status validate_placement(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);

// Peak bytes each device needs: weights, gradients and optimizer state
// (3 x parameter bytes) plus the activations kept for backward by the
// micro-batches in flight under the schedule, plus received buffers. A
// replica of a group holds the group's state and the activations of its own
// micro-batches in flight. A data-parallel placement: the whole model on each
// replica at its share.
std::vector<int64_t> estimate_device_memory_bytes(const Placement& p, const LayerGraph& g,
                                                  const Cluster& c, int64_t batch_size);

// Error naming the device and both sizes when any device is over its memory_mb.
Status check_memory(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);

// The pieces of that rule, for loops that cost one stage at a time:
// a device holds memory_mb MiB; a pipeline of `stages` devices keeps this many
// micro-batches' activations (GPipe: all of them; 1F1B: at most one per stage).
int64_t device_memory_bytes(const Device& d);
// Weights, gradients and optimizer state of `param_bytes` of parameters (3 x, saturating).
int64_t training_state_bytes(int64_t param_bytes);
int64_t micro_batches_in_flight(Schedule schedule, int micro_batches, int stages);

// The memory rule for a run of consecutive layers [first, end) on one device,
// in O(1) a query (prefix sums): 3 x their parameter bytes plus their
// activations for `samples` per micro-batch x `in_flight` micro-batches; the
// same sum estimate_device_memory_bytes adds per layer (tests/core checks they agree).
class StageMemory {
 public:
  explicit StageMemory(const LayerGraph& g);
  int64_t param_bytes(int first, int end) const { return param_prefix_[end] - param_prefix_[first]; }
  int64_t bytes(int first, int end, int64_t samples, int64_t in_flight) const;
  bool fits(const Device& d, int first, int end, int64_t samples, int64_t in_flight) const {
    return bytes(first, end, samples, in_flight) <= device_memory_bytes(d);
  }

 private:
  std::vector<int64_t> param_prefix_, activation_prefix_;  // per sample
};

// JSON: "groups" items are a device name or, for a replicated group, an array
// of device names (the first is group_device); "aggregation_every" is written
// when not 1. A data-parallel placement writes "data_parallel": true, and
// "data_parallel_mode" when that is not bsp; the parser takes either
// ("data_parallel": true alone is bsp) and refuses an unknown mode or a contradiction.
nlohmann::json placement_to_json(const Placement& p, const LayerGraph& g, const Cluster& c);
Result<Placement> placement_from_json(const nlohmann::json& j, const LayerGraph& g, const Cluster& c);
Result<Placement> load_placement(const std::string& path, const LayerGraph& g, const Cluster& c);

}  // namespace tapp
