// placer/al_phase.h — the Associated Learning row of an optimize job (request `allow_al`).
//
// Owns the step from "the plans the planners and the policy proposed" to the
// fastest AL plan: each candidate pipeline's groups become AL blocks (their cut
// points are part of the placement, core/al_placement.h), each AL form is priced
// from the job's own profiles (model/al_form.h's al_form_library: no new
// profiling per cut set) under the job's calibration, at 1, 2, 4, ... micro-batches.
// AL changes the learning algorithm, so the row is shown beside the best
// plan, never put in its place.
// Data flow: candidates (policy, baselines) + job libraries -> AlRow -> result JSON "al".
// Thread safety: plain functions.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/al_placement.h"
#include "core/cluster.h"
#include "core/placement.h"
#include "core/step_report.h"
#include "model/layer_library.h"
#include "simulator/cost_model.h"

namespace tapp {

struct AlCandidate {
  std::string from;    // who proposed the pipeline: "policy", "policy+refine", a planner's name
  Placement pipeline;  // of the source model
};

struct AlRow {
  bool found = false;
  std::string from;
  Placement pipeline;  // the candidate, micro_batches set to the AL plan's
  AlPlan plan;         // the AL form and its placement (schedule al)
  StepReport report;   // predicted
  int candidates = 0;  // distinct cut sets priced
  std::vector<std::string> refused;  // "dp: placement.layers[3]: ..." for candidates with no AL form
};

struct AlPricing {
  const std::vector<LayerLibrary>* libraries = nullptr;               // the job's (source model)
  const std::vector<std::vector<LayerLibrary>>* device_libraries = nullptr;
  Calibration calibration;
  int64_t batch_size = 32;
  int max_micro_batches = 32;
};

// The fastest AL plan over the candidates (duplicates by groups and devices
// priced once; one-group, replicated or data-parallel ones skipped). found = false with
// `refused` saying why when none has an AL form.
AlRow best_al_row(const LayerGraph& source, const Cluster& cluster, const std::vector<AlCandidate>& candidates,
                  const AlPricing& pricing, const std::atomic<bool>& cancel);

}  // namespace tapp
