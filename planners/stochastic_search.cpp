// planners/stochastic_search.cpp — planners that spend an evaluation budget on
// random contiguous plans: random search, and simulated annealing from the
// balance-by-time plan through the shared move generator's random
// neighbours; and the random placements calibration and accuracy runs use.
#include <cmath>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "planners/planner_support.h"
#include "planners/planners.h"

namespace tapp {
using namespace planner_support;

namespace planner_support {

Result<Outcome> random_search(const PlannerContext& ctx, Evaluator& ev) {
  if (Status s = check_context(ctx); !s) return s;
  std::mt19937_64 rng(ctx.seed);
  const StageMoves moves = stage_moves(ctx);
  Best best;
  const int L = num_layers(ctx);
  for (int e = 0; e < ctx.budget && !cancelled(ctx); ++e) {
    Placement p;
    bool ok = false;
    for (int attempt = 0; attempt < 200 && !ok; ++attempt) {
      p = planned(ctx, moves.random_plan(rng), "random");
      ok = fits(ctx, p);
    }
    if (!ok) break;
    best.consider(p, ev.evaluate(p));
  }
  if (!best.placement) return best.none_found(ctx, "random");
  return Outcome{*best.placement, best.report};
}

Result<Outcome> annealing(const PlannerContext& ctx, Evaluator& ev) {
  if (Status s = check_context(ctx); !s) return s;
  const int L = num_layers(ctx);
  std::mt19937_64 rng(ctx.seed);
  const StageMoves moves = stage_moves(ctx);
  // Start from the balance-by-time plan when it fits, else a random plan that fits.
  StagePlan cur;
  bool have = false;
  if (auto start = plan_balance_by_time(ctx); start.is_ok()) {
    cur = stage_plan_of_runs(*start);
    have = true;
  }
  for (int attempt = 0; attempt < 500 && !have; ++attempt) {
    cur = moves.random_plan(rng);
    have = fits(ctx, planned(ctx, cur, "anneal"));
  }
  if (!have) return nothing_fits(ctx, "anneal");
  Best best;
  Placement cur_p = planned(ctx, cur, "anneal");
  StepReport cur_r = ev.evaluate(cur_p);
  best.consider(cur_p, cur_r);
  double cur_ms = cur_r.ok ? cur_r.step_ms : kInf;
  const int budget = std::max(1, ctx.budget);
  const double t0 = 0.05, t1 = 0.0005;
  for (int e = 1; e < budget && !cancelled(ctx); ++e) {
    double temp = t0 * std::pow(t1 / t0, static_cast<double>(e) / budget);
    StagePlan cand = moves.random_neighbour(cur, rng);
    Placement p = planned(ctx, cand, "anneal");
    int guard = 0;
    while (!fits(ctx, p) && guard++ < 50) {
      cand = moves.random_neighbour(cur, rng);
      p = planned(ctx, cand, "anneal");
    }
    if (!fits(ctx, p)) continue;
    StepReport r = ev.evaluate(p);
    best.consider(p, r);
    if (!r.ok) continue;
    double delta = cur_ms == kInf ? -1 : (r.step_ms - cur_ms) / cur_ms;
    std::uniform_real_distribution<double> u(0, 1);
    if (delta <= 0 || u(rng) < std::exp(-delta / temp)) {
      cur = cand;
      cur_ms = r.step_ms;
    }
  }
  if (!best.placement) return best.none_found(ctx, "anneal");
  return Outcome{*best.placement, best.report};
}

}  // namespace planner_support

namespace {

// `plan` with up to 3 random stages replicated onto random unused devices
// (never more replicas than micro-batches); `plan` itself when none can be.
StagePlan with_random_replicas(StagePlan plan, int num_devices, std::mt19937_64& rng) {
  std::vector<int> unused;
  for (int d = 0; d < num_devices; ++d)
    if (!plan.uses_device(d)) unused.push_back(d);
  std::shuffle(unused.begin(), unused.end(), rng);
  const int S = plan.num_stages();
  plan.stage_replicas.resize(S);
  const int wanted = 1 + static_cast<int>(rng() % 3);
  for (int added = 0; added < wanted && !unused.empty(); ++added) {
    const int k = static_cast<int>(rng() % S);
    if (plan.replica_count(k) >= plan.micro_batches) continue;
    plan.stage_replicas[k].push_back(unused.back());
    unused.pop_back();
  }
  return plan;
}

}  // namespace

std::vector<Placement> random_placements(const PlannerContext& ctx, int n, double noncontiguous_fraction,
                                         double replicated_fraction) {
  std::vector<Placement> out;
  if (!check_context(ctx)) return out;
  std::mt19937_64 rng(ctx.seed);
  const StageMoves moves = stage_moves(ctx);
  const int L = num_layers(ctx), D = num_devices(ctx);
  std::vector<int> choices = ctx.micro_batch_choices();
  std::set<std::tuple<std::vector<int>, std::vector<int>, std::vector<std::vector<int>>, int>> seen;
  std::uniform_real_distribution<double> u(0, 1);
  for (int attempt = 0; attempt < 100 * n && static_cast<int>(out.size()) < n; ++attempt) {
    Placement p;
    if (D > 1 && u(rng) < noncontiguous_fraction) {
      // Runs of 1..L/4 layers on random devices.
      std::vector<int> dev;
      while (static_cast<int>(dev.size()) < L) {
        int d = static_cast<int>(rng() % D);
        int len = 1 + static_cast<int>(rng() % std::max(1, L / 4));
        for (int k = 0; k < len && static_cast<int>(dev.size()) < L; ++k) dev.push_back(d);
      }
      std::vector<int> group_of(D, -1);
      for (int i = 0; i < L; ++i) {
        if (group_of[dev[i]] < 0) {
          group_of[dev[i]] = p.num_groups();
          p.group_device.push_back(dev[i]);
        }
        p.layer_group.push_back(group_of[dev[i]]);
      }
      p.micro_batches = choices[rng() % choices.size()];
      p.schedule = ctx.schedule;
      p.optimizer = ctx.optimizer;
      p.source = "random";
    } else {
      StagePlan plan = moves.random_plan(rng);
      if (u(rng) < replicated_fraction) plan = with_random_replicas(plan, D, rng);
      p = planned(ctx, plan, "random");
    }
    if (!fits(ctx, p)) continue;
    if (!seen.insert({p.layer_group, p.group_device, p.group_replicas, p.micro_batches}).second) continue;
    out.push_back(p);
  }
  return out;
}

}  // namespace tapp
