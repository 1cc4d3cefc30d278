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
#include "simulator/simulator_evaluator.h"

namespace tapp {
namespace {

// The best of the single-device plan and the DP planner's: the problem's reward scale.
double reference_ms(TrainProblem& p, Evaluator& evaluator, const TrainPolicyOptions& o) {
  BaselineOptions bo;
  bo.batch_size = o.batch_size;
  bo.seed = o.seed;
  bo.planners = {"single", "dp"};
  double best = std::numeric_limits<double>::infinity();
  for (const BaselineResult& b : run_baselines(p.graph, p.cluster, p.cost, evaluator, bo))
    if (b.placement && b.report.ok) best = std::min(best, b.report.step_ms);
  return std::isfinite(best) ? best : 0.0;
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
        measurer(p.graph, p.cluster, evaluator, o.batch_size, Optimizer::sgd),
        features(encode_layers(p.graph, dictionary)),
        rng(seed) {
    SearchOptions so;
    so.batch_size = o.batch_size;
    so.seed = seed;
    so.hidden = policy_hidden_width(*networks);
    so.learning_rate = o.learning_rate;
    config = search_policy_config(p.graph, p.cluster, so);
    policy = std::make_unique<Policy>(features, p.graph.consumers(), config, networks);
    reference = reference_ms(p, evaluator, o);
    learner.emplace(*policy, training_reinforce(), reference > 0 ? reference : 1.0);
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
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  TrainPolicyResult result;
  result.networks = new_policy_networks(o.hidden, o.learning_rate, o.seed);
  std::vector<std::unique_ptr<ProblemState>> states;
  for (size_t i = 0; i < problems.size(); ++i)
    states.push_back(std::make_unique<ProblemState>(problems[i], o, result.networks, o.seed + 1000003ULL * (i + 1)));

  auto checkpoint = [&](int it) -> Status {
    if (o.out.empty()) return Status::ok();
    nlohmann::json meta = o.trained_on;
    meta["iterations"] = it;
    return save_policy_networks(*result.networks, o.out, meta);
  };

  std::mt19937_64 order_rng(o.seed);
  std::vector<size_t> order(states.size());
  std::iota(order.begin(), order.end(), 0);
  const int total = o.iterations > 0 ? o.iterations : std::numeric_limits<int>::max();
  int it = 0;
  while (it < total) {
    if (it % static_cast<int>(order.size()) == 0) std::shuffle(order.begin(), order.end(), order_rng);
    ProblemState& s = *states[order[it % order.size()]];
    ++it;
    std::vector<Decision> decisions;
    std::vector<StepReport> reports;
    for (int k = 0; k < std::max(1, o.samples_per_iteration); ++k) {
      decisions.push_back(s.policy->sample(s.rng));
      reports.push_back(
          s.measurer.measure(decision_to_placement(decisions.back(), s.config.micro_batch_choices, Schedule::gpipe), it));
    }
    const double frac = o.iterations > 0 ? static_cast<double>(it) / o.iterations : elapsed() / o.time_budget_s;
    s.learner->step(decisions, reports, std::min(1.0, frac));
    if (progress) progress({it, o.iterations, elapsed(), o.time_budget_s, s.problem.name, gap_of(s)});
    if (o.checkpoint_every > 0 && it % o.checkpoint_every == 0)
      if (Status st = checkpoint(it); !st.ok()) return st;
    if (cancel && cancel->load()) {
      result.cancelled = true;
      break;
    }
    if (o.time_budget_s > 0 && elapsed() >= o.time_budget_s) break;
  }
  result.iterations = it;
  result.elapsed_s = elapsed();
  for (const auto& s : states)
    result.problems.push_back({s->problem.name, s->reference,
                               s->measurer.found() ? s->measurer.best_report().step_ms : 0.0,
                               s->measurer.evaluations()});
  if (Status st = checkpoint(it); !st.ok()) return st;
  return result;
}

}  // namespace tapp
