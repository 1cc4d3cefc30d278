// core/pipeline_efficiency.h — how close a measured pipeline step came to its own bound.
//
// Owns `pipeline_efficiency`: from one step's per-task timeline (StepReport),
// each device's compute is the sum of its forward and backward tasks ("F ..."
// and "B ..." entries); the ideal step of a pipeline of S stages and m
// micro-batches is the largest device compute x (m + S - 1) / m (GPipe's fill
// and drain with no communication and no idle time beyond it), and the
// efficiency is ideal / measured. The optimizer update is not part of the
// bound. Meaningful for pipelines; replicas (data parallel) report none.
// Thread safety: a pure function.
#pragma once

#include <optional>

#include "core/placement.h"
#include "core/step_report.h"

namespace tapp {

struct PipelineEfficiency {
  int stages = 0;                  // distinct devices that computed
  int micro_batches = 0;
  double largest_stage_compute_ms = 0;
  double ideal_step_ms = 0;
  double measured_step_ms = 0;
  double efficiency = 0;           // ideal / measured
};

// None when the report failed, has no timeline, or the placement is data parallel.
std::optional<PipelineEfficiency> pipeline_efficiency(const StepReport& report, const Placement& placement);

}  // namespace tapp
