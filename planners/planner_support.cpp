// planners/planner_support.cpp — see planner_support.h.
#include "planners/planner_support.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "simulator/cost_model.h"

namespace tapp {

std::vector<int> PlannerContext::micro_batch_choices() const {
  if (micro_batches > 0) return {micro_batches};
  std::vector<int> out;
  for (int m = 1; m <= batch_size && m <= std::max(1, max_micro_batches); m *= 2) out.push_back(m);
  return out;
}

namespace planner_support {
namespace {

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

}  // namespace

int num_layers(const PlannerContext& ctx) { return static_cast<int>(ctx.graph->layers.size()); }
int num_devices(const PlannerContext& ctx) { return ctx.cluster->num_devices(); }
bool cancelled(const PlannerContext& ctx) { return ctx.cancel && ctx.cancel->load(); }

Status check_context(const PlannerContext& ctx) {
  if (!ctx.graph || !ctx.cluster || !ctx.cost)
    return Status::error("planner: missing model, cluster or cost model");
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

double stage_ms(const PlannerContext& ctx, int d, int a, int b, int64_t samples) {
  return ctx.cost->forward_ms(d, a, b - 1, samples) + ctx.cost->backward_ms(d, a, b - 1, samples);
}

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
    int prev =
        static_cast<int>(stage_ms(ctx, d, 0, pos.back(), 1) / std::max(total, 1e-12) * (max_positions - 1));
    if (bucket > prev) pos.push_back(j);
  }
  pos.push_back(L);
  return pos;
}

std::vector<int> interchangeable_classes(const PlannerContext& ctx) {
  const int D = num_devices(ctx), L = num_layers(ctx);
  const CostModel& cost = *ctx.cost;
  constexpr int64_t kProbe = 1 << 20;
  const auto same = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); };
  const auto alike = [&](int d, int e) {
    if (ctx.cluster->devices[d].memory_mb != ctx.cluster->devices[e].memory_mb) return false;
    if (!same(stage_ms(ctx, d, 0, L, 1), stage_ms(ctx, e, 0, L, 1))) return false;
    if (!same(cost.transfer_ms(d, e, kProbe), cost.transfer_ms(e, d, kProbe))) return false;
    for (int x = 0; x < D; ++x)
      if (x != d && x != e && (!same(cost.transfer_ms(d, x, kProbe), cost.transfer_ms(e, x, kProbe)) ||
                               !same(cost.transfer_ms(x, d, kProbe), cost.transfer_ms(x, e, kProbe))))
        return false;
    return true;
  };
  std::vector<int> cls(D);
  for (int d = 0; d < D; ++d) {
    cls[d] = d;
    for (int e = 0; e < d && cls[d] == d; ++e)
      if (cls[e] == e && alike(d, e)) cls[d] = e;
  }
  return cls;
}

std::vector<int> devices_fastest_first(const PlannerContext& ctx) {
  const int D = num_devices(ctx), L = num_layers(ctx);
  std::vector<double> t(D);
  for (int d = 0; d < D; ++d) t[d] = stage_ms(ctx, d, 0, L, 1);
  std::vector<int> order(D);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return t[a] < t[b]; });
  return order;
}

StageMoves stage_moves(const PlannerContext& ctx) {
  return StageMoves(num_layers(ctx), num_devices(ctx), ctx.micro_batch_choices());
}

bool fits(const PlannerContext& ctx, const Placement& p) {
  return check_memory(p, *ctx.graph, *ctx.cluster, ctx.batch_size).is_ok();
}

Status fit_with_recompute(const PlannerContext& ctx, Placement& p) {
  if (ctx.allow_recompute) recompute_where_needed(p, *ctx.graph, *ctx.cluster, ctx.batch_size);
  return check_memory(p, *ctx.graph, *ctx.cluster, ctx.batch_size);
}

Placement planned(const PlannerContext& ctx, const StagePlan& plan, const std::string& source) {
  Placement p = to_placement(plan, num_layers(ctx), ctx.schedule, source);
  p.optimizer = ctx.optimizer;
  if (ctx.allow_recompute) recompute_where_needed(p, *ctx.graph, *ctx.cluster, ctx.batch_size);
  return p;
}

std::string memory_shortfall(const PlannerContext& ctx) {
  const LayerGraph& g = *ctx.graph;
  const StageMemory mem(g, ctx.optimizer);
  const Device* largest = nullptr;
  int64_t total_mb = 0;
  for (const Device& d : ctx.cluster->devices) {
    total_mb += d.memory_mb;
    if (!largest || d.memory_mb > largest->memory_mb) largest = &d;
  }
  if (!largest) return "the cluster has no devices";
  const int L = num_layers(ctx);
  for (int l = 0; l < L; ++l)
    if (!mem.fits(*largest, l, l + 1, 1, 1))
      return "layer '" + g.layers[l].name + "' alone needs " + mib_rounded_up(mem.bytes(l, l + 1, 1, 1)) +
             " MiB for one sample (weights, gradients, optimizer state, activations); the largest device '" +
             largest->name + "' has memory_mb " + std::to_string(largest->memory_mb);
  return "the model's weights, gradients and optimizer state alone take " +
         std::to_string(training_state_bytes(mem.param_bytes(0, L), ctx.optimizer) >> 20) + " MiB; the devices have " +
         std::to_string(total_mb) + " MiB together, the largest '" + largest->name + "' memory_mb " +
         std::to_string(largest->memory_mb);
}

Status nothing_fits(const PlannerContext& ctx, const std::string& planner) {
  return Status::error(planner + ": found no placement that fits the devices' memory (" + memory_shortfall(ctx) + ")");
}

PlanEstimator::PlanEstimator(const PlannerContext& ctx)
    : sim_(*ctx.graph, *ctx.cluster, *ctx.cost, ctx.batch_size) {}

double PlanEstimator::step_ms(const Placement& p) {
  SimulateOptions options;
  options.timeline = false;
  StepReport r = sim_.evaluate(p, options);
  return r.ok ? r.step_ms : kInf;
}

Result<Placement> best_micro_batches(const PlannerContext& ctx, PlanEstimator& estimator, Placement p,
                                     const std::string& what) {
  double best = kInf;
  Placement chosen;
  Status last = Status::ok();
  for (int m : ctx.micro_batch_choices()) {
    p.micro_batches = m;
    if (Status s = fit_with_recompute(ctx, p); !s) {
      last = s;
      continue;
    }
    // Ascending m: more micro-batches only when they help by more than 0.1%
    // (an uncalibrated model charges nothing for a micro-batch's fixed costs).
    double t = estimator.step_ms(p);
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

std::pair<double, StagePlan> polish_by_simulation(const PlannerContext& ctx, PlanEstimator& estimator, StagePlan plan,
                                                 const MoveSet& set, const std::string& source) {
  const int L = num_layers(ctx);
  const StageMoves moves = stage_moves(ctx);
  auto score = [&](const StagePlan& p) {
    Placement pl = planned(ctx, p, source);
    return fits(ctx, pl) ? estimator.step_ms(pl) : kInf;
  };
  double cur = score(plan);
  for (int iter = 0; iter < 100; ++iter) {
    StagePlan best_n = plan;
    double best_v = cur;
    for (const StagePlan& n : moves.neighbours(plan, set)) {
      double v = score(n);
      if (v < best_v - 1e-12) {
        best_v = v;
        best_n = n;
      }
    }
    if (best_v >= cur) break;
    cur = best_v;
    plan = best_n;
  }
  return {cur, plan};
}

StagePassing::StagePassing(const LayerGraph& g) : readers_(g.consumers()) {
  bytes_.reserve(g.layers.size());
  for (const Layer& layer : g.layers) bytes_.push_back(layer.activation_bytes());
}

StagePassing::Bytes StagePassing::bytes(int a, int b) const {
  Bytes sum;
  for (int p = 0; p < a; ++p) {
    const std::vector<int>& readers = readers_[p];
    if (readers.empty() || readers.back() < b) continue;  // not read from b on
    sum.over += bytes_[p];
    if (*std::lower_bound(readers.begin(), readers.end(), a) >= b)
      sum.past += bytes_[p];  // its first reader from a on
  }
  return sum;
}

std::vector<StagePassing::Bytes> StagePassing::table(const std::vector<int>& P) const {
  const size_t n = P.size();
  // Per row i, differences along j: a tensor counts for j in (i, last position <= its reader].
  std::vector<Bytes> out(n * n);
  const auto last_at_or_before = [&](int l) {
    return static_cast<size_t>(std::upper_bound(P.begin(), P.end(), l) - P.begin()) - 1;
  };
  for (int p = 0; p < static_cast<int>(bytes_.size()); ++p) {
    const std::vector<int>& readers = readers_[p];
    if (readers.empty()) continue;
    const size_t over_last = last_at_or_before(readers.back());
    for (size_t i = std::upper_bound(P.begin(), P.end(), p) - P.begin(); i < over_last; ++i) {
      out[i * n + i + 1].over += bytes_[p];
      if (over_last + 1 < n) out[i * n + over_last + 1].over -= bytes_[p];
      const size_t past_last = last_at_or_before(*std::lower_bound(readers.begin(), readers.end(), P[i]));
      if (past_last <= i) continue;
      out[i * n + i + 1].past += bytes_[p];
      if (past_last + 1 < n) out[i * n + past_last + 1].past -= bytes_[p];
    }
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      out[i * n + j].over += out[i * n + j - 1].over;
      out[i * n + j].past += out[i * n + j - 1].past;
    }
  return out;
}

BottleneckModel::BottleneckModel(const PlannerContext& c, int micro_batches)
    : ctx(c),
      cut(cut_bytes_per_sample(*c.graph)),
      mem(*c.graph, c.optimizer),
      m(micro_batches),
      samples(micro_batch_samples(c, micro_batches)) {}

double BottleneckModel::stage(int d, int a, int b, int stages_to_end) const {
  const Device& device = ctx.cluster->devices[d];
  const int in_flight = micro_batches_in_flight(ctx.schedule, m, stages_to_end);
  if (mem.fits(device, a, b, samples, in_flight, false, m)) return stage_ms(ctx, d, a, b, samples);
  // Try again recomputing: the stage keeps one micro-batch's activations and runs its forward twice.
  if (ctx.allow_recompute && mem.fits(device, a, b, samples, in_flight, true, m))
    return stage_ms(ctx, d, a, b, samples) + ctx.cost->forward_ms(d, a, b - 1, samples);
  return kInf;
}

double BottleneckModel::boundary(int from, int to, int j) const {
  int64_t bytes = cut[j] * samples;
  return std::max(ctx.cost->transfer_ms(from, to, bytes), ctx.cost->transfer_ms(to, from, bytes));
}

bool Best::consider(const Placement& p, const StepReport& r) {
  const bool to_run = r.failure_kind == FailureKind::worker_failed || r.failure_kind == FailureKind::worker_unreachable ||
                      r.failure_kind == FailureKind::timeout;
  if (!r.ok && to_run && !failed_to_run) failed_to_run = r;
  if (!r.ok) return false;
  if (placement && r.step_ms >= report.step_ms) return false;
  placement = p;
  report = r;
  return true;
}

Status Best::none_found(const PlannerContext& ctx, const std::string& planner) const {
  if (!failed_to_run) return nothing_fits(ctx, planner);
  return Status::error(planner + ": every plan it evaluated failed to run (" + failure_kind_name(failed_to_run->failure_kind) +
                       ": " + failed_to_run->message + ")");
}

}  // namespace planner_support
}  // namespace tapp
