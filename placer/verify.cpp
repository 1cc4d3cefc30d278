#include "placer/verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "core/cluster.h"
#include "placer/measurer.h"

namespace tapp {

namespace {

// Starting the workers, the rendezvous and the first step's allocations: a
// fixed cost per measured plan on this machine (a few hundred ms), rounded up.
constexpr double kStartupS = 2.0;
// Measured steps ran up to 1.6x their predictions under the default calibration
// (issue 14): the time a plan needs is estimated with this margin.
constexpr double kPredictionMargin = 2.0;

std::string seconds(double s) {
  std::ostringstream o;
  o.precision(s < 10 ? 2 : 3);
  o << s << " s";
  return o.str();
}

// Estimated seconds to measure a plan with `runs` steps (warm-up + timed).
double estimated_s(const PlanToVerify& p, int runs) {
  return kStartupS + runs * kPredictionMargin * std::max(0.0, p.predicted_ms) / 1e3;
}

double estimated_total_s(const std::vector<PlanToVerify>& plans, const std::vector<bool>& runs_here, int steps) {
  double total = 0;
  for (size_t i = 0; i < plans.size(); ++i)
    if (runs_here[i]) total += estimated_s(plans[i], steps);
  return total;
}

}  // namespace

std::string verification_state_name(VerificationState state) {
  switch (state) {
    case VerificationState::verified: return "verified";
    case VerificationState::off: return "off";
    case VerificationState::skipped: return "skipped";
  }
  return "off";
}

double PlanCheck::relative_difference() const {
  return ok() ? (measured.step_ms - predicted_ms) / measured.step_ms : 0.0;
}

bool PlanCheck::disagrees() const { return ok() && std::abs(relative_difference()) > kDisagreement; }

bool Verification::any_disagrees() const {
  return std::any_of(plans.begin(), plans.end(), [](const PlanCheck& p) { return p.disagrees(); });
}

const PlanCheck* Verification::plan(const std::string& role) const {
  for (const PlanCheck& p : plans)
    if (p.role == role) return &p;
  return nullptr;
}

std::string cannot_run_here(const Cluster& cluster) {
  Status s = measurable_here(cluster);
  return s ? "" : s.message();
}

Verification verify_plans(const LayerGraph& graph, const Cluster& cluster, int64_t batch_size,
                          const std::vector<PlanToVerify>& plans, const VerifyOptions& options,
                          const std::atomic<bool>& cancel) {
  Verification v;
  if (!options.enabled) {
    v.reason = "turned off by the request (--no-verify, options.verify = false)";
    return v;
  }
  v.state = VerificationState::skipped;
  if (std::string why = cannot_run_here(cluster); !why.empty()) {
    v.reason = why;
    return v;
  }
  if (plans.empty()) {
    v.reason = "no plan to verify";
    return v;
  }

  // Which plans run here: not those the evaluator measured, nor a second copy of the same plan.
  std::vector<bool> runs_here(plans.size(), false);
  std::vector<int> same_as(plans.size(), -1);
  for (size_t i = 0; i < plans.size(); ++i) {
    for (size_t k = 0; k < i && same_as[i] < 0; ++k)
      if (placement_key(plans[k].placement) == placement_key(plans[i].placement)) same_as[i] = static_cast<int>(k);
    runs_here[i] = same_as[i] < 0 && !(plans[i].measured && plans[i].measured->ok);
  }

  // Fit the time limit: the requested steps, else one timed step, else none.
  int warmup = std::max(0, options.warmup_steps), steps = std::max(1, options.steps);
  if (estimated_total_s(plans, runs_here, warmup + steps) > options.limit_s) steps = 1;
  const double needed_s = estimated_total_s(plans, runs_here, warmup + steps);
  if (needed_s > options.limit_s) {
    v.reason = "measuring would take about " + seconds(needed_s) + ", over the verification's limit of " +
               seconds(options.limit_s) + " (" + options.limit_why + ")";
    return v;
  }
  v.state = VerificationState::verified;
  v.warmup_steps = warmup;
  v.steps = steps;

  RunOptions run = options.run;
  run.warmup_steps = warmup;
  run.steps = steps;
  run.batch_size = batch_size;
  run.timeout_s = std::min(run.timeout_s, std::max(10.0, options.limit_s));

  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanToVerify& p = plans[i];
    PlanCheck check{p.role, p.name, p.placement, p.predicted_ms, {}, false, ""};
    if (same_as[i] >= 0) {
      check.measured = v.plans[same_as[i]].measured;
      check.by_evaluator = v.plans[same_as[i]].by_evaluator;
      check.same_plan_as = plans[same_as[i]].role;
    } else if (!runs_here[i]) {
      check.measured = *p.measured;
      check.by_evaluator = true;
    } else if (cancel) {
      check.measured = StepReport::failure(FailureKind::skipped, "the job was cancelled", "measure");
    } else if (v.state == VerificationState::skipped) {
      check.measured = StepReport::failure(FailureKind::skipped, v.reason, "measure");
    } else if (elapsed_s() + estimated_s(p, warmup + steps) > options.limit_s) {
      check.measured = StepReport::failure(
          FailureKind::skipped, "the verification's limit of " + seconds(options.limit_s) + " was reached", "measure");
    } else {
      check.measured = measure_placement(graph, cluster, p.placement, run);
      if (check.measured.failure_kind == FailureKind::worker_unreachable) {
        // The devices cannot run here: no other plan is tried.
        v.state = VerificationState::skipped;
        v.reason = "a remote tapp-worker cannot be reached: " + check.measured.message;
      }
    }
    v.plans.push_back(std::move(check));
  }
  return v;
}

}  // namespace tapp
