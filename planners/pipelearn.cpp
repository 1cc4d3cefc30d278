// planners/pipelearn.cpp — PipeLearn's planner side: clients and a server.
//
// PipeLearn (split learning with pipelined micro-batches) chooses, from the
// profile and the up/down link bandwidths, the split layer k and the number of
// pipelined micro-batches (its pipe_batch_num). Its structure here: the server
// is the fastest device (devices_fastest_first); every other device that can
// hold layers [0, k) is a client running a replica of them (the micro-batches
// go round-robin over the clients, their gradients are all-reduced each step:
// aggregation_every 1, synchronous); the server runs [k, L). Candidates: every
// split position (thinned to 64 quantiles of compute on long models) x every
// micro-batch choice with at least one micro-batch per client; each is
// estimated by the cost model's simulation (which charges the uplink for
// activations and the downlink for gradients separately) and the best three
// are evaluated. PipeDream's DP covers this shape too (stage 0 replicated),
// but only on 8 devices and under its bottleneck objective; this row scales to
// many clients and keeps PipeLearn's roles fixed.
#include <algorithm>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "planners/planner_support.h"
#include "planners/planners.h"

namespace tapp {
using namespace planner_support;
namespace {

std::vector<int> split_positions(const PlannerContext& ctx, int server) {
  const int L = num_layers(ctx);
  std::vector<int> pos;
  if (L <= 65) {
    for (int k = 1; k < L; ++k) pos.push_back(k);
    return pos;
  }
  const double total = std::max(stage_ms(ctx, server, 0, L, 1), 1e-12);
  int last = -1;
  for (int k = 1; k < L; ++k) {
    const int bucket = static_cast<int>(stage_ms(ctx, server, 0, k, 1) / total * 64);
    if (bucket > last) {
      pos.push_back(k);
      last = bucket;
    }
  }
  return pos;
}

}  // namespace

namespace planner_support {

Result<Outcome> pipelearn(const PlannerContext& ctx, Evaluator& ev) {
  if (Status s = check_context(ctx); !s) return s;
  const int L = num_layers(ctx), D = num_devices(ctx);
  if (D < 2) return Status::error("pipelearn: needs a server and at least one client (the cluster has 1 device)");
  if (L < 2) return Status::error("pipelearn: needs at least 2 layers to split between clients and the server");
  // Fastest first; among equally fast devices the one with the most memory serves.
  std::vector<int> order = devices_fastest_first(ctx);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const double ta = stage_ms(ctx, a, 0, L, 1), tb = stage_ms(ctx, b, 0, L, 1);
    if (ta != tb) return ta < tb;
    return ctx.cluster->devices[a].memory_mb > ctx.cluster->devices[b].memory_mb;
  });
  PlanEstimator estimator(ctx);
  std::vector<std::pair<double, Placement>> cands;
  std::string why_not;  // the last reason a split had no candidate
  // The first server (in that order) that holds the rest of the model for some split.
  for (int server : order) {
    if (!cands.empty() || cancelled(ctx)) break;
  for (int k : split_positions(ctx, server)) {
    if (cancelled(ctx)) break;
    for (int m : ctx.micro_batch_choices()) {
      StagePlan plan;
      plan.stage_begin = {0, k};
      plan.micro_batches = m;
      // The clients that hold [0, k) with their share of the micro-batches in flight.
      std::vector<int> clients;
      for (int d : order) {
        if (d == server) continue;
        clients.push_back(d);
      }
      while (!clients.empty()) {
        plan.stage_device = {clients.front(), server};
        plan.stage_replicas = {std::vector<int>(clients.begin() + 1, clients.end()), {}};
        if (static_cast<int>(clients.size()) > m) {
          why_not = std::to_string(clients.size()) + " clients need at least as many micro-batches";
          break;
        }
        Placement p = planned(ctx, plan, "pipelearn");
        if (Status s = check_memory(p, *ctx.graph, *ctx.cluster, ctx.batch_size); !s) {
          why_not = s.message();
          // Drop the client that does not fit (named in the message) and try the rest.
          auto it = std::find_if(clients.begin(), clients.end(), [&](int d) {
            return s.message().find("'" + ctx.cluster->devices[d].name + "'") != std::string::npos;
          });
          if (it == clients.end()) break;  // the server itself does not fit [k, L)
          clients.erase(it);
          continue;
        }
        const double ms = estimator.step_ms(p);
        if (ms < kInf) cands.push_back({ms, std::move(p)});
        break;
      }
    }
  }
  }
  if (cands.empty())
    return Status::error("pipelearn: no split fits (" + (why_not.empty() ? std::string("no candidate") : why_not) + ")");
  auto key = [](const std::pair<double, Placement>& c) { return c.first * (1 + 1e-4 * c.second.micro_batches); };
  std::stable_sort(cands.begin(), cands.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  Best best;
  for (int i = 0; i < static_cast<int>(cands.size()) && i < 3; ++i)
    best.consider(cands[i].second, ev.evaluate(cands[i].second));
  if (!best.placement) return best.none_found(ctx, "pipelearn");
  return Outcome{*best.placement, best.report};
}

}  // namespace planner_support

Result<Placement> plan_pipelearn(const PlannerContext& ctx, Evaluator& evaluator) {
  auto o = pipelearn(ctx, evaluator);
  if (!o) return o.status();
  return o->placement;
}

}  // namespace tapp
