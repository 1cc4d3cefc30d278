// core/placement.h — where each layer runs and how the batch is pipelined.
//
// Owns `Placement`: layer -> group (partition), group -> device (allocation),
// the number of micro-batches and the schedule; or, when its data-parallel
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

enum class Schedule { gpipe, one_f_one_b };
std::string schedule_name(Schedule s);  // "gpipe" | "1f1b"
Result<Schedule> schedule_from_name(const std::string& name);

// Whether the whole model is replicated instead of pipelined, and how the
// replicas update: none (a pipeline), bsp (synchronous, gradients
// all-reduced), hogwild (asynchronous, shared parameters, local devices only).
enum class DataParallelMode { none, bsp, hogwild };
std::string data_parallel_mode_name(DataParallelMode m);  // "none" | "bsp" | "hogwild"
Result<DataParallelMode> data_parallel_mode_from_name(const std::string& name);

struct Placement {
  std::vector<int> layer_group;   // per layer
  std::vector<int> group_device;  // per group
  int micro_batches = 1;
  Schedule schedule = Schedule::gpipe;
  std::string source;  // who proposed it: "policy", "dp", "uniform", "user", ... (a label only)
  // Data parallel (bsp, hogwild): every layer in group 0, group_device = the
  // replicas (each runs the whole model on ceil(batch / replicas) samples), micro_batches 1.
  DataParallelMode data_parallel = DataParallelMode::none;

  bool is_data_parallel() const { return data_parallel != DataParallelMode::none; }
  int num_groups() const { return static_cast<int>(group_device.size()); }
  int device_of_layer(int layer) const { return group_device[layer_group[layer]]; }
  std::vector<int> layer_devices() const;
  // Every layer on `device`, one group, no pipelining.
  static Placement single_device(int num_layers, int device, int micro_batches = 1);
  // Full replicas on `devices` in `mode` (bsp or hogwild; source the mode's name).
  static Placement replicas(int num_layers, const std::vector<int>& devices,
                            DataParallelMode mode = DataParallelMode::bsp);
  int64_t replica_share(int64_t batch_size) const;  // samples per replica
};

// Structural checks against a model and a cluster (sizes, indices, micro-batches
// between 1 and the batch size). Errors name the field.
Status validate_placement(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);

// Peak bytes each device needs: weights, gradients and optimizer state
// (3 x parameter bytes) plus the activations kept for backward by the
// micro-batches in flight under the schedule, plus received buffers. A
// data-parallel placement: the whole model on each replica at its share.
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

// JSON: a data-parallel placement writes "data_parallel": true, and
// "data_parallel_mode" when that is not bsp; the parser takes either
// ("data_parallel": true alone is bsp) and refuses an unknown mode or a contradiction.
nlohmann::json placement_to_json(const Placement& p, const LayerGraph& g, const Cluster& c);
Result<Placement> placement_from_json(const nlohmann::json& j, const LayerGraph& g, const Cluster& c);
Result<Placement> load_placement(const std::string& path, const LayerGraph& g, const Cluster& c);

}  // namespace tapp
