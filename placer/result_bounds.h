// placer/result_bounds.h — how good is good, in the optimize result.
//
// Owns `add_bounds`: writes into a result JSON the step-time lower bound of
// the job's model on its cluster (planners/lower_bound.h), each baseline row's
// and the best plan's gap to it, which rows are the exact optimum of a
// subspace (planner_optimality) and the best plan's gap to each such optimum.
// Data flow: (graph, cluster, cost model, batch, baselines, best step) -> keys
// "lower_bound_ms", "lower_bound", "gap_to_bound", "subspace_optima" and, per
// row of "baselines", "gap_to_bound" and "optimal_within".
// Thread safety: a pure function of its arguments (writes only `result`).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "placer/baselines.h"

namespace tapp {

// `result["baselines"]` holds one row per `baselines` entry, in order.
void add_bounds(nlohmann::json& result, const LayerGraph& graph, const Cluster& cluster, const CostModel& cost,
                int64_t batch_size, const std::vector<BaselineResult>& baselines, double best_step_ms,
                bool measured);

}  // namespace tapp
