// placer/train_policy.cpp — see train_policy.h.
#include "placer/train_policy.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <optional>
#include <random>

#include "placer/baselines.h"
#include "placer/measurer.h"
#include "placer/reinforce.h"
#include "placer/search.h"
#include "profiler/compute_threads.h"
#include "simulator/simulator_evaluator.h"

namespace tapp {
namespace {

// The classical plans a problem starts from: its reward scale and its first
// expert. Search planners (random, annealing) are left out: they cost the
// policy's budget again and find nothing these do not on the training problems.
const std::vector<std::string>& expert_planners() {
  static const std::vector<std::string> names = {"single", "bsp", "time", "dp", "pipedream", "pipelearn"};
  return names;
}

// A trained policy must stay stochastic: a job fine-tunes it by sampling, and
// one annealed to near-certainty (a search's 0.002) stops exploring where it was wrong.
ReinforceConfig training_reinforce() {
  ReinforceConfig c;
  c.entropy_coef_final = 0.02;
  return c;
}

// One problem's view of the shared networks, its measurer and its learner.
struct ProblemState {
  ProblemState(TrainProblem& p, const TrainPolicyOptions& o, const std::shared_ptr<PolicyNetworks>& networks,
               uint64_t seed)
      : problem(p),
        evaluator(p.graph, p.cluster, p.cost, o.batch_size),
        // Replicas share micro-batches round-robin here, not by speed as in a
        // job: timed as a job times them, the held-out plans came out worse
        // (docs/transfer.md, 2026-11-29 14:33).
        measurer(p.graph, p.cluster, evaluator, o.batch_size, Optimizer::sgd),
        features(encode_layers(p.graph, dictionary)),
        rng(seed) {
    SearchOptions so;
    so.batch_size = o.batch_size;
    so.seed = seed;
    so.hidden = policy_hidden_width(*networks);
    so.learning_rate = o.learning_rate;
    so.initial_policy = networks;  // the config `optimize --policy` starts trained networks with
    so.layer_ms = layer_compute_ms(p.graph, p.cluster, p.cost, o.batch_size);
    // Training draws no spreads: its decisions become placements without a
    // search (to_placement below), and the head keeps its initial odds in the file.
    so.spread_branches = false;
    config = search_policy_config(p.graph, p.cluster, so);
    policy = std::make_unique<Policy>(features, p.graph.consumers(), config, networks);
    seed_expert(o);
    learner.emplace(*policy, training_reinforce(), reference > 0 ? reference : 1.0);
  }

  // Runs the classical planners: the fastest plan is the reward scale (-1 is
  // as fast as it) and, as the Decision the policy would draw for it, scored
  // as the policy's proposal would be, the first expert.
  void seed_expert(const TrainPolicyOptions& o) {
    BaselineOptions bo;
    bo.batch_size = o.batch_size;
    bo.seed = o.seed;
    bo.planners = expert_planners();
    double best = std::numeric_limits<double>::infinity();
    for (const BaselineResult& b : run_baselines(problem.graph, problem.cluster, problem.cost, evaluator, bo)) {
      if (!b.placement || !b.report.ok) continue;
      best = std::min(best, b.report.step_ms);
      Decision d = placement_to_decision(*b.placement, config.micro_batch_choices, config.num_groups);
      if (!policy->allows(d)) continue;
      offer_expert(d, measurer.measure(to_placement(d), 0));
    }
    reference = std::isfinite(best) ? best : 0.0;
  }

  // Self-imitation: the fastest valid plan known (classical or sampled) is
  // the expert, in the policy's canonical form (Policy::canonical: the same
  // placement up to interchangeable devices, however its devices were numbered).
  void offer_expert(const Decision& d, const StepReport& r) {
    if (!r.ok || !(r.step_ms > 0) || (expert && r.step_ms >= expert_ms)) return;
    expert = policy->canonical(d);
    expert_ms = r.step_ms;
  }

  Placement to_placement(const Decision& d) const {
    return decision_to_placement(d, config.micro_batch_choices, Schedule::gpipe);
  }

  // The zero-shot plan's step, picked as `optimize --policy` picks it (the
  // fastest of zero_shot_candidates); 0 where none is valid.
  double zero_shot_ms(int64_t batch_size, int it) {
    double best = 0;
    for (const ZeroShotCandidate& c :
         zero_shot_candidates(*policy, problem.graph, problem.cluster, &problem.cost, batch_size, Schedule::gpipe)) {
      const StepReport& r = measurer.measure(c.placement, it);
      if (r.ok && (best == 0 || r.step_ms < best)) best = r.step_ms;
    }
    return best;
  }

  TrainProblem& problem;
  SimulatorEvaluator evaluator;
  Measurer measurer;
  OpDictionary dictionary;
  FeatureMatrix features;
  PolicyConfig config;
  std::unique_ptr<Policy> policy;
  std::optional<Reinforce> learner;
  std::mt19937_64 rng;
  double reference = 0;
  std::optional<Decision> expert;
  double expert_ms = 0;
};

double gap_of(const ProblemState& s) {
  if (!s.measurer.found() || !(s.reference > 0)) return 0;
  return s.measurer.best_report().step_ms / s.reference - 1.0;
}

}  // namespace

Result<TrainPolicyResult> train_policy(std::vector<TrainProblem>& problems, const TrainPolicyOptions& o,
                                       const std::function<void(const TrainProgress&)>& progress,
                                       const std::atomic<bool>* cancel) {
  if (problems.empty()) return Status::error("no training problems: name at least one model and one cluster");
  if (o.iterations <= 0 && !(o.time_budget_s > 0))
    return Status::error("iterations: give --iterations or --time-budget (both are zero)");
  ScopedComputeThreads one_thread(1);  // as the search (search.cpp): small networks, no spinning pool
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  // Reports a phase before the iterations (the planners, the cloning epochs): iteration 0.
  auto report_setup = [&](TrainProgress p) {
    if (!progress) return;
    p.total_iterations = o.iterations;
    p.elapsed_s = elapsed();
    p.time_budget_s = o.time_budget_s;
    progress(p);
  };

  TrainPolicyResult result;
  result.networks = new_policy_networks(o.hidden, o.learning_rate, o.seed);
  std::vector<std::unique_ptr<ProblemState>> states;
  for (size_t i = 0; i < problems.size(); ++i) {
    states.push_back(std::make_unique<ProblemState>(problems[i], o, result.networks, o.seed + 1000003ULL * (i + 1)));
    TrainProgress planned;
    planned.problem = problems[i].name;
    planned.gap = gap_of(*states.back());
    planned.planned = static_cast<int>(i + 1);
    planned.problems = static_cast<int>(problems.size());
    report_setup(planned);
    if (cancel && cancel->load()) return Status::error("cancelled while running the classical planners");
  }

  auto checkpoint = [&](int it) -> Status {
    if (o.out.empty()) return Status::ok();
    nlohmann::json meta = o.trained_on;
    meta["iterations"] = it;
    return save_policy_networks(*result.networks, o.out, meta);
  };

  std::mt19937_64 order_rng(o.seed);
  std::vector<size_t> order(states.size());
  std::iota(order.begin(), order.end(), 0);
  // Behaviour cloning first: supervised epochs over the classical experts.
  for (int e = 1; e <= o.cloning_epochs; ++e) {
    std::shuffle(order.begin(), order.end(), order_rng);
    for (size_t i : order)
      if (states[i]->expert) states[i]->policy->imitate(*states[i]->expert, 1);
    TrainProgress cloned;
    cloned.cloning_epoch = e;
    cloned.cloning_epochs = o.cloning_epochs;
    report_setup(cloned);
    if (cancel && cancel->load()) break;
  }
  const int total = o.iterations > 0 ? o.iterations : std::numeric_limits<int>::max();
  int it = 0;
  while (it < total && !(cancel && cancel->load())) {
    if (it % static_cast<int>(order.size()) == 0) std::shuffle(order.begin(), order.end(), order_rng);
    ProblemState& s = *states[order[it % order.size()]];
    ++it;
    const std::vector<Decision> decisions = s.policy->sample(std::max(1, o.samples_per_iteration), s.rng);
    std::vector<StepReport> reports;
    for (const Decision& d : decisions) {
      reports.push_back(s.measurer.measure(s.to_placement(d), it));
      s.offer_expert(d, reports.back());
    }
    const double frac = o.iterations > 0 ? static_cast<double>(it) / o.iterations : elapsed() / o.time_budget_s;
    s.learner->step(decisions, reports, std::min(1.0, frac));
    if (s.expert && o.imitation_steps > 0) s.policy->imitate(*s.expert, o.imitation_steps);
    if (progress) progress({it, o.iterations, elapsed(), o.time_budget_s, s.problem.name, gap_of(s)});
    if (o.checkpoint_every > 0 && it % o.checkpoint_every == 0)
      if (Status st = checkpoint(it); !st) return st;
    if (o.time_budget_s > 0 && elapsed() >= o.time_budget_s) break;
  }
  result.iterations = it;
  result.elapsed_s = elapsed();
  result.cancelled = cancel && cancel->load();
  for (const auto& s : states)
    result.problems.push_back({s->problem.name, s->reference,
                               s->measurer.found() ? s->measurer.best_report().step_ms : 0.0,
                               s->zero_shot_ms(o.batch_size, it), s->measurer.evaluations()});
  if (Status st = checkpoint(it); !st) return st;
  return result;
}

}  // namespace tapp
