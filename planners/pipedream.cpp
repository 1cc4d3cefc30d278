// planners/pipedream.cpp — PipeDream's planner with stage replication, on
// heterogeneous devices and per-direction links; exhaustive enumeration of the
// same space under the same model (tests, tiny inputs).
//
// PipeDream's optimizer (Narayanan et al., SOSP'19) solves, for identical
// workers, A(j, m) = min over the last stage [i, j) and its replica count m'
// of max(A(i, m - m'), transfer of the cut, (compute + data-parallel sync) / m').
// Our devices differ, so a count is not enough: the DP chooses for each stage a
// *set* of devices. The model (ReplicatedStageModel), per micro-batch of a step
// with m micro-batches of ceil(B / m) samples, bottleneck objective as the DP
// planner (pipeline_bottleneck_ms), and for an unreplicated plan equal to it:
//  * a stage [a, b) on the ordered device set R (fastest device first; the
//    placement's group_device is R[0]) runs micro-batch t on R[t % |R|]:
//    replica i does n_i = ceil((m - i) / |R|) micro-batches, so the stage costs
//    (max_i n_i x (forward + backward of [a, b) on R[i]) + all-reduce) / m,
//    where the all-reduce of the stage's parameters is a ring over R in that
//    order (2 (|R| - 1) steps of params / |R| bytes on the slowest ring link),
//    charged in full (PipeDream adds it too; the simulator may overlap it);
//    infinity when a replica does not fit its memory or |R| > m;
//  * the cut before layer j between sets A and B: micro-batch t goes from
//    A[t % |A|] to B[t % |B|] and its gradient back; each sender's total
//    transfer time on its links (activations forward, gradients backward),
//    the largest sender's, / m.
// The DP runs from the last layer back over (cut position, used devices U,
// the first stage's set F ⊆ U), so a stage knows the devices after it (its
// memory under 1F1B, in_flight_limit):
// 4^D x positions^2 steps, so at most 8 devices each on its own; on more,
// devices interchangeable under the cost model are counted, as PipeDream
// counts its workers (DeviceGroups), and the fastest are kept while the steps
// stay within those of 8 devices (cut positions thinned as the DP planner
// does when the model is long).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/allreduce_ring.h"
#include "core/cluster.h"
#include "model/layer_graph.h"
#include "planners/planner_support.h"
#include "planners/planners.h"
#include "simulator/cost_model.h"

namespace tapp {
using namespace planner_support;
namespace {

constexpr int kMaxPipeDreamDevices = 8;

// The replicated-stage bottleneck model of one micro-batch count.
class ReplicatedStageModel {
 public:
  ReplicatedStageModel(const PlannerContext& ctx, int micro_batches)
      : bm_(ctx, micro_batches), rank_(num_devices(ctx)) {
    const std::vector<int> order = devices_fastest_first(ctx);
    for (int i = 0; i < static_cast<int>(order.size()); ++i) rank_[order[i]] = i;
  }

  // Devices of `mask`, fastest first (ties by index): the replica order.
  std::vector<int> ordered(unsigned mask) const {
    std::vector<int> out;
    for (int d = 0; d < static_cast<int>(rank_.size()); ++d)
      if (mask & (1u << d)) out.push_back(d);
    return ordered(std::move(out));
  }
  std::vector<int> ordered(std::vector<int> devices) const {
    std::sort(devices.begin(), devices.end(), [&](int a, int b) { return rank_[a] < rank_[b]; });
    return devices;
  }

  // The DP's stage cost, its memory for `limit` (in_flight_limit): PipeDream's,
  // the replicas' all-reduce spread over the micro-batches.
  double stage(const std::vector<int>& R, int a, int b, int limit) const {
    const Phases p = phases(R, a, b, limit);
    return (p.total + allreduce_ms(R, a, b)) / bm_.m;
  }

  // The replicas' all-reduce of the stage's gradients, once a step, in the
  // ring order of R (0 on one device; a stage without parameters exchanges
  // nothing, where the ring would still pay its latencies).
  double allreduce_ms(const std::vector<int>& R, int a, int b) const {
    if (R.size() < 2) return 0;
    const int64_t bytes = bm_.mem.param_bytes(a, b);
    return bytes == 0 ? 0 : bm_.ctx.cost->ring_allreduce_ms(R, bytes);
  }
  // R in the order the measurer rings them (cheapest_ring) for the stage's
  // gradients: ordered once per set, for the bytes it is first asked with
  // (the order hardly depends on them, and cheapest_ring looks up the
  // cluster's links for every pair, each time).
  const std::vector<int>& ring(const std::vector<int>& R, int a, int b) const {
    if (R.size() < 3) return R;  // two devices form one ring either way
    auto it = rings_.find(R);
    if (it == rings_.end())
      it = rings_.emplace(R, cheapest_ring(*bm_.ctx.cluster, R, bm_.mem.param_bytes(a, b))).first;
    return it->second;
  }

  // The in-flight limit of stage k of `sets` (the memory rule's,
  // core/placement.h): the devices from it to the last stage, over its replicas.
  static int in_flight_limit(const std::vector<std::vector<int>>& sets, int k) {
    std::vector<int> devices;
    for (size_t s = k; s < sets.size(); ++s) devices.insert(devices.end(), sets[s].begin(), sets[s].end());
    std::sort(devices.begin(), devices.end());
    const int n = static_cast<int>(std::unique(devices.begin(), devices.end()) - devices.begin());
    return in_flight_limit(n, static_cast<int>(sets[k].size()));
  }
  // The same for a stage on `replicas` devices with `devices_to_end` from it to the last stage.
  static int in_flight_limit(int devices_to_end, int replicas) {
    return (devices_to_end + replicas - 1) / replicas;
  }

  // Whether a stage's interval has parts by phase (interval()): under GPipe.
  bool by_phase() const { return bm_.ctx.schedule == Schedule::gpipe; }

  // A stage's interval with its sends out (one_way: the activations on, the
  // gradients back). Under GPipe every forward runs before any backward, and
  // a send never blocks compute, so each phase lasts as long as its slower
  // side: forward or activations on, then backward or gradients back, each
  // phase's part also in `forward` and `backward` where given (untouched
  // otherwise). Otherwise stage(), or where longer both sends: they
  // interleave, and a device's sends leave one at a time (the simulator's
  // send queue per device, the runtime's sender thread).
  // `limit`: the stage's in_flight_limit, which its memory (and so
  // recomputation, told in `recompute` where given) depends on. `allreduce`:
  // what its replicas' all-reduce adds, spread over the micro-batches (a
  // later stage's, which the drain of the stages before it partly hides; the
  // first stage's is the step's tail, PipelineTimes::first_allreduce).
  double interval(const std::vector<int>& R, int a, int b, double send_on, double send_back, int limit,
                  double allreduce, double* forward = nullptr, double* backward = nullptr,
                  bool* recompute = nullptr) const {
    const Phases p = phases(R, a, b, limit);
    if (recompute) *recompute = p.recompute;
    if (p.total == kInf) return p.total;
    const int m = bm_.m;
    if (!by_phase()) return std::max((p.total + allreduce) / m, send_on + send_back);
    const double f = std::max(p.forward / m, send_on), g = std::max((p.backward + allreduce) / m, send_back);
    if (forward) *forward = f, *backward = g;
    return f + g;
  }

  // Per-sample bytes across the cut before layer j, and of those the ones
  // that pass over a stage (StagePassing: built on first use, which the
  // planners' DP never makes).
  int64_t cut(int j) const { return bm_.cut[j]; }
  const StagePassing& passing() const {
    if (!passing_) passing_.emplace(*bm_.ctx.graph);
    return *passing_;
  }

  // Per micro-batch, the largest sender of A's total time for `per_sample`
  // bytes of activations to B (micro-batch t from A[t % |A|] to B[t % |B|]).
  double one_way(const std::vector<int>& A, const std::vector<int>& B, int64_t per_sample) const {
    const int64_t bytes = per_sample * bm_.samples;
    if (bytes == 0) return 0;
    std::vector<double>& sent = scratch(A.size());
    for (int t = 0; t < bm_.m; ++t)
      sent[t % A.size()] += bm_.ctx.cost->transfer_ms(A[t % A.size()], B[t % B.size()], bytes);
    return *std::max_element(sent.begin(), sent.end()) / bm_.m;
  }

  // The same both ways (activations on, gradients back): the busiest device's time.
  double boundary(const std::vector<int>& A, const std::vector<int>& B, int64_t per_sample) const {
    const int64_t bytes = per_sample * bm_.samples;
    if (bytes == 0) return 0;
    const int m = bm_.m;
    std::vector<double>& sent = scratch(rank_.size());
    for (int t = 0; t < m; ++t) {
      const int a = A[t % A.size()], b = B[t % B.size()];
      sent[a] += bm_.ctx.cost->transfer_ms(a, b, bytes);
      sent[b] += bm_.ctx.cost->transfer_ms(b, a, bytes);
    }
    return *std::max_element(sent.begin(), sent.end()) / m;
  }

  // The boundary after stage k of `sets` (k + 1 < |sets|): its `on` bytes
  // per sample to stage k + 1, and `over` bytes passing over it from the
  // stage before to the one after (the makers further back priced as that one).
  double boundary_after(const std::vector<std::vector<int>>& sets, int k, int64_t on, int64_t over) const {
    const double own = boundary(sets[k], sets[k + 1], on);
    return k == 0 || over == 0 ? own : std::max(own, boundary(sets[k - 1], sets[k + 1], over));
  }

  // One micro-batch through the stage: forward + backward, and the forward
  // again where it recomputes (the latency GPipe's fill and drain and 1F1B's
  // round trip see; the interval is stage()), on its slowest replica; where
  // replicas are weighed by speed, on its fastest: the slow ones run fewer
  // micro-batches and finish with the rest, so the fill and drain see the first.
  double stage_latency(const std::vector<int>& R, int a, int b, bool recompute) const {
    double slowest = 0, fastest = kInf;
    for (int d : R) {
      const double t = stage_ms(bm_.ctx, d, a, b, bm_.samples) +
                       (recompute ? bm_.ctx.cost->forward_ms(d, a, b - 1, bm_.samples) : 0);
      slowest = std::max(slowest, t), fastest = std::min(fastest, t);
    }
    return bm_.ctx.replicas_weighed ? fastest : slowest;
  }

  // One micro-batch's `per_sample` bytes of activations and their gradients
  // back, on the slowest pair of the two sets' devices.
  double boundary_latency(const std::vector<int>& A, const std::vector<int>& B, int64_t per_sample) const {
    const int64_t bytes = per_sample * bm_.samples;
    if (bytes == 0) return 0;
    double t = 0;
    for (int a : A)
      for (int b : B) t = std::max(t, bm_.ctx.cost->transfer_ms(a, b, bytes) + bm_.ctx.cost->transfer_ms(b, a, bytes));
    return t;
  }

  int micro_batches() const { return bm_.m; }

  // Micro-batches stage k of S on r replicas keeps in flight. A micro-batch
  // goes from its forward there through every later stage and boundary and
  // back to its backward, one latency each, so the stage's interval is at
  // least that round trip / this: 1F1B's window, which slow links make the
  // bottleneck (GPipe keeps all m in flight).
  int window(int k, int S, int r) const {
    const int own = (bm_.m + r - 1) / r;
    return static_cast<int>(
        std::min<int64_t>(bm_.m, micro_batches_in_flight(bm_.ctx.schedule, own, S - k) * r));
  }

 private:
  // Per step on the stage's slowest replica, all its micro-batches: forward,
  // backward (with recomputation's extra forward) and both together.
  struct Phases {
    double forward = 0, backward = 0, total = 0;
    bool recompute = false;
  };
  Phases phases(const std::vector<int>& R, int a, int b, int limit) const {
    const int r = static_cast<int>(R.size()), m = bm_.m;
    if (r > m) return {kInf, kInf, kInf};
    const std::vector<int> weighed = weighed_shares(R, a, b);  // empty: round-robin
    const auto share = [&](int i) { return weighed.empty() ? (m - i + r - 1) / r : weighed[i]; };
    const int own = weighed.empty() ? share(0) : *std::max_element(weighed.begin(), weighed.end());
    const int64_t in_flight = micro_batches_in_flight(bm_.ctx.schedule, own, limit);
    // A stage that fits no replica's memory as it is may recompute (all its
    // replicas do, as planned() marks it): one more forward per micro-batch.
    bool recompute = false;
    for (int i = 0; i < r && !recompute; ++i)
      if (!bm_.mem.fits(bm_.ctx.cluster->devices[R[i]], a, b, bm_.samples, in_flight, false, own))
        recompute = true;
    Phases p;
    p.recompute = recompute;
    for (int i = 0; i < r; ++i) {
      if (recompute && !(bm_.ctx.allow_recompute && bm_.mem.fits(bm_.ctx.cluster->devices[R[i]], a, b,
                                                                 bm_.samples, in_flight, true, own)))
        return {kInf, kInf, kInf};
      const int n = share(i);
      const double forward = bm_.ctx.cost->forward_ms(R[i], a, b - 1, bm_.samples);
      const double backward =
          bm_.ctx.cost->backward_ms(R[i], a, b - 1, bm_.samples) + (recompute ? forward : 0);
      p.forward = std::max(p.forward, n * forward);
      p.backward = std::max(p.backward, n * backward);
      p.total = std::max(p.total, n * (forward + backward));
    }
    return p;
  }

  // Where the context weighs replicas, each replica's micro-batches by speed
  // as the measurer's weigh_replicas counts them; else none (round-robin,
  // counted where used: no allocation on the DP's path).
  std::vector<int> weighed_shares(const std::vector<int>& R, int a, int b) const {
    const int r = static_cast<int>(R.size());
    if (!bm_.ctx.replicas_weighed || r < 2) return {};
    std::vector<double> ms(r);
    for (int i = 0; i < r; ++i)
      ms[i] = bm_.ctx.cost->forward_ms(R[i], a, b - 1, bm_.samples) +
              bm_.ctx.cost->backward_ms(R[i], a, b - 1, bm_.samples);
    return micro_batches_by_speed(bm_.m, ms);
  }

  // n zeros, reused: the cut placement prices a boundary for each pair of positions.
  static std::vector<double>& scratch(size_t n) {
    thread_local std::vector<double> v;
    v.assign(n, 0);
    return v;
  }

  BottleneckModel bm_;
  mutable std::optional<StagePassing> passing_;
  mutable std::map<std::vector<int>, std::vector<int>> rings_;  // ring(): a set's order
  std::vector<int> rank_;  // device -> position fastest first
};

StagePlan plan_of(const ReplicatedStageModel& model, const std::vector<int>& begins,
                  const std::vector<std::vector<int>>& sets) {
  StagePlan plan;
  plan.micro_batches = model.micro_batches();
  plan.stage_begin = begins;
  for (const std::vector<int>& set : sets) {
    std::vector<int> R = model.ordered(set);
    plan.stage_device.push_back(R[0]);
    plan.stage_replicas.emplace_back(R.begin() + 1, R.end());
  }
  if (plan.max_replica_count() == 1) plan.stage_replicas.clear();
  return plan;
}

StagePlan plan_of(const ReplicatedStageModel& model, const std::vector<int>& begins,
                  const std::vector<unsigned>& masks) {
  std::vector<std::vector<int>> sets;
  for (unsigned mask : masks) sets.push_back(model.ordered(mask));
  return plan_of(model, begins, sets);
}

// The 8 fastest devices' indices when the cluster has more (exhaustive search's devices).
std::vector<int> dp_devices(const PlannerContext& ctx) {
  std::vector<int> devs = devices_fastest_first(ctx);
  if (static_cast<int>(devs.size()) > kMaxPipeDreamDevices) devs.resize(kMaxPipeDreamDevices);
  std::sort(devs.begin(), devs.end());
  return devs;
}

// The DP's devices in groups. A state of the DP is how many devices of each
// group are in use (a mixed-radix number, group k's digit at stride_k), and a
// stage of `take` devices after `from` gets each group's members [from_k,
// from_k + take_k). On at most 8 devices each device is its own group, so the
// states are the subsets of the devices (the masks). On more, devices
// interchangeable under the cost model share a group, so that the DP counts
// them as PipeDream counts its identical workers (two servers of 8 are 81
// states, not 2^16), and the fastest devices are kept while the DP's (used,
// last stage, next stage) triples, the product over groups of C(n + 3, 3),
// stay within the 4^8 of 8 devices.
class DeviceGroups {
 public:
  explicit DeviceGroups(const PlannerContext& ctx) {
    const std::vector<int> fastest = devices_fastest_first(ctx);
    int kept = static_cast<int>(fastest.size());
    std::vector<int> cls;  // empty: each device its own group
    if (kept > kMaxPipeDreamDevices) {
      cls = interchangeable_classes(ctx);
      while (kept > kMaxPipeDreamDevices && triples(group(fastest, cls, kept)) > kMaxTriples) --kept;
      if (kept <= kMaxPipeDreamDevices) cls.clear();
    }
    members_ = group(fastest, cls, kept);
    states_ = 1;
    for (const auto& g : members_) {
      stride_.push_back(states_);
      states_ *= static_cast<int>(g.size()) + 1;
    }
    subs_.resize(states_);
    for (int u = 1; u < states_; ++u)
      for (int t = u; t >= 1; --t)
        if (within(t, u)) subs_[u].push_back(t);
  }

  int states() const { return states_; }
  int full() const { return states_ - 1; }
  int devices_used(int state) const {
    int n = 0;
    for (size_t k = 0; k < members_.size(); ++k) n += digit(state, k);
    return n;
  }
  // The non-empty states componentwise at most `state`, largest first.
  const std::vector<int>& subs(int state) const { return subs_[state]; }
  std::vector<int> devices(int from, int take) const {
    std::vector<int> out;
    for (size_t k = 0; k < members_.size(); ++k)
      for (int i = digit(from, k); i < digit(from, k) + digit(take, k); ++i) out.push_back(members_[k][i]);
    return out;
  }
  int64_t triples() const { return triples(members_); }

 private:
  static constexpr int64_t kMaxTriples = int64_t{1} << (2 * kMaxPipeDreamDevices);

  // The first `kept` of `fastest` by `cls` (each its own group when `cls` is
  // empty), each group's members by index, the groups by their first member.
  static std::vector<std::vector<int>> group(const std::vector<int>& fastest, const std::vector<int>& cls, int kept) {
    std::vector<int> devs(fastest.begin(), fastest.begin() + kept);
    std::sort(devs.begin(), devs.end());
    std::vector<std::vector<int>> groups;
    std::vector<int> group_of_class(cls.size(), -1);
    for (int d : devs) {
      if (cls.empty()) {
        groups.push_back({d});
        continue;
      }
      int& g = group_of_class[cls[d]];
      if (g < 0) {
        g = static_cast<int>(groups.size());
        groups.emplace_back();
      }
      groups[g].push_back(d);
    }
    return groups;
  }
  static int64_t triples(const std::vector<std::vector<int>>& groups) {
    int64_t t = 1;
    for (const auto& g : groups) {
      const int64_t n = static_cast<int64_t>(g.size());
      t *= (n + 3) * (n + 2) * (n + 1) / 6;
      if (t > kMaxTriples) return t;
    }
    return t;
  }
  int digit(int state, size_t k) const {
    return state / stride_[k] % (static_cast<int>(members_[k].size()) + 1);
  }
  bool within(int sub, int state) const {
    for (size_t k = 0; k < members_.size(); ++k)
      if (digit(sub, k) > digit(state, k)) return false;
    return true;
  }

  std::vector<std::vector<int>> members_;
  std::vector<int> stride_;
  int states_ = 1;
  std::vector<std::vector<int>> subs_;
};

// The DP's best plan per number of devices used (index = device count), for
// `m` micro-batches, over the states of `groups` (built from ctx once per
// planner run). It runs from the last layer back, so that a stage knows the
// devices after it, and so its in_flight_limit (its memory under 1F1B).
std::vector<std::optional<StagePlan>> pipedream_by_devices(const PlannerContext& ctx, const DeviceGroups& groups,
                                                           int m) {
  const ReplicatedStageModel model(ctx, m);
  const int M = groups.states();
  // Keep triples x C^2 / 2 around 2e7.
  const int max_positions = std::max(4, static_cast<int>(std::sqrt(4e7 / static_cast<double>(groups.triples()))));
  const std::vector<int> P = cut_positions(ctx, max_positions);
  const int C = static_cast<int>(P.size()) - 1;
  // Costs by state: a stage on `s` devices is priced on the first of each
  // group, a boundary from `s` to `n` on the first and the next (the groups'
  // members are interchangeable; on 8 devices or fewer these are the sets themselves).
  std::vector<std::vector<int>> set_devices(M);
  for (int s = 1; s < M; ++s) set_devices[s] = model.ordered(groups.devices(0, s));
  std::vector<std::vector<int>> next_devices(static_cast<size_t>(M) * M);
  auto next_of = [&](int S, int N) -> const std::vector<int>& {
    std::vector<int>& d = next_devices[static_cast<size_t>(S) * M + N];
    if (d.empty()) d = model.ordered(groups.devices(S, N));
    return d;
  };
  // stage cost per (set, last position k, limit), a row over the first
  // positions i < k, computed on first use (the DP reads a row in turn);
  // limits past the micro-batches keep as many in flight as m does, and
  // where the schedule keeps the same whatever the limit (GPipe) one stands for all.
  std::vector<int> used(M);  // devices per state
  for (int u = 0; u < M; ++u) used[u] = groups.devices_used(u);
  const int D = used[groups.full()];
  const bool by_limit =
      micro_batches_in_flight(ctx.schedule, m, 1) != micro_batches_in_flight(ctx.schedule, m, D);
  const int limits = by_limit ? std::min(D, m) : 1;
  std::vector<double> stage(static_cast<size_t>(M) * (C + 1) * limits * (C + 1));
  std::vector<char> row_ready(static_cast<size_t>(M) * (C + 1) * limits, 0);
  auto stage_row = [&](int s, int k, int limit) -> const double* {
    const size_t row = (static_cast<size_t>(s) * (C + 1) + k) * limits + (std::min(limit, limits) - 1);
    double* out = &stage[row * (C + 1)];
    if (!row_ready[row]) {
      for (int i = 0; i < k; ++i) out[i] = model.stage(set_devices[s], P[i], P[k], limit);
      row_ready[row] = 1;
    }
    return out;
  };
  // boundary per (set, next set, position), computed on first use
  std::vector<double> boundary(static_cast<size_t>(M) * M * (C + 1), std::nan(""));
  auto boundary_at = [&](int S, int N, int i) {
    double& b = boundary[(static_cast<size_t>(S) * M + N) * (C + 1) + i];
    if (std::isnan(b)) b = model.boundary(set_devices[S], next_of(S, N), model.cut(P[i]));
    return b;
  };
  // best[i][U][F]: the smallest bottleneck of layers [P[i], L) on the devices
  // U, the first stage on F <= U; of equal bottlenecks the least sum of the
  // stages' and boundaries' times (sum[i][U][F]: a micro-batch's way through).
  // i innermost: the DP writes a row of first positions in turn.
  auto at = [&](int i, int U, int F) { return (static_cast<size_t>(U) * M + F) * (C + 1) + i; };
  std::vector<double> best(static_cast<size_t>(C + 1) * M * M, kInf), sum(best.size(), kInf);
  std::vector<int> next_i(best.size(), -1);
  std::vector<int> next_s(best.size(), 0);
  auto improve = [&](size_t idx, double v, double total, int i, int F) {
    if (std::tie(v, total) < std::tie(best[idx], sum[idx]))
      best[idx] = v, sum[idx] = total, next_i[idx] = i, next_s[idx] = F;
  };
  for (int F = 1; F < M; ++F)
    for (int k = 0; k < C; ++k) {
      const double t = stage_row(F, C, 1)[k];
      improve(at(k, F, F), t, t, -1, 0);
    }
  for (int i = C - 1; i >= 1; --i)
    for (int U = 1; U < M; ++U)
      for (int F : groups.subs(U)) {
        const size_t from = at(i, U, F);
        if (best[from] == kInf) continue;
        const int free = groups.full() - U;
        if (free == 0) continue;
        for (int N : groups.subs(free)) {
          const double edge = boundary_at(N, F, i);
          const double link = std::max(best[from], edge);
          if (link == kInf) continue;
          const int limit = ReplicatedStageModel::in_flight_limit(used[U] + used[N], used[N]);
          const double* row = stage_row(N, i, limit);
          for (int h = 0; h < i; ++h) {
            const double t = row[h];
            improve(at(h, U + N, N), std::max(link, t), sum[from] + edge + t, i, F);
          }
        }
      }
  std::vector<std::optional<StagePlan>> out(D + 1);
  std::vector<double> out_value(D + 1, kInf), out_sum(D + 1, kInf);
  for (int U = 1; U < M; ++U)
    for (int F : groups.subs(U)) {
      const size_t first = at(0, U, F);
      const int n = used[U];
      if (!(std::tie(best[first], sum[first]) < std::tie(out_value[n], out_sum[n]))) continue;
      out_value[n] = best[first], out_sum[n] = sum[first];
      std::vector<int> begins;
      std::vector<std::vector<int>> sets;
      for (int i = 0, u = U, f = F, taken = 0; i >= 0;) {
        begins.push_back(P[i]);
        sets.push_back(groups.devices(taken, f));  // each group's next devices in turn
        const size_t idx = at(i, u, f);
        taken += f;
        u -= f;
        i = next_i[idx];
        f = next_s[idx];
      }
      out[n] = plan_of(model, begins, sets);
    }
  return out;
}

// One pipeline's stages (k) and the boundaries before them (k > 0): each
// one micro-batch's latency and interval per micro-batch, and the stage's
// window (ReplicatedStageModel::window).
struct PipelineTimes {
  explicit PipelineTimes(int S)
      : latency(S, 0),
        interval(S, 0),
        forward(S, 0),
        backward(S, 0),
        edge_latency(S, 0),
        edge_interval(S, 0),
        window(S, 1),
        replicas(S, 1) {}
  std::vector<double> latency, interval;
  std::vector<double> forward, backward;  // GPipe's phases of each interval (0 otherwise)
  std::vector<double> edge_latency, edge_interval;
  std::vector<int> window, replicas;
  // The first stage's all-reduce: its last backward is the step's last
  // compute, so nothing hides it (the later stages' are in their intervals).
  double first_allreduce = 0;

  // Sum of latencies + (m - 1) x the bottleneck (pace()). Then the first
  // stage's all-reduce. A copied first stage's replicas start together (its
  // input is there from the start), not one interval apart as a later
  // stage's micro-batches arrive: where it paces the pipeline, its last
  // micro-batch leaves it m intervals after the start, not a latency + m - 1
  // intervals (one stage on eight devices: 103.7 ms against the simulator's
  // 58.7 at m = 8). The stages after it still go at their own pace.
  double step(int m) const {
    double sum = 0;
    const double bottleneck = pace(0, m, &sum);
    if (bottleneck == kInf) return kInf;  // (not m = 1's 0 x infinity)
    double filled = sum + (m - 1) * bottleneck;
    if (replicas[0] > 1) {
      const int S = static_cast<int>(latency.size());
      const double first_pace = std::max({interval[0], S > 1 ? edge_interval[1] : 0, sum / window[0]});
      const double head_start = std::max(0.0, latency[0] - first_pace);
      filled = std::max(filled - head_start, sum + (m - 1) * pace(1, m));
    }
    return filled + first_allreduce;
  }

  // The bottleneck of stages from.. and the boundaries between them: the
  // largest interval, or round trip from a stage on over its window, or
  // 1F1B's round trip between two stages (inner_round_trip), or under GPipe
  // the slowest forward + the slowest backward: every forward runs before
  // any backward, so each phase goes at its own slowest stage's pace. Their
  // latencies and boundaries' in `latencies` where given.
  double pace(int from, int m, double* latencies = nullptr) const {
    const int S = static_cast<int>(latency.size());
    double sum = 0, bottleneck = 0, slowest_forward = 0, slowest_backward = 0;
    for (int k = S - 1; k >= from; --k) {
      sum += latency[k];
      bottleneck = std::max({bottleneck, interval[k], k > from ? edge_interval[k] : 0, sum / window[k]});
      slowest_forward = std::max(slowest_forward, forward[k]);
      slowest_backward = std::max(slowest_backward, backward[k]);
      if (k > from) sum += edge_latency[k];
    }
    if (latencies) *latencies = sum;
    return std::max({bottleneck, slowest_forward + slowest_backward, inner_round_trip(m)});
  }

  // Under 1F1B stage i's backward of micro-batch t frees its forward of
  // t + window_i, and stage j runs its forward of u before its backward of
  // u - window_j + 1; so the latencies of stages i..j and the boundaries
  // between them, both ways, recur every window_i - window_j + 1
  // micro-batches: a slow link back to a busy stage paces the stages before
  // it even where the round trip to the last stage does not. (The last stage,
  // a window of one, is step()'s round trip.) Stages of one device each only:
  // a replica runs every r-th micro-batch in an order of its own.
  double inner_round_trip(int m) const {
    const int S = static_cast<int>(latency.size());
    double slowest = 0;
    for (int j = S - 2; j > 0; --j) {
      if (replicas[j] != 1) continue;
      double cycle = latency[j];
      for (int i = j - 1; i >= 0; --i) {
        cycle += edge_latency[i + 1] + latency[i];
        const int recurs = window[i] - window[j] + 1;
        if (replicas[i] == 1 && window[i] < m && recurs >= 1) slowest = std::max(slowest, cycle / recurs);
      }
    }
    return slowest;
  }
};

// Each stage's devices (StagePlan::devices), in stage order.
std::vector<std::vector<int>> stage_device_sets(const StagePlan& plan) {
  std::vector<std::vector<int>> sets(plan.num_stages());
  for (int k = 0; k < plan.num_stages(); ++k) sets[k] = plan.devices(k);
  return sets;
}

// A pipeline's step for given cuts, as GPipe's fill and drain see it: one
// micro-batch's latency through every stage and boundary, then m - 1 more
// intervals of the slowest (the bottleneck, or a stage's round trip over its
// window where 1F1B's window is the narrower): PipelineTimes::step. Per
// stage k and positions i < j, its interval (ReplicatedStageModel::interval:
// PipeDream's stage cost per micro-batch, by phase under GPipe) and latency
// (its slowest replica's forward + backward of one micro-batch), and the same
// of the boundary after it. A stage sends on what crosses its last cut less
// what passes over it, and back the gradients of what it reads (StagePassing:
// a shortcut over a thin stage goes from its maker to its reader, not through
// the stage); what passes over goes from the stage before to the one after,
// which the boundary's interval also counts. So a boundary's bytes depend on
// the stage before it, both its ends.
class CutTable {
 public:
  CutTable(const ReplicatedStageModel& model, const StagePlan& plan, std::vector<int> positions)
      : P(std::move(positions)), S(plan.num_stages()), C(static_cast<int>(P.size()) - 1), m(plan.micro_batches) {
    const std::vector<std::vector<int>> sets = stage_device_sets(plan);
    std::swap(a_, spare());
    const size_t cells = static_cast<size_t>(S) * (C + 1) * (C + 1);
    a_.gate.assign(cells, kInf);
    a_.latency.assign(cells, kInf);
    a_.edge_latency.assign(cells, 0);
    a_.forward.clear(), a_.backward.clear();
    if (model.by_phase()) a_.forward.assign(cells, 0), a_.backward.assign(cells, 0);
    std::vector<int> limit(S);
    std::vector<std::vector<int>> rings(S);  // each stage's all-reduce ring, ordered for its own layers
    if (sets[0].size() > 1) first_allreduce_.assign(C + 1, 0);
    for (int k = 0; k < S; ++k) {
      rings[k] = model.ring(sets[k], plan.stage_begin[k], k + 1 < S ? plan.stage_begin[k + 1] : P.back());
      window_.push_back(model.window(k, S, static_cast<int>(sets[k].size())));
      replicas_.push_back(static_cast<int>(sets[k].size()));
      limit[k] = ReplicatedStageModel::in_flight_limit(sets, k);
    }
    // Per stage and position, with all the bytes across a cut there (where
    // nothing passes the stage by): its sends on (its last), back (its first),
    // and the boundary after it.
    std::vector<double> on(static_cast<size_t>(S) * (C + 1), 0), back(on.size(), 0), after(on.size(), 0),
        after_latency(on.size(), 0);
    for (int k = 0; k < S; ++k)
      for (int i = 0; i <= C; ++i) {
        const int64_t bytes = model.cut(P[i]);
        if (k + 1 < S) {
          on[edge(k, i)] = model.one_way(sets[k], sets[k + 1], bytes);
          after[edge(k, i)] = model.boundary(sets[k], sets[k + 1], bytes);
          after_latency[edge(k, i)] = model.boundary_latency(sets[k], sets[k + 1], bytes);
        }
        if (k > 0) back[edge(k, i)] = model.one_way(sets[k], sets[k - 1], bytes);
      }
    const std::vector<StagePassing::Bytes> passing = model.passing().table(P);
    std::vector<char> after_bounds(after.size(), 0);  // whether after[] at (k, j) is a bound worth trying
    for (int k = 0; k < S; ++k)
      for (int i = 0; i < C; ++i)
        for (int j = i + 1; j <= C; ++j) {
          const StagePassing::Bytes by = passing[static_cast<size_t>(i) * (C + 1) + j];
          const int64_t on_bytes = model.cut(P[j]) - by.over;
          const double send_on =
              by.over == 0 || k + 1 == S ? on[edge(k, j)] : model.one_way(sets[k], sets[k + 1], on_bytes);
          const double send_back = by.past == 0 || k == 0
                                       ? back[edge(k, i)]
                                       : model.one_way(sets[k], sets[k - 1], model.cut(P[i]) - by.past);
          const size_t c = at(k, i, j);
          bool recompute = false;
          // The first stage's all-reduce is the step's tail, kept per end for
          // the stage from the first layer; a later stage's is in its interval.
          if (k == 0 && i == 0 && !first_allreduce_.empty())
            first_allreduce_[j] = model.allreduce_ms(rings[0], P[0], P[j]);
          const double allreduce = k == 0 ? 0 : model.allreduce_ms(rings[k], P[i], P[j]);
          const double interval = model.interval(sets[k], P[i], P[j], send_on, send_back, limit[k], allreduce,
                                                 a_.forward.empty() ? nullptr : &a_.forward[c],
                                                 a_.backward.empty() ? nullptr : &a_.backward[c], &recompute);
          a_.latency[c] = model.stage_latency(sets[k], P[i], P[j], recompute);
          double edge_interval;
          if (k + 1 == S || by.over == 0) {  // 0 after the last stage (after[] is 0 there)
            edge_interval = after[edge(k, j)];
            a_.edge_latency[c] = after_latency[edge(k, j)];
            if (interval < kInf) after_bounds[edge(k, j)] = 1;
          } else {
            edge_interval = model.boundary_after(sets, k, on_bytes, by.over);
            a_.edge_latency[c] = model.boundary_latency(sets[k], sets[k + 1], on_bytes);
            if (interval < kInf) bounds_.push_back(edge_interval);
          }
          a_.gate[c] = std::max(interval, edge_interval);
          if (interval < kInf) bounds_.push_back(interval);
        }
    for (size_t e = 0; e < after.size(); ++e)
      if (after_bounds[e]) bounds_.push_back(after[e]);
  }

  ~CutTable() { std::swap(a_, spare()); }
  CutTable(const CutTable&) = delete;
  CutTable& operator=(const CutTable&) = delete;

  // The cuts (position indices of the stages' first layers) whose every
  // interval, and every round trip over its stage's window, is at most
  // `bound`, with the least latency; their latency in `sum` (infinity: none).
  // Built from the last stage back: a stage's round trip is the latency of
  // the stages and boundaries from it on, which the least suffix keeps least.
  std::vector<int> least_latency(double bound, double& sum) const {
    // suffix[k][i]: the least latency of stages k.. with stage k first at position i.
    std::vector<double> suffix(static_cast<size_t>(S + 1) * (C + 1), kInf);
    std::vector<int> next(suffix.size(), -1);
    const auto cell = [&](int k, int i) { return static_cast<size_t>(k) * (C + 1) + i; };
    suffix[cell(S, C)] = 0;
    for (int k = S - 1; k >= 0; --k)
      for (int i = k; i < C && (k > 0 || i == 0); ++i)
        for (int j = i + 1; j <= C - (S - 1 - k); ++j) {
          const double after = suffix[cell(k + 1, j)];
          if (after == kInf || a_.gate[at(k, i, j)] > bound) continue;
          const double v = a_.latency[at(k, i, j)] + a_.edge_latency[at(k, i, j)] + after;
          if (v > bound * window_[k] * (1 + 1e-9))
            continue;  // a round trip at the bound, summed, may round above it
          if (v < suffix[cell(k, i)]) suffix[cell(k, i)] = v, next[cell(k, i)] = j;
        }
    sum = suffix[cell(0, 0)];
    std::vector<int> cuts(S, 0);
    if (sum == kInf) return cuts;
    for (int k = 0; k + 1 < S; ++k) cuts[k + 1] = next[cell(k, cuts[k])];
    return cuts;
  }

  // The step of cuts (position indices).
  double step(const std::vector<int>& cuts) const {
    PipelineTimes t(S);
    for (int k = 0; k < S; ++k) {
      const int end = k + 1 < S ? cuts[k + 1] : C;
      t.latency[k] = a_.latency[at(k, cuts[k], end)];
      // The stage's interval and the boundary's after it together: only the largest counts.
      t.interval[k] = a_.gate[at(k, cuts[k], end)];
      if (!a_.forward.empty())
        t.forward[k] = a_.forward[at(k, cuts[k], end)], t.backward[k] = a_.backward[at(k, cuts[k], end)];
      if (k > 0)
        t.edge_latency[k] = a_.edge_latency[at(k - 1, cuts[k - 1], cuts[k])];  // the boundary after k - 1
    }
    if (!first_allreduce_.empty()) t.first_allreduce = first_allreduce_[S > 1 ? cuts[1] : C];
    t.window = window_;
    t.replicas = replicas_;
    return t.step(m);
  }

  int positions() const { return C; }  // the last position index (the end of the model)

  // Every finite interval, ascending, once: the bounds worth trying.
  std::vector<double> intervals() const {
    std::vector<double> v = bounds_;
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }

 private:
  const std::vector<int> P;
  const int S, C, m;
  size_t at(int k, int i, int j) const { return (static_cast<size_t>(k) * (C + 1) + i) * (C + 1) + j; }
  size_t edge(int k, int i) const { return static_cast<size_t>(k) * (C + 1) + i; }
  // Per stage k at [P[i], P[j]): the larger of its interval and the
  // boundary's after it, its latency and the boundary's, and under GPipe
  // its interval's parts by phase (empty otherwise).
  struct Arrays {
    std::vector<double> gate, latency, edge_latency, forward, backward;
  };
  // Kept per thread for the next table: the climb places the cuts of every
  // move, and fresh pages for each table cost more than filling them.
  static Arrays& spare() {
    thread_local Arrays a;
    return a;
  }
  Arrays a_;
  std::vector<double> bounds_;  // the finite intervals, and the boundaries' after those stages (some twice)
  std::vector<int> window_;     // per stage (ReplicatedStageModel::window)
  std::vector<int> replicas_;   // per stage: its devices
  std::vector<double> first_allreduce_;  // per end position of the first stage (empty: no copies)
};

// The first layers of `plan`'s stages, each stage keeping its device set,
// whose CutTable step is least: for a bound on the intervals (and on each
// round trip over its window), the least latency under it, over the smallest
// feasible bound (bisected: a round trip may bind between two intervals) and
// up to kBoundsTried larger ones (by rank among the intervals), then each
// cut moved while the step falls. Cut positions: every layer on models of
// up to kMaxCutPositions - 1 layers, else quantiles of the fastest device's
// time, and the plan's own cuts always (kept where no others beat them); on
// quantiles, each cut then moved to a narrow point (narrow_points) and to
// the layer between its neighbours on the quantiles (a coarse
// shortlist's, on fewer positions, stays on them).
constexpr int kMaxCutPositions = 129;
constexpr int kBoundsTried = 48;
constexpr int kBisections = 30;
// The orders with_pipedream_orders places the cuts for, of those its capacity
// cuts rank best (and its coarse cuts, shortlist_orders): the capacity split
// ignores boundaries, so its best few, not its best one, are worth the cut
// placement's cost.
constexpr size_t kOrdersRefined = 4;
constexpr int kCoarseRankedStages = 5;
// Up to this many stages every order is ranked, pairwise swaps beyond; and the
// fewer-stage descent also copies each stage onto every other, not only its neighbours.
constexpr int kEveryOrderStages = 6;
constexpr int kCoarseCutPositions = 17;
// Up to this many layers the fewer-stage descent prices its plans on every
// cut position (a table of at most 65, cheap): 17 quantiles of compute miss
// the narrow points where a small model's pipeline pays.
constexpr int kEveryPositionUpToLayers = 64;

// `v` ascending, each value once.
std::vector<int> ascending_once(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// The index of layer `l` in ascending positions `P` that hold it.
int position_of(const std::vector<int>& P, int l) {
  return static_cast<int>(std::lower_bound(P.begin(), P.end(), l) - P.begin());
}

// Each cut of `cuts` (the first, 0, stays) to its best place among `places`
// (ascending) between its neighbours (the last's: `end`), by `step_of`,
// while `step` (theirs) falls.
template <typename StepOf>
void descend_among(const std::vector<int>& places, int end, StepOf step_of, std::vector<int>& cuts,
                   double& step) {
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t k = 1; k < cuts.size(); ++k) {
      std::vector<int> tried = cuts;
      const int next = k + 1 < cuts.size() ? cuts[k + 1] : end;
      for (auto at = std::upper_bound(places.begin(), places.end(), cuts[k - 1]);
           at != places.end() && *at < next; ++at) {
        tried[k] = *at;
        const double s = step_of(tried);
        if (s < step) step = s, cuts = tried, moved = true;
      }
    }
  }
}

// Each cut of `cuts` (position indices of `table`) to its best position
// between its neighbours while `step` (theirs) falls.
void descend(const CutTable& table, std::vector<int>& cuts, double& step) {
  std::vector<int> every(table.positions() + 1);
  std::iota(every.begin(), every.end(), 0);
  descend_among(
      every, table.positions(), [&](const std::vector<int>& c) { return table.step(c); }, cuts, step);
}

// Between each two positions of `P` (ascending), the layer whose cut carries
// the fewest bytes, where it carries fewer than both: on a slow link the best
// cut is often such a narrow point (a block's one output, between layers that
// pass several tensors), which quantiles of time miss, and the step around it
// too rugged for a cut to descend to it (inception_v3 on two devices: 24.1 s
// at the concat of Mixed_6a, 27.1 s at the best quantile).
std::vector<int> narrow_points(const ReplicatedStageModel& model, const std::vector<int>& P) {
  std::vector<int> narrow;
  for (size_t i = 0; i + 1 < P.size(); ++i) {
    int narrowest = P[i] + 1;
    for (int l = P[i] + 2; l < P[i + 1]; ++l)
      if (model.cut(l) < model.cut(narrowest)) narrowest = l;
    if (narrowest < P[i + 1] && model.cut(narrowest) < std::min(model.cut(P[i]), model.cut(P[i + 1])))
      narrow.push_back(narrowest);
  }
  return narrow;
}

// CutTable::step's objective for stages on `sets` (chain order) beginning at `begins`.
double pipeline_step(const ReplicatedStageModel& model, const std::vector<std::vector<int>>& sets,
                     const std::vector<int>& begins, int L) {
  const int S = static_cast<int>(sets.size());
  PipelineTimes t(S);
  for (int k = 0; k < S; ++k) {
    const int a = begins[k], b = k + 1 < S ? begins[k + 1] : L;
    const StagePassing::Bytes by = model.passing().bytes(a, b);
    const int64_t on_bytes = model.cut(b) - by.over;
    const double on = k + 1 < S ? model.one_way(sets[k], sets[k + 1], on_bytes) : 0;
    const double back = k > 0 ? model.one_way(sets[k], sets[k - 1], model.cut(a) - by.past) : 0;
    bool recompute = false;
    const double allreduce = model.allreduce_ms(model.ring(sets[k], a, b), a, b);
    if (k == 0) t.first_allreduce = allreduce;
    t.interval[k] = model.interval(sets[k], a, b, on, back, ReplicatedStageModel::in_flight_limit(sets, k),
                                   k == 0 ? 0 : allreduce, &t.forward[k], &t.backward[k], &recompute);
    t.latency[k] = model.stage_latency(sets[k], a, b, recompute);
    t.window[k] = model.window(k, S, static_cast<int>(sets[k].size()));
    t.replicas[k] = static_cast<int>(sets[k].size());
    if (k + 1 < S) {  // the boundary after stage k
      t.edge_latency[k + 1] = model.boundary_latency(sets[k], sets[k + 1], on_bytes);
      t.edge_interval[k + 1] = model.boundary_after(sets, k, on_bytes, by.over);
    }
  }
  return t.step(model.micro_batches());
}

// `model`: ReplicatedStageModel(ctx, plan.micro_batches), which callers that
// place many plans at one count build once.
std::vector<int> balanced_begins(const ReplicatedStageModel& model, const PlannerContext& ctx,
                                 const StagePlan& plan, int positions = kMaxCutPositions) {
  std::vector<int> P = cut_positions(ctx, positions);
  P.insert(P.end(), plan.stage_begin.begin(), plan.stage_begin.end());
  P = ascending_once(std::move(P));
  const CutTable table(model, plan, P);
  std::vector<int> own(plan.num_stages());
  for (int k = 0; k < plan.num_stages(); ++k) own[k] = position_of(P, plan.stage_begin[k]);
  std::vector<double> bounds = table.intervals();
  double sum = kInf;
  // A round trip over its window may exceed every interval (one micro-batch
  // has a window of one): then the step of the least-latency cuts under no
  // bound at all is a bound that holds.
  if (!bounds.empty() && (table.least_latency(bounds.back(), sum), sum == kInf)) {
    const std::vector<int> any = table.least_latency(std::numeric_limits<double>::max(), sum);
    if (sum < kInf) bounds.push_back(table.step(any));
  }
  // The smallest feasible bound (feasibility grows with the bound).
  size_t lo = 0, hi = bounds.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    table.least_latency(bounds[mid], sum);
    if (sum < kInf)
      hi = mid;
    else
      lo = mid + 1;
  }
  double best_step = table.step(own);
  std::vector<int> best = own;
  const auto try_bound = [&](double bound) {
    std::vector<int> cuts = table.least_latency(bound, sum);
    if (sum == kInf) return;
    const double step = table.step(cuts);
    if (step < best_step) best_step = step, best = std::move(cuts);
  };
  if (lo == bounds.size()) return plan.stage_begin;
  // A round trip over its window may bind between two intervals: the
  // smallest feasible bound itself, bisected below the listed one, first.
  double below = lo > 0 ? bounds[lo - 1] : 0, above = bounds[lo];
  for (int t = 0; t < kBisections && above - below > 1e-9 * above; ++t) {
    const double mid = (below + above) / 2;
    table.least_latency(mid, sum);
    (sum < kInf ? above : below) = mid;
  }
  try_bound(above);
  const size_t tried = std::min<size_t>(kBoundsTried, bounds.size() - lo);
  for (size_t t = 0; t < tried; ++t)
    try_bound(bounds[lo + t * (bounds.size() - 1 - lo) / std::max<size_t>(1, tried - 1)]);
  // The bounds hold each stage's interval, not GPipe's pace of each phase
  // (the slowest forward + the slowest backward) nor 1F1B's round trips
  // between two stages, which may be least at cuts of more latency than
  // another's under the same bound.
  descend(table, best, best_step);
  for (int& c : best) c = P[c];
  const int L = num_layers(ctx);
  if (static_cast<int>(P.size()) == L + 1 || positions < kMaxCutPositions)
    return best;  // every layer, or a coarse shortlist's
  const std::vector<std::vector<int>> sets = stage_device_sets(plan);
  // Each cut to the narrow point between its neighbours while the step falls: a step per try, no table.
  descend_among(
      narrow_points(model, P), L, [&](const std::vector<int>& c) { return pipeline_step(model, sets, c, L); },
      best, best_step);
  // Between a cut's neighbours on the quantiles, every layer: the cuts to the layer.
  std::vector<int> fine = {0, L};
  for (size_t k = 1; k < best.size(); ++k) {
    const int below = *(std::lower_bound(P.begin(), P.end(), best[k]) - 1);
    const int above = *std::upper_bound(P.begin(), P.end(), best[k]);
    for (int l = below + 1; l < above; ++l) fine.push_back(l);
  }
  fine = ascending_once(std::move(fine));
  const CutTable closer(model, plan, fine);
  for (int& c : best) c = position_of(fine, c);
  descend(closer, best, best_step);
  for (int& c : best) c = fine[c];
  return best;
}

// Calls f(begins, sets) for every contiguous plan of 1..min(D, L) stages on
// disjoint non-empty device sets (global masks over the DP's devices).
template <typename F>
void for_each_replicated(int L, const std::vector<int>& devs, F&& f) {
  const int D = static_cast<int>(devs.size());
  std::vector<int> begins;
  std::vector<unsigned> sets;
  // Recursive over stages: the next stage starts at `from`, devices `used` taken.
  std::function<void(int, unsigned)> rec = [&](int from, unsigned used) {
    for (int end = from + 1; end <= L; ++end)
      for (unsigned local = 1; local < (1u << D); ++local) {
        unsigned g = 0;
        for (int i = 0; i < D; ++i)
          if (local & (1u << i)) g |= 1u << devs[i];
        if (g & used) continue;
        begins.push_back(from);
        sets.push_back(g);
        if (end == L)
          f(begins, sets);
        else
          rec(end, used | g);
        begins.pop_back();
        sets.pop_back();
      }
  };
  rec(0, 0);
}

}  // namespace

double replicated_bottleneck_ms(const PlannerContext& ctx, const StagePlan& plan) {
  const int L = num_layers(ctx), S = plan.num_stages();
  const ReplicatedStageModel model(ctx, plan.micro_batches);
  const std::vector<std::vector<int>> sets = stage_device_sets(plan);
  double v = 0;
  for (int k = 0; k < S; ++k) {
    const int end = k + 1 < S ? plan.stage_begin[k + 1] : L;
    v = std::max(
        v, model.stage(sets[k], plan.stage_begin[k], end, ReplicatedStageModel::in_flight_limit(sets, k)));
    if (k > 0)
      v = std::max(v, model.boundary(plan.devices(k - 1), plan.devices(k), model.cut(plan.stage_begin[k])));
  }
  return v;
}

namespace {

// Each group's first layer (-1: an empty group).
std::vector<int> first_layers(const Placement& p) {
  std::vector<int> first(p.num_groups(), -1);
  for (int l = 0; l < static_cast<int>(p.layer_group.size()); ++l)
    if (first[p.layer_group[l]] < 0) first[p.layer_group[l]] = l;
  return first;
}

// The groups in the order of their first layers: the stages of `p` as a
// pipeline (empty where a group is empty).
std::vector<int> stage_order(const Placement& p) {
  const std::vector<int> first = first_layers(p);
  if (std::find(first.begin(), first.end(), -1) != first.end()) return {};
  std::vector<int> order(p.num_groups());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return first[a] < first[b]; });
  return order;
}

// The stages' first layers where each stage's share of the work (`prefix`:
// the work before each layer) is its share of the `capacity`; each keeps a layer.
std::vector<int> begins_by_capacity(const std::vector<double>& prefix, const std::vector<double>& capacity) {
  const int L = static_cast<int>(prefix.size()) - 1, S = static_cast<int>(capacity.size());
  const double total = std::accumulate(capacity.begin(), capacity.end(), 0.0);
  std::vector<int> begins(S, 0);
  double before = 0;
  for (int k = 1; k < S; ++k) {
    before += capacity[k - 1];
    const double target = prefix[L] * before / total;
    int j = static_cast<int>(std::lower_bound(prefix.begin(), prefix.end(), target) - prefix.begin());
    if (j > 0 && target - prefix[j - 1] < prefix[std::min(j, L)] - target) --j;  // the nearer boundary
    begins[k] = std::clamp(j, begins[k - 1] + 1, L - (S - k));
  }
  return begins;
}

}  // namespace

double modelled_step_ms(const PlannerContext& context, const Placement& p) {
  std::vector<std::vector<int>> sets;
  std::vector<int> begins;
  int m = p.micro_batches;
  if (p.is_data_parallel()) {  // one stage on every replica, a micro-batch each
    sets = {p.group_device};
    begins = {0};
    m = std::max(m, static_cast<int>(p.group_device.size()));
  } else {
    const StagePlan plan = stage_plan_of_runs(p);
    const std::vector<int> first = first_layers(p);
    if (plan.num_stages() != p.num_groups() - std::count(first.begin(), first.end(), -1))
      return kInf;  // a group in several runs: not a chain of stages
    begins = plan.stage_begin;
    sets = stage_device_sets(plan);
  }
  double best = kInf;
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    PlannerContext ctx = context;
    ctx.schedule = schedule;
    ctx.optimizer = p.optimizer;
    best = std::min(best, pipeline_step(ReplicatedStageModel(ctx, m), sets, begins, num_layers(ctx)));
  }
  return best;
}

namespace {

// `p`'s groups as stages (stage k: the group with the k-th first layer, from
// that layer on; `order` empty where a group has no layer), and the context
// of its schedule and optimizer.
struct StagesOf {
  std::vector<int> order;
  StagePlan plan;
  PlannerContext ctx;
  StagesOf(const PlannerContext& context, const Placement& p) : order(stage_order(p)), ctx(context) {
    const std::vector<int> first = first_layers(p);
    plan.micro_batches = p.micro_batches;
    for (int g : order) {
      plan.stage_begin.push_back(first[g]);
      plan.stage_device.push_back(p.group_device[g]);
      if (p.has_replicated_groups()) plan.stage_replicas.push_back(p.group_replicas[g]);
    }
    ctx.schedule = p.schedule;
    ctx.optimizer = p.optimizer;
  }
};

// with_pipedream_cuts' objective for `p` with its cuts placed on
// kCoarseCutPositions positions (a table a fiftieth of the full one's; every
// position up to kEveryPositionUpToLayers layers), for its own schedule: a
// cheap rank of many plans' stages (one stage, or data parallelism:
// modelled_step_ms, the faster schedule).
double coarse_placed_step_ms(const PlannerContext& context, const Placement& p) {
  if (p.is_data_parallel() || p.num_groups() < 2) return modelled_step_ms(context, p);
  const StagesOf st(context, p);
  if (st.order.empty()) return kInf;
  const ReplicatedStageModel model(st.ctx, st.plan.micro_batches);
  const int positions =
      num_layers(st.ctx) <= kEveryPositionUpToLayers ? kMaxCutPositions : kCoarseCutPositions;
  return pipeline_step(model, stage_device_sets(st.plan), balanced_begins(model, st.ctx, st.plan, positions),
                       num_layers(st.ctx));
}

}  // namespace

Placement with_pipedream_cuts(const PlannerContext& context, const Placement& p) {
  if (p.is_data_parallel() || p.num_groups() < 2) return p;
  const StagesOf st(context, p);
  if (st.order.empty()) return p;
  const std::vector<int>& order = st.order;
  const StagePlan& plan = st.plan;
  const PlannerContext& ctx = st.ctx;
  const std::vector<int> begins = balanced_begins(ReplicatedStageModel(ctx, plan.micro_batches), ctx, plan);
  Placement out = p;
  for (int k = 0, S = plan.num_stages(), L = num_layers(ctx); k < S; ++k)
    std::fill(out.layer_group.begin() + begins[k], out.layer_group.begin() + (k + 1 < S ? begins[k + 1] : L),
              order[k]);
  return out;
}

namespace {

// Each device's place in devices_fastest_first (0 = fastest).
std::vector<int> speed_rank(const PlannerContext& ctx) {
  std::vector<int> rank(num_devices(ctx));
  const std::vector<int> order = devices_fastest_first(ctx);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) rank[order[i]] = i;
  return rank;
}

// Each device's speed on this model relative to the fastest (1 = as fast).
std::vector<double> relative_speeds(const PlannerContext& ctx) {
  const int D = num_devices(ctx), L = num_layers(ctx);
  const double fastest_ms = stage_ms(ctx, devices_fastest_first(ctx)[0], 0, L, 1);
  std::vector<double> speed(D);
  for (int d = 0; d < D; ++d) speed[d] = fastest_ms / stage_ms(ctx, d, 0, L, 1);
  return speed;
}

// Each group's work: its layers' time on the fastest device.
std::vector<double> group_work(const PlannerContext& ctx, const Placement& p) {
  const int fastest = devices_fastest_first(ctx)[0];
  std::vector<double> work(p.num_groups(), 0);
  for (int l = 0; l < num_layers(ctx); ++l) work[p.layer_group[l]] += stage_ms(ctx, fastest, l, l + 1, 1);
  return work;
}

// The fewest micro-batches among the choices that give each of `units`
// (copies or stages) one, at least `current`; 0 where no choice does.
int micro_batches_for(const PlannerContext& ctx, int units, int current) {
  if (units <= current) return current;
  const std::vector<int> choices = ctx.micro_batch_choices();
  const auto enough = std::lower_bound(choices.begin(), choices.end(), units);
  return enough == choices.end() ? 0 : *enough;
}

// Every device `p` uses, each once, fastest first.
std::vector<int> devices_used_fastest_first(const PlannerContext& ctx, const Placement& p) {
  std::vector<int> devices;
  for (int g = 0; g < p.num_groups(); ++g)
    for (int d : p.devices_of_group(g))
      if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  const std::vector<int> rank = speed_rank(ctx);
  std::sort(devices.begin(), devices.end(), [&](int a, int b) { return rank[a] < rank[b]; });
  return devices;
}

}  // namespace

Placement without_replicas(const PlannerContext& ctx, const Placement& p) {
  const std::vector<int> rank = speed_rank(ctx);
  auto fastest = [&](const std::vector<int>& devices) {
    return *std::min_element(devices.begin(), devices.end(), [&](int a, int b) { return rank[a] < rank[b]; });
  };
  Placement out = p;
  out.group_replicas.clear();
  out.group_replica_weights.clear();
  out.aggregation_every = 1;
  if (p.is_data_parallel()) {
    out.data_parallel = DataParallelMode::none;
    out.group_device = {fastest(p.group_device)};
    if (!out.group_recompute.empty()) out.group_recompute.resize(1);
    out.micro_batches = 1;
    return out;
  }
  for (int g = 0; g < p.num_groups(); ++g) out.group_device[g] = fastest(p.devices_of_group(g));
  // One device left: nothing to pipeline, and each further micro-batch costs
  // its tasks' overhead; more stay only where one does not fit its memory.
  const bool one_device = std::all_of(out.group_device.begin(), out.group_device.end(),
                                      [&](int d) { return d == out.group_device[0]; });
  if (one_device && out.micro_batches > 1) {
    Placement whole = out;
    whole.micro_batches = 1;
    if (fits(ctx, whole)) return whole;
  }
  return out;
}

Placement with_idle_devices(const PlannerContext& ctx, const Placement& p, IdleDevices which) {
  const int D = num_devices(ctx), L = num_layers(ctx);
  std::vector<char> used(D, 0);
  for (int g = 0; g < p.num_groups(); ++g)
    for (int d : p.devices_of_group(g)) used[d] = 1;
  const std::vector<int> order = devices_fastest_first(ctx);
  const std::vector<double> speed = relative_speeds(ctx);
  // A copy's memory need is about its peers' (its share of the micro-batches
  // no larger), so a device at least as large as the smallest of them holds
  // it wherever they are made to fit (by the evaluator's memory rule, or not);
  // a smaller one may where the model, which knows memory, finds it faster.
  const auto& devices = ctx.cluster->devices;
  const auto roomy = [&](int d, const std::vector<int>& peers) {
    for (int q : peers)
      if (devices[d].memory_mb < devices[q].memory_mb) return false;
    return true;
  };
  const auto takes = [&](int d, const std::vector<int>& peers, const Placement& with,
                         const Placement& without) {
    return roomy(d, peers) || (which == IdleDevices::or_faster_by_model &&
                               modelled_step_ms(ctx, with) < modelled_step_ms(ctx, without));
  };
  Placement out = p;
  if (p.is_data_parallel()) {
    const std::vector<int> peers = p.group_device;
    for (int d : order) {
      if (used[d]) continue;
      Placement with = out;
      with.group_device.push_back(d);
      if (takes(d, peers, with, out)) out = std::move(with);
    }
    return out;
  }
  const std::vector<double> work = group_work(ctx, p);
  std::vector<double> capacity(p.num_groups(), 0);
  for (int g = 0; g < p.num_groups(); ++g)
    for (int d : p.devices_of_group(g)) capacity[g] += speed[d];
  if (out.group_replicas.empty()) out.group_replicas.assign(out.num_groups(), {});
  for (int d : order) {
    if (used[d]) continue;
    std::vector<int> groups(p.num_groups());
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int a, int b) { return work[a] / capacity[a] > work[b] / capacity[b]; });
    for (int g : groups) {
      const int copies = 2 + static_cast<int>(out.group_replicas[g].size());
      if (work[g] == 0) continue;
      const int micro_batches = micro_batches_for(ctx, copies, out.micro_batches);  // a micro-batch per copy
      if (micro_batches == 0) continue;
      Placement with = out;
      with.micro_batches = micro_batches;
      with.group_replicas[g].push_back(d);
      if (!with.group_replica_weights.empty()) with.group_replica_weights[g].clear();
      if (!takes(d, p.devices_of_group(g), with, out)) continue;
      out = std::move(with);
      capacity[g] += speed[d];
      break;
    }
  }
  if (!out.has_replicated_groups()) out.group_replicas.clear();
  return out;
}

Placement as_one_stage(const PlannerContext& ctx, const Placement& p) {
  const std::vector<int> devices = devices_used_fastest_first(ctx, p);
  const int micro_batches = micro_batches_for(ctx, static_cast<int>(devices.size()), p.micro_batches);
  if (p.is_data_parallel() || p.num_groups() < 2 || micro_batches == 0) return p;
  Placement out = p;
  out.layer_group.assign(p.layer_group.size(), 0);
  out.group_device = {devices[0]};
  out.group_replicas.clear();
  if (devices.size() > 1) out.group_replicas = {std::vector<int>(devices.begin() + 1, devices.end())};
  out.group_replica_weights.clear();
  out.group_recompute.clear();
  out.aggregation_every = 1;
  out.micro_batches = micro_batches;
  if (out.schedule == Schedule::interleaved_1f1b) out.schedule = Schedule::one_f_one_b;  // no device holds two stages
  return out;
}

Placement as_data_parallel(const PlannerContext& ctx, const Placement& p) {
  const std::vector<int> devices = devices_used_fastest_first(ctx, p);
  if (p.is_data_parallel() || devices.size() < 2 || static_cast<int64_t>(devices.size()) > ctx.batch_size) return p;
  Placement out = Placement::replicas(num_layers(ctx), devices);
  out.source = p.source;
  return out;
}

namespace {

// `p` with group g's layers joined to the group of the layer before its
// first (after its last, for a first stage): one stage fewer, its devices
// left out where they hold no other group. `p` as it is where g has no
// neighbour (its layers interleave with no other group's).
// Group g's first and last layer (first = L, last = -1: it has none).
std::pair<int, int> layer_span(const Placement& p, int g) {
  const int L = static_cast<int>(p.layer_group.size());
  const auto first = std::find(p.layer_group.begin(), p.layer_group.end(), g) - p.layer_group.begin();
  const auto last =
      L - 1 - (std::find(p.layer_group.rbegin(), p.layer_group.rend(), g) - p.layer_group.rbegin());
  return {static_cast<int>(first), static_cast<int>(last)};
}

Placement merged_into_neighbour(const PlannerContext& ctx, const Placement& p, int g) {
  const int L = num_layers(ctx);
  const auto [first, last] = layer_span(p, g);
  const int into = first > 0 ? p.layer_group[first - 1] : last + 1 < L ? p.layer_group[last + 1] : -1;
  if (first == L || into < 0 || into == g) return p;
  Placement out = p;
  for (int& group : out.layer_group)
    if (group == g) group = into;
  drop_unused_groups(out);  // the group goes
  return out;
}

// `p` with group g's layers merged into its neighbour and its devices
// further replicas of group h (a stage that need not be g's neighbour), the
// micro-batches raised to one per copy where fewer. `p` as it is where g or h
// holds no layer, they share a device, or no micro-batch choice gives every copy one.
Placement made_replica_of(const PlannerContext& ctx, const Placement& p, int g, int h) {
  const std::vector<int> moved = p.devices_of_group(g);
  std::vector<int> devices = p.devices_of_group(h);
  for (int d : moved) {
    if (std::find(devices.begin(), devices.end(), d) != devices.end()) return p;
    devices.push_back(d);
  }
  const int micro_batches = micro_batches_for(ctx, static_cast<int>(devices.size()), p.micro_batches);
  if (micro_batches == 0) return p;
  Placement with = p;
  with.micro_batches = micro_batches;
  if (with.group_replicas.empty()) with.group_replicas.assign(with.num_groups(), {});
  with.group_replicas[h].assign(devices.begin() + 1, devices.end());
  if (!with.group_replica_weights.empty()) with.group_replica_weights[h].clear();
  const Placement out = merged_into_neighbour(ctx, with, g);
  return out.num_groups() < p.num_groups() ? out : p;
}

// `p` with the group after g (the group of the layer after g's last) joined
// onto g: its layers, and its devices as further replicas of g (PipeDream's
// replicated stage), the micro-batches raised to one per copy where fewer.
// `p` as it is where g is last, the two share a device, or no micro-batch
// choice gives every copy one.
Placement joined_with_next(const PlannerContext& ctx, const Placement& p, int g) {
  const int L = num_layers(ctx);
  const int last = layer_span(p, g).second;
  if (last < 0 || last + 1 >= L || p.layer_group[last + 1] == g) return p;
  return made_replica_of(ctx, p, p.layer_group[last + 1], g);  // its neighbour before it: g
}

}  // namespace

Placement without_slowest_stage(const PlannerContext& ctx, const Placement& p) {
  if (p.is_data_parallel() || p.num_groups() < 2) return p;
  // The group on the slowest device that holds no other group (and no
  // replicas), where that device is slower than every other the plan uses
  // (among equal devices none is the slowest).
  const std::vector<double> speed = relative_speeds(ctx);
  std::vector<int> groups_on(num_devices(ctx), 0);
  for (int g = 0; g < p.num_groups(); ++g)
    for (int d : p.devices_of_group(g)) ++groups_on[d];
  int slowest = -1;
  for (int g = 0; g < p.num_groups(); ++g) {
    const int d = p.group_device[g];
    if (p.replica_count(g) == 1 && groups_on[d] == 1 &&
        (slowest < 0 || speed[d] < speed[p.group_device[slowest]]))
      slowest = g;
  }
  if (slowest < 0) return p;
  const int dropped = p.group_device[slowest];
  for (int d = 0; d < num_devices(ctx); ++d)
    if (d != dropped && groups_on[d] > 0 && speed[d] <= speed[dropped]) return p;
  return merged_into_neighbour(ctx, p, slowest);
}

Placement with_fewer_stages_by_model(const PlannerContext& ctx, const Placement& p) {
  if (p.is_data_parallel() || p.num_groups() < 2) return p;
  Placement out = p;
  double step = coarse_placed_step_ms(ctx, p);
  for (bool fewer = true; fewer && out.num_groups() > 1;) {
    fewer = false;
    Placement best;
    const auto consider = [&](Placement q) {
      if (q.num_groups() == out.num_groups()) return;
      const double s = coarse_placed_step_ms(ctx, q);
      if (s < step) step = s, best = std::move(q), fewer = true;
    };
    const int G = out.num_groups();
    // h's join with the next, g, was priced already where h came first.
    const auto joined_before = [&](int g, int h) {
      return h < g && layer_span(out, h).second + 1 == layer_span(out, g).first;
    };
    for (int g = 0; g < G; ++g) {
      consider(merged_into_neighbour(ctx, out, g));
      consider(joined_with_next(ctx, out, g));
      if (G <= kEveryOrderStages)
        for (int h = 0; h < G; ++h)
          if (h != g && !joined_before(g, h)) consider(made_replica_of(ctx, out, g, h));
    }
    if (fewer) out = std::move(best);
  }
  return out;
}

Placement with_micro_batches_by_model(const PlannerContext& ctx, const Placement& p) {
  if (p.is_data_parallel()) return p;
  int fewest = 1;
  for (int g = 0; g < p.num_groups(); ++g) fewest = std::max(fewest, p.replica_count(g));
  Placement out = p, q = p;
  double least = modelled_step_ms(ctx, p);
  for (int m : ctx.micro_batch_choices()) {
    if (m < fewest || m == p.micro_batches) continue;
    q.micro_batches = m;
    const double s = modelled_step_ms(ctx, q);
    if (s < least) least = s, out.micro_batches = m;
  }
  return out;
}

Placement on_fastest_devices(const PlannerContext& ctx, const Placement& p) {
  const std::vector<int> used = devices_used_fastest_first(ctx, p), fastest = devices_fastest_first(ctx);
  std::vector<int> to(num_devices(ctx), -1);
  for (size_t i = 0; i < used.size(); ++i) to[used[i]] = fastest[i];
  Placement out = p;
  for (int& d : out.group_device) d = to[d];
  for (auto& replicas : out.group_replicas)
    for (int& d : replicas) d = to[d];
  return fits(ctx, out) ? out : p;
}

Placement as_pipeline_of_every_device(const PlannerContext& ctx, const Placement& p) {
  if (p.is_data_parallel()) return p;
  const int D = num_devices(ctx), L = num_layers(ctx);
  Placement out = p;
  const std::vector<int> rank = speed_rank(ctx);
  for (int g = 0; g < p.num_groups(); ++g) {
    const std::vector<int> devices = p.devices_of_group(g);
    out.group_device[g] = *std::min_element(devices.begin(), devices.end(), [&](int a, int b) { return rank[a] < rank[b]; });
  }
  out.group_replicas.clear();
  out.group_replica_weights.clear();
  out.aggregation_every = 1;
  std::vector<char> used(D, 0);
  // A device that runs several groups keeps its first; the others go to the
  // idle devices, fastest first, while there are any (the cuts are placed after).
  std::vector<int> idle;
  for (int d : out.group_device) used[d] = 1;
  for (int d : devices_fastest_first(ctx))
    if (!used[d]) idle.push_back(d);
  std::vector<char> held(D, 0), group_seen(p.num_groups(), 0);
  for (int l = 0; l < L && !idle.empty(); ++l) {  // the groups by their first layers
    const int g = out.layer_group[l];
    if (group_seen[g]) continue;
    group_seen[g] = 1;
    int& d = out.group_device[g];
    if (held[d]) d = idle.front(), idle.erase(idle.begin()), used[d] = 1;
    held[d] = 1;
  }
  const std::vector<double> speed = relative_speeds(ctx);
  const int fastest = devices_fastest_first(ctx)[0];
  std::vector<double> work = group_work(ctx, out);
  for (int d : devices_fastest_first(ctx)) {
    if (used[d]) continue;
    // The group with the most work per unit of its device's speed and two layers to split.
    int heavy = -1;
    for (int g = 0; g < out.num_groups(); ++g) {
      const int layers = static_cast<int>(std::count(out.layer_group.begin(), out.layer_group.end(), g));
      if (layers >= 2 && (heavy < 0 || work[g] / speed[out.group_device[g]] > work[heavy] / speed[out.group_device[heavy]]))
        heavy = g;
    }
    if (heavy < 0) break;
    // Its tail goes to d: d's share of the work by the two devices' speeds.
    const double keep = work[heavy] * speed[out.group_device[heavy]] / (speed[out.group_device[heavy]] + speed[d]);
    const int added = out.add_group(d);
    double so_far = 0;
    int kept = 0;
    for (int l = 0; l < L; ++l) {
      if (out.layer_group[l] != heavy) continue;
      const double ms = stage_ms(ctx, fastest, l, l + 1, 1);
      if (kept > 0 && so_far + ms / 2 > keep) out.layer_group[l] = added;  // the tail, by each layer's midpoint
      else ++kept, so_far += ms;
    }
    if (std::count(out.layer_group.begin(), out.layer_group.end(), added) == 0) {  // the last layer goes at least
      for (int l = L - 1; l >= 0; --l)
        if (out.layer_group[l] == heavy) {
          out.layer_group[l] = added, so_far -= stage_ms(ctx, fastest, l, l + 1, 1);
          break;
        }
    }
    work.push_back(work[heavy] - so_far);
    work[heavy] = so_far;
  }
  const int micro_batches = micro_batches_for(ctx, out.num_groups(), out.micro_batches);
  if (micro_batches > 0) out.micro_batches = micro_batches;
  return out;
}

namespace {

// A pipeline's stages to deal to the chain's positions: perm[k] is the stage
// (index into `sets`) that runs at position k.
struct StagesToDeal {
  int L = 0;
  std::vector<int> order;                  // the plan's groups by first layer: stage k is group order[k]
  std::vector<std::vector<int>> sets;      // each stage's devices, its primary first
  std::vector<double> capacity;            // each stage's devices' relative speeds, summed
  std::vector<std::vector<int>> classes;   // each stage's devices' interchangeable classes, sorted
  std::vector<double> prefix;              // the work before each layer, on the fastest device
  bool replicated = false;                 // whether a stage has replicas

  std::vector<std::vector<int>> placed(const std::vector<int>& perm) const {
    std::vector<std::vector<int>> v;
    for (int s : perm) v.push_back(sets[s]);
    return v;
  }
  // Cuts where each position's share of the work is its stage's share of the capacity.
  std::vector<int> capacity_begins(const std::vector<int>& perm) const {
    std::vector<double> cap;
    for (int s : perm) cap.push_back(capacity[s]);
    return begins_by_capacity(prefix, cap);
  }
  // Whether two orders differ only by interchangeable devices.
  bool alike(const std::vector<int>& a, const std::vector<int>& b) const {
    for (size_t k = 0; k < a.size(); ++k)
      if (classes[a[k]] != classes[b[k]]) return false;
    return true;
  }
};

StagesToDeal stages_to_deal(const PlannerContext& ctx, const Placement& p, std::vector<int> order) {
  StagesToDeal st;
  st.L = num_layers(ctx);
  st.order = std::move(order);
  st.replicated = p.has_replicated_groups();
  const std::vector<double> speed = relative_speeds(ctx);
  const std::vector<int> cls = interchangeable_classes(ctx);
  for (int g : st.order) {
    st.sets.push_back(p.devices_of_group(g));
    st.capacity.push_back(0);
    st.classes.emplace_back();
    for (int d : st.sets.back()) st.capacity.back() += speed[d], st.classes.back().push_back(cls[d]);
    std::sort(st.classes.back().begin(), st.classes.back().end());
  }
  st.prefix.assign(st.L + 1, 0);
  const int fastest = devices_fastest_first(ctx)[0];
  for (int l = 0; l < st.L; ++l) st.prefix[l + 1] = st.prefix[l] + stage_ms(ctx, fastest, l, l + 1, 1);
  return st;
}

struct DealtOrder {
  double step;
  std::vector<int> perm;
  int m;
};

// Whether two dealt orders are one: the same count, orders alike.
bool same_order(const StagesToDeal& st, const DealtOrder& a, const DealtOrder& b) {
  return a.m == b.m && st.alike(a.perm, b.perm);
}

// `order` dealt as `perm` at the model's micro-batch count: the stages' first
// layers where the objective is least from `begins` (balanced_begins on
// `positions`), and that step.
std::vector<int> placed_cuts(const ReplicatedStageModel& model, const PlannerContext& ctx,
                             const StagesToDeal& st, const std::vector<int>& perm, std::vector<int> begins,
                             double& step, int positions = kMaxCutPositions) {
  StagePlan plan;
  plan.micro_batches = model.micro_batches();
  plan.stage_begin = std::move(begins);
  for (const auto& set : st.placed(perm)) {
    plan.stage_device.push_back(set[0]);
    if (st.replicated) plan.stage_replicas.emplace_back(set.begin() + 1, set.end());
  }
  std::vector<int> cuts = balanced_begins(model, ctx, plan, positions);
  step = pipeline_step(model, st.placed(perm), cuts, st.L);
  return cuts;
}

// Adds (perm, m) to `shortlist` (ascending by step, at most kOrdersRefined,
// one of each set of orders alike) where its step ranks there.
void consider(std::vector<DealtOrder>& shortlist, const StagesToDeal& st, const std::vector<int>& perm, int m,
              double step) {
  if (!(step < kInf) || (shortlist.size() == kOrdersRefined && step >= shortlist.back().step)) return;
  const DealtOrder o{step, perm, m};
  if (std::any_of(shortlist.begin(), shortlist.end(),
                  [&](const DealtOrder& s) { return same_order(st, s, o); }))
    return;
  const auto at = std::upper_bound(shortlist.begin(), shortlist.end(), step,
                                   [](double v, const DealtOrder& d) { return v < d.step; });
  shortlist.insert(at, o);
  if (shortlist.size() > kOrdersRefined) shortlist.pop_back();
}

// The kOrdersRefined best (order, micro-batch count) by the step with capacity
// cuts: every order of up to six stages at every count, pairwise swaps from
// the plan's own beyond six. The capacity split ignores memory: where a
// stage's share does not fit its device, that order is out (or pays for
// recomputation) though cuts that move layers off it would fit, as on devices
// of 1-4 GB for a 1.4 GB model. So orders of up to kCoarseRankedStages stages
// are also ranked with their cuts placed coarsely (balanced_begins on
// kCoarseCutPositions positions, a table a fiftieth of the full one's): the
// kOrdersRefined best by that too; orders of six stages only where no order's
// capacity split fits (six times the orders of five, at every count).
struct Shortlists {
  std::vector<DealtOrder> by_capacity, by_coarse_cuts;
};

Shortlists shortlist_orders(const PlannerContext& ctx, const StagesToDeal& st) {
  const int S = static_cast<int>(st.sets.size());
  Shortlists lists;
  std::vector<int> identity(S);
  std::iota(identity.begin(), identity.end(), 0);
  const auto rank_by_coarse_cuts = [&](const ReplicatedStageModel& model, const std::vector<int>& perm,
                                       const std::vector<int>& begins) {
    double coarse = kInf;
    placed_cuts(model, ctx, st, perm, begins, coarse, kCoarseCutPositions);
    consider(lists.by_coarse_cuts, st, perm, model.micro_batches(), coarse);
  };
  for (int m : ctx.micro_batch_choices()) {
    const ReplicatedStageModel model(ctx, m);
    const auto step_of = [&](const std::vector<int>& perm) {
      return pipeline_step(model, st.placed(perm), st.capacity_begins(perm), st.L);
    };
    std::vector<int> perm = identity;
    if (S <= kEveryOrderStages) {
      do {
        const std::vector<int> begins = st.capacity_begins(perm);
        consider(lists.by_capacity, st, perm, m, pipeline_step(model, st.placed(perm), begins, st.L));
        if (S <= kCoarseRankedStages) rank_by_coarse_cuts(model, perm, begins);
      } while (std::next_permutation(perm.begin(), perm.end()));
      continue;
    }
    double here = step_of(perm);
    consider(lists.by_capacity, st, perm, m, here);
    for (bool better = true; better;) {
      better = false;
      for (int i = 0; i < S; ++i)
        for (int j = i + 1; j < S; ++j) {
          std::swap(perm[i], perm[j]);
          const double step = step_of(perm);
          if (step < here * (1 - 1e-9)) {
            here = step, better = true;
            consider(lists.by_capacity, st, perm, m, step);
          } else {
            std::swap(perm[i], perm[j]);
          }
        }
    }
  }
  // Where no order's capacity split fits, every order of six stages with its
  // cuts placed coarsely (memory-tight clusters: gpt2 on six devices of 1-16
  // GB, whose every capacity split overfills a device of 1 GB).
  if (lists.by_capacity.empty() && S <= kEveryOrderStages && S > kCoarseRankedStages)
    for (int m : ctx.micro_batch_choices()) {
      const ReplicatedStageModel model(ctx, m);
      std::vector<int> perm = identity;
      do {
        rank_by_coarse_cuts(model, perm, st.capacity_begins(perm));
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
  return lists;
}

// `p` with its stages dealt as `o` and cut at `begins`.
Placement dealt(const Placement& p, const StagesToDeal& st, const DealtOrder& o, const std::vector<int>& begins) {
  Placement out = p;
  out.micro_batches = o.m;
  const int S = static_cast<int>(st.order.size());
  for (int k = 0; k < S; ++k) {
    const int g = st.order[k], from = st.order[o.perm[k]];
    out.group_device[g] = p.group_device[from];
    if (!p.group_replicas.empty()) out.group_replicas[g] = p.group_replicas[from];
    if (!p.group_replica_weights.empty()) out.group_replica_weights[g] = p.group_replica_weights[from];
    std::fill(out.layer_group.begin() + begins[k], out.layer_group.begin() + (k + 1 < S ? begins[k + 1] : st.L), g);
  }
  return out;
}

}  // namespace

std::vector<Placement> with_pipedream_orders(const PlannerContext& context, const Placement& p) {
  if (p.is_data_parallel() || p.num_groups() < 2) return {};
  std::vector<int> order = stage_order(p);
  const int S = static_cast<int>(order.size());
  if (order.empty() || S > num_layers(context)) return {};
  PlannerContext ctx = context;
  ctx.schedule = p.schedule;
  ctx.optimizer = p.optimizer;
  const StagesToDeal st = stages_to_deal(ctx, p, std::move(order));
  // The capacity cuts' shortlist, then the coarse cuts' orders it lacks.
  const Shortlists lists = shortlist_orders(ctx, st);
  std::vector<DealtOrder> shortlist = lists.by_capacity;
  for (const DealtOrder& o : lists.by_coarse_cuts)
    if (std::none_of(shortlist.begin(), shortlist.end(),
                     [&](const DealtOrder& s) { return same_order(st, s, o); }))
      shortlist.push_back(o);
  // p's own order and count, its cuts placed: what a new order has to beat.
  DealtOrder own{kInf, std::vector<int>(S), p.micro_batches};
  std::iota(own.perm.begin(), own.perm.end(), 0);
  const std::vector<int> first = first_layers(p);
  std::vector<int> own_begins;
  for (int g : st.order) own_begins.push_back(first[g]);
  placed_cuts(ReplicatedStageModel(ctx, own.m), ctx, st, own.perm, own_begins, own.step);
  const auto is_own = [&](const DealtOrder& o) { return same_order(st, o, own); };
  // The shortlist's first (unless it is p's own), then the best once cut-placed where it differs and beats
  // p's own.
  std::vector<Placement> out;
  const DealtOrder* best = nullptr;
  double best_step = kInf;
  std::vector<int> best_begins;
  for (const DealtOrder& o : shortlist) {
    double step = kInf;
    std::vector<int> begins =
        placed_cuts(ReplicatedStageModel(ctx, o.m), ctx, st, o.perm, st.capacity_begins(o.perm), step);
    if (&o == &shortlist.front() && !is_own(o)) out.push_back(dealt(p, st, o, begins));
    if (step < best_step) best_step = step, best = &o, best_begins = std::move(begins);
  }
  if (best && best != &shortlist.front() && best_step < own.step * (1 - 1e-9) && !is_own(*best))
    out.push_back(dealt(p, st, *best, best_begins));
  return out;
}

Result<StagePlan> pipedream_min_bottleneck(const PlannerContext& ctx, int micro_batches) {
  if (Status s = check_context(ctx); !s) return s;
  std::optional<StagePlan> best;
  double best_v = kInf;
  for (const auto& p : pipedream_by_devices(ctx, DeviceGroups(ctx), micro_batches)) {
    if (!p) continue;
    const double v = replicated_bottleneck_ms(ctx, *p);
    if (v < best_v) {
      best_v = v;
      best = p;
    }
  }
  if (!best) return nothing_fits(ctx, "pipedream");
  return *best;
}

Result<StagePlan> exhaustive_replicated_min_bottleneck(const PlannerContext& ctx, int micro_batches) {
  if (Status s = check_context(ctx); !s) return s;
  const ReplicatedStageModel model(ctx, micro_batches);
  std::optional<StagePlan> best;
  double best_v = kInf;
  for_each_replicated(num_layers(ctx), dp_devices(ctx),
                      [&](const std::vector<int>& begins, const std::vector<unsigned>& sets) {
                        StagePlan plan = plan_of(model, begins, sets);
                        const double v = replicated_bottleneck_ms(ctx, plan);
                        if (v < best_v) {
                          best_v = v;
                          best = plan;
                        }
                      });
  if (!best) return nothing_fits(ctx, "exhaustive");
  return *best;
}

namespace planner_support {

// For every micro-batch count, the DP's best plan per number of devices used,
// polished on the cost model's simulation; ranked by it; the best `verify` evaluated.
Result<Outcome> pipedream(const PlannerContext& ctx, Evaluator& ev, int verify) {
  if (Status s = check_context(ctx); !s) return s;
  PlanEstimator estimator(ctx);
  const int L = num_layers(ctx);
  std::vector<std::pair<double, Placement>> cands;
  MoveSet polish = MoveSet::shifts_and_swaps();
  polish.replicate = polish.drop_replica = true;
  const DeviceGroups groups(ctx);
  for (int m : ctx.micro_batch_choices()) {
    if (cancelled(ctx)) break;
    for (const auto& plan : pipedream_by_devices(ctx, groups, m)) {
      if (!plan) continue;
      // Polished like the DP planner's plans: boundary shifts, swaps, and a replica added or dropped.
      auto [ms, polished] = polish_by_simulation(ctx, estimator, *plan, polish, "pipedream");
      if (ms < kInf) cands.push_back({ms, planned(ctx, polished, "pipedream")});
    }
  }
  auto key = [](const std::pair<double, Placement>& c) { return c.first * (1 + 1e-4 * c.second.micro_batches); };
  std::stable_sort(cands.begin(), cands.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  Best best;
  for (int i = 0; i < static_cast<int>(cands.size()) && i < std::max(1, verify); ++i)
    best.consider(cands[i].second, ev.evaluate(cands[i].second));
  if (!best.placement) return best.none_found(ctx, "pipedream");
  return Outcome{*best.placement, best.report};
}

}  // namespace planner_support

Result<Placement> plan_pipedream(const PlannerContext& ctx, Evaluator& evaluator, int verify) {
  auto o = pipedream(ctx, evaluator, verify);
  if (!o) return o.status();
  return o->placement;
}

}  // namespace tapp
