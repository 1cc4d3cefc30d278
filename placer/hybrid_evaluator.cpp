// placer/hybrid_evaluator.cpp — see hybrid_evaluator.h.
#include "placer/hybrid_evaluator.h"

#include <algorithm>

#include "planners/planners.h"
#include "placer/search.h"

namespace tapp {

HybridEvaluator::HybridEvaluator(const LayerGraph& graph, const Cluster& cluster, CostModel base, int64_t batch_size,
                                 std::unique_ptr<Evaluator> measure, HybridOptions options)
    : graph_(graph),
      cluster_(cluster),
      base_(base),
      sim_(graph, cluster, std::move(base), batch_size),
      batch_size_(batch_size),
      measure_(std::move(measure)),
      options_(options) {}

HybridEvaluator::~HybridEvaluator() = default;

StepReport HybridEvaluator::predict(const Placement& placement) {
  return is_data_parallel(placement) ? simulate_data_parallel(graph_, cluster_, sim_.cost(), batch_size_, placement)
                                     : sim_.evaluate(placement, SimulateOptions{false});
}

StepReport HybridEvaluator::evaluate(const Placement& placement) {
  ++evaluations_;
  StepReport r = predict(placement);
  if (is_data_parallel(placement)) return r;  // never verified during the search
  if (r.ok && !measured(placement)) {
    pending_.emplace_back(r.step_ms, placement);
    std::sort(pending_.begin(), pending_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    // Keep distinct placements only.
    pending_.erase(std::unique(pending_.begin(), pending_.end(),
                               [](const auto& a, const auto& b) { return placement_key(a.second) == placement_key(b.second); }),
                   pending_.end());
    if (static_cast<int>(pending_.size()) > options_.top_k) pending_.resize(options_.top_k);
  }
  if (options_.verify_every > 0 && evaluations_ % options_.verify_every == 0) verify();
  return r;
}

const StepReport* HybridEvaluator::measured(const Placement& placement) const {
  auto it = measured_index_.find(placement_key(placement));
  return it == measured_index_.end() ? nullptr : &measurements_[it->second].measured;
}

StepReport HybridEvaluator::measure_now(const Placement& placement, bool count) {
  if (const StepReport* m = measured(placement)) return *m;
  HybridMeasurement hm;
  hm.placement = placement;
  StepReport predicted = predict(placement);
  hm.predicted_ms = predicted.ok ? predicted.step_ms : 0;
  hm.measured = measure_->evaluate(placement);
  if (count) ++counted_measurements_;
  measured_index_[placement_key(placement)] = measurements_.size();
  measurements_.push_back(hm);
  if (hm.measured.ok && !is_data_parallel(placement)) recalibrate();
  return hm.measured;
}

void HybridEvaluator::verify() {
  auto pending = std::move(pending_);
  pending_.clear();
  for (const auto& [predicted_ms, p] : pending) {
    if (counted_measurements_ >= options_.max_measurements) break;
    measure_now(p, true);
  }
}

void HybridEvaluator::recalibrate() {
  std::vector<CalibrationSample> samples;
  for (const auto& m : measurements_)
    if (m.measured.ok && !is_data_parallel(m.placement)) samples.push_back({m.placement, m.measured});
  if (samples.empty()) return;
  Result<CalibrationResult> fit = calibrate(graph_, cluster_, base_, batch_size_, samples);
  if (!fit) return;  // keep the previous costs; the measurement itself is still data
  before_ = fit->before;
  after_ = fit->after;
  sim_.set_cost(base_.with_calibration(fit->calibration));
}

}  // namespace tapp
