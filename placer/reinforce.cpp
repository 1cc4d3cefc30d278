// placer/reinforce.cpp — see reinforce.h.
#include "placer/reinforce.h"

#include <algorithm>
#include <cmath>

namespace tapp {

Reinforce::Reinforce(Policy& policy, ReinforceConfig config, double reference_step_ms)
    : policy_(policy), cfg_(config), reference_ms_(reference_step_ms > 0 ? reference_step_ms : 1.0) {}

double Reinforce::reward(const StepReport& report) const {
  if (!report.ok || !(report.step_ms > 0) || !std::isfinite(report.step_ms)) return cfg_.failure_reward;
  return std::max(cfg_.failure_reward, -std::sqrt(report.step_ms / reference_ms_));
}

UpdateStats Reinforce::step(const std::vector<Decision>& decisions, const std::vector<StepReport>& reports,
                            double progress) {
  std::vector<double> rewards(decisions.size());
  double mean = 0;
  for (size_t i = 0; i < decisions.size(); ++i) mean += rewards[i] = reward(reports[i]);
  if (decisions.empty()) return {};
  mean /= static_cast<double>(decisions.size());
  double var = 0;
  for (double r : rewards) var += (r - mean) * (r - mean);
  var /= static_cast<double>(decisions.size());
  if (!started_) {
    baseline_ = mean;
    variance_ = std::max(var, 1e-4);
    started_ = true;
  }
  // Baseline: the moving average before this batch, blended with the batch
  // mean so the first batches are not all positive or all negative; the
  // advantages are scaled by the batch's spread (floored by the running one)
  // so the step size does not depend on the reward scale.
  const double b = 0.5 * (baseline_ + mean);
  const double scale = std::sqrt(std::max({var, 0.1 * variance_, 1e-6}));
  std::vector<double> adv(rewards.size());
  for (size_t i = 0; i < rewards.size(); ++i) adv[i] = (rewards[i] - b) / scale;
  if (cfg_.rank_weight > 0 && rewards.size() > 1) {
    // Centred ranks in [-0.5, 0.5] (ties share their mean rank): robust to a
    // few disastrous samples dominating the spread.
    std::vector<size_t> order(rewards.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return rewards[x] < rewards[y]; });
    std::vector<double> rank(rewards.size());
    for (size_t i = 0; i < order.size();) {
      size_t j = i;
      while (j + 1 < order.size() && rewards[order[j + 1]] == rewards[order[i]]) ++j;
      for (size_t k = i; k <= j; ++k) rank[order[k]] = 0.5 * (i + j) / (order.size() - 1) - 0.5;
      i = j + 1;
    }
    for (size_t i = 0; i < adv.size(); ++i) adv[i] = (1 - cfg_.rank_weight) * adv[i] + cfg_.rank_weight * 2 * rank[i];
  }
  const double t = std::clamp(progress, 0.0, 1.0);
  const double ent = cfg_.entropy_coef + (cfg_.entropy_coef_final - cfg_.entropy_coef) * t;
  UpdateStats st = policy_.update(decisions, adv, ent, cfg_.max_grad_norm);
  baseline_ = cfg_.baseline_decay * baseline_ + (1 - cfg_.baseline_decay) * mean;
  variance_ = cfg_.baseline_decay * variance_ + (1 - cfg_.baseline_decay) * std::max(var, 1e-6);
  return st;
}

}  // namespace tapp
