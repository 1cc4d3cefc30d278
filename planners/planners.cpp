#include "planners/planners.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <iomanip>
#include <set>
#include <sstream>
#include <tuple>

#include "model/layer_graph.h"
#include "core/cluster.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace tapp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int num_layers(const PlannerContext& ctx) { return static_cast<int>(ctx.graph->layers.size()); }
int num_devices(const PlannerContext& ctx) { return ctx.cluster->num_devices(); }
bool cancelled(const PlannerContext& ctx) { return ctx.cancel && ctx.cancel->load(); }

Status check_context(const PlannerContext& ctx) {
  if (!ctx.graph || !ctx.cluster || !ctx.cost) return Status::error("planner: missing model, cluster or cost model");
  if (ctx.graph->layers.empty()) return Status::error("model: has no layers");
  if (ctx.cluster->devices.empty()) return Status::error("cluster.devices: must not be empty");
  if (ctx.batch_size < 1) return Status::error("batch_size: must be at least 1");
  if (ctx.cost->num_devices() != num_devices(ctx) || ctx.cost->num_layers() != num_layers(ctx))
    return Status::error("planner: the cost model was built for another model or cluster");
  if (ctx.micro_batches < 0 || ctx.micro_batches > ctx.batch_size)
    return Status::error("micro_batches: must be in [1, batch size " + std::to_string(ctx.batch_size) + "]");
  return Status::ok();
}

int64_t micro_batch_samples(const PlannerContext& ctx, int m) { return (ctx.batch_size + m - 1) / m; }

// Per-sample bytes crossing the cut before layer j (layers < j read by layers >= j).
std::vector<int64_t> cut_bytes_per_sample(const LayerGraph& g) {
  const int L = static_cast<int>(g.layers.size());
  std::vector<int> last_consumer(L, -1);
  for (int i = 0; i < L; ++i)
    for (int p : g.layers[i].inputs) last_consumer[p] = std::max(last_consumer[p], i);
  std::vector<int64_t> diff(L + 2, 0);
  for (int i = 0; i < L; ++i)
    if (last_consumer[i] > i) {
      diff[i + 1] += g.layers[i].activation_bytes();
      diff[last_consumer[i] + 1] -= g.layers[i].activation_bytes();
    }
  std::vector<int64_t> cut(L + 1, 0);
  int64_t run = 0;
  for (int j = 0; j <= L; ++j) {
    run += diff[j];
    cut[j] = run;
  }
  return cut;
}

// Memory of layers [a, b) on device d, as estimate_device_memory_bytes counts it.
struct MemoryModel {
  std::vector<int64_t> param_prefix, act_prefix;
  explicit MemoryModel(const LayerGraph& g) {
    param_prefix.assign(g.layers.size() + 1, 0);
    act_prefix.assign(g.layers.size() + 1, 0);
    for (size_t i = 0; i < g.layers.size(); ++i) {
      param_prefix[i + 1] = param_prefix[i] + g.layers[i].param_bytes();
      act_prefix[i + 1] = act_prefix[i] + g.layers[i].activation_bytes();
    }
  }
  bool fits(const PlannerContext& ctx, int d, int a, int b, int m, int in_flight) const {
    int64_t mb = micro_batch_samples(ctx, m);
    int64_t bytes = 3 * (param_prefix[b] - param_prefix[a]) + (act_prefix[b] - act_prefix[a]) * mb * in_flight;
    return bytes <= ctx.cluster->devices[d].memory_mb * 1024 * 1024;
  }
};

int in_flight_bound(const PlannerContext& ctx, int m, int stages) {
  return ctx.schedule == Schedule::gpipe ? m : std::min(m, stages);
}

double stage_ms(const PlannerContext& ctx, int d, int a, int b, int64_t samples) {
  return ctx.cost->forward_ms(d, a, b - 1, samples) + ctx.cost->backward_ms(d, a, b - 1, samples);
}

// Predicted step of a placement under the context's cost model (infinity if it fails).
// A planner call reuses one Simulator (and its task-graph buffers) for its
// estimates: EstimateScope opens it at the outermost planner entry and drops
// it on exit, so nothing outlives the context it was built from.
struct EstimateCache {
  int depth = 0;
  std::unique_ptr<Simulator> sim;
};
EstimateCache& estimate_cache() {
  thread_local EstimateCache cache;
  return cache;
}
struct EstimateScope {
  EstimateScope() {
    if (estimate_cache().depth++ == 0) estimate_cache().sim.reset();
  }
  ~EstimateScope() {
    if (--estimate_cache().depth == 0) estimate_cache().sim.reset();
  }
};

double estimate_ms(const PlannerContext& ctx, const Placement& p) {
  EstimateScope scope;
  EstimateCache& cache = estimate_cache();
  if (!cache.sim) cache.sim = std::make_unique<Simulator>(*ctx.graph, *ctx.cluster, *ctx.cost, ctx.batch_size);
  SimulateOptions options;
  options.timeline = false;
  StepReport r = cache.sim->evaluate(p, options);
  return r.ok ? r.step_ms : kInf;
}

// Picks the micro-batch count with the best estimate among placements that fit.
Result<Placement> best_micro_batches(const PlannerContext& ctx, Placement p, const std::string& what) {
  double best = kInf;
  Placement chosen;
  Status last = Status::ok();
  for (int m : ctx.micro_batch_choices()) {
    p.micro_batches = m;
    if (Status s = check_memory(p, *ctx.graph, *ctx.cluster, ctx.batch_size); !s) {
      last = s;
      continue;
    }
    // Ascending m: more micro-batches only when they help by more than 0.1%
    // (an uncalibrated model charges nothing for a micro-batch's fixed costs).
    double t = estimate_ms(ctx, p);
    if (t < best * (1 - 1e-3)) {
      best = t;
      chosen = p;
    }
  }
  if (best == kInf)
    return Status::error(what + ": no placement fits the devices' memory (" +
                         (last ? std::string("simulation failed") : last.message()) + ")");
  return chosen;
}

// Minimizes the largest block cost over contiguous blocks: block k = [begin_k, begin_{k+1}) with cost(k, a, b).
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

// Devices by estimated speed on this model (fastest first).
std::vector<int> devices_fastest_first(const PlannerContext& ctx) {
  const int D = num_devices(ctx), L = num_layers(ctx);
  std::vector<double> t(D);
  for (int d = 0; d < D; ++d) t[d] = stage_ms(ctx, d, 0, L, 1);
  std::vector<int> order(D);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return t[a] < t[b]; });
  return order;
}

// Splits over all devices with block costs `cost(device, a, b)`: devices fastest
// first; when that does not fit, largest memory first, then rotations of it.
Result<Placement> split_planner(const PlannerContext& ctx, const std::string& source,
                                const std::function<double(int, int, int)>& cost) {
  if (Status s = check_context(ctx); !s) return s;
  EstimateScope scope;
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
    auto p = best_micro_batches(ctx, to_placement(plan, L, ctx.schedule, source), source);
    if (p) return p;
    if (i == 0) first = p;
  }
  return first;
}

// Bottleneck of one stage / boundary, shared by the DP and the enumerations.
struct BottleneckModel {
  const PlannerContext& ctx;
  std::vector<int64_t> cut;
  MemoryModel mem;
  int m;
  int64_t samples;
  int in_flight;
  BottleneckModel(const PlannerContext& c, int micro_batches, int stages)
      : ctx(c), cut(cut_bytes_per_sample(*c.graph)), mem(*c.graph), m(micro_batches),
        samples(micro_batch_samples(c, micro_batches)),
        in_flight(in_flight_bound(c, micro_batches, stages > 0 ? stages : num_devices(c))) {}
  double stage(int d, int a, int b) const {
    if (!mem.fits(ctx, d, a, b, m, in_flight)) return kInf;
    return stage_ms(ctx, d, a, b, samples);
  }
  double boundary(int from, int to, int j) const {
    int64_t bytes = cut[j] * samples;
    return std::max(ctx.cost->transfer_ms(from, to, bytes), ctx.cost->transfer_ms(to, from, bytes));
  }
};

std::vector<int> cut_positions(const PlannerContext& ctx, int max_positions) {
  const int L = num_layers(ctx);
  std::vector<int> pos;
  if (L + 1 <= max_positions) {
    for (int j = 0; j <= L; ++j) pos.push_back(j);
    return pos;
  }
  // Quantiles of cumulative time on the fastest device.
  int d = devices_fastest_first(ctx).front();
  double total = stage_ms(ctx, d, 0, L, 1);
  pos.push_back(0);
  for (int j = 1; j < L; ++j) {
    double f = stage_ms(ctx, d, 0, j, 1) / std::max(total, 1e-12);
    int bucket = static_cast<int>(f * (max_positions - 1));
    int prev = static_cast<int>(stage_ms(ctx, d, 0, pos.back(), 1) / std::max(total, 1e-12) * (max_positions - 1));
    if (bucket > prev) pos.push_back(j);
  }
  pos.push_back(L);
  return pos;
}

// DP over (cut position, used devices, last device); best plan per stage count.
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
  BottleneckModel bm(ctx, m, 0);
  auto at = [&](int i, int mask, int last) { return (static_cast<size_t>(i) * M + mask) * D + last; };
  std::vector<double> best(static_cast<size_t>(C + 1) * M * D, kInf);
  std::vector<int> parent(best.size(), -1);  // previous cut index
  for (int k = 1; k <= C; ++k)
    for (int d = 0; d < D; ++d) {
      double v = bm.stage(d, 0, P[k]);
      if (v < best[at(k, 1 << d, d)]) best[at(k, 1 << d, d)] = v;
    }
  for (int i = 1; i < C; ++i)
    for (int mask = 1; mask < M; ++mask)
      for (int last = 0; last < D; ++last) {
        double cur = best[at(i, mask, last)];
        if (cur == kInf) continue;
        for (int d = 0; d < D; ++d) {
          if (mask & (1 << d)) continue;
          double link = std::max(cur, bm.boundary(last, d, P[i]));
          int nmask = mask | (1 << d);
          for (int k = i + 1; k <= C; ++k) {
            double v = std::max(link, bm.stage(d, P[i], P[k]));
            size_t idx = at(k, nmask, d);
            if (v < best[idx]) {
              best[idx] = v;
              parent[idx] = i;
            }
          }
        }
      }
  std::vector<std::optional<StagePlan>> out(D + 1);
  std::vector<double> out_value(D + 1, kInf);
  for (int mask = 1; mask < M; ++mask)
    for (int last = 0; last < D; ++last) {
      double v = best[at(C, mask, last)];
      int S = __builtin_popcount(mask);
      if (v >= out_value[S]) continue;
      out_value[S] = v;
      StagePlan plan;
      plan.micro_batches = m;
      int i = C, msk = mask, d = last;
      while (true) {
        plan.stage_device.push_back(d);
        int prev = parent[at(i, msk, d)];
        if (prev < 0) {
          plan.stage_begin.push_back(0);
          break;
        }
        plan.stage_begin.push_back(P[prev]);
        msk &= ~(1 << d);
        // the previous stage's device: the one in msk whose state at prev leads here
        int found = -1;
        double target = best[at(i, msk | (1 << d), d)];
        for (int q = 0; q < D && found < 0; ++q) {
          if (!(msk & (1 << q))) continue;
          double cur = best[at(prev, msk, q)];
          if (cur == kInf) continue;
          double v = std::max({cur, bm.boundary(q, d, P[prev]), bm.stage(d, P[prev], P[i])});
          if (v == target) found = q;
        }
        if (found < 0) return Status::error("dp: internal error reconstructing the plan");
        i = prev;
        d = found;
      }
      std::reverse(plan.stage_begin.begin(), plan.stage_begin.end());
      std::reverse(plan.stage_device.begin(), plan.stage_device.end());
      out[S] = plan;
    }
  return out;
}

struct Outcome {
  Placement placement;
  std::optional<StepReport> report;  // the evaluator's report when the planner already has it
};

// Evaluates candidates through the evaluator; keeps the best ok report.
struct Best {
  std::optional<Placement> placement;
  StepReport report;
  bool consider(const Placement& p, const StepReport& r) {
    if (!r.ok) return false;
    if (placement && r.step_ms >= report.step_ms) return false;
    placement = p;
    report = r;
    return true;
  }
};

Status nothing_fits(const std::string& planner) {
  return Status::error(planner + ": found no placement that fits the devices' memory");
}

std::vector<int> random_stage_begin(std::mt19937_64& rng, int L, int S) {
  std::vector<int> cuts(L - 1);
  std::iota(cuts.begin(), cuts.end(), 1);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(S - 1);
  cuts.push_back(0);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

StagePlan random_plan(const PlannerContext& ctx, std::mt19937_64& rng) {
  const int D = num_devices(ctx), L = num_layers(ctx);
  std::vector<int> choices = ctx.micro_batch_choices();
  int S = 1 + static_cast<int>(rng() % std::min(D, L));
  StagePlan plan;
  plan.stage_begin = random_stage_begin(rng, L, S);
  std::vector<int> devs(D);
  std::iota(devs.begin(), devs.end(), 0);
  std::shuffle(devs.begin(), devs.end(), rng);
  plan.stage_device.assign(devs.begin(), devs.begin() + S);
  plan.micro_batches = choices[rng() % choices.size()];
  return plan;
}

bool fits(const PlannerContext& ctx, const Placement& p) {
  return check_memory(p, *ctx.graph, *ctx.cluster, ctx.batch_size).is_ok();
}

Result<Outcome> random_search(const PlannerContext& ctx, Evaluator& ev) {
  if (Status s = check_context(ctx); !s) return s;
  std::mt19937_64 rng(ctx.seed);
  Best best;
  const int L = num_layers(ctx);
  for (int e = 0; e < ctx.budget && !cancelled(ctx); ++e) {
    Placement p;
    bool ok = false;
    for (int attempt = 0; attempt < 200 && !ok; ++attempt) {
      p = to_placement(random_plan(ctx, rng), L, ctx.schedule, "random");
      ok = fits(ctx, p);
    }
    if (!ok) break;
    best.consider(p, ev.evaluate(p));
  }
  if (!best.placement) return nothing_fits("random");
  return Outcome{*best.placement, best.report};
}

StagePlan neighbour(const PlannerContext& ctx, const StagePlan& cur, std::mt19937_64& rng) {
  const int D = num_devices(ctx), L = num_layers(ctx);
  std::vector<int> choices = ctx.micro_batch_choices();
  StagePlan n = cur;
  const int S = static_cast<int>(n.stage_begin.size());
  std::vector<int> unused;
  for (int d = 0; d < D; ++d)
    if (std::find(n.stage_device.begin(), n.stage_device.end(), d) == n.stage_device.end()) unused.push_back(d);
  auto stage_end = [&](int k) { return k + 1 < S ? n.stage_begin[k + 1] : L; };
  for (int tries = 0; tries < 20; ++tries) {
    switch (rng() % 6) {
      case 0:  // move a boundary
        if (S > 1) {
          int k = 1 + static_cast<int>(rng() % (S - 1));
          // Mostly a layer or two; sometimes up to a tenth of the model.
          int span = (rng() % 4) ? 2 : std::max(2, L / 10);
          int delta = 1 + static_cast<int>(rng() % span);
          int nb = n.stage_begin[k] + ((rng() & 1) ? delta : -delta);
          nb = std::max(n.stage_begin[k - 1] + 1, std::min(stage_end(k) - 1, nb));
          if (nb != n.stage_begin[k]) {
            n.stage_begin[k] = nb;
            return n;
          }
        }
        break;
      case 1:  // swap two stages' devices
        if (S > 1) {
          int a = static_cast<int>(rng() % S), b = static_cast<int>(rng() % S);
          if (a != b) {
            std::swap(n.stage_device[a], n.stage_device[b]);
            return n;
          }
        }
        break;
      case 2:  // another device for a stage
        if (!unused.empty()) {
          n.stage_device[rng() % S] = unused[rng() % unused.size()];
          return n;
        }
        break;
      case 3: {  // micro-batches up or down
        auto it = std::find(choices.begin(), choices.end(), n.micro_batches);
        int i = it == choices.end() ? 0 : static_cast<int>(it - choices.begin());
        int j = i + ((rng() & 1) ? 1 : -1);
        if (j >= 0 && j < static_cast<int>(choices.size())) {
          n.micro_batches = choices[j];
          return n;
        }
        break;
      }
      case 4: {  // split a stage onto an unused device
        if (unused.empty()) break;
        int k = static_cast<int>(rng() % S);
        int a = n.stage_begin[k], b = stage_end(k);
        if (b - a < 2) break;
        int cut = a + 1 + static_cast<int>(rng() % (b - a - 1));
        n.stage_begin.insert(n.stage_begin.begin() + k + 1, cut);
        n.stage_device.insert(n.stage_device.begin() + k + 1, unused[rng() % unused.size()]);
        return n;
      }
      case 5:  // merge a stage into its predecessor
        if (S > 1) {
          int k = 1 + static_cast<int>(rng() % (S - 1));
          n.stage_begin.erase(n.stage_begin.begin() + k);
          n.stage_device.erase(n.stage_device.begin() + k);
          return n;
        }
        break;
    }
  }
  return n;
}

Result<Outcome> annealing(const PlannerContext& ctx, Evaluator& ev) {
  if (Status s = check_context(ctx); !s) return s;
  const int L = num_layers(ctx);
  std::mt19937_64 rng(ctx.seed);
  // Start from the balance-by-time plan when it fits, else a random plan that fits.
  StagePlan cur;
  bool have = false;
  if (auto start = plan_balance_by_time(ctx); start.is_ok()) {
    for (int i = 0; i < L; ++i)
      if (i == 0 || start->layer_group[i] != start->layer_group[i - 1]) {
        cur.stage_begin.push_back(i);
        cur.stage_device.push_back(start->group_device[start->layer_group[i]]);
      }
    cur.micro_batches = start->micro_batches;
    have = true;
  }
  for (int attempt = 0; attempt < 500 && !have; ++attempt) {
    cur = random_plan(ctx, rng);
    have = fits(ctx, to_placement(cur, L, ctx.schedule, "anneal"));
  }
  if (!have) return nothing_fits("anneal");
  Best best;
  Placement cur_p = to_placement(cur, L, ctx.schedule, "anneal");
  StepReport cur_r = ev.evaluate(cur_p);
  best.consider(cur_p, cur_r);
  double cur_ms = cur_r.ok ? cur_r.step_ms : kInf;
  const int budget = std::max(1, ctx.budget);
  const double t0 = 0.05, t1 = 0.0005;
  for (int e = 1; e < budget && !cancelled(ctx); ++e) {
    double temp = t0 * std::pow(t1 / t0, static_cast<double>(e) / budget);
    StagePlan cand = neighbour(ctx, cur, rng);
    Placement p = to_placement(cand, L, ctx.schedule, "anneal");
    int guard = 0;
    while (!fits(ctx, p) && guard++ < 50) {
      cand = neighbour(ctx, cur, rng);
      p = to_placement(cand, L, ctx.schedule, "anneal");
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
  if (!best.placement) return nothing_fits("anneal");
  return Outcome{*best.placement, best.report};
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
      Placement p = to_placement(plan, L, ctx.schedule, "exhaustive");
      if (fits(ctx, p)) best.consider(p, ev.evaluate(p));
      return !cancelled(ctx);
    });
  } else {
    std::ostringstream count;
    if (contiguous < 1e15)
      count << static_cast<long long>(contiguous);
    else
      count << "about " << std::setprecision(2) << contiguous;
    return Status::error("exhaustive: " + count.str() + " contiguous placements exceed the limit of " +
                         std::to_string(ctx.exhaustive_limit));
  }
  if (!best.placement) return nothing_fits("exhaustive");
  return Outcome{*best.placement, best.report};
}

// Hill climbing on the cost model's simulation: boundary moves by one layer and device swaps.
std::pair<double, StagePlan> refine(const PlannerContext& ctx, StagePlan plan) {
  const int L = num_layers(ctx);
  auto score = [&](const StagePlan& p) {
    Placement pl = to_placement(p, L, ctx.schedule, "dp");
    return fits(ctx, pl) ? estimate_ms(ctx, pl) : kInf;
  };
  double cur = score(plan);
  for (int iter = 0; iter < 100; ++iter) {
    const int S = static_cast<int>(plan.stage_begin.size());
    StagePlan best_n = plan;
    double best_v = cur;
    auto consider = [&](const StagePlan& n) {
      double v = score(n);
      if (v < best_v - 1e-12) {
        best_v = v;
        best_n = n;
      }
    };
    for (int k = 1; k < S; ++k)
      for (int delta : {-1, 1}) {
        StagePlan n = plan;
        n.stage_begin[k] += delta;
        int end = k + 1 < S ? n.stage_begin[k + 1] : L;
        if (n.stage_begin[k] <= n.stage_begin[k - 1] || n.stage_begin[k] >= end) continue;
        consider(n);
      }
    for (int a = 0; a < S; ++a)
      for (int b = a + 1; b < S; ++b) {
        StagePlan n = plan;
        std::swap(n.stage_device[a], n.stage_device[b]);
        consider(n);
      }
    if (best_v >= cur) break;
    cur = best_v;
    plan = best_n;
  }
  return {cur, plan};
}

Result<Outcome> dynamic_programming(const PlannerContext& ctx, Evaluator& ev, int verify) {
  if (Status s = check_context(ctx); !s) return s;
  EstimateScope scope;
  const int L = num_layers(ctx);
  std::vector<std::pair<double, Placement>> cands;
  for (int m : ctx.micro_batch_choices()) {
    if (cancelled(ctx)) break;
    auto per_s = dp_by_stage_count(ctx, m);
    if (!per_s) return per_s.status();
    for (const auto& plan : *per_s) {
      if (!plan) continue;
      auto [ms, polished] = refine(ctx, *plan);
      if (ms == kInf) continue;
      Placement p = to_placement(polished, L, ctx.schedule, "dp");
      cands.push_back({ms, p});
    }
  }
  // Near-ties go to fewer micro-batches (0.01% per micro-batch).
  auto key = [](const std::pair<double, Placement>& c) { return c.first * (1 + 1e-4 * c.second.micro_batches); };
  std::stable_sort(cands.begin(), cands.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  Best best;
  int evaluated = 0;
  for (const auto& c : cands) {
    if (evaluated >= std::max(1, verify) || c.first == kInf) break;
    best.consider(c.second, ev.evaluate(c.second));
    ++evaluated;
  }
  if (!best.placement) return nothing_fits("dp");
  return Outcome{*best.placement, best.report};
}

Result<Outcome> run_outcome(const std::string& name, const PlannerContext& ctx, Evaluator& ev) {
  if (name == "dp") return dynamic_programming(ctx, ev, 3);
  if (name == "random") return random_search(ctx, ev);
  if (name == "anneal") return annealing(ctx, ev);
  if (name == "exhaustive") return exhaustive(ctx, ev);
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

}  // namespace

std::vector<int> PlannerContext::micro_batch_choices() const {
  if (micro_batches > 0) return {micro_batches};
  std::vector<int> out;
  for (int m = 1; m <= batch_size && m <= std::max(1, max_micro_batches); m *= 2) out.push_back(m);
  return out;
}

Placement to_placement(const StagePlan& plan, int L, Schedule schedule, const std::string& source) {
  Placement p;
  p.layer_group.assign(L, 0);
  const int S = static_cast<int>(plan.stage_begin.size());
  for (int k = 0; k < S; ++k) {
    int end = k + 1 < S ? plan.stage_begin[k + 1] : L;
    for (int i = plan.stage_begin[k]; i < end; ++i) p.layer_group[i] = k;
  }
  p.group_device = plan.stage_device;
  p.micro_batches = plan.micro_batches;
  p.schedule = schedule;
  p.source = source;
  return p;
}

double pipeline_bottleneck_ms(const PlannerContext& ctx, const StagePlan& plan) {
  const int L = num_layers(ctx), S = static_cast<int>(plan.stage_begin.size());
  BottleneckModel bm(ctx, plan.micro_batches, 0);
  double v = 0;
  for (int k = 0; k < S; ++k) {
    int end = k + 1 < S ? plan.stage_begin[k + 1] : L;
    v = std::max(v, bm.stage(plan.stage_device[k], plan.stage_begin[k], end));
    if (k > 0) v = std::max(v, bm.boundary(plan.stage_device[k - 1], plan.stage_device[k], plan.stage_begin[k]));
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
  if (!best) return nothing_fits("dp");
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
  if (!best) return nothing_fits("exhaustive");
  return *best;
}

Result<Placement> plan_single_device(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  Status last = Status::ok();
  for (int d : devices_fastest_first(ctx)) {
    Placement p = Placement::single_device(num_layers(ctx), d, 1);
    p.schedule = ctx.schedule;
    if (ctx.micro_batches > 0) p.micro_batches = ctx.micro_batches;
    if (Status s = check_memory(p, *ctx.graph, *ctx.cluster, ctx.batch_size); !s) {
      last = s;
      continue;
    }
    return p;
  }
  return Status::error("single: no device can hold the whole model (" + last.message() + ")");
}

std::vector<Placement> random_placements(const PlannerContext& ctx, int n, double noncontiguous_fraction) {
  std::vector<Placement> out;
  if (!check_context(ctx)) return out;
  std::mt19937_64 rng(ctx.seed);
  const int L = num_layers(ctx), D = num_devices(ctx);
  std::vector<int> choices = ctx.micro_batch_choices();
  std::set<std::tuple<std::vector<int>, std::vector<int>, int>> seen;
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
      p.source = "random";
    } else {
      p = to_placement(random_plan(ctx, rng), L, ctx.schedule, "random");
    }
    if (!fits(ctx, p)) continue;
    if (!seen.insert({p.layer_group, p.group_device, p.micro_batches}).second) continue;
    out.push_back(p);
  }
  return out;
}

Placement data_parallel_placement(int L, const std::vector<int>& devices, const std::string& strategy) {
  Placement p = Placement::replicas(L, devices);
  p.source = strategy;
  return p;
}

bool is_data_parallel(const Placement& p) { return p.data_parallel; }

Result<Placement> plan_hogwild(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  for (const Device& d : ctx.cluster->devices)
    if (!d.is_local())
      return Status::error("hogwild: device '" + d.name + "' is remote; HOGWILD shares parameters in local memory");
  auto p = plan_data_parallel(ctx);
  if (!p) return Status::error("hogwild" + p.error_message().substr(3));
  p->source = "hogwild";
  return p;
}


Result<Placement> plan_data_parallel(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  const int D = num_devices(ctx), L = num_layers(ctx);
  int64_t share = (ctx.batch_size + D - 1) / D;
  std::vector<int> devices;
  for (int d = 0; d < D; ++d) {
    if (Status s = check_memory(Placement::single_device(L, d), *ctx.graph, *ctx.cluster, share); !s)
      return Status::error("bsp: every device holds a full replica, and " + s.message());
    devices.push_back(d);
  }
  return data_parallel_placement(L, devices);
}


Result<Placement> plan_uniform(const PlannerContext& ctx) {
  return split_planner(ctx, "uniform", [](int, int a, int b) { return static_cast<double>(b - a); });
}

Result<Placement> plan_param_balanced(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  MemoryModel mem(*ctx.graph);
  // Ties in parameters (layers without any) are broken by layer count.
  return split_planner(ctx, "params", [&](int, int a, int b) {
    return static_cast<double>(mem.param_prefix[b] - mem.param_prefix[a]) + 1e-9 * (b - a);
  });
}

Result<Placement> plan_balance_by_time(const PlannerContext& ctx) {
  return split_planner(ctx, "time", [&](int d, int a, int b) { return stage_ms(ctx, d, a, b, 1); });
}

Result<Placement> plan_dynamic_programming(const PlannerContext& ctx, Evaluator& evaluator, int verify) {
  auto o = dynamic_programming(ctx, evaluator, verify);
  if (!o) return o.status();
  return o->placement;
}
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
Result<Placement> plan_exhaustive(const PlannerContext& ctx, Evaluator& evaluator) {
  auto o = exhaustive(ctx, evaluator);
  if (!o) return o.status();
  return o->placement;
}

const std::vector<std::string>& planner_names() {
  static const std::vector<std::string> names = {"single", "bsp",    "uniform", "params",     "time",
                                                 "dp",     "random", "anneal",  "exhaustive", "hogwild"};
  return names;
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
    auto t0 = std::chrono::steady_clock::now();
    PlannerRow row;
    row.name = name;
    PlannerContext c = ctx;
    if (name == "exhaustive" && evaluator.name() != "simulate")
      c.exhaustive_limit = std::min<int64_t>(c.exhaustive_limit, c.budget);
    auto o = run_outcome(name, c, evaluator);
    if (!o) {
      row.report = StepReport::failure("no_placement", o.error_message(), evaluator.name());
    } else {
      row.placement = o->placement;
      if (o->report) {
        row.report = *o->report;
      } else if (is_data_parallel(o->placement)) {
        row.report = options.strategy_evaluator
                         ? options.strategy_evaluator(o->placement.source)
                         : simulate_data_parallel(*ctx.graph, *ctx.cluster, *ctx.cost, ctx.batch_size, o->placement);
      } else {
        row.report = evaluator.evaluate(o->placement);
      }
    }
    row.plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tapp
