// core/evaluator.h — the one interface every search and baseline scores placements through.
//
// Data flow: Placement -> Evaluator::evaluate -> StepReport (ok, step_ms, ...).
// Implementations: the simulator (predicts), the runtime (measures), and a
// hybrid (simulate; measure the best; recalibrate). Invalid placements (over a
// device's memory, bad indices) come back as a failed StepReport, never an
// exception, so a search can keep going. Which implementation a job uses is an
// `EvaluatorKind`, parsed once where a request or a command line names it
// (evaluator_kind_from_name) and built by one factory (placer/evaluator_factory.h).
// Thread safety: an Evaluator is used by one thread at a time.
#pragma once

#include <string>

#include "common/status.h"
#include "core/placement.h"
#include "core/step_report.h"

namespace tapp {

enum class EvaluatorKind {
  simulate,  // the simulator predicts every step (cheap, deterministic)
  measure,   // real workers run every step (slow, the truth)
  hybrid,    // simulate; measure the best few; recalibrate the simulator
};

// "simulate" | "measure" | "hybrid".
const char* evaluator_kind_name(EvaluatorKind kind);
// The kind a user named; the error names `field` ("options.evaluator: must be
// simulate, measure or hybrid, got \"guess\"").
Result<EvaluatorKind> evaluator_kind_from_name(const std::string& name, const std::string& field);

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual StepReport evaluate(const Placement& placement) = 0;
  virtual EvaluatorKind kind() const = 0;
  std::string name() const { return evaluator_kind_name(kind()); }
  int64_t evaluations() const { return evaluations_; }

 protected:
  int64_t evaluations_ = 0;  // implementations count every call
};

}  // namespace tapp
