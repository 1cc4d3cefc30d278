// planners/balanced_splits.cpp — one stage per device, the layers split so
// that the largest stage is smallest by some measure: layer count (uniform),
// parameter bytes (DeepSpeed's "parameters"), or estimated time
// (torchgpipe's balance_by_time); the micro-batch count by the estimate.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "planners/planner_support.h"
#include "planners/planners.h"

namespace tapp {
using namespace planner_support;
namespace {

// Minimizes the largest block cost over contiguous blocks: block k = [begin_k, begin_{k+1}) with cost(k, a,
// b).
std::vector<int> partition_min_max(int L, int S, const std::function<double(int, int, int)>& cost) {
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> from(S + 1, std::vector<int>(L + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= S; ++k)
    for (int b = k; b <= L - (S - k); ++b)
      for (int a = k - 1; a < b; ++a) {
        if (best[k - 1][a] == kInf) continue;
        double v = std::max(best[k - 1][a], cost(k - 1, a, b));
        if (v < best[k][b]) {
          best[k][b] = v;
          from[k][b] = a;
        }
      }
  std::vector<int> begin(S);
  for (int k = S, b = L; k >= 1; --k) {
    begin[k - 1] = from[k][b];
    b = from[k][b];
  }
  return begin;
}

// Splits over all devices with block costs `cost(device, a, b)`: devices fastest
// first; when that does not fit, largest memory first, then rotations of it.
Result<Placement> split_planner(const PlannerContext& ctx, const std::string& source,
                                const std::function<double(int, int, int)>& cost) {
  if (Status s = check_context(ctx); !s) return s;
  PlanEstimator estimator(ctx);
  const int L = num_layers(ctx), D = num_devices(ctx);
  std::vector<std::vector<int>> orders = {devices_fastest_first(ctx)};
  std::vector<int> by_memory = orders[0];
  std::stable_sort(by_memory.begin(), by_memory.end(), [&](int a, int b) {
    return ctx.cluster->devices[a].memory_mb > ctx.cluster->devices[b].memory_mb;
  });
  for (int r = 0; r < D; ++r) {
    std::vector<int> o = by_memory;
    std::rotate(o.begin(), o.begin() + r, o.end());
    orders.push_back(o);
  }
  Result<Placement> first = Status::error(source + ": no device order");
  for (size_t i = 0; i < orders.size(); ++i) {
    std::vector<int> devs = orders[i];
    const int S = std::min<int>(D, L);
    devs.resize(S);
    StagePlan plan;
    plan.stage_device = devs;
    plan.stage_begin = partition_min_max(L, S, [&](int k, int a, int b) { return cost(devs[k], a, b); });
    auto p = best_micro_batches(ctx, estimator, planned(ctx, plan, source), source);
    if (p) return p;
    if (i == 0) first = p;
  }
  return first;
}

}  // namespace

Result<Placement> plan_uniform(const PlannerContext& ctx) {
  return split_planner(ctx, "uniform", [](int, int a, int b) { return static_cast<double>(b - a); });
}

Result<Placement> plan_param_balanced(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  StageMemory mem(*ctx.graph, ctx.optimizer);
  // Ties in parameters (layers without any) are broken by layer count.
  return split_planner(ctx, "params", [&](int, int a, int b) {
    return static_cast<double>(mem.param_bytes(a, b)) + 1e-9 * (b - a);
  });
}

Result<Placement> plan_balance_by_time(const PlannerContext& ctx) {
  return split_planner(ctx, "time", [&](int d, int a, int b) { return stage_ms(ctx, d, a, b, 1); });
}

}  // namespace tapp
