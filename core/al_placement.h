// core/al_placement.h — an Associated Learning plan from a pipeline placement, or from a block count.
//
// Owns the step from "these groups, these devices" to an AL plan: the model's
// AL form (model/al_form.h) cut where the placement's groups change, and the
// placement of that form with schedule al (one group per block, its added
// layers with it). The cut points are part of the placement: a planner that
// proposes contiguous stages proposes AL blocks too.
// Data flow: (LayerGraph, Placement | block count) -> AlPlan -> task graph | runtime.
// Thread safety: plain functions.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "core/placement.h"
#include "model/al_form.h"
#include "model/layer_graph.h"

namespace tapp {

struct AlPlan {
  LayerGraph graph;     // the AL form
  Placement placement;  // schedule al over `graph`
};

// Each group of a pipeline placement of `source` becomes an AL block on the
// group's device, keeping micro-batches and optimizer. Errors name the field:
// placement.data_parallel / placement.groups (replicas) / placement.layers[i]
// (a group that is not one run of consecutive layers) / al.cuts[k] (a cut
// more than one tensor crosses).
Result<AlPlan> al_plan_from_pipeline(const LayerGraph& source, const Placement& pipeline,
                                     int64_t target_width = kDefaultAlTargetWidth);

// `blocks` blocks of about equal multiply-adds, block b on device b % devices.
Result<AlPlan> al_plan_by_blocks(const LayerGraph& source, int blocks, int devices, int micro_batches,
                                 int64_t target_width = kDefaultAlTargetWidth);

}  // namespace tapp
