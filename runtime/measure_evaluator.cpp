#include "runtime/measure_evaluator.h"

#include <algorithm>
#include <cmath>

namespace tapp {

double step_timeout_s(double fixed_timeout_s, double step_ms) {
  if (!(step_ms > 0) || !std::isfinite(step_ms)) return fixed_timeout_s;
  return std::max(fixed_timeout_s, kTimeoutOverStep * step_ms / 1000);
}

StepReport MeasureEvaluator::evaluate(const Placement& placement) {
  ++evaluations_;
  RunOptions o = options_;
  if (estimate_) {
    double step_ms = estimate_(placement);
    if (best_measured_ms_ > 0 && step_ms > 0) step_ms = std::min(step_ms, best_measured_ms_);
    o.timeout_s = step_timeout_s(options_.timeout_s, step_ms);
  }
  StepReport r = measure_placement(graph_, cluster_, placement, o);
  if (r.ok && r.step_ms > 0 && (best_measured_ms_ == 0 || r.step_ms < best_measured_ms_)) best_measured_ms_ = r.step_ms;
  return r;
}

}  // namespace tapp
