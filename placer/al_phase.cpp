// placer/al_phase.cpp — see al_phase.h.
#include "placer/al_phase.h"

#include <set>

#include "model/al_form.h"
#include "simulator/simulator.h"

namespace tapp {

namespace {

std::vector<LayerLibrary> al_libraries(const std::vector<LayerLibrary>& source, const LayerGraph& al_form) {
  std::vector<LayerLibrary> out;
  out.reserve(source.size());
  for (const auto& lib : source) out.push_back(al_form_library(lib, al_form));
  return out;
}

// Groups as device lists per layer: two candidates with the same key give the same AL plan.
std::vector<int> assignment_key(const Placement& p) {
  std::vector<int> key;
  for (int g : p.layer_group) key.push_back(g < 0 ? -1 : p.group_device[g]);
  return key;
}

}  // namespace

AlRow best_al_row(const LayerGraph& source, const Cluster& cluster, const std::vector<AlCandidate>& candidates,
                  const AlPricing& pricing, const std::atomic<bool>& cancel) {
  AlRow best;
  std::set<std::vector<int>> seen;
  for (const AlCandidate& c : candidates) {
    if (cancel) break;
    // One group is one block: nothing to unlock. Replicas and data parallelism have no AL form.
    if (c.pipeline.num_groups() < 2 || c.pipeline.is_data_parallel() || c.pipeline.has_replicated_groups()) continue;
    if (!seen.insert(assignment_key(c.pipeline)).second) continue;
    auto plan = al_plan_from_pipeline(source, c.pipeline);
    if (!plan) {
      best.refused.push_back(c.from + ": " + plan.error_message());
      if (plan.status().field() == "model") break;  // the model has no AL form at all (no classes, ...)
      continue;
    }
    ++best.candidates;
    std::vector<std::vector<LayerLibrary>> own;
    if (pricing.device_libraries)
      for (const auto& libs : *pricing.device_libraries) own.push_back(al_libraries(libs, plan->graph));
    auto cost = CostModel::build(plan->graph, cluster, al_libraries(*pricing.libraries, plan->graph), own,
                                 pricing.calibration);
    if (!cost) {
      best.refused.push_back(c.from + ": " + cost.error_message());
      continue;
    }
    Simulator sim(plan->graph, cluster, *cost, pricing.batch_size);
    const int most = static_cast<int>(std::min<int64_t>(pricing.max_micro_batches, pricing.batch_size));
    for (int m = 1; m <= most; m *= 2) {
      Placement p = plan->placement;
      p.micro_batches = m;
      if (Status fits = check_memory(p, plan->graph, cluster, pricing.batch_size); !fits) {
        if (m == 1) best.refused.push_back(c.from + ": " + fits.message());
        continue;
      }
      StepReport r = sim.evaluate(p);
      if (!r.ok || (best.found && r.step_ms >= best.report.step_ms)) continue;
      best.found = true;
      best.from = c.from;
      best.pipeline = c.pipeline;
      best.pipeline.micro_batches = m;
      best.plan = {plan->graph, p};
      best.report = r;
    }
  }
  return best;
}

}  // namespace tapp
