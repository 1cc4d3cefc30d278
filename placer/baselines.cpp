// placer/baselines.cpp — see baselines.h.
#include "placer/baselines.h"

#include <algorithm>

#include "planners/planners.h"

namespace tapp {
namespace {

// The pipeline planners of `rows` (planned for GPipe) run again for 1F1B;
// each row keeps the faster of its two plans and the time of both.
void keep_faster_on_1f1b(std::vector<PlannerRow>& rows, PlannerContext ctx, Evaluator& evaluator,
                         PlannerRunOptions ro) {
  ro.planners.clear();
  for (const PlannerRow& row : rows)
    if (row.name != "bsp" && row.name != "hogwild" && !row.skipped) ro.planners.push_back(row.name);
  ctx.schedule = Schedule::one_f_one_b;
  for (PlannerRow& other : run_planners(ctx, evaluator, ro)) {
    PlannerRow& row =
        *std::find_if(rows.begin(), rows.end(), [&](const PlannerRow& r) { return r.name == other.name; });
    row.plan_s += other.plan_s;
    if (runs_faster(other.report, row.report)) {
      row.placement = std::move(other.placement);
      row.report = std::move(other.report);
    }
  }
}

}  // namespace

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
  std::vector<PlannerRow> rows = run_planners(ctx, evaluator, ro);
  if (o.both_schedules) keep_faster_on_1f1b(rows, ctx, evaluator, ro);
  std::vector<BaselineResult> out;
  for (PlannerRow& row : rows)
    out.push_back({row.name, std::move(row.placement), row.plan_s, std::move(row.report), row.skipped});
  return out;
}

}  // namespace tapp
