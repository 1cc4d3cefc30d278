#include "runtime/measure_evaluator.h"

namespace tapp {

StepReport MeasureEvaluator::evaluate(const Placement& placement) {
  ++evaluations_;
  return measure_placement(graph_, cluster_, placement, options_);
}

}  // namespace tapp
