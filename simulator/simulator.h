// simulator/simulator.h — predicts one training step by replaying the task graph.
//
// `simulate(task graph, costs)` is a free function (FlexFlow's estimate): every
// compute task starts when its device is free (device_order fixes the order)
// and its inputs have arrived; a transfer takes latency + bytes / bandwidth on
// its sender's send queue (FIFO in the order the sender's tasks post them, as
// the runtime's sender thread; or per directed link); a device's sends never
// block its compute. Since device orders are fixed and a queue's FIFO order
// follows its sender's device order, the replay is one pass over a DAG
// (dependencies + device chains + queue chains): O(tasks + edges).
// An allreduce task (a replicated group's gradients, aggregation_every = 1)
// costs CostModel::ring_allreduce_ms over the group's replicas and occupies
// their links: it joins the end of every participant's send queue (per
// directed link: the participant's link to its ring successor), so it starts
// when every backward of the group is done and each participant's earlier
// sends have left; compute never waits for it, so it overlaps the backward of
// other groups. With aggregation_every = K > 1 each participant is charged
// 1/K of that allreduce per step (the parameter averaging every K steps, amortised).
// A device ends when its last task, its last send and its allreduces are
// done, then runs the optimizer update (over every segment it holds a replica
// of); the step ends when every device has. Communication time
// is counted as the runtime counts it: blocked waiting for remote inputs plus
// draining the sends. Peak memory is counted along each device's order:
// weights, gradients and the optimizer's state (core's training_state_bytes)
// plus the activations of the micro-batches in flight plus the inputs they
// received. A recomputing segment's backward also runs its forward (charged
// to the backward task) and keeps only its inputs until then.
//
// `Simulator` is the fast path for search loops: it keeps the graph, cluster
// and costs, and reuses its buffers, so evaluate(placement) = validate +
// memory check + task graph + replay without re-allocating. Invalid placements
// come back as StepReport::failure ("invalid_placement", "out_of_memory"),
// never as an exception.
// Thread safety: simulate() is reentrant; a Simulator is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/placement.h"
#include "simulator/cost_model.h"
#include "core/step_report.h"
#include "simulator/task_graph.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

struct SimulateOptions {
  bool timeline = true;  // fill StepReport::timeline (task names cost string formatting)
  // One FIFO send queue per device, in the order its tasks post sends (the
  // runtime's sender thread); false: one FIFO per directed link.
  bool send_queue_per_device = true;
};

// Per-task times of one replay (for calibration and tests).
struct TaskTimes {
  std::vector<double> start_ms, end_ms;
  std::vector<int> critical_pred;  // the dependency or resource predecessor that set the start (-1: none)
  int last_task = -1;              // the task whose end (plus its device's update) ends the step
  int last_device = -1;
};

StepReport simulate(const TaskGraph& tg, const CostModel& cost, const SimulateOptions& options = {},
                    TaskTimes* times = nullptr);

// The same report as simulate(the task graph built from sg, options) without a
// timeline, replayed from the segments, their edges and the run order (no
// tasks built): the search's path, Simulator::evaluate's when no timeline is asked for.
StepReport simulate_segments(const SegmentGraph& sg, const CostModel& cost, const SimulateOptions& options = {});

// Name of a task as it appears in timelines: "F s2 m3", "B s2 m3", "X s1->s2 m3", "G s2->s1 m3",
// "AR r0" (the allreduce of replicated_groups[0]; one timeline line per participant).
std::string task_name(const Task& t);

class Simulator {
 public:
  // Keeps references to g and c: they must outlive the Simulator.
  Simulator(const LayerGraph& g, const Cluster& c, CostModel cost, int64_t batch_size);
  ~Simulator();
  Simulator(Simulator&&) noexcept;

  StepReport evaluate(const Placement& p, const SimulateOptions& options = {});
  const CostModel& cost() const { return cost_; }
  void set_cost(CostModel cost) { cost_ = std::move(cost); }
  int64_t batch_size() const { return batch_size_; }
  const LayerGraph& graph() const { return *graph_; }
  const Cluster& cluster() const { return *cluster_; }

 private:
  const LayerGraph* graph_;
  const Cluster* cluster_;
  CostModel cost_;
  int64_t batch_size_;
  TaskGraph tg_;  // reused between evaluations
};

}  // namespace tapp
