#include "core/step_report.h"

#include <nlohmann/json.hpp>

namespace tapp {

std::string failure_kind_name(FailureKind kind) {
  switch (kind) {
    case FailureKind::none:
      return "";
    case FailureKind::invalid_options:
      return "invalid_options";
    case FailureKind::invalid_placement:
      return "invalid_placement";
    case FailureKind::invalid_strategy:
      return "invalid_strategy";
    case FailureKind::out_of_memory:
      return "out_of_memory";
    case FailureKind::worker_failed:
      return "worker_failed";
    case FailureKind::worker_unreachable:
      return "worker_unreachable";
    case FailureKind::timeout:
      return "timeout";
    case FailureKind::no_placement:
      return "no_placement";
    case FailureKind::skipped:
      return "skipped";
  }
  return "";
}

nlohmann::json step_report_to_json(const StepReport& r, bool with_timeline) {
  nlohmann::json j;
  j["ok"] = r.ok;
  if (!r.ok) {
    j["failure_kind"] = failure_kind_name(r.failure_kind);
    j["message"] = r.message;
  }
  j["source"] = r.source;
  j["step_ms"] = r.step_ms;
  if (!r.step_samples_ms.empty()) j["step_samples_ms"] = r.step_samples_ms;
  j["comm_fraction"] = r.comm_fraction;
  if (!r.warnings.empty()) j["warnings"] = r.warnings;
  j["devices"] = nlohmann::json::array();
  for (const DeviceStats& d : r.devices) {
    j["devices"].push_back({{"device", d.device},
                            {"busy_ms", d.busy_ms},
                            {"comm_ms", d.comm_ms},
                            {"idle_ms", d.idle_ms},
                            {"peak_memory_bytes", d.peak_memory_bytes}});
    if (d.peak_tensor_bytes > 0) j["devices"].back()["peak_tensor_bytes"] = d.peak_tensor_bytes;
  }
  if (with_timeline) {
    j["timeline"] = nlohmann::json::array();
    for (const TimelineEntry& e : r.timeline)
      j["timeline"].push_back(
          {{"device", e.device}, {"task", e.task}, {"start_ms", e.start_ms}, {"end_ms", e.end_ms}});
  }
  return j;
}

}  // namespace tapp
