// placer/baselines.h — the classical baselines of an optimization job, through the job's evaluator.
//
// Owns `run_baselines`: the adapter between optimize() and the classical
// planners (planners/planners.h, simulator engineer). Every baseline's placement
// is scored by the same Evaluator as the TAPP candidates, so the table
// compares like with like. Baselines that are not a Placement (BSP data
// parallel) carry no placement and their report comes from the planners'
// own evaluation on the same evaluator kind.
// Thread safety: one thread (uses the caller's evaluator).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/evaluator.h"
#include "core/placement.h"
#include "core/step_report.h"

namespace tapp {

struct LayerGraph;
struct Cluster;
class CostModel;

struct BaselineOptions {
  int64_t batch_size = 32;
  uint64_t seed = 1;
  int search_budget = 2000;  // evaluations for random search / annealing (the policy's budget)
  Optimizer optimizer = Optimizer::sgd;  // what the plans train with (PlannerContext::optimizer)
  std::vector<std::string> planners;  // empty: every planner (planner_names())
  // Each pipeline planner also plans for the other synchronous schedule
  // (1F1B beside GPipe) and its row keeps the faster plan: TAPP's refinement
  // switches schedules, so the table it is judged against must too (on
  // memory-bound clusters a 1F1B plan need not recompute: 8-25% faster).
  bool both_schedules = false;
  // Measures "bsp" on the runtime when the evaluator measures; empty: simulated.
  std::function<StepReport(const std::string& strategy)> strategy_evaluator;
  const std::atomic<bool>* cancel = nullptr;
  // Called as each planner starts: "pipedream (7 of 12)", "anneal, 1f1b (18 of 20)",
  // and the share of the table's rows started before it.
  std::function<void(const std::string& message, double fraction)> progress;
  // Within a planner, at most this often: its evaluations so far ("anneal (8 of 22): 1200 of 4000
  // evaluations"; random search and annealing spend the budget, their share of it in the fraction).
  double progress_every_s = 1.0;
};

struct BaselineResult {
  std::string name;                    // "single", "bsp", "uniform", "params", "time", "dp", ...
  std::optional<Placement> placement;  // none when the planner found nothing
  double plan_s = 0;
  StepReport report;
  bool skipped = false;  // did not run (exhaustive: its space > its limit); report.message says why
};

std::vector<BaselineResult> run_baselines(const LayerGraph& graph, const Cluster& cluster, const CostModel& cost,
                                          Evaluator& evaluator, const BaselineOptions& options);

}  // namespace tapp
