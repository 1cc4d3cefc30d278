// service/result_check.cpp — see result_check.h.
#include "service/result_check.h"

#include <cmath>
#include <set>

namespace tapp::service {
using nlohmann::json;

namespace {

bool is_step_time(const std::string& key) {
  static const std::set<std::string> keys = {"step_ms",         "predicted_step_ms", "measured_step_ms",
                                             "refined_step_ms", "best_step_ms",      "predicted_ms",
                                             "measured_ms"};
  return keys.count(key) > 0;
}

Status check(const json& j, const std::string& path, bool step_time) {
  if (j.is_number()) {
    const double v = j.get<double>();
    if (!std::isfinite(v)) return Status::field_error(path, "the job computed a non-finite number");
    if (step_time && !(v > 0))
      return Status::field_error(path, "the job computed a step time of " + std::to_string(v) +
                                           " ms; a step always takes time (are the device speeds or link "
                                           "figures at the edge of their range?)");
    return Status::ok();
  }
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (Status s = check(*it, path + "." + it.key(), is_step_time(it.key())); !s) return s;
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      if (Status s = check(j[i], path + "[" + std::to_string(i) + "]", false); !s) return s;
  }
  return Status::ok();
}

}  // namespace

Status check_result_figures(const json& result) {
  return check(result, "result", false).with_code(ErrorCode::internal);
}

}  // namespace tapp::service
