// core/evaluator.cpp — the evaluator kinds' names (see evaluator.h).
#include "core/evaluator.h"

namespace tapp {

const char* evaluator_kind_name(EvaluatorKind kind) {
  switch (kind) {
    case EvaluatorKind::simulate: return "simulate";
    case EvaluatorKind::measure: return "measure";
    case EvaluatorKind::hybrid: return "hybrid";
  }
  return "unknown";
}

Result<EvaluatorKind> evaluator_kind_from_name(const std::string& name, const std::string& field) {
  for (EvaluatorKind k : {EvaluatorKind::simulate, EvaluatorKind::measure, EvaluatorKind::hybrid})
    if (name == evaluator_kind_name(k)) return k;
  return Status::field_error(field, "must be simulate, measure or hybrid, got \"" + name + "\"");
}

}  // namespace tapp
