#include "core/step_report.h"

#include <nlohmann/json.hpp>

namespace tapp {

nlohmann::json step_report_to_json(const StepReport& r, bool with_timeline) {
  nlohmann::json j;
  j["ok"] = r.ok;
  if (!r.ok) {
    j["failure_kind"] = r.failure_kind;
    j["message"] = r.message;
  }
  j["source"] = r.source;
  j["step_ms"] = r.step_ms;
  if (!r.step_samples_ms.empty()) j["step_samples_ms"] = r.step_samples_ms;
  j["comm_fraction"] = r.comm_fraction;
  if (!r.warnings.empty()) j["warnings"] = r.warnings;
  j["devices"] = nlohmann::json::array();
  for (const DeviceStats& d : r.devices)
    j["devices"].push_back({{"device", d.device},
                            {"busy_ms", d.busy_ms},
                            {"comm_ms", d.comm_ms},
                            {"idle_ms", d.idle_ms},
                            {"peak_memory_bytes", d.peak_memory_bytes}});
  if (with_timeline) {
    j["timeline"] = nlohmann::json::array();
    for (const TimelineEntry& e : r.timeline)
      j["timeline"].push_back(
          {{"device", e.device}, {"task", e.task}, {"start_ms", e.start_ms}, {"end_ms", e.end_ms}});
  }
  return j;
}

}  // namespace tapp
