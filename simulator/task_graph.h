// simulator/task_graph.h — one training step as tasks: the contract between the
// simulator and the runtime ("one task graph, two executors", DESIGN.md).
//
// Owns `TaskGraph`, built from (layer graph, placement, cluster, batch size):
//  * segments: maximal runs of consecutive layers (in the graph's topological
//    order) on one device. Segment edges always point forward, so any
//    layer-to-device assignment of a DAG runs, including non-contiguous ones
//    where a device holds several segments.
//  * tasks: forward and backward of each (segment, micro-batch), and a transfer
//    for each segment edge that crosses devices (activations forward, gradients
//    backward), with their dependencies.
//  * device_order: for every device, the order it runs its compute tasks, fixed
//    by the schedule (GPipe fill-drain or 1F1B). Orders are derived from a
//    feasible execution, so in-order execution on every device never deadlocks.
// Both executors run compute tasks in device_order and transfers as soon as
// their producer is done, over the link (from_device -> to_device).
// Thread safety: immutable after build; share freely.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/placement.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

enum class TaskKind { forward, backward, transfer_activation, transfer_gradient };

struct Segment {
  int device = 0;
  std::vector<int> layers;  // ascending layer indices
  std::vector<int> preds;   // segments it reads from, ascending
  std::vector<int> succs;   // segments reading it, ascending
  bool reads_model_input = false;
  bool computes_loss = false;  // holds the output layer
  int64_t param_bytes = 0;
};

struct Task {
  TaskKind kind = TaskKind::forward;
  int segment = 0;      // compute: the segment; transfer: the producing segment
  int peer_segment = -1;  // transfer: the consuming segment (forward direction)
  int micro_batch = 0;
  int device = 0;       // compute: where it runs; transfer: sender
  int to_device = -1;   // transfer: receiver
  int64_t bytes = 0;    // transfer payload
  std::vector<int> deps;  // task ids that must finish first
};

struct TaskGraph {
  std::vector<Segment> segments;
  std::vector<Task> tasks;  // a topological order
  std::vector<std::vector<int>> device_order;  // per device: compute task ids in run order
  std::vector<int64_t> micro_batch_sizes;
  int num_devices = 0;
  Schedule schedule = Schedule::gpipe;
  // Task ids: forward_task[s][m], backward_task[s][m].
  std::vector<std::vector<int>> forward_task, backward_task;
  // For each segment, the layers whose outputs a consuming segment reads: (layer, consumer segment).
  int micro_batches() const { return static_cast<int>(micro_batch_sizes.size()); }
};

// Validates the placement, then builds. Does not check memory (check_memory does).
// A data-parallel placement is an error: it has no pipeline to build.
Result<TaskGraph> build_task_graph(const LayerGraph& g, const Placement& p, const Cluster& c,
                                   int64_t batch_size);
// The same graph, built into `out` while reusing its buffers (search loops
// build thousands of graphs a second). On error `out` is unspecified.
Status build_task_graph_into(const LayerGraph& g, const Placement& p, const Cluster& c, int64_t batch_size,
                             TaskGraph& out);

// Layers of segment `from` whose output segment `to` reads (the payload of their edge).
std::vector<int> boundary_layers(const LayerGraph& g, const TaskGraph& tg, int from, int to);

}  // namespace tapp
