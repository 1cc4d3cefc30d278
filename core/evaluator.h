// core/evaluator.h — the one interface every search and baseline scores placements through.
//
// Data flow: Placement -> Evaluator::evaluate -> StepReport (ok, step_ms, ...).
// Implementations: the simulator (predicts), the runtime (measures), and a
// hybrid (simulate; measure the best; recalibrate). Invalid placements (over a
// device's memory, bad indices) come back as a failed StepReport, never an
// exception, so a search can keep going.
// Thread safety: an Evaluator is used by one thread at a time.
#pragma once

#include <string>

#include "core/placement.h"
#include "core/step_report.h"

namespace tapp {

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual StepReport evaluate(const Placement& placement) = 0;
  virtual std::string name() const = 0;  // "simulate" | "measure" | "hybrid"
  int64_t evaluations() const { return evaluations_; }

 protected:
  int64_t evaluations_ = 0;  // implementations count every call
};

}  // namespace tapp
