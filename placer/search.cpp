// placer/search.cpp — see search.h.
#include "placer/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "placer/features.h"
#include "model/layer_graph.h"
#include "core/cluster.h"
#include "planners/moves.h"

namespace tapp {

std::string placement_key(const Placement& p) {
  std::string k;
  k.reserve(p.layer_group.size() * 3 + p.group_device.size() * 3 + 8);
  for (int g : p.layer_group) k += std::to_string(g) + ',';
  k += '|';
  for (int d : p.group_device) k += std::to_string(d) + ',';
  k += '|' + std::to_string(p.micro_batches) + schedule_name(p.schedule);
  if (p.is_data_parallel())
    k += p.data_parallel == DataParallelMode::bsp ? "|dp" : "|" + data_parallel_mode_name(p.data_parallel);
  return k;
}

namespace {

// A device that cannot hold the smallest layer (the whole batch as one
// micro-batch, by core's memory rule) is masked out of the allocation.
std::vector<bool> devices_that_fit(const LayerGraph& g, const Cluster& c, int64_t batch_size) {
  const StageMemory memory(g);
  std::vector<bool> ok(c.num_devices(), false);
  for (int d = 0; d < c.num_devices(); ++d)
    for (int l = 0; l < static_cast<int>(g.layers.size()) && !ok[d]; ++l)
      ok[d] = memory.fits(c.devices[d], l, l + 1, batch_size, 1);
  return ok;
}

// Local moves around a data-parallel placement: drop a replica, add an unused
// device as one, or swap a replica for an unused device.
std::vector<Placement> replica_neighbours(const Placement& p, int num_devices) {
  std::vector<Placement> out;
  const int L = static_cast<int>(p.layer_group.size());
  std::vector<bool> used(num_devices, false);
  for (int d : p.group_device) used[d] = true;
  auto with = [&](std::vector<int> devices) {
    Placement q = Placement::replicas(L, devices, p.data_parallel);
    q.source = p.source;
    out.push_back(std::move(q));
  };
  for (size_t k = 0; k < p.group_device.size() && p.group_device.size() > 1; ++k) {
    auto fewer = p.group_device;
    fewer.erase(fewer.begin() + static_cast<long>(k));
    with(fewer);
  }
  for (int d = 0; d < num_devices; ++d) {
    if (used[d]) continue;
    auto more = p.group_device;
    more.push_back(d);
    with(more);
    for (size_t k = 0; k < p.group_device.size(); ++k) {
      auto other = p.group_device;
      other[k] = d;
      with(other);
    }
  }
  return out;
}

// Local moves around a pipeline (planners/moves.h, every move, boundary
// shifts by 1, 2, 4, ... layers up to a quarter of the model); replica moves
// around a data-parallel placement. A placement whose groups are not runs of
// consecutive layers is taken as the pipeline of its runs.
std::vector<Placement> neighbours(const Placement& p, int num_devices, const std::vector<int>& choices) {
  if (p.is_data_parallel()) return replica_neighbours(p, num_devices);
  const int L = static_cast<int>(p.layer_group.size());
  const StageMoves moves(L, num_devices, choices);
  std::vector<Placement> out;
  for (const StagePlan& n : moves.neighbours(stage_plan_of_runs(p), MoveSet::wide(L)))
    out.push_back(to_placement(n, L, p.schedule, "policy"));
  return out;
}

// Stage ends (fractions of the depth) that split the model's multiply-adds
// into `stages` equal parts.
std::vector<double> compute_balanced_cuts(const LayerGraph& g, int stages) {
  const int L = static_cast<int>(g.layers.size());
  double total = 0;
  for (const Layer& l : g.layers) total += static_cast<double>(l.macs);
  std::vector<double> cuts;
  if (stages < 2 || L < 2 || !(total > 0)) return cuts;
  double acc = 0;
  for (int i = 0; i < L && static_cast<int>(cuts.size()) < stages - 1; ++i) {
    acc += static_cast<double>(g.layers[i].macs);
    while (static_cast<int>(cuts.size()) < stages - 1 && acc >= total * (cuts.size() + 1) / stages)
      cuts.push_back(std::clamp((i + 1.0) / L, 0.02, 0.98));
  }
  while (static_cast<int>(cuts.size()) < stages - 1) cuts.push_back(0.98);
  return cuts;
}

// A restarted policy starts from another positional prior, so restarts
// explore other basins. In turn (restart 1, 2, 3, 4, then again): stages of
// equal multiply-adds (G of them, ceil(G/2) the next time round); all G
// stages ending at depths that move by the golden ratio from restart to
// restart; one stage (a single-device plan) the first time round, then a
// random number in [2, G] placed like the golden-ratio ones; the
// equal-stage prior (only the seed changes).
void vary_prior(PolicyConfig& pc, int restart, uint64_t search_seed, std::mt19937_64& rng, const LayerGraph& g) {
  const int G = pc.num_groups;
  if (G < 2 || restart % 4 == 0) return;
  const int cycle = restart / 4;  // 0, 1, 2, ...
  if (restart % 4 == 1) {
    pc.prior_groups = cycle % 2 == 0 ? G : (G + 1) / 2;
    pc.prior_cuts = compute_balanced_cuts(g, pc.prior_groups);
    return;
  }
  int stages = G;
  if (restart % 4 == 3) stages = cycle == 0 ? 1 : std::uniform_int_distribution<int>(2, G)(rng);
  // Each stage end moves by the golden ratio from restart to restart (from
  // a random start per search), so successive restarts spread it over the
  // depth instead of drawing it independently.
  std::vector<double> cuts(stages - 1);
  std::mt19937_64 start_rng(search_seed * 0x2545F4914F6CDD1DULL + 3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double phi = 0.6180339887498949;
  for (double& c : cuts) {
    double x = u(start_rng) + restart * phi;
    c = 0.02 + 0.96 * (x - std::floor(x));
  }
  std::sort(cuts.begin(), cuts.end());
  pc.prior_groups = stages;
  pc.prior_cuts = cuts;
}

}  // namespace

std::vector<int> micro_batch_choices(int64_t batch_size, int max_micro_batches) {
  std::vector<int> v;
  for (int m = 1; m <= batch_size && m <= std::max(1, max_micro_batches); m *= 2) v.push_back(m);
  return v;
}

Placement decision_to_placement(const Decision& d, const std::vector<int>& choices, Schedule schedule) {
  if (!choices.empty() && d.micro_batch_index == static_cast<int>(choices.size())) {
    // Data parallel: a replica on each device the non-empty groups got (each once, in group order).
    std::vector<bool> nonempty(d.group_device.size(), false);
    for (int g : d.layer_group) nonempty[g] = true;
    std::vector<int> devices;
    for (size_t g = 0; g < d.group_device.size(); ++g)
      if (nonempty[g] && std::find(devices.begin(), devices.end(), d.group_device[g]) == devices.end())
        devices.push_back(d.group_device[g]);
    Placement p = Placement::replicas(static_cast<int>(d.layer_group.size()), devices);
    p.schedule = schedule;
    p.source = "policy";
    return p;
  }
  Placement p;
  std::map<int, int> renumber;
  p.layer_group.resize(d.layer_group.size());
  for (size_t i = 0; i < d.layer_group.size(); ++i) {
    int g = d.layer_group[i];
    auto it = renumber.find(g);
    if (it == renumber.end()) {
      it = renumber.emplace(g, static_cast<int>(p.group_device.size())).first;
      p.group_device.push_back(d.group_device[g]);
    }
    p.layer_group[i] = it->second;
  }
  p.micro_batches = choices.empty() ? 1 : choices[std::clamp(d.micro_batch_index, 0, static_cast<int>(choices.size()) - 1)];
  p.schedule = schedule;
  p.source = "policy";
  return p;
}

Decision placement_to_decision(const Placement& p, const std::vector<int>& choices, int num_groups) {
  if (p.is_data_parallel()) {
    // One group per replica (as many as fit), layers spread evenly over them.
    const int R = std::max(1, std::min<int>(num_groups, p.num_groups()));
    const int L = static_cast<int>(p.layer_group.size());
    Decision d;
    d.group_device.assign(num_groups, p.group_device.front());
    for (int r = 0; r < R; ++r) d.group_device[r] = p.group_device[r];
    for (int i = 0; i < L; ++i) d.layer_group.push_back(std::min(R - 1, i * R / std::max(1, L)));
    d.micro_batch_index = static_cast<int>(choices.size());
    return d;
  }
  // Stages in layer order: a new stage wherever the device changes (at most
  // num_groups; the rest stay in the last one), as the contiguous policy sees it.
  Decision d;
  d.group_device.assign(num_groups, 0);
  d.layer_group.resize(p.layer_group.size());
  int stage = 0;
  for (size_t i = 0; i < p.layer_group.size(); ++i) {
    int dev = p.device_of_layer(static_cast<int>(i));
    if (i > 0 && dev != p.device_of_layer(static_cast<int>(i - 1)) && stage + 1 < num_groups) ++stage;
    d.layer_group[i] = stage;
    if (i == 0 || d.layer_group[i - 1] != stage) d.group_device[stage] = dev;
  }
  d.micro_batch_index = 0;
  for (size_t k = 0; k < choices.size(); ++k)
    if (choices[k] <= p.micro_batches) d.micro_batch_index = static_cast<int>(k);
  return d;
}

SearchResult search(const LayerGraph& graph, const Cluster& cluster, Evaluator& evaluator, const SearchOptions& opt,
                    const std::function<void(const SearchProgress&)>& progress, const std::atomic<bool>* cancel) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  auto cancelled = [&] { return cancel && cancel->load(); };

  SearchResult result;
  OpDictionary dictionary;
  FeatureMatrix features = encode_layers(graph, dictionary);
  PolicyConfig pc;
  pc.num_devices = cluster.num_devices();
  pc.num_groups = opt.num_groups > 0 ? opt.num_groups : cluster.num_devices();
  pc.num_groups = std::max(1, std::min<int>(pc.num_groups, static_cast<int>(graph.layers.size())));
  // BatchNorm in training needs more than one value per channel: a model with
  // a BatchNorm on a 1x1 feature map cannot run micro-batches of one sample.
  int64_t max_micro = opt.max_micro_batches;
  for (const Layer& l : graph.layers)
    if (l.op == "batchnorm2d" && l.output_shape.size() == 3 && l.output_shape[1] * l.output_shape[2] == 1)
      max_micro = std::min<int64_t>(max_micro, std::max<int64_t>(1, opt.batch_size / 2));
  pc.micro_batch_choices = micro_batch_choices(opt.batch_size, static_cast<int>(max_micro));
  pc.device_allowed = devices_that_fit(graph, cluster, opt.batch_size);
  pc.hidden = opt.hidden;
  pc.contiguous = opt.contiguous;
  pc.distinct_devices = opt.distinct_devices;
  pc.offer_data_parallel = opt.data_parallel && cluster.num_devices() > 1;
  pc.learning_rate = opt.learning_rate;
  pc.seed = opt.seed;
  const auto consumers = graph.consumers();
  auto policy = std::make_unique<Policy>(features, consumers, pc);
  if (opt.warm_start) policy->imitate(placement_to_decision(*opt.warm_start, pc.micro_batch_choices, pc.num_groups), 60);
  int restarts = 0, last_restart = 0;
  double reference_ms = opt.reference_step_ms;

  std::mt19937_64 rng(opt.seed);
  std::map<std::string, StepReport> seen;
  std::optional<Reinforce> reinforce;
  const int total = std::max(1, opt.iterations);
  const int patience = opt.patience > 0 ? opt.patience : std::max(100, total / 2);
  int last_improvement = 0;
  // The current policy's own best since its (re)start: a restarted policy is
  // judged by its own progress, not by whether it already beats the best of
  // the policies before it.
  double own_best_ms = std::numeric_limits<double>::infinity();
  int own_last_improvement = 0;
  result.stop_reason = "iterations";

  std::optional<std::pair<Placement, double>> best_pipeline;  // the best valid non-replicated plan and its step
  // Evaluates a decision once (memoised) and keeps the best valid placement.
  auto evaluate_placement = [&](const Placement& p, int it) -> const StepReport& {
    const std::string key = placement_key(p);
    auto hit = seen.find(key);
    if (hit != seen.end()) return hit->second;
    StepReport r;
    if (Status st = validate_placement(p, graph, cluster, opt.batch_size); !st)
      r = StepReport::failure(FailureKind::invalid_placement, st.message(), evaluator.name());
    else if (Status mem = check_memory(p, graph, cluster, opt.batch_size); !mem)
      r = StepReport::failure(FailureKind::out_of_memory, mem.message(), evaluator.name());
    else
      r = evaluator.evaluate(p);
    r.timeline.clear();  // the caller re-evaluates the best with its timeline
    hit = seen.emplace(key, std::move(r)).first;
    ++result.evaluations;
    if (!hit->second.ok) ++result.failures;
    if (hit->second.ok && !p.is_data_parallel() && (!best_pipeline || hit->second.step_ms < best_pipeline->second))
      best_pipeline.emplace(p, hit->second.step_ms);
    if (hit->second.ok && (!result.found || hit->second.step_ms < result.best_report.step_ms)) {
      result.found = true;
      result.best = p;
      result.best_report = hit->second;
      last_improvement = it;
      result.trace.push_back({it, result.evaluations, elapsed(), hit->second.step_ms});
    }
    return hit->second;
  };
  auto evaluate_decision = [&](const Decision& d, int it) -> const StepReport& {
    return evaluate_placement(decision_to_placement(d, pc.micro_batch_choices, opt.schedule), it);
  };

  // Propose, evaluate, update, keep the best, stop early.
  for (int it = 1; it <= total; ++it) {
    std::vector<Decision> decisions;
    std::vector<StepReport> reports;
    for (int s = 0; s < std::max(1, opt.samples_per_iteration) && !cancelled(); ++s) {
      Decision d = policy->sample(rng);
      const StepReport& r = evaluate_decision(d, it);
      decisions.push_back(std::move(d));
      reports.push_back(r);
    }
    if (cancelled()) {
      result.cancelled = true;
      result.stop_reason = "cancelled";
      result.iterations = it - 1;
      break;
    }
    for (const auto& r : reports)
      if (r.ok && r.step_ms < own_best_ms) own_best_ms = r.step_ms, own_last_improvement = it;
    if (!reinforce) {
      if (!(reference_ms > 0))
        for (const auto& r : reports)
          if (r.ok && (!(reference_ms > 0) || r.step_ms < reference_ms)) reference_ms = r.step_ms;
      reinforce.emplace(*policy, opt.reinforce, reference_ms > 0 ? reference_ms : 1.0);
    }
    double frac = static_cast<double>(it) / total;
    if (opt.time_budget_s > 0) frac = std::max(frac, elapsed() / opt.time_budget_s);
    reinforce->step(decisions, reports, frac);
    result.iterations = it;
    double mean_reward = 0;
    for (const auto& r : reports) mean_reward += reinforce->reward(r);
    mean_reward /= std::max<size_t>(1, reports.size());
    if (progress)
      progress({it, total, result.found ? result.best_report.step_ms : 0.0, mean_reward, elapsed()});
    if (opt.time_budget_s > 0 && elapsed() >= opt.time_budget_s) {
      result.stop_reason = "time_budget";
      break;
    }
    // Restart: a policy that has not improved its own best for
    // `restart_after` iterations has converged; keep the best and start a
    // fresh policy (another seed and prior) to escape the local optimum.
    if (opt.restart_after > 0 && restarts < opt.max_restarts &&
        (it - std::max(own_last_improvement, last_restart) >= opt.restart_after ||
         it - std::max(last_improvement, last_restart) >= 2 * opt.restart_after)) {
      evaluate_decision(policy->greedy(), it);
      ++restarts;
      last_restart = it;
      own_best_ms = std::numeric_limits<double>::infinity();
      PolicyConfig next = pc;
      next.seed = pc.seed + 7919ULL * restarts;
      // Data-parallel plans are few (a set of devices) and the first policy
      // has weighed them; restarted policies search the pipelines, so a
      // replicated plan found early cannot hold every restart in its basin.
      next.offer_data_parallel = false;
      if (opt.vary_prior_on_restart) vary_prior(next, restarts, pc.seed, rng, graph);
      reinforce.reset();
      policy = std::make_unique<Policy>(features, consumers, next);
      continue;
    }
    if (it - std::max(last_improvement, last_restart) >= patience &&
        (opt.restart_after <= 0 || restarts >= opt.max_restarts)) {
      result.stop_reason = "patience";
      break;
    }
  }
  result.restarts = restarts;
  // The policy's most probable placement, once it has learned.
  if (!result.cancelled && !cancelled()) evaluate_decision(policy->greedy(), result.iterations);
  result.policy_found = result.found;
  result.policy_best = result.best;
  result.policy_best_report = result.best_report;
  result.policy_evaluations = result.evaluations;
  result.policy_elapsed_s = elapsed();

  // Optional refinement of the policy's best by local search through the same
  // evaluator (reported apart): hill-climb by first improvement over the
  // neighbours in random order; at a local optimum, kick the best found so
  // far by two random moves and climb again, until the budget is spent.
  if (opt.refine_budget > 0 && result.found && !cancelled()) {
    const int64_t stop_at = result.evaluations + opt.refine_budget;
    std::mt19937_64 refine_rng(opt.seed * 0x9E3779B97F4A7C15ULL + 101);
    int64_t attempts = 0;  // memoised repeats cost no evaluation: bound the loop anyway
    auto spent = [&] { return result.evaluations >= stop_at || ++attempts > 20LL * opt.refine_budget || cancelled(); };
    auto moves = [&](const Placement& p) {
      auto nb = neighbours(p, cluster.num_devices(), pc.micro_batch_choices);
      std::shuffle(nb.begin(), nb.end(), refine_rng);
      return nb;
    };
    auto climb = [&](Placement current, double current_ms) {
      for (bool improved = true; improved;) {
        improved = false;
        for (const Placement& q : moves(current)) {
          if (spent()) return;
          const StepReport& r = evaluate_placement(q, result.iterations);
          if (r.ok && r.step_ms < current_ms) {
            current = q, current_ms = r.step_ms, improved = true;
            break;
          }
        }
      }
    };
    // A data-parallel best is climbed among replica sets (few moves); the
    // budget then goes to the pipelines, from the best one.
    if (result.best.is_data_parallel()) climb(result.best, result.best_report.step_ms);
    if (best_pipeline) climb(best_pipeline->first, best_pipeline->second);
    while (!spent()) {
      Placement kick = best_pipeline ? best_pipeline->first : result.best;
      for (int k = 0; k < 2; ++k) {
        auto nb = moves(kick);
        if (!nb.empty()) kick = nb.front();
      }
      const StepReport& r = evaluate_placement(kick, result.iterations);
      if (r.ok) climb(kick, r.step_ms);
    }
    if (result.best_report.step_ms < result.policy_best_report.step_ms) result.best.source = "policy+refine";
  }
  result.elapsed_s = elapsed();
  return result;
}

}  // namespace tapp
