// planners/context.h — what every classical planner is given.
//
// Owns `PlannerContext`: the model, the cluster, the cost model the analytic
// planners estimate with, the batch, the schedule, the micro-batch choices,
// and the budgets of the search planners (random, annealing, exhaustive).
// Data flow: (LayerGraph, Cluster, CostModel, batch) -> PlannerContext -> each planner.
// Thread safety: a plain value holding pointers; what they point to must outlive
// every planner call that uses the context.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/placement.h"

namespace tapp {

struct LayerGraph;
struct Cluster;
class CostModel;

struct PlannerContext {
  const LayerGraph* graph = nullptr;
  const Cluster* cluster = nullptr;
  const CostModel* cost = nullptr;  // estimates for the analytic planners
  int64_t batch_size = 32;
  Schedule schedule = Schedule::gpipe;
  Optimizer optimizer = Optimizer::sgd;  // every placement a planner returns trains with it (its memory counts it)
  // A stage that does not fit its device otherwise may recompute its forward
  // in backward (Placement::group_recompute): the DP's stage costs and the
  // planners' placements try without, then with.
  bool allow_recompute = true;
  // Replicas take the micro-batches of their stage in proportion to their
  // speed (the TAPP search's measurer weighs them so), not in equal shares
  // (the planners' own plans): how the replicated-stage model shares them.
  bool replicas_weighed = false;
  int micro_batches = 0;       // 0: each planner picks from micro_batch_choices()
  int max_micro_batches = 64;  // cap on the choices
  uint64_t seed = 1;
  int budget = 200;                         // evaluations for random search and annealing
  int64_t exhaustive_limit = 200000;        // candidates exhaustive search may enumerate
  bool exhaustive_contiguous_only = false;  // skip the every-assignment space
  const std::atomic<bool>* cancel = nullptr;
  // Powers of two up to the batch size and max_micro_batches (or just `micro_batches` when set).
  std::vector<int> micro_batch_choices() const;
};

}  // namespace tapp
