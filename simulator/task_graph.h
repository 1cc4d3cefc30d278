// simulator/task_graph.h — one training step as tasks: the contract between the
// simulator and the runtime ("one task graph, two executors", DESIGN.md).
//
// Owns `SegmentGraph` (the segments, their edges and the schedule's run order
// of compute steps) and `TaskGraph`, which extends it with the tasks; both
// built from (layer graph, placement, cluster, batch size):
//  * segments: maximal runs of consecutive layers (in the graph's topological
//    order) that run on the same devices: one device, or one replicated group's
//    replica set. A replicated group's segments hold only that group's layers;
//    consecutive unreplicated groups on one device merge into one segment (as
//    before replicas existed). Within a run of one device, the last layer that
//    another run reads of it ends a segment (outside AL form), so a parallel
//    branch elsewhere starts as soon as that layer is done, not after the
//    layers that follow it here; pieces of one run share a `stage`, by which
//    the schedules order. Segment edges always point forward, so any
//    layer-to-device assignment of a DAG runs, including non-contiguous ones
//    where a device holds several segments and branch-parallel ones.
//  * replicas: micro-batch m of a segment runs on segment.device_of(m) =
//    devices[m % devices.size()], or by the group's replica weights
//    (Placement::replica_order, device_of_micro_batch). There is
//    no "the device" of a segment: every per-micro-batch use goes through
//    device_of(m).
//  * tasks: forward and backward of each (segment, micro-batch) on
//    device_of(m); a transfer for each segment edge (s -> t) and micro-batch m
//    whose devices differ (s.device_of(m) != t.device_of(m): activations
//    forward, gradients backward), with their dependencies; and, when
//    aggregation_every == 1, one `allreduce` task per replicated group (its
//    gradients summed over its replicas) after every backward of the group.
//  * device_order: for every device, the order it runs its compute tasks
//    (forward, backward; never transfers or allreduces), fixed by the schedule
//    (GPipe fill-drain, 1F1B, or interleaved 1F1B over a device's several
//    segments; al: per device one micro-batch at a time, each backward right
//    after its forward). Orders are derived from a feasible execution, so
//    in-order execution on every device never deadlocks.
//  * schedule al (a model in AL form; blocks on one device may share a
//    segment): a backward depends on its own forward only and there are no
//    gradient transfers; the block's update follows each of its backwards
//    (executors charge it there).
// Both executors run compute tasks in device_order and transfers as soon as
// their producer is done, over the link (device -> to_device). An allreduce
// task's participants are replicated_groups[task.replicated_group].devices;
// it starts when all its deps (every backward of the group, on every replica)
// are done; a participant issues its allreduces in ascending task id (the same
// order on every participant, as collectives need) and runs its optimizer
// update only after the allreduces it takes part in. With aggregation_every =
// K > 1 there is no allreduce task: each replica updates on its own
// micro-batches and the replicas' parameters are averaged every K steps
// (replicated_groups lists what to average; the simulator charges 1/K of it per step).
// Thread safety: immutable after build; share freely.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/placement.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

enum class TaskKind { forward, backward, transfer_activation, transfer_gradient, allreduce };
inline bool is_compute(TaskKind k) { return k == TaskKind::forward || k == TaskKind::backward; }
inline bool is_transfer(TaskKind k) { return k == TaskKind::transfer_activation || k == TaskKind::transfer_gradient; }

struct Segment {
  int group = 0;             // the placement group of its first layer (all of them when replicated)
  // Its stage: the maximal run of consecutive layers on its devices that it
  // is part of (a run split after a layer read elsewhere keeps one stage).
  // Schedules order by stage, so a split never changes a device's order.
  int stage = 0;
  std::vector<int> devices;  // Placement::devices_of_group(group): the first replica, then the others
  // Replicas with weights (Placement::replica_order): per micro-batch, the
  // index in `devices` of the replica that runs it; empty = round-robin.
  std::vector<int> replica_of_micro_batch;
  // The index in `devices` of the replica that runs micro-batch m.
  int replica_of(int micro_batch) const {
    if (devices.size() == 1) return 0;
    return replica_of_micro_batch.empty() ? static_cast<int>(static_cast<size_t>(micro_batch) % devices.size())
                                          : replica_of_micro_batch[static_cast<size_t>(micro_batch)];
  }
  // The device that runs micro-batch m of this segment.
  int device_of(int micro_batch) const { return devices[static_cast<size_t>(replica_of(micro_batch))]; }
  int replica_count() const { return static_cast<int>(devices.size()); }
  bool replicated() const { return devices.size() > 1; }
  std::vector<int> layers;  // ascending layer indices
  std::vector<int> preds;   // segments it reads from, ascending
  std::vector<int> succs;   // segments reading it, ascending
  bool reads_model_input = false;
  bool computes_loss = false;  // holds the output layer
  // Its group recomputes (Placement::group_recompute): its backward runs its
  // forward again first; consecutive groups on one device share a segment
  // only when they agree on this.
  bool recompute = false;
  int64_t param_bytes = 0;
};

struct Task {
  TaskKind kind = TaskKind::forward;
  int segment = 0;      // compute: the segment; transfer: the producing segment; allreduce: -1
  int peer_segment = -1;  // transfer: the consuming segment (forward direction)
  int micro_batch = 0;  // allreduce: -1
  int device = 0;       // compute: where it runs (segment.device_of(m)); transfer: sender; allreduce: first participant
  int to_device = -1;   // transfer: receiver
  // Transfer: payload; allreduce: the group's parameter bytes; compute: what
  // its transfer deps bring (the simulator's tally reads it without visiting them).
  int64_t bytes = 0;
  int replicated_group = -1;  // allreduce: index into TaskGraph::replicated_groups
  bool remote_input = false;  // compute: a dep is a transfer
  // Its deps (the task ids that must finish first) are
  // TaskGraph::dep_ids[first_dep, first_dep + dep_count): one flat array, so a
  // search loop's thousands of builds a second allocate nothing per task.
  int first_dep = 0;
  int dep_count = 0;
};

// A task's deps, read-only, as TaskGraph::deps gives them.
struct DepSpan {
  const int* first = nullptr;
  const int* last = nullptr;
  const int* begin() const { return first; }
  const int* end() const { return last; }
  size_t size() const { return static_cast<size_t>(last - first); }
  int operator[](size_t k) const { return first[k]; }
  std::vector<int> to_vector() const { return {first, last}; }
};

// A group with several replicas: what its replicas combine, and where.
struct ReplicatedGroup {
  int group = 0;              // the placement group
  std::vector<int> devices;   // its replicas (participants), Placement::devices_of_group order
  int64_t param_bytes = 0;    // the group's parameters: what the allreduce (or the averaging) moves
  std::vector<int> segments;  // its segments, ascending
  int allreduce_task = -1;    // aggregation_every == 1: its allreduce task; K > 1: -1 (averaged every K steps)
};

// A segment edge: `to` reads outputs of `from`; what crosses per sample (each
// boundary layer's output once).
struct SegmentEdge {
  int from = 0, to = 0;
  int64_t bytes_per_sample = 0;
};

// A compute task by position (what the schedules order).
struct ComputeStep {
  int segment = 0;
  int micro_batch = 0;
  bool backward = false;
};

// The placement's segments, their edges and the order the schedule runs their
// compute in: what a task graph is made of, without its tasks. The simulator's
// search path replays this directly (simulate_segments); TaskGraph adds the tasks.
struct SegmentGraph {
  std::vector<Segment> segments;
  std::vector<SegmentEdge> edges;  // grouped by `from`, ascending `to`
  std::vector<int> succ_begin;     // segment s's out edges: edges[succ_begin[s], succ_begin[s + 1])
  std::vector<int> pred_begin, pred_edges;  // its in edges: pred_edges[pred_begin[s], pred_begin[s + 1]), ascending `from`
  std::vector<int> device_at;      // [segment x micro-batch]: the device that runs it (Segment::device_of)
  std::vector<int64_t> micro_batch_sizes;
  std::vector<ReplicatedGroup> replicated_groups;  // ascending group; empty when nothing is replicated
  // Every compute task once, in a feasible execution of the schedule: each
  // after its inputs' producers, each device's tasks in its run order.
  std::vector<ComputeStep> run_order;
  int num_devices = 0;
  Schedule schedule = Schedule::gpipe;
  int aggregation_every = 1;  // Placement::aggregation_every
  Optimizer optimizer = Optimizer::sgd;  // Placement::optimizer
  int micro_batches() const { return static_cast<int>(micro_batch_sizes.size()); }
  int device(int segment, int micro_batch) const {
    return device_at[static_cast<size_t>(segment) * micro_batch_sizes.size() + static_cast<size_t>(micro_batch)];
  }
};

// How both executors wire compute step t, read off the segment edges
// (add_tasks makes tasks and deps of it; simulate_segments replays it as is).
// for_each_input: a forward reads each in-edge's producer (edges[e].from),
// ascending; a backward each out-edge's consumer's gradient (edges[e].to),
// latest consumer first, and then its own forward (not visited); in AL form a
// backward reads nothing else. visit(edge, peer segment, remote): remote where
// the peer runs that micro-batch on another device (a transfer brings it).
// (Search loops run these for every compute step: the tables are read through local pointers.)
template <typename Visit>
void for_each_input(const SegmentGraph& sg, ComputeStep t, Visit&& visit) {
  const size_t M = sg.micro_batch_sizes.size();
  const int* device = sg.device_at.data() + t.micro_batch;  // device[s * M]: where s runs it
  const SegmentEdge* edges = sg.edges.data();
  const int s = t.segment, here = device[s * M];
  if (!t.backward) {
    const int* pred = sg.pred_edges.data();
    for (int k = sg.pred_begin[s], end = sg.pred_begin[s + 1]; k < end; ++k) {
      const int e = pred[k], from = edges[e].from;
      visit(e, from, device[from * M] != here);
    }
  } else if (sg.schedule != Schedule::al) {
    for (int e = sg.succ_begin[s + 1] - 1, first = sg.succ_begin[s]; e >= first; --e) {
      const int to = edges[e].to;
      visit(e, to, device[to * M] != here);
    }
  }
}
// Its sends, in the order the sender posts them: a forward's activations over
// its out-edges, a backward's gradients over its in-edges (none in AL form),
// each to a peer on another device. visit(edge, receiving device).
template <typename Visit>
void for_each_send(const SegmentGraph& sg, ComputeStep t, Visit&& visit) {
  const size_t M = sg.micro_batch_sizes.size();
  const int* device = sg.device_at.data() + t.micro_batch;
  const SegmentEdge* edges = sg.edges.data();
  const int s = t.segment, here = device[s * M];
  if (!t.backward) {
    for (int e = sg.succ_begin[s], end = sg.succ_begin[s + 1]; e < end; ++e)
      if (const int there = device[edges[e].to * M]; there != here) visit(e, there);
  } else if (sg.schedule != Schedule::al) {
    const int* pred = sg.pred_edges.data();
    for (int k = sg.pred_begin[s], end = sg.pred_begin[s + 1]; k < end; ++k) {
      const int e = pred[k];
      if (const int there = device[edges[e].from * M]; there != here) visit(e, there);
    }
  }
}

struct TaskGraph : SegmentGraph {
  // A topological order: each forward directly followed by its activation
  // transfers, each backward by its gradient transfers (the simulator relies
  // on it), then the allreduces (ascending group).
  std::vector<Task> tasks;
  std::vector<int> dep_ids;  // every task's deps, back to back (Task::first_dep)
  DepSpan deps(const Task& t) const {
    const int* first = dep_ids.data() + t.first_dep;
    return {first, first + t.dep_count};
  }
  DepSpan deps(int task) const { return deps(tasks[static_cast<size_t>(task)]); }
  std::vector<std::vector<int>> device_order;  // per device: compute task ids in run order (run_order's)
  // Every task once, in the feasible execution the device orders were read
  // from: compute tasks each followed by its sends, then the allreduces. It
  // respects deps, device_order and every send queue, so the simulator
  // replays it in one pass (and checks that it does).
  std::vector<int> replay_order;
  // Task ids: forward_task[s][m], backward_task[s][m].
  std::vector<std::vector<int>> forward_task, backward_task;
};

// Validates the placement, then builds its segments and run order into `out`,
// reusing its buffers. A data-parallel placement is an error.
Status build_segment_graph_into(const LayerGraph& g, const Placement& p, const Cluster& c, int64_t batch_size,
                                SegmentGraph& out);

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
