// placer/measurer.cpp — see measurer.h.
#include "placer/measurer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/allreduce_ring.h"
#include "core/cluster.h"
#include "core/memory_fit.h"
#include "model/layer_graph.h"

namespace tapp {

std::string placement_key(const Placement& p) {
  std::string k;
  k.reserve(p.layer_group.size() * 3 + p.group_device.size() * 3 + 8);
  for (int g : p.layer_group) k += std::to_string(g) + ',';
  k += '|';
  for (int d : p.group_device) k += std::to_string(d) + ',';
  k += '|' + std::to_string(p.micro_batches) + schedule_name(p.schedule);
  if (p.has_replicated_groups()) {
    k += "|r";
    for (const auto& r : p.group_replicas) {
      for (int d : r) k += std::to_string(d) + ',';
      k += ';';
    }
    if (p.aggregation_every != 1) k += "|a" + std::to_string(p.aggregation_every);
    for (int g = 0; g < p.num_groups(); ++g) {
      if (!p.has_replica_weights(g)) continue;
      k += "|w" + std::to_string(g) + ':';
      for (int w : p.group_replica_weights[g]) k += std::to_string(w) + ',';
    }
  }
  for (int g = 0; g < p.num_groups(); ++g)
    if (p.recomputes(g)) k += "|r" + std::to_string(g);
  if (p.optimizer != Optimizer::sgd) k += "|" + optimizer_name(p.optimizer);
  if (p.is_data_parallel())
    k += p.data_parallel == DataParallelMode::bsp ? "|dp" : "|" + data_parallel_mode_name(p.data_parallel);
  return k;
}

Measurer::Measurer(const LayerGraph& graph, const Cluster& cluster, Evaluator& evaluator, int64_t batch_size,
                   Optimizer optimizer)
    : graph_(graph),
      cluster_(cluster),
      evaluator_(evaluator),
      batch_size_(batch_size),
      optimizer_(optimizer),
      mover_(graph, cluster, batch_size) {}

double Measurer::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Measurer::keyed(Placement& p) const {
  p.optimizer = optimizer_;
  return placement_key(p);
}

const StepReport& Measurer::measure(const Placement& given, int iteration) {
  Placement p = given;
  const std::string key = keyed(p);
  if (auto hit = memo_.find(key); hit != memo_.end()) return hit->second.report;
  moving_ = false;
  StepReport r = check_and_evaluate(p);
  moved_ += moving_;
  r.timeline.clear();  // the caller re-evaluates the best with its timeline
  const Scored& stored = memo_.emplace(key, Scored{std::move(r), std::move(p)}).first->second;
  ++evaluations_;
  if (!stored.report.ok) ++failures_;
  keep_if_best(stored.placement, stored.report, iteration);
  return stored.report;
}

Placement Measurer::as_evaluated(const Placement& p) const {
  Placement q = p;
  const auto hit = memo_.find(keyed(q));
  return hit == memo_.end() ? p : hit->second.placement;
}

bool weigh_replicas(Placement& p, const std::vector<double>& device_sample_ms) {
  if (!p.has_replicated_groups() || p.is_data_parallel()) return false;
  bool weighed = false;
  for (int g = 0; g < p.num_groups(); ++g) {
    const int r = p.replica_count(g);
    if (r < 2 || p.has_replica_weights(g) || p.micro_batches < r) continue;
    std::vector<double> ms;
    for (int d : p.devices_of_group(g)) {
      if (d < 0 || d >= static_cast<int>(device_sample_ms.size()) || !(device_sample_ms[d] > 0)) return weighed;
      ms.push_back(device_sample_ms[d]);
    }
    // Equally fast replicas keep round-robin (their counts differ by one at most anyway).
    if (std::all_of(ms.begin(), ms.end(), [&](double x) { return std::abs(x - ms[0]) <= 1e-9 * ms[0]; })) continue;
    std::vector<int> counts = micro_batches_by_speed(p.micro_batches, ms);
    if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; })) continue;
    // Counts above the largest weight a placement takes: scaled down, at least 1 each.
    const int most = *std::max_element(counts.begin(), counts.end());
    if (most > kMaxReplicaWeight)
      for (int& c : counts)
        c = std::max(1, static_cast<int>(std::lround(static_cast<double>(c) * kMaxReplicaWeight / most)));
    if (p.group_replica_weights.empty()) p.group_replica_weights.assign(p.num_groups(), {});
    p.group_replica_weights[g] = counts;
    weighed = true;
  }
  return weighed;
}

namespace {

// The group's parameter bytes: what its replicas all-reduce.
int64_t group_param_bytes(const Placement& p, const LayerGraph& graph, int g) {
  int64_t bytes = 0;
  for (size_t i = 0; i < p.layer_group.size(); ++i)
    if (p.layer_group[i] == g) bytes += graph.layers[i].param_bytes();
  return bytes;
}

// The rotation of `ring` whose first `extra` devices are fastest together (`faster`: higher is faster).
std::vector<int> turned_fastest_first(std::vector<int> ring, int extra, const std::vector<double>& faster) {
  const int r = static_cast<int>(ring.size());
  int best_start = 0;
  double best_speed = -1;
  for (int s = 0; s < r; ++s) {
    double speed = 0;
    for (int k = 0; k < extra; ++k) speed += faster[ring[(s + k) % r]];
    if (speed > best_speed) best_start = s, best_speed = speed;
  }
  std::rotate(ring.begin(), ring.begin() + best_start, ring.end());
  return ring;
}

// The report of whichever of `p` (scored `mine`) and `other` (scored
// `theirs`) ran faster, `p` on a tie; `p` becomes it.
StepReport keep_faster(Placement& p, StepReport mine, Placement other, StepReport theirs) {
  if (!runs_faster(theirs, mine)) return mine;
  p = std::move(other);
  return theirs;
}

}  // namespace

std::optional<Placement> with_other_schedule(const Placement& p) {
  if (p.is_data_parallel() || (p.schedule != Schedule::gpipe && p.schedule != Schedule::one_f_one_b))
    return {};
  Placement q = p;
  q.schedule = p.schedule == Schedule::gpipe ? Schedule::one_f_one_b : Schedule::gpipe;
  q.group_recompute.clear();
  return q;
}

bool has_replica_rings(const Placement& p) {
  return p.data_parallel == DataParallelMode::bsp || (p.has_replicated_groups() && !p.is_data_parallel());
}

bool order_replica_rings(Placement& p, const LayerGraph& graph, const Cluster& cluster,
                         const std::vector<double>& device_sample_ms) {
  if (!has_replica_rings(p)) return false;
  if (p.data_parallel == DataParallelMode::bsp) {  // equal shares: only the ring's order counts
    std::vector<int> ring = cheapest_ring(cluster, p.group_device, group_param_bytes(p, graph, 0));
    if (ring == p.group_device) return false;
    p.group_device = std::move(ring);
    return true;
  }
  std::vector<double> faster(cluster.num_devices());  // higher is faster
  for (int d = 0; d < cluster.num_devices(); ++d) {
    const bool timed = d < static_cast<int>(device_sample_ms.size()) && device_sample_ms[d] > 0;
    faster[d] = timed ? 1.0 / device_sample_ms[d] : cluster.devices[d].speed;
  }
  bool changed = false;
  for (int g = 0; g < p.num_groups(); ++g) {
    const int r = p.replica_count(g);
    if (r < 3) continue;
    const std::vector<int> given = p.devices_of_group(g);
    const int64_t bytes = group_param_bytes(p, graph, g);
    std::vector<int> ring = cheapest_ring(cluster, given, bytes);
    if (ring == given) continue;
    const int extra = p.micro_batches % r == 0 ? 1 : p.micro_batches % r;
    ring = turned_fastest_first(std::move(ring), extra, faster);
    if (p.has_replica_weights(g)) {
      const std::vector<int>& was = p.group_replica_weights[g];
      std::vector<int> weights;
      for (int d : ring) weights.push_back(was[std::find(given.begin(), given.end(), d) - given.begin()]);
      p.group_replica_weights[g] = std::move(weights);
    }
    p.group_device[g] = ring[0];
    p.group_replicas[g].assign(ring.begin() + 1, ring.end());
    changed = true;
  }
  return changed;
}

StepReport Measurer::check_and_evaluate(Placement& p) {
  if (Status st = validate_placement(p, graph_, cluster_, batch_size_); !st)
    return StepReport::failure(FailureKind::invalid_placement, st.message(), evaluator_.name());
  // Both synchronous schedules, the faster kept: the same gradients, another
  // order of the micro-batches. 1F1B keeps as many in flight as stages, not
  // all of them, so a GPipe plan that recomputes to fit may not need to there
  // (gpt2 on two 4 GB devices: 0.75x the step), and a slow stage's backward
  // overlaps the next forward. The planner rows plan for both too (placer/baselines.h).
  if (std::optional<Placement> other = with_other_schedule(p)) {
    StepReport mine = rings_and_evaluate(p);
    StepReport theirs = rings_and_evaluate(*other);
    return keep_faster(p, std::move(mine), std::move(*other), std::move(theirs));
  }
  return rings_and_evaluate(p);
}

StepReport Measurer::rings_and_evaluate(Placement& p) {
  // The policy offers replicas in index order; on links of different speeds
  // the ring all-reduce's order matters (six devices of a random cluster:
  // 187.4 ms in index order, 131.1 ms in PipeDream's and on the cheapest
  // ring), so that order is scored too and the faster kept.
  if (has_replica_rings(p)) {
    Placement ringed = p;
    if (order_replica_rings(ringed, graph_, cluster_, device_sample_ms_)) {
      StepReport given = split_and_evaluate(p);
      StepReport on_ring = split_and_evaluate(ringed);
      return keep_faster(p, std::move(given), std::move(ringed), std::move(on_ring));
    }
  }
  return split_and_evaluate(p);
}

StepReport Measurer::split_and_evaluate(Placement& p) {
  // Replicas of different speeds may take micro-batches in proportion, where
  // that still fits; the even split is scored too and the faster kept, as
  // speed alone misleads where a fast replica's link is slow (alexnet on a
  // random six-device cluster: pipedream's plan 1,474 ms weighed, 1,358 ms
  // round-robin, so the search could not reach the plan it imitated).
  if (!device_sample_ms_.empty() && p.has_replicated_groups() && !p.is_data_parallel()) {
    Placement weighed = p;
    if (weigh_replicas(weighed, device_sample_ms_) && recompute_where_needed(weighed, graph_, cluster_, batch_size_)) {
      StepReport by_speed = evaluator_.evaluate(weighed);
      StepReport even = fit_and_evaluate(p);
      return keep_faster(p, std::move(even), std::move(weighed), std::move(by_speed));
    }
  }
  return fit_and_evaluate(p);
}

StepReport Measurer::fit_and_evaluate(Placement& p) {
  // As the planners do (planners/planner_support.h): the stages of a device
  // that does not fit recompute their activations, where that makes it fit.
  // Without it no proposal of a model like gpt2 at batch 32 on 4 GB devices
  // fits, while every classical plan does by recomputing. (Only on a valid
  // placement: the memory estimate indexes its devices.) Where recomputing
  // is not enough, layers move off the devices it overfills (gpt2_medium's
  // proposals on an 8 GB server beside 1 GB edge devices: every group on the
  // server). Its answer is check_memory's, so the rule runs a second time
  // only to word a failure.
  bool fits = p.is_data_parallel() ? check_memory(p, graph_, cluster_, batch_size_).is_ok()
                                   : recompute_where_needed(p, graph_, cluster_, batch_size_);
  if (!fits && mover_.fit(p)) fits = moving_ = true;  // (it leaves data-parallel plans alone)
  if (!fits)
    return StepReport::failure(FailureKind::out_of_memory, check_memory(p, graph_, cluster_, batch_size_).message(),
                               evaluator_.name());
  return evaluator_.evaluate(p);
}

void Measurer::keep_if_best(const Placement& p, const StepReport& r, int iteration) {
  if (!r.ok) return;
  if (!p.is_data_parallel() && (!best_pipeline_ || r.step_ms < best_pipeline_->second)) best_pipeline_.emplace(p, r.step_ms);
  if (best_ && r.step_ms >= best_->second.step_ms) return;
  best_.emplace(p, r);
  last_improvement_ = iteration;
  trace_.push_back({iteration, evaluations_, elapsed_s(), r.step_ms});
}

}  // namespace tapp
