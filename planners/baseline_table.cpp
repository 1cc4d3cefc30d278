// planners/baseline_table.cpp — the planners by name, and the baseline table:
// every planner run through one Evaluator so that their numbers compare.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "planners/planner_support.h"
#include "planners/planners.h"
#include "simulator/data_parallel.h"

namespace tapp {
using namespace planner_support;
namespace {

Result<Outcome> run_outcome(const std::string& name, const PlannerContext& ctx, Evaluator& ev) {
  if (name == "dp") return dynamic_programming(ctx, ev, 3);
  if (name == "random") return random_search(ctx, ev);
  if (name == "anneal") return annealing(ctx, ev);
  if (name == "exhaustive") return exhaustive(ctx, ev);
  if (name == "pipedream") return pipedream(ctx, ev, 3);
  if (name == "pipelearn") return pipelearn(ctx, ev);
  Result<Placement> p = Status::error("");
  if (name == "single")
    p = plan_single_device(ctx);
  else if (name == "bsp")
    p = plan_data_parallel(ctx);
  else if (name == "hogwild")
    p = plan_hogwild(ctx);
  else if (name == "uniform")
    p = plan_uniform(ctx);
  else if (name == "params")
    p = plan_param_balanced(ctx);
  else if (name == "time")
    p = plan_balance_by_time(ctx);
  else {
    std::string known;
    for (const auto& n : planner_names()) known += (known.empty() ? "" : ", ") + n;
    return Status::error("planner: unknown \"" + name + "\"; expected one of " + known);
  }
  if (!p) return p.status();
  return Outcome{*p, std::nullopt};
}

// The row of a planner that ran: its placement evaluated (data-parallel
// strategies by the hook, else simulated), or its error.
PlannerRow evaluated_row(const std::string& name, const Result<Outcome>& o, const PlannerContext& ctx,
                         Evaluator& evaluator, const PlannerRunOptions& options) {
  PlannerRow row;
  row.name = name;
  if (!o) {
    row.report = StepReport::failure(FailureKind::no_placement, o.error_message(), evaluator.name());
    return row;
  }
  row.placement = o->placement;
  if (o->report)
    row.report = *o->report;
  else if (is_data_parallel(o->placement))
    row.report = options.strategy_evaluator
                     ? options.strategy_evaluator(o->placement.source)
                     : simulate_data_parallel(*ctx.graph, *ctx.cluster, *ctx.cost, ctx.batch_size, o->placement);
  else
    row.report = evaluator.evaluate(o->placement);
  return row;
}

}  // namespace

Result<Placement> plan_random_search(const PlannerContext& ctx, Evaluator& evaluator) {
  auto o = random_search(ctx, evaluator);
  if (!o) return o.status();
  return o->placement;
}
Result<Placement> plan_annealing(const PlannerContext& ctx, Evaluator& evaluator) {
  auto o = annealing(ctx, evaluator);
  if (!o) return o.status();
  return o->placement;
}

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = {"single", "bsp",    "uniform", "params",     "time",
                                                 "dp",     "random", "anneal",  "exhaustive", "hogwild",
                                                 "pipedream", "pipelearn"};
  return names;
}

std::optional<std::string> planner_optimality(const std::string& name) {
  if (name == "dp")
    return "its DP is optimal among contiguous stages on distinct devices under the bottleneck model at its cut "
           "positions (every layer boundary while the DP over device sets stays small, else quantiles of the "
           "compute, plus every boundary for the devices in the cluster's order and fastest first; per micro-batch "
           "count; then polished and ranked by simulation)";
  if (name == "pipedream")
    return "its DP is optimal among contiguous stages on disjoint device sets (replicas) of the 8 fastest devices, "
           "or on more devices of counts of interchangeable ones, under PipeDream's bottleneck model (per "
           "micro-batch count; then polished and ranked by simulation)";
  if (name == "pipelearn")
    return "the best under the cost model's simulation among its client/server splits (every split layer, or 64 "
           "quantiles on long models) and micro-batch choices, every client replicating the first stage";
  if (name == "exhaustive")
    return "optimal under the evaluator among every layer-to-device assignment, or every contiguous plan on "
           "distinct devices when that space is too large, for the micro-batch choices";
  return std::nullopt;
}

Result<Placement> run_planner(const std::string& name, const PlannerContext& ctx, Evaluator& evaluator) {
  auto o = run_outcome(name, ctx, evaluator);
  if (!o) return o.status();
  return o->placement;
}

std::vector<PlannerRow> run_planners(const PlannerContext& ctx, Evaluator& evaluator,
                                     const PlannerRunOptions& options) {
  std::vector<PlannerRow> rows;
  const std::vector<std::string>& names = options.planners.empty() ? planner_names() : options.planners;
  for (const std::string& name : names) {
    if (cancelled(ctx)) break;
    if (options.on_planner) options.on_planner(name);
    auto t0 = std::chrono::steady_clock::now();
    PlannerRow row;
    row.name = name;
    PlannerContext c = ctx;
    // Each candidate may run the workers: exhaustive gets the search planners' budget.
    if (name == "exhaustive" && evaluator.kind() != EvaluatorKind::simulate)
      c.exhaustive_limit = std::min<int64_t>(c.exhaustive_limit, c.budget);
    if (std::optional<std::string> skip = name == "exhaustive" ? exhaustive_skip_reason(c) : std::nullopt) {
      row.skipped = true;
      row.report = StepReport::failure(FailureKind::skipped, *skip, evaluator.name());
    } else {
      row = evaluated_row(name, run_outcome(name, c, evaluator), ctx, evaluator, options);
    }
    row.plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tapp
