#include "service/cli/cost_inputs.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/layer_graph.h"
#include "model/profile_cache.h"
#include "profiler/profiler.h"
#include "core/cluster.h"

namespace tapp::cli {

Result<CostInputs> load_cost_inputs(const LayerGraph& g, const Cluster& c, int64_t batch_size,
                                    const std::string& mode, const std::string& calibration_path) {
  if (mode != "auto" && mode != "profile" && mode != "estimated")
    return Status::error("--costs: expected auto, profile or estimated, got \"" + mode + "\"");
  CostInputs in;
  FileProfileCache cache(default_cache_dir());
  std::map<std::pair<std::string, int>, bool> seen;
  int cached = 0, measured = 0, estimated = 0;
  const std::vector<int64_t> sizes = profile_batch_sizes(batch_size);
  for (const Device& d : c.devices) {
    if (!seen.emplace(std::make_pair(d.kind, d.threads), true).second) continue;
    size_t before = in.libraries.size();
    if (mode != "estimated") {
      for (int64_t b : sizes) {
        ProfileOptions po;
        po.device = d.kind;
        po.threads = d.threads;
        po.batch_size = b;
        po.runs = 7;  // the median of more runs: profiles are the simulator's only timing input
        if (mode == "auto") {
          auto lib = cached_library(cache, g, d.kind, d.threads, b);
          if (!lib) continue;
          in.libraries.push_back(std::move(*lib));
          ++cached;
        } else {
          bool hit = false;
          auto lib = profile_cached(g, po, &cache, &hit);
          if (!lib) return lib.status().with_context("profiling " + g.name + " on " + d.kind + " at batch " +
                                                     std::to_string(b));
          in.libraries.push_back(std::move(*lib));
          ++(hit ? cached : measured);
        }
      }
    }
    if (in.libraries.size() > before) continue;
    LayerLibrary lib = estimated_library(g, batch_size, 20.0, d.threads);
    lib.device_kind = d.kind;
    in.libraries.push_back(std::move(lib));
    ++estimated;
  }
  if (estimated && !cached && !measured)
    in.costs_note = "estimated from multiply-adds (no profile; run `tapp-cli profile` or use --costs profile)";
  else if (estimated)
    in.costs_note = "profiled where cached, estimated elsewhere";
  else
    in.costs_note = std::string(measured ? "measured" : "cached") + " profiles at " +
                    std::to_string(in.libraries.size()) + " (device kind, batch size) points";
  in.calibration = default_calibration();  // unless a calibration file says otherwise
  if (!calibration_path.empty()) {
    std::ifstream f(calibration_path);
    if (!f) return Status::error("--calibration: cannot open '" + calibration_path + "'");
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_discarded()) return Status::error("--calibration: '" + calibration_path + "' is not valid JSON");
    const nlohmann::json& cj = j.contains("calibration") ? j["calibration"] : j;
    auto cal = calibration_from_json(cj);
    if (!cal) return cal.status().with_context(calibration_path);
    if (!cal->device_factor.empty() && static_cast<int>(cal->device_factor.size()) != c.num_devices())
      return Status::error(calibration_path + ": calibration.device_factor has " +
                           std::to_string(cal->device_factor.size()) + " entries, the cluster " +
                           std::to_string(c.num_devices()) + " devices");
    in.calibration = *cal;
  }
  return in;
}

}  // namespace tapp::cli
