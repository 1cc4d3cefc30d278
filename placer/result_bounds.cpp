// placer/result_bounds.cpp — see result_bounds.h.
#include "placer/result_bounds.h"

#include "planners/lower_bound.h"
#include "planners/planners.h"

namespace tapp {

using nlohmann::json;

void add_bounds(json& result, const LayerGraph& graph, const Cluster& cluster, const CostModel& cost,
                int64_t batch_size, const std::vector<BaselineResult>& baselines, double best_step_ms,
                bool measured) {
  auto bound = step_lower_bound(graph, cluster, cost, batch_size);
  // The returned plan is synchronous (hogwild is never the best): its bound.
  const double lb = bound ? bound->synchronous_ms : 0;
  auto gap = [&](bool ok, double ms, double under) {
    return ok && under > 0 ? json(gap_to_bound(ms, under)) : json();
  };
  result["lower_bound_ms"] = bound ? json(lb) : json();
  result["lower_bound"] = lower_bound_json(bound);
  if (bound && measured)
    result["lower_bound"]["basis"] =
        bound->basis + " (the steps here are measured: the bound is the model's, not the machine's)";
  result["gap_to_bound"] = gap(best_step_ms > 0, best_step_ms, lb);
  json optima = json::array();
  json& rows = result["baselines"];
  for (size_t i = 0; i < baselines.size() && i < rows.size(); ++i) {
    const BaselineResult& b = baselines[i];
    rows[i]["gap_to_bound"] = gap(b.report.ok, b.report.step_ms, bound ? bound_for(*bound, b.placement) : 0);
    const auto within = planner_optimality(b.name);
    rows[i]["optimal_within"] = within ? json(*within) : json();
    if (within && b.report.ok && best_step_ms > 0)
      optima.push_back({{"planner", b.name},
                        {"step_ms", b.report.step_ms},
                        {"optimal_within", *within},
                        {"best_gap", (best_step_ms - b.report.step_ms) / b.report.step_ms}});
  }
  result["subspace_optima"] = optima;
}

}  // namespace tapp
