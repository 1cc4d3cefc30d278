// placer/reinforce.h — joint REINFORCE for the partition and allocation networks (paper 4.3).
//
// Owns the reward and the baseline: reward = -sqrt(step_ms / reference_ms),
// where reference_ms is a fixed scale for the job (the single-device step);
// a failed evaluation (over memory, a worker failure, a schedule that cannot
// run) gets `failure_reward`, worse than any valid placement a few times
// slower than the reference, so the search learns away from it and goes on.
// Advantage = (reward - moving-average baseline) / spread, blended with the
// sample's centred rank in its batch (rank_weight; robust when a few
// disastrous samples dominate the spread); the policy then takes one clipped
// Adam step with an entropy bonus (Policy::update).
// Data flow: decisions + StepReports -> rewards -> advantages -> Policy::update.
// Thread safety: one per search, single thread.
#pragma once

#include <vector>

#include "placer/policy.h"
#include "core/step_report.h"

namespace tapp {

struct ReinforceConfig {
  double baseline_decay = 0.9;     // moving average of the batch mean reward
  double entropy_coef = 0.05;      // entropy bonus at the start ...
  double entropy_coef_final = 0.002;  // ... annealed linearly to this by the last iteration
  double max_grad_norm = 1.0;
  double failure_reward = -3.0;
  // Weight of centred batch ranks in the advantage (0 = baseline only).
  double rank_weight = 0.75;    // a valid step 9x slower than the reference scores the same
};

class Reinforce {
 public:
  Reinforce(Policy& policy, ReinforceConfig config, double reference_step_ms);

  double reward(const StepReport& report) const;
  double baseline() const { return baseline_; }

  // Rewards the batch, updates the baseline, and takes one policy step.
  // `progress` in [0, 1] anneals the entropy coefficient.
  UpdateStats step(const std::vector<Decision>& decisions, const std::vector<StepReport>& reports, double progress);

 private:
  Policy& policy_;
  ReinforceConfig cfg_;
  double reference_ms_;
  double baseline_ = 0;
  double variance_ = 1;
  bool started_ = false;
};

}  // namespace tapp
