// planners/dynamic_programming.cpp — contiguous pipelines found by dynamic
// programming (PipeDream / Pipe-Torch style: minimum bottleneck over layer
// suffixes, sets of used devices and the first device), polished by a local
// search on the cost model's simulation through the shared move generator;
// and exhaustive search, which enumerates every plan where the space is small.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "planners/planner_support.h"
#include "planners/planners.h"

namespace tapp {
using namespace planner_support;
namespace {

// Stages on the devices of `order` taken in turn (stage s on order[s]), every
// layer boundary a candidate cut: O(L^2 S) per pass, so exact over the cuts
// where the DP over device sets must fall back to quantiles. Per stage count,
// the best plan, its bottleneck (kInf where none fits) and, of equal
// bottlenecks, the least sum of its stages' and boundaries' times. Where a
// stage's micro-batches in flight depend on the stages after it (1F1B), each
// stage count takes a pass of its own; otherwise one pass gives them all.
void dp_in_device_order(const BottleneckModel& bm, int L, const std::vector<int>& order,
                        std::vector<std::optional<StagePlan>>& out, std::vector<double>& out_value,
                        std::vector<double>& out_sum) {
  const int S_max = std::min(static_cast<int>(order.size()), L);
  const bool per_count = micro_batches_in_flight(bm.ctx.schedule, bm.m, 1) !=
                         micro_batches_in_flight(bm.ctx.schedule, bm.m, S_max);
  for (int S = per_count ? 1 : S_max; S <= S_max; ++S) {
    // f[s][j]: the best bottleneck of layers [0, j) on stages 0..s, g[s][j]
    // its sum; from[s][j]: the cut before stage s.
    std::vector<std::vector<double>> f(S, std::vector<double>(L + 1, kInf)), g = f;
    std::vector<std::vector<int>> from(S, std::vector<int>(L + 1, -1));
    for (int j = 1; j <= L; ++j) f[0][j] = g[0][j] = bm.stage(order[0], 0, j, S);
    for (int s = 1; s < S; ++s)
      for (int i = s; i < L; ++i) {
        if (f[s - 1][i] == kInf) continue;
        const double edge = bm.boundary(order[s - 1], order[s], i);
        const double link = std::max(f[s - 1][i], edge);
        if (link >= kInf) continue;
        for (int j = i + 1; j <= L; ++j) {
          const double t = bm.stage(order[s], i, j, S - s);
          const double v = std::max(link, t), total = g[s - 1][i] + edge + t;
          if (std::tie(v, total) < std::tie(f[s][j], g[s][j])) f[s][j] = v, g[s][j] = total, from[s][j] = i;
        }
      }
    for (int s = per_count ? S - 1 : 0; s < S; ++s) {
      if (!(std::tie(f[s][L], g[s][L]) < std::tie(out_value[s + 1], out_sum[s + 1]))) continue;
      out_value[s + 1] = f[s][L], out_sum[s + 1] = g[s][L];
      StagePlan plan;
      plan.micro_batches = bm.m;
      plan.stage_begin.assign(s + 1, 0);
      for (int k = s, j = L; k > 0; --k) j = plan.stage_begin[k] = from[k][j];
      plan.stage_device.assign(order.begin(), order.begin() + s + 1);
      out[s + 1] = plan;
    }
  }
}

// DP over (cut position, used devices, first device) from the last layer back,
// so that a stage knows how many stages follow it (its memory under 1F1B):
// the devices of the suffix already placed. Best plan per stage count.
Result<std::vector<std::optional<StagePlan>>> dp_by_stage_count(const PlannerContext& ctx, int m) {
  if (Status s = check_context(ctx); !s) return s;
  const int D = num_devices(ctx), L = num_layers(ctx);
  if (D > 16) return Status::error("dp: at most 16 devices (got " + std::to_string(D) + ")");
  // Keep C^2/2 x 2^D x D^2 around 2e7.
  double per_pair = std::ldexp(1.0, D) * D * D;
  int max_positions = std::max(4, static_cast<int>(std::sqrt(4e7 / per_pair)));
  std::vector<int> P = cut_positions(ctx, max_positions);
  const int C = static_cast<int>(P.size()) - 1;
  const int M = 1 << D;
  BottleneckModel bm(ctx, m);
  // best[at(i, mask, first)]: layers [P[i], L) on the devices of mask, the
  // first stage on `first`; of equal bottlenecks the least sum of the stages'
  // and boundaries' times (`sum`: one micro-batch's way through, the fill and
  // drain a step adds to its bottleneck).
  auto at = [&](int i, int mask, int first) { return (static_cast<size_t>(i) * M + mask) * D + first; };
  std::vector<double> best(static_cast<size_t>(C + 1) * M * D, kInf), sum(best.size(), kInf);
  std::vector<int> next(best.size(), -1);      // the cut index where the next stage begins
  std::vector<int> next_dev(best.size(), -1);  // and its device
  auto improve = [&](size_t idx, double v, double total, int i, int d) {
    if (std::tie(v, total) < std::tie(best[idx], sum[idx]))
      best[idx] = v, sum[idx] = total, next[idx] = i, next_dev[idx] = d;
  };
  for (int k = 0; k < C; ++k)
    for (int d = 0; d < D; ++d) {
      const double t = bm.stage(d, P[k], L, 1);
      improve(at(k, 1 << d, d), t, t, -1, -1);
    }
  for (int i = C - 1; i >= 1; --i)
    for (int mask = 1; mask < M; ++mask)
      for (int first = 0; first < D; ++first) {
        const size_t from = at(i, mask, first);
        if (best[from] == kInf) continue;
        const int stages_to_end = __builtin_popcount(mask) + 1;
        for (int d = 0; d < D; ++d) {
          if (mask & (1 << d)) continue;
          const double edge = bm.boundary(d, first, P[i]);
          const double link = std::max(best[from], edge);
          const int nmask = mask | (1 << d);
          for (int h = 0; h < i; ++h) {
            const double t = bm.stage(d, P[h], P[i], stages_to_end);
            improve(at(h, nmask, d), std::max(link, t), sum[from] + edge + t, i, first);
          }
        }
      }
  std::vector<std::optional<StagePlan>> out(D + 1);
  std::vector<double> out_value(D + 1, kInf), out_sum(D + 1, kInf);
  for (int mask = 1; mask < M; ++mask)
    for (int first = 0; first < D; ++first) {
      const size_t idx = at(0, mask, first);
      const int S = __builtin_popcount(mask);
      if (!(std::tie(best[idx], sum[idx]) < std::tie(out_value[S], out_sum[S]))) continue;
      out_value[S] = best[idx], out_sum[S] = sum[idx];
      StagePlan plan;
      plan.micro_batches = m;
      for (int i = 0, msk = mask, d = first; i >= 0;) {
        plan.stage_begin.push_back(P[i]);
        plan.stage_device.push_back(d);
        const size_t here = at(i, msk, d);
        msk &= ~(1 << d);
        i = next[here], d = next_dev[here];
      }
      out[S] = plan;
    }
  // With many devices the DP above sees only a few cut positions (4 for 16
  // devices: at most 3 stages); the same model over every boundary, with the
  // devices in the cluster's order (its nodes) and fastest first, keeps the
  // pipelines that use them all.
  if (C < L) {
    std::vector<int> in_order(D);
    std::iota(in_order.begin(), in_order.end(), 0);
    dp_in_device_order(bm, L, in_order, out, out_value, out_sum);
    dp_in_device_order(bm, L, devices_fastest_first(ctx), out, out_value, out_sum);
  }
  return out;
}

// Calls f(plan) for every contiguous plan with 1..min(D, L) stages on distinct devices.
template <typename F>
void for_each_contiguous(int L, int D, const std::vector<int>& choices, F&& f) {
  std::vector<int> devs(D);
  for (int S = 1; S <= std::min(D, L); ++S) {
    // cut sets: combinations of S-1 positions from 1..L-1
    std::vector<int> c(S - 1);
    std::iota(c.begin(), c.end(), 1);
    while (true) {
      StagePlan plan;
      plan.stage_begin.push_back(0);
      plan.stage_begin.insert(plan.stage_begin.end(), c.begin(), c.end());
      // ordered device selections: permutations of S-subsets
      std::vector<int> perm(D);
      std::iota(perm.begin(), perm.end(), 0);
      std::set<std::vector<int>> seen;
      do {
        std::vector<int> sel(perm.begin(), perm.begin() + S);
        if (!seen.insert(sel).second) continue;
        plan.stage_device = sel;
        for (int m : choices) {
          plan.micro_batches = m;
          if (!f(plan)) return;
        }
      } while (std::next_permutation(perm.begin(), perm.end()));
      int i = S - 2;
      while (i >= 0 && c[i] == L - 1 - (S - 2 - i)) --i;
      if (i < 0) break;
      ++c[i];
      for (int k = i + 1; k < S - 1; ++k) c[k] = c[k - 1] + 1;
    }
  }
}

// "1234", or "about 2.3e+17" past what a long long shows exactly.
std::string count_text(double count) {
  std::ostringstream os;
  if (count < 1e15)
    os << static_cast<long long>(count);
  else
    os << "about " << std::setprecision(2) << count;
  return os.str();
}

double count_contiguous(int L, int D, int choices) {
  double total = 0;
  for (int S = 1; S <= std::min(D, L); ++S) {
    double comb = 1;
    for (int k = 0; k < S - 1; ++k) comb = comb * (L - 1 - k) / (k + 1);
    double perm = 1;
    for (int k = 0; k < S; ++k) perm *= D - k;
    total += comb * perm * choices;
  }
  return total;
}

}  // namespace

std::optional<std::string> exhaustive_skip_reason(const PlannerContext& ctx) {
  if (!ctx.graph || !ctx.cluster) return std::nullopt;
  const int D = ctx.cluster->num_devices(), L = static_cast<int>(ctx.graph->layers.size());
  const size_t choices = ctx.micro_batch_choices().size();
  const double limit = static_cast<double>(ctx.exhaustive_limit);
  if (!ctx.exhaustive_contiguous_only && std::pow(static_cast<double>(D), L) * choices <= limit) return std::nullopt;
  // Otherwise exhaustive search would enumerate the contiguous plans only: their count decides.
  const double contiguous = count_contiguous(L, D, static_cast<int>(choices));
  if (contiguous <= limit) return std::nullopt;
  return count_text(contiguous) + " candidates > limit " + std::to_string(ctx.exhaustive_limit);
}

namespace planner_support {

Result<Outcome> exhaustive(const PlannerContext& ctx, Evaluator& ev) {
  if (Status s = check_context(ctx); !s) return s;
  const int D = num_devices(ctx), L = num_layers(ctx);
  std::vector<int> choices = ctx.micro_batch_choices();
  const double limit = static_cast<double>(ctx.exhaustive_limit);
  double all = std::pow(static_cast<double>(D), L) * choices.size();
  double contiguous = count_contiguous(L, D, static_cast<int>(choices.size()));
  Best best;
  if (all <= limit && !ctx.exhaustive_contiguous_only) {
    std::vector<int> dev(L, 0);
    while (!cancelled(ctx)) {
      // groups: the used devices in order of first use
      Placement p;
      std::vector<int> group_of(D, -1);
      for (int i = 0; i < L; ++i) {
        if (group_of[dev[i]] < 0) {
          group_of[dev[i]] = static_cast<int>(p.group_device.size());
          p.group_device.push_back(dev[i]);
        }
        p.layer_group.push_back(group_of[dev[i]]);
      }
      p.schedule = ctx.schedule;
      p.optimizer = ctx.optimizer;
      p.source = "exhaustive";
      for (int m : choices) {
        p.micro_batches = m;
        if (fits(ctx, p)) best.consider(p, ev.evaluate(p));
      }
      int i = L - 1;
      while (i >= 0 && dev[i] == D - 1) dev[i--] = 0;
      if (i < 0) break;
      ++dev[i];
    }
  } else if (contiguous <= limit) {
    for_each_contiguous(L, D, choices, [&](const StagePlan& plan) {
      Placement p = planned(ctx, plan, "exhaustive");
      if (fits(ctx, p)) best.consider(p, ev.evaluate(p));
      return !cancelled(ctx);
    });
  } else {
    return Status::error("exhaustive: " + count_text(contiguous) + " contiguous placements exceed the limit of " +
                         std::to_string(ctx.exhaustive_limit));
  }
  if (!best.placement) return best.none_found(ctx, "exhaustive");
  return Outcome{*best.placement, best.report};
}

Result<Outcome> dynamic_programming(const PlannerContext& ctx, Evaluator& ev, int verify) {
  if (Status s = check_context(ctx); !s) return s;
  PlanEstimator estimator(ctx);
  const int L = num_layers(ctx);
  std::vector<std::pair<double, Placement>> cands;
  for (int m : ctx.micro_batch_choices()) {
    if (cancelled(ctx)) break;
    auto per_s = dp_by_stage_count(ctx, m);
    if (!per_s) return per_s.status();
    for (const auto& plan : *per_s) {
      if (!plan) continue;
      auto [ms, polished] = polish_by_simulation(ctx, estimator, *plan, MoveSet::shifts_and_swaps(), "dp");
      if (ms == kInf) continue;
      Placement p = planned(ctx, polished, "dp");
      cands.push_back({ms, p});
    }
  }
  // Near-ties go to fewer micro-batches (0.01% per micro-batch).
  auto key = [](const std::pair<double, Placement>& c) {
    return c.first * (1 + 1e-4 * c.second.micro_batches);
  };
  std::stable_sort(cands.begin(), cands.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  Best best;
  int evaluated = 0;
  for (const auto& c : cands) {
    if (evaluated >= std::max(1, verify) || c.first == kInf) break;
    best.consider(c.second, ev.evaluate(c.second));
    ++evaluated;
  }
  if (!best.placement) return best.none_found(ctx, "dp");
  return Outcome{*best.placement, best.report};
}

}  // namespace planner_support

double pipeline_bottleneck_ms(const PlannerContext& ctx, const StagePlan& plan) {
  const int L = num_layers(ctx), S = static_cast<int>(plan.stage_begin.size());
  BottleneckModel bm(ctx, plan.micro_batches);
  double v = 0;
  for (int k = 0; k < S; ++k) {
    int end = k + 1 < S ? plan.stage_begin[k + 1] : L;
    v = std::max(v, bm.stage(plan.stage_device[k], plan.stage_begin[k], end, S - k));
    if (k > 0)
      v = std::max(v, bm.boundary(plan.stage_device[k - 1], plan.stage_device[k], plan.stage_begin[k]));
  }
  return v;
}

Result<StagePlan> dp_min_bottleneck(const PlannerContext& ctx, int micro_batches, int stages) {
  auto per_s = dp_by_stage_count(ctx, micro_batches);
  if (!per_s) return per_s.status();
  std::optional<StagePlan> best;
  double best_v = kInf;
  for (int S = 1; S < static_cast<int>(per_s->size()); ++S) {
    if (stages > 0 && S != stages) continue;
    if (!(*per_s)[S]) continue;
    double v = pipeline_bottleneck_ms(ctx, *(*per_s)[S]);
    if (v < best_v) {
      best_v = v;
      best = (*per_s)[S];
    }
  }
  if (!best) return nothing_fits(ctx, "dp");
  return *best;
}

Result<StagePlan> exhaustive_min_bottleneck(const PlannerContext& ctx, int micro_batches, int stages) {
  if (Status s = check_context(ctx); !s) return s;
  std::optional<StagePlan> best;
  double best_v = kInf;
  for_each_contiguous(num_layers(ctx), num_devices(ctx), {micro_batches}, [&](const StagePlan& plan) {
    if (stages > 0 && static_cast<int>(plan.stage_begin.size()) != stages) return true;
    double v = pipeline_bottleneck_ms(ctx, plan);
    if (v < best_v) {
      best_v = v;
      best = plan;
    }
    return true;
  });
  if (!best) return nothing_fits(ctx, "exhaustive");
  return *best;
}

Result<Placement> plan_dynamic_programming(const PlannerContext& ctx, Evaluator& evaluator, int verify) {
  auto o = dynamic_programming(ctx, evaluator, verify);
  if (!o) return o.status();
  return o->placement;
}
Result<Placement> plan_exhaustive(const PlannerContext& ctx, Evaluator& evaluator) {
  auto o = exhaustive(ctx, evaluator);
  if (!o) return o.status();
  return o->placement;
}

}  // namespace tapp
