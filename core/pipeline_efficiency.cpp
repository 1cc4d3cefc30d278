#include "core/pipeline_efficiency.h"

#include <algorithm>
#include <map>

namespace tapp {
namespace {

bool is_compute_task(const std::string& task) {
  return task.rfind("F ", 0) == 0 || task.rfind("B ", 0) == 0;
}

}  // namespace

std::optional<PipelineEfficiency> pipeline_efficiency(const StepReport& report, const Placement& placement) {
  if (!report.ok || report.timeline.empty() || placement.is_data_parallel() || !(report.step_ms > 0))
    return std::nullopt;
  std::map<int, double> compute_ms;  // device -> its forward + backward time in the step
  for (const TimelineEntry& e : report.timeline)
    if (is_compute_task(e.task)) compute_ms[e.device] += e.end_ms - e.start_ms;
  if (compute_ms.empty()) return std::nullopt;
  PipelineEfficiency out;
  out.stages = static_cast<int>(compute_ms.size());
  out.micro_batches = std::max(1, placement.micro_batches);
  for (const auto& [device, ms] : compute_ms) out.largest_stage_compute_ms = std::max(out.largest_stage_compute_ms, ms);
  const double m = out.micro_batches;
  out.ideal_step_ms = out.largest_stage_compute_ms * (m + out.stages - 1) / m;
  out.measured_step_ms = report.step_ms;
  out.efficiency = out.ideal_step_ms / out.measured_step_ms;
  return out;
}

}  // namespace tapp
