// service/cli/cost_inputs.cpp — see cost_inputs.h.
#include "service/cli/cost_inputs.h"

#include <unistd.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "common/read_file.h"
#include "core/cluster.h"
#include "model/layer_graph.h"
#include "model/profile_cache.h"
#include "profiler/cost_profiles.h"
#include "runtime/worker_profile.h"
#include "simulator/calibration_store.h"

namespace tapp::cli {

Result<CostSource> cost_source(const std::string& mode) {
  if (mode == "auto" || mode == "cached") return CostSource::cached_only;
  if (mode == "profile") return CostSource::profile;
  if (mode == "estimated") return CostSource::estimated;
  return Status::error("--costs: expected auto (or cached), profile or estimated, got \"" + mode + "\"");
}

namespace {

std::string costs_note(const CostProfiles& p) {
  if (p.estimated && !p.cached && !p.measured)
    return "estimated from multiply-adds (no profile; run `tapp-cli profile` or use --costs profile)";
  if (p.estimated) return "profiled where cached, estimated elsewhere";
  return std::string(p.measured ? "measured" : "cached") + " profiles at " + std::to_string(p.libraries.size()) +
         " (device kind, batch size) points";
}

// One line per profile measured on a terminal, overwritten per layer.
void show_progress(const ProfileProgress& p) {
  static const bool tty = ::isatty(STDERR_FILENO) == 1;
  if (!p.warning.empty()) {
    std::cerr << (tty ? "\r\033[K" : "") << p.message() << "\n";
  } else if (tty) {
    std::cerr << "\r\033[Kprofiling " << p.message() << std::flush;
  } else if (p.layer == 0) {
    std::cerr << "profiling " << p.message() << "\n";
  }
}

// The calibration a plan predicts with, and what to say about it.
struct CalibrationChoice {
  Calibration calibration;
  std::string note;
};

std::string fitted_note(const std::string& fitted_at, int measurements, const std::string& where) {
  return "fitted " + fitted_at + " from " + std::to_string(measurements) + " measurements (" + where + ")";
}

// No --calibration: the one stored for this cluster, if it can be used.
CalibrationChoice stored_or_default(const Cluster& c) {
  FileProfileCache store(default_cache_dir());
  ChosenCalibration chosen = choose_calibration(store, c);
  if (!chosen.refused.empty()) {
    std::cerr << "note: " << chosen.refused << "; predicting with the default calibration\n";
    return {chosen.calibration, "default (the stored one was refused)"};
  }
  if (!chosen.waiting.empty()) return {chosen.calibration, "default (" + chosen.waiting + ")"};
  if (!chosen.used.fitted) return {chosen.calibration, "default (none fitted on this cluster: tapp-cli calibrate)"};
  return {chosen.calibration, fitted_note(chosen.used.fitted_at, chosen.used.measurements,
                                          "stored for cluster " + chosen.used.cluster_fingerprint)};
}

Result<CalibrationChoice> read_calibration(const std::string& path, const Cluster& c) {
  if (path.empty()) return stored_or_default(c);
  Result<std::string> text = read_file(path);
  if (!text) return text.status().with_context("--calibration '" + path + "'");
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::error("--calibration: '" + path + "' is not valid JSON");
  // `tapp-cli calibrate --out` writes the stored form under "stored": it names its cluster and timing method.
  const nlohmann::json* stored = j.contains("stored") ? &j["stored"] : (j.contains("format") ? &j : nullptr);
  if (stored) {
    auto s = stored_calibration_from_json(*stored, c, profile_timing_method());
    if (!s) return s.status().with_context("--calibration " + path);
    return CalibrationChoice{s->calibration, fitted_note(s->fitted_at, s->measurements, path)};
  }
  const nlohmann::json& cj = j.contains("calibration") ? j["calibration"] : j;
  auto cal = calibration_from_json(cj);
  if (!cal) return cal.status().with_context(path);
  if (!cal->device_factor.empty() && static_cast<int>(cal->device_factor.size()) != c.num_devices())
    return Status::error(path + ": calibration.device_factor has " + std::to_string(cal->device_factor.size()) +
                         " entries, the cluster " + std::to_string(c.num_devices()) + " devices");
  return CalibrationChoice{*cal, "from " + path + " (no cluster fingerprint to check)"};
}

}  // namespace

Result<CostInputs> load_cost_inputs(const LayerGraph& g, const Cluster& c, int64_t batch_size,
                                    const std::string& mode, const std::string& calibration_path) {
  Result<CostSource> source = cost_source(mode);
  if (!source) return source.status();
  CostProfileOptions po;
  po.batch_size = batch_size;
  po.source = *source;
  po.progress = show_progress;
  po.worker_costs = worker_costs(nullptr);
  Result<CostProfiles> profiled = cost_profiles(g, c, po);
  if (!profiled) return profiled.status();
  CostProfiles& profiles = *profiled;
  if (::isatty(STDERR_FILENO) == 1 && profiles.measured) std::cerr << "\r\033[K" << std::flush;
  CostInputs in;
  in.costs_note = costs_note(profiles);
  for (const SkippedProfile& s : profiles.skipped)
    in.skipped.push_back(s.device_kind + " x" + std::to_string(s.threads) + " at micro-batch size " +
                         std::to_string(s.batch_size) + ": " + s.error);
  for (const DeviceCostsUsed& d : profiles.devices)
    if (d.from != CostsFrom::host)
      in.device_costs.push_back(d.device + ": " + d.detail +
                                (d.fingerprint.empty() ? "" : ", device fingerprint " + d.fingerprint));
  in.device_costs.insert(in.device_costs.end(), profiles.notes.begin(), profiles.notes.end());
  in.libraries = std::move(profiles.libraries);
  in.device_libraries = std::move(profiles.device_libraries);
  Result<CalibrationChoice> calibration = read_calibration(calibration_path, c);
  if (!calibration) return calibration.status();
  in.calibration = calibration->calibration;
  in.calibration_note = calibration->note;
  return in;
}

}  // namespace tapp::cli
