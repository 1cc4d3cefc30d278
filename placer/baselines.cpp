// placer/baselines.cpp — see baselines.h.
#include "placer/baselines.h"

#include "planners/planners.h"

namespace tapp {

std::vector<BaselineResult> run_baselines(const LayerGraph& graph, const Cluster& cluster, const CostModel& cost,
                                          Evaluator& evaluator, const BaselineOptions& o) {
  PlannerContext ctx;
  ctx.graph = &graph;
  ctx.cluster = &cluster;
  ctx.cost = &cost;
  ctx.batch_size = o.batch_size;
  ctx.optimizer = o.optimizer;
  ctx.seed = o.seed;
  ctx.budget = o.search_budget;
  ctx.cancel = o.cancel;
  PlannerRunOptions ro;
  ro.planners = o.planners;
  ro.strategy_evaluator = o.strategy_evaluator;
  std::vector<BaselineResult> out;
  for (PlannerRow& row : run_planners(ctx, evaluator, ro))
    out.push_back({row.name, std::move(row.placement), row.plan_s, std::move(row.report), row.skipped});
  return out;
}

}  // namespace tapp
