// service/result_check.h — a job's result is refused unless its figures are real.
//
// Owns the last check before a result is stored: every number in it finite,
// and every step time (step_ms, predicted/measured/refined/best step_ms,
// predicted_ms, measured_ms) strictly positive. A result that breaks this
// (a device so slow that a step rounds to 0.0 ms, an overflow to infinity)
// fails the job with the reason instead of "succeeding" with a wrong answer.
// Data flow: optimize() -> check_result_figures -> JobStore.
// Thread safety: stateless function.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tapp::service {

// ok, or an error naming the first bad figure by its JSON path ("result.baselines[2].step_ms").
Status check_result_figures(const nlohmann::json& result);

}  // namespace tapp::service
