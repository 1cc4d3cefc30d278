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
// one place that decides whether a placement fits the devices' memory; its
// rule (`estimate_device_memory`) names its parts: parameters, gradients,
// optimizer state (the placement's optimizer), activations kept for backward
// by the micro-batches in flight (or, for a group that recomputes, its inputs
// and one micro-batch's activations) and received buffers.
// Data flow: planner / TAPP policy -> Placement -> task graph -> simulator | runtime.
// Thread safety: plain values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp {

struct Layer;
struct LayerGraph;
struct Cluster;
struct Device;

// gpipe: fill-drain; 1f1b: one forward one backward (PipeDream-flush);
// timed_1f1b: 1F1B whose device orders follow the model's estimated task
// times instead of unit steps (simulator/task_graph.h): a device that holds
// several stages runs the task whose input is there, not one still waiting
// on a slower device;
// interleaved_1f1b: 1F1B over virtual stages (Megatron), for a device that
// holds several groups: its groups take turns by micro-batch chunk.
// al: Associated Learning (AL-FM) on a model in AL form (model/al_form.h):
// one group per AL block; only activations and target encodings go forward,
// no gradient goes back, and each block's backward and update follow its own
// forward of every micro-batch (it changes the learning algorithm: a job must allow it).
enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b, al, timed_1f1b };
// "gpipe" | "1f1b" | "interleaved_1f1b" | "al" | "timed_1f1b"
std::string schedule_name(Schedule s);
Result<Schedule> schedule_from_name(const std::string& name);

// Whether the whole model is replicated instead of pipelined, and how the
// replicas update: none (a pipeline), bsp (synchronous, gradients
// all-reduced), hogwild (asynchronous, shared parameters, local devices only).
enum class DataParallelMode { none, bsp, hogwild };
std::string data_parallel_mode_name(DataParallelMode m);  // "none" | "bsp" | "hogwild"
Result<DataParallelMode> data_parallel_mode_from_name(const std::string& name);

// The optimizer a run trains with: what it keeps per parameter beside the
// weights and gradients. sgd: SGD with momentum (one momentum buffer, the
// default); adam: Adam (two moments).
enum class Optimizer { sgd, adam };
std::string optimizer_name(Optimizer o);  // "sgd" | "adam"
Result<Optimizer> optimizer_from_name(const std::string& name);
// Copies of the parameters the optimizer keeps (sgd 1, adam 2).
int optimizer_state_copies(Optimizer o);

// The largest replica weight a placement may give (a share of 1 : 64 is as
// uneven as any cluster needs; it bounds the integers a file may bring).
constexpr int kMaxReplicaWeight = 64;

struct Placement {
  std::vector<int> layer_group;   // per layer
  std::vector<int> group_device;  // per group: its device (its first replica when replicated)
  // Per group (empty = no group replicated): the further devices that run a
  // replica of the group beside group_device[g]. Micro-batch m of the group
  // runs on replica m % replica_count(g) (or by its weights, below); each
  // replica sees whole micro-batches.
  std::vector<std::vector<int>> group_replicas;
  // Per group (empty = every replica set shares equally): the replicas'
  // relative shares of the micro-batches, one positive integer per device of
  // devices_of_group(g) (empty for a group = equal). Heterogeneous replicas:
  // a device twice as fast takes twice the micro-batches, so its replicas
  // finish together (weighted_replica_order says which runs which).
  std::vector<std::vector<int>> group_replica_weights;
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
  Optimizer optimizer = Optimizer::sgd;  // decides the optimizer state in memory and what the runtime steps
  // Per group (empty = none): 1 = activation recomputation: its forward keeps
  // only the group's inputs per micro-batch and its backward runs the forward
  // again (more compute, fewer activations kept).
  std::vector<char> group_recompute;

  bool recomputes(int g) const { return !group_recompute.empty() && group_recompute[g] != 0; }
  bool is_data_parallel() const { return data_parallel != DataParallelMode::none; }
  int num_groups() const { return static_cast<int>(group_device.size()); }
  // Appends an empty group on `device` (one replica, no weights; recomputing
  // if `recompute`) and returns its index. An empty group weighs nothing, so
  // a search may add one and move layers into it.
  int add_group(int device, bool recompute = false);
  int device_of_layer(int layer) const { return group_device[layer_group[layer]]; }  // first replica
  // group_device[g] followed by its further replicas.
  std::vector<int> devices_of_group(int g) const;
  int replica_count(int g) const {
    return 1 + (group_replicas.empty() ? 0 : static_cast<int>(group_replicas[g].size()));
  }
  bool has_replicated_groups() const;
  bool has_replica_weights(int g) const { return !group_replica_weights.empty() && !group_replica_weights[g].empty(); }
  // Per micro-batch of group g: the index (in devices_of_group(g)) of the
  // replica that runs it: round-robin, or by the group's weights.
  std::vector<int> replica_order(int g) const;
  // The device that runs micro-batch m of group g.
  int device_of_micro_batch(int g, int m) const;
  std::vector<int> layer_devices() const;
  // Every layer on `device`, one group, no pipelining.
  static Placement single_device(int num_layers, int device, int micro_batches = 1);
  // Full replicas on `devices` in `mode` (bsp or hogwild; source the mode's name).
  static Placement replicas(int num_layers, const std::vector<int>& devices,
                            DataParallelMode mode = DataParallelMode::bsp);
  int64_t replica_share(int64_t batch_size) const;  // samples per replica
};

// Which replica runs each of `micro_batches` micro-batches when the replicas
// have these relative weights: each replica's count is its share of the
// micro-batches by largest remainder, at least one each (needs micro_batches
// >= weights.size()); the order interleaves them evenly (the replica furthest
// behind its share goes next), so equal weights give round-robin exactly.
std::vector<int> weighted_replica_order(int micro_batches, const std::vector<int>& weights);
// How many micro-batches each replica runs in that order.
std::vector<int> replica_micro_batch_counts(int micro_batches, const std::vector<int>& weights);
// Renumbers `p`'s groups in order of first use, dropping those no layer uses
// (their devices, replicas, weights and recomputation marks with them).
void drop_unused_groups(Placement& p);
// How many of `micro_batches` each replica runs when every one after the
// first each goes to the replica that would finish it first, from each
// replica's time per micro-batch `ms` (any unit): the counts that let replicas
// of different speeds finish together (needs micro_batches >= ms.size()).
std::vector<int> micro_batches_by_speed(int micro_batches, const std::vector<double>& ms);

// Structural checks against a model and a cluster (sizes, indices, micro-batches
// between 1 and the batch size; replicas: distinct devices in a group, at
// least as many micro-batches as replicas, a replicated group that is one
// stage — never both before and after another group; aggregation_every >= 1;
// replica weights: one positive integer per replica of a replicated group).
// Errors name the field.
Status validate_placement(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);

// The memory a device needs at its peak, by part (bytes).
struct MemoryBreakdown {
  int64_t params = 0;           // weights
  int64_t grads = 0;            // their gradients
  int64_t optimizer_state = 0;  // momentum (sgd) or Adam's two moments
  int64_t activations = 0;      // kept for backward by the micro-batches in flight
  // Inputs received from other devices and gradients received for the
  // outputs it sends (the runtime posts every receive of a step at its start,
  // so: for every micro-batch the device runs), plus the working memory of
  // backward and the update: the largest layer's weight gradient before it
  // is accumulated (Adam: twice, its update's temporaries) and two of the
  // largest layer's activation gradients for one micro-batch.
  int64_t buffers = 0;
  int64_t total() const;
  MemoryBreakdown& operator+=(const MemoryBreakdown& o);
};

// Per-sample bytes the backward pass keeps for one layer. Every use of a
// layer's kept activations goes through here (the memory rule, StageMemory,
// the simulator's tally): Layer::saved_bytes where shape inference set it,
// else the layer's output (float32).
int64_t kept_bytes_per_sample(const Layer& l);
// The same for layer i of g, with the training loss's own: the cross-entropy
// keeps its log-probabilities (the size of the last layer's output) until
// backward, per micro-batch in flight (a language model's per-token logits).
int64_t kept_bytes_per_sample(const LayerGraph& g, int i);

// Peak memory of every device, by part: each group it runs holds its weights,
// gradients and optimizer state; activations of the micro-batches in flight
// on it (GPipe: all the micro-batches the device runs of that group; 1F1B: at
// most as many as the devices from its first layer to the end, divided by
// the replicas of its first group (the task graph's in-flight limit);
// interleaved 1F1B one more) — a group that recomputes keeps one
// micro-batch's activations instead (its inputs are kept either way: those
// from other devices are buffers); buffers: received inputs and gradients of
// every micro-batch it runs, and the backward's and update's working memory
// (MemoryBreakdown::buffers). A replica holds the group's state and its own
// micro-batches only. A data-parallel placement: the whole model on each
// replica at its share. Not counted: the step's input batch (the data
// loader's; the runtime draws it on every worker).
std::vector<MemoryBreakdown> estimate_device_memory(const Placement& p, const LayerGraph& g, const Cluster& c,
                                                    int64_t batch_size);
// Their totals.
std::vector<int64_t> estimate_device_memory_bytes(const Placement& p, const LayerGraph& g,
                                                  const Cluster& c, int64_t batch_size);

// Error naming the first device over its memory_mb, by how much, with the breakdown:
// "device 'gpu1' needs 9.3 GB (params 1.4, grads 1.4, Adam 2.8, activations 3.5, buffers 0.2) but has 8.0 GB: over by 1.3 GB".
Status check_memory(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);
// The breakdown as that message writes it ("params 1.4, grads 1.4, Adam 2.8, ..."; GB = 2^30 bytes).
std::string memory_breakdown_text(const MemoryBreakdown& m, Optimizer o);

// Marks groups for recomputation, on the devices that do not fit without it,
// until they fit: each such device's groups from the most activation bytes
// kept. Returns whether the placement fits now (check_memory passes); a
// placement that fits is left unchanged.
bool recompute_where_needed(Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);

// The pieces of that rule, for loops that cost one stage at a time:
// a device holds memory_mb MiB; a pipeline of `stages` devices keeps this many
// micro-batches' activations (GPipe: all of them; 1F1B: at most one per stage).
int64_t device_memory_bytes(const Device& d);
// Weights, gradients and optimizer state of `param_bytes` of parameters (saturating).
int64_t training_state_bytes(int64_t param_bytes, Optimizer o = Optimizer::sgd);
int64_t micro_batches_in_flight(Schedule schedule, int micro_batches, int stages);
// Per device: how many micro-batches 1F1B lets it start before its first
// backward (PipeDream's NOAM): the devices from its first layer to the end,
// divided by the replicas of its first group; 0 = unused. The memory rule and
// the task graph's list schedule both read it. `limit` is the caller's, kept
// between calls (search loops).
void in_flight_limits(const Placement& p, const LayerGraph& g, int num_devices, std::vector<int>& limit);

// The memory rule for a run of consecutive layers [first, end) on one device,
// in O(1) a query (prefix sums, sparse tables for the largest layer):
// training state of their parameters, their kept activations for `samples`
// per micro-batch x `in_flight` micro-batches (recompute: one micro-batch),
// and the buffers of a pipeline stage whose neighbours are other devices:
// what crosses the cut before `first` (the received inputs; none when first
// = 0) and the cut before `end` (the received gradients; none when end = L),
// each for `micro_batches` (0: in_flight) micro-batches, plus the working
// memory of its largest layers. For a chain on distinct devices this is exactly what
// estimate_device_memory adds up (tests/core checks it); on a DAG it is an
// upper bound (a cut also counts edges that jump over the stage).
// Bytes as MiB for a message that sets them beside a device's memory_mb:
// whole where exact, else rounded up to 0.01 ("128.06", never "128" for a
// need just over 128 MiB).
std::string mib_rounded_up(int64_t bytes);

// An lm_head and the token_embedding whose table it reads: a device that holds
// the head without the embedding keeps its own copy of the table (weights,
// gradients, optimizer state), summed with the embedding's each step.
struct TiedTable {
  int head = -1, table = -1;
  int64_t bytes = 0;  // the table's parameter bytes
};
std::vector<TiedTable> tied_tables(const LayerGraph& g);

class StageMemory {
 public:
  explicit StageMemory(const LayerGraph& g, Optimizer o = Optimizer::sgd);
  int64_t param_bytes(int first, int end) const { return param_prefix_[end] - param_prefix_[first]; }
  // Bytes per sample of the outputs of layers < j read by layers >= j (a cut before layer j).
  int64_t cut_bytes(int j) const { return cut_[j]; }
  MemoryBreakdown breakdown(int first, int end, int64_t samples, int64_t in_flight, bool recompute = false,
                            int64_t micro_batches = 0) const;
  int64_t bytes(int first, int end, int64_t samples, int64_t in_flight, bool recompute = false,
                int64_t micro_batches = 0) const {
    return breakdown(first, end, samples, in_flight, recompute, micro_batches).total();
  }
  bool fits(const Device& d, int first, int end, int64_t samples, int64_t in_flight, bool recompute = false,
            int64_t micro_batches = 0) const {
    return bytes(first, end, samples, in_flight, recompute, micro_batches) <= device_memory_bytes(d);
  }
  Optimizer optimizer() const { return optimizer_; }

 private:
  Optimizer optimizer_;
  std::vector<int64_t> param_prefix_, kept_prefix_;  // per sample
  std::vector<int64_t> cut_;  // per sample: outputs of layers < j read by layers >= j
  // Sparse tables: [k][i] = the largest of layers [i, i + 2^k) (parameter bytes; output bytes per sample).
  std::vector<std::vector<int64_t>> param_max_, output_max_;
  std::vector<TiedTable> tied_;
};

// JSON: "groups" items are a device name or, for a replicated group, an array
// of device names (the first is group_device); "aggregation_every" is written
// when not 1. A data-parallel placement writes "data_parallel": true, and
// "data_parallel_mode" when that is not bsp; the parser takes either
// ("data_parallel": true alone is bsp) and refuses an unknown mode or a contradiction.
// "optimizer" ("sgd" | "adam") is written when not sgd; "recompute" (an
// array of group indices) when a group recomputes.
nlohmann::json placement_to_json(const Placement& p, const LayerGraph& g, const Cluster& c);
Result<Placement> placement_from_json(const nlohmann::json& j, const LayerGraph& g, const Cluster& c);
Result<Placement> load_placement(const std::string& path, const LayerGraph& g, const Cluster& c);

}  // namespace tapp
