// placer/verify.h — measured is what counts: the job's best plan and the best baseline, run on the workers.
//
// Owns `verify_plans`: each plan to verify (the job's best, the best classical
// baseline) comes with its prediction; it is measured on the runtime
// (runtime/runtime.h measure_placement: warm-up steps, then the median of the
// timed steps) unless the job's evaluator measured it already, and a plan that
// is both the best and the best baseline runs once. Each pair (predicted,
// measured) gives the relative difference (measured - predicted) / measured; a
// plan *disagrees* when its absolute value is over kDisagreement (10%).
// Bounds: the whole verification has a time limit (from the job's time
// budget); when the predicted steps do not fit it, fewer timed steps are run,
// and none (skipped, with the reason) when even one would not fit.
// Devices that cannot run here skip the verification with the reason: a
// device faster than this host (speed > 1 cannot be emulated) up front, a
// remote tapp-worker the runtime cannot reach (worker_unreachable) when it
// tries. Any other failed measurement (a worker died, out of memory, a
// timeout) is data: that plan keeps its prediction and says why (kind +
// message); nothing here fails the job.
// Data flow: PlanToVerify (placement, predicted) -> measure_placement -> PlanCheck.
// Thread safety: one call at a time per process (local workers are reaped by pid).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "core/placement.h"
#include "core/step_report.h"
#include "runtime/runtime.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

inline constexpr double kDisagreement = 0.10;  // |measured - predicted| / measured above this: flagged

enum class VerificationState {
  verified,  // measured (each plan ok or with its failure)
  off,       // turned off by the request (--no-verify, options.verify = false)
  skipped,   // the devices cannot run here, or the time limit is too short: `reason` says which
};
std::string verification_state_name(VerificationState state);  // "verified" | "off" | "skipped"

struct PlanToVerify {
  std::string role;  // "best" | "best_baseline"
  std::string name;  // where the plan came from ("policy+refine", "dp", ...)
  Placement placement;
  double predicted_ms = 0;
  std::optional<StepReport> measured;  // when the job's evaluator measured it already
};

struct PlanCheck {
  std::string role, name;
  Placement placement;
  double predicted_ms = 0;
  StepReport measured;          // ok, or the failure (kind + message); the prediction stands
  bool by_evaluator = false;    // measured by the job's evaluator, not again here
  std::string same_plan_as;     // the role whose measurement this plan shares ("" = its own)

  bool ok() const { return measured.ok && measured.step_ms > 0; }
  // (measured - predicted) / measured; 0 unless ok.
  double relative_difference() const;
  bool disagrees() const;
};

struct VerifyOptions {
  bool enabled = true;
  int warmup_steps = kWarmupSteps;
  int steps = 3;          // timed steps per plan (median); fewer when the time limit needs it
  double limit_s = 120;   // the whole verification
  std::string limit_why = "the default";  // where limit_s comes from, for the reason a skip gives
  // How the workers run: worker binary, seed, learning rate, and (tests) fault
  // injection; steps, warm-up and batch size are set from the above. Its
  // timeout_s (no worker progress for this long) is an upper bound.
  RunOptions run;
};

struct Verification {
  VerificationState state = VerificationState::off;
  std::string reason;  // off or skipped: why
  int warmup_steps = 0, steps = 0;
  std::vector<PlanCheck> plans;

  bool any_disagrees() const;
  const PlanCheck* plan(const std::string& role) const;  // nullptr when absent
};

// Why `cluster`'s devices cannot run here, "" when they can (as far as can be
// told without starting workers: remote workers are tried by the runtime).
std::string cannot_run_here(const Cluster& cluster);

Verification verify_plans(const LayerGraph& graph, const Cluster& cluster, int64_t batch_size,
                          const std::vector<PlanToVerify>& plans, const VerifyOptions& options,
                          const std::atomic<bool>& cancel);

}  // namespace tapp
