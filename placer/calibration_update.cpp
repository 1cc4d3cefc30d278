#include "placer/calibration_update.h"

#include <memory>

#include "core/cluster.h"
#include "core/cluster_fingerprint.h"
#include "core/placement.h"
#include "model/model_json.h"
#include "model/profile_cache.h"
#include "profiler/cost_profiles.h"
#include "runtime/worker_profile.h"
#include "simulator/calibration_store.h"
#include "simulator/cost_model.h"

namespace tapp {

namespace {

// A stored workload made replayable: its graph, its uncalibrated costs, its samples.
struct Replayable {
  std::unique_ptr<LayerGraph> owned_graph;  // another model's, rebuilt from the record
  const LayerGraph* graph = nullptr;
  CostModel cost;
  int64_t batch_size = 0;
  std::vector<CalibrationSample> samples;
};

// Another model's costs on the cluster from its cached profiles only (a fit
// must not profile); nullopt when any set would have to be estimated.
std::optional<CostModel> cached_costs(ProfileCache& store, const LayerGraph& g, const Cluster& cluster,
                                      int64_t batch_size) {
  CostProfileOptions o;
  o.batch_size = batch_size;
  o.source = CostSource::cached_only;
  o.cache = &store;
  o.worker_costs = worker_costs(&store, kWorkerConnectTimeoutS);  // cached_only: never asks it to profile
  Result<CostProfiles> profiles = cost_profiles(g, cluster, o);
  if (!profiles || profiles->estimated > 0 || !profiles->notes.empty()) return std::nullopt;
  Result<CostModel> cost =
      CostModel::build(g, cluster, profiles->libraries, profiles->device_libraries, default_calibration());
  if (!cost) return std::nullopt;
  return std::move(*cost);
}

// The workload's samples as calibration samples of `g` (a placement that no
// longer parses against the graph is left out).
std::vector<CalibrationSample> samples_of(const StoredWorkload& w, const LayerGraph& g, const Cluster& cluster) {
  std::vector<CalibrationSample> out;
  for (const StoredSample& s : w.samples) {
    Result<Placement> p = placement_from_json(s.placement, g, cluster);
    if (!p) continue;
    StepReport r;
    r.ok = true;
    r.source = "measure";
    r.step_ms = s.measured_ms;
    r.devices = s.devices;
    out.push_back({std::move(*p), std::move(r)});
  }
  return out;
}

std::vector<Replayable> replayable_workloads(const StoredCalibration& stored, ProfileCache& store,
                                             const LayerGraph& graph, const Cluster& cluster, int64_t batch_size,
                                             const CostModel& uncalibrated) {
  const std::string this_graph = graph_fingerprint(graph);
  std::vector<Replayable> out;
  for (const StoredWorkload& w : stored.workloads) {
    Replayable r;
    r.batch_size = w.batch_size;
    if (w.graph_fingerprint == this_graph && w.batch_size == batch_size) {
      r.graph = &graph;
      r.cost = uncalibrated.with_calibration(default_calibration());
    } else {
      Result<LayerGraph> g = model_from_json(w.model);
      if (!g) continue;
      r.owned_graph = std::make_unique<LayerGraph>(std::move(*g));
      r.graph = r.owned_graph.get();
      std::optional<CostModel> cost = cached_costs(store, *r.graph, cluster, w.batch_size);
      if (!cost) continue;
      r.cost = std::move(*cost);
    }
    r.samples = samples_of(w, *r.graph, cluster);
    if (!r.samples.empty()) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

CalibrationUpdate join_calibration(ProfileCache& store, const LayerGraph& graph, const Cluster& cluster,
                                   int64_t batch_size, const CostModel& uncalibrated,
                                   const std::vector<CalibrationSample>& samples) {
  CalibrationUpdate update;
  StoredCalibration stored;
  Result<std::optional<StoredCalibration>> found = find_calibration(store, cluster, profile_timing_method());
  if (!found)
    update.replaced_refused = found.error_message();
  else if (found->has_value())
    stored = std::move(**found);
  stored.cluster_fingerprint = cluster_fingerprint(cluster);
  stored.timing_method = profile_timing_method();

  update.samples_added = add_samples(stored, graph, cluster, batch_size, samples);
  if (update.samples_added == 0) {
    update.error = "no successful measurement of a pipelined plan to add";
    return update;
  }
  update.samples_kept = stored.stored_samples();

  const std::vector<Replayable> replayable =
      replayable_workloads(stored, store, graph, cluster, batch_size, uncalibrated);
  std::vector<CalibrationWorkload> workloads;
  for (const Replayable& r : replayable) workloads.push_back({r.graph, &r.cost, r.batch_size, r.samples});
  Result<CalibrationResult> fit = calibrate(cluster, workloads);
  if (!fit) {
    update.error = "refit: " + fit.error_message();
    return update;
  }
  // Never store what a later read would refuse.
  if (Result<Calibration> readable = calibration_from_json(calibration_to_json(fit->calibration)); !readable) {
    update.error = "refit: the fitted calibration is out of range (" + readable.error_message() + "); not stored";
    return update;
  }
  stored.calibration = fit->calibration;
  stored.measurements = fit->after.n;
  stored.fitted_at = utc_now_iso8601();
  if (Status s = save_calibration(store, stored); !s) {
    update.error = "storing the calibration: " + s.message();
    return update;
  }
  update.stored = true;
  update.fitted_from = stored.measurements;
  update.fitted_at = stored.fitted_at;
  update.before = fit->before;
  update.after = fit->after;
  return update;
}

}  // namespace tapp
