// profiler/cost_profiles.cpp — see cost_profiles.h.
#include "profiler/cost_profiles.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <utility>

namespace tapp {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The distinct (kind, threads) of the cluster's devices priced from this host's profile, in device order.
std::vector<std::pair<std::string, int>> device_sets(const Cluster& c, const CostProfiles& out) {
  std::vector<std::pair<std::string, int>> sets;
  for (size_t i = 0; i < c.devices.size(); ++i) {
    const Device& d = c.devices[i];
    if (!out.device_libraries[i].empty()) continue;
    std::pair<std::string, int> s{d.kind, d.threads};
    if (std::find(sets.begin(), sets.end(), s) == sets.end()) sets.push_back(s);
  }
  return sets;
}

// One (kind, threads) set at every micro-batch size: cached, measured or skipped.
class SetProfiler {
 public:
  SetProfiler(const LayerGraph& g, const CostProfileOptions& o, ProfileCache& cache, CostProfiles& out)
      : g_(g), o_(o), cache_(cache), out_(out) {}

  void run(const std::string& kind, int threads, int set, int sets) {
    const std::vector<int64_t> sizes = profile_batch_sizes(o_.batch_size);
    const size_t before = out_.libraries.size();
    double large_spent_s = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t b = sizes[k];
      if (auto hit = cached_library(cache_, g_, kind, threads, b)) {
        out_.libraries.push_back(std::move(*hit));
        ++out_.cached;
        continue;
      }
      if (o_.source != CostSource::profile || !worth_measuring(b, before, large_spent_s)) continue;
      ProfileProgress at;
      at.device_kind = kind;
      at.threads = threads;
      at.batch_size = b;
      at.device_set = set, at.device_sets = sets;
      at.size_index = static_cast<int>(k) + 1, at.sizes = static_cast<int>(sizes.size());
      const auto t0 = std::chrono::steady_clock::now();
      Result<LayerLibrary> lib = measure(kind, threads, b, at);
      if (b > kAlwaysProfiledBatch) large_spent_s += seconds_since(t0);
      if (!lib || lib->rows.size() != g_.layers.size()) {
        out_.skipped.push_back({kind, threads, b, lib ? "profile has the wrong number of layers" : lib.error_message()});
        continue;
      }
      out_.libraries.push_back(std::move(lib.value()));
      ++out_.measured;
    }
    if (out_.libraries.size() > before) return;
    LayerLibrary estimate = estimated_library(g_, o_.batch_size, 20.0, threads);
    estimate.device_kind = kind;
    out_.libraries.push_back(std::move(estimate));
    ++out_.estimated;
  }

 private:
  // Sizes up to kAlwaysProfiledBatch always; larger ones while their expected
  // time (about 8 whole steps, scaled from the last library of this set) fits
  // what is left of kLargeProfileBudgetS.
  bool worth_measuring(int64_t b, size_t set_begin, double large_spent_s) const {
    if (b <= kAlwaysProfiledBatch) return true;
    if (out_.libraries.size() == set_begin) return false;
    const LayerLibrary& last = out_.libraries.back();
    const double expected_s = 8.0 * last.whole_step_ms / 1e3 * b / std::max<int64_t>(1, last.batch_size);
    return large_spent_s + expected_s <= kLargeProfileBudgetS;
  }

  Result<LayerLibrary> measure(const std::string& kind, int threads, int64_t b, ProfileProgress at) {
    if (o_.progress) o_.progress(at);  // starting this size
    ProfileOptions po;
    po.device = kind;
    po.threads = threads;
    po.batch_size = b;
    po.warmup_runs = kProfileWarmupRuns;
    po.runs = kProfileRuns;
    po.seed = o_.seed;
    if (o_.progress)
      po.progress = [&](const ProfileProgress& layer) {
        if (!layer.warning.empty()) return o_.progress(layer);
        at.layer = layer.layer, at.layers = layer.layers, at.layer_name = layer.layer_name;
        o_.progress(at);
      };
    return profile_cached(g_, po, &cache_);
  }

  const LayerGraph& g_;
  const CostProfileOptions& o_;
  ProfileCache& cache_;
  CostProfiles& out_;
};

}  // namespace

std::string CostProfiles::origin() const {
  if (measured > 0) return "profiled";
  if (cached > 0) return "cache";
  return "estimated";
}

std::vector<int64_t> CostProfiles::batch_sizes() const {
  std::set<int64_t> sizes;
  for (const LayerLibrary& l : libraries) sizes.insert(l.batch_size);
  for (const auto& own : device_libraries)
    for (const LayerLibrary& l : own) sizes.insert(l.batch_size);
  return {sizes.begin(), sizes.end()};
}

namespace {

// Device `i`'s own libraries (library file or worker) into `out`; a worker
// profile that is not cached under cached_only, or any under estimated, leaves
// the device on this host's profile.
Status own_device_costs(const LayerGraph& graph, const Cluster& cluster, size_t i, const CostProfileOptions& options,
                        CostProfiles& out) {
  const Device& d = cluster.devices[i];
  const std::string field = "devices[" + std::to_string(i) + "].costs";
  DeviceCostsUsed& used = out.devices[i];
  if (d.costs.from == CostsFrom::library) {
    Result<std::vector<LayerLibrary>> libs = load_library_file(d.costs.library_path, graph, options.batch_size);
    if (!libs) return libs.status().with_context(field + ".library");
    std::sort(libs->begin(), libs->end(),
              [](const LayerLibrary& a, const LayerLibrary& b) { return a.batch_size < b.batch_size; });
    out.device_libraries[i] = std::move(*libs);
    used.from = CostsFrom::library;
    used.detail = "layer library '" + d.costs.library_path + "'";
    return Status::ok();
  }
  if (options.source == CostSource::estimated) {
    out.notes.push_back(field + " (" + d.name + "): estimated here (--costs estimated does not ask its worker)");
    return Status::ok();
  }
  if (!options.worker_costs)
    return Status::field_error(field, "\"worker\": this caller cannot ask a remote worker to profile");
  Result<OwnDeviceCosts> own =
      options.worker_costs(graph, d, profile_batch_sizes(options.batch_size), options.seed,
                           options.source == CostSource::profile);
  if (!own) return own.status().with_context(field);
  if (own->libraries.empty()) {
    out.notes.push_back(field + " (" + d.name + "): no profile from " + own->detail +
                        " is cached yet; priced from this host's profile (--costs profile asks the worker)");
    return Status::ok();
  }
  out.measured += own->measured;
  out.cached += own->cached;
  out.device_libraries[i] = std::move(own->libraries);
  used.from = CostsFrom::worker;
  used.detail = std::move(own->detail);
  used.fingerprint = std::move(own->fingerprint);
  return Status::ok();
}

}  // namespace

Result<CostProfiles> cost_profiles(const LayerGraph& graph, const Cluster& cluster, const CostProfileOptions& options) {
  CostProfiles out;
  out.device_libraries.resize(cluster.devices.size());
  for (size_t i = 0; i < cluster.devices.size(); ++i) {
    out.devices.push_back({cluster.devices[i].name, CostsFrom::host, "", ""});
    if (cluster.devices[i].costs.from == CostsFrom::host) continue;
    if (Status s = own_device_costs(graph, cluster, i, options, out); !s) return s;
  }
  FileProfileCache file_cache(default_cache_dir());
  ProfileCache& cache = options.cache ? *options.cache : file_cache;
  const auto sets = device_sets(cluster, out);
  for (size_t s = 0; s < sets.size(); ++s) {
    if (options.source == CostSource::estimated) {
      LayerLibrary estimate = estimated_library(graph, options.batch_size, 20.0, sets[s].second);
      estimate.device_kind = sets[s].first;
      out.libraries.push_back(std::move(estimate));
      ++out.estimated;
      continue;
    }
    SetProfiler(graph, options, cache, out).run(sets[s].first, sets[s].second, static_cast<int>(s) + 1,
                                                static_cast<int>(sets.size()));
  }
  return out;
}

}  // namespace tapp
