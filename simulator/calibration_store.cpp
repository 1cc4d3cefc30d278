#include "simulator/calibration_store.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "core/cluster_fingerprint.h"
#include "model/model_json.h"
#include "model/profile_cache.h"

namespace tapp {
namespace jf = json_fields;
using nlohmann::json;

CalibrationUsed calibration_used(const std::optional<StoredCalibration>& stored) {
  CalibrationUsed used;
  if (!stored) return used;
  used.fitted = true;
  used.fitted_at = stored->fitted_at;
  used.measurements = stored->measurements;
  used.cluster_fingerprint = stored->cluster_fingerprint;
  return used;
}

json calibration_used_to_json(const CalibrationUsed& used) {
  if (!used.fitted) return {{"kind", "default"}};
  return {{"kind", "fitted"},
          {"fitted_at", used.fitted_at},
          {"measurements", used.measurements},
          {"cluster_fingerprint", used.cluster_fingerprint}};
}

namespace {

constexpr const char* kFormat = "tapp-calibration-v2";

json sample_to_json(const StoredSample& s) {
  json devices = json::array();
  for (const DeviceStats& d : s.devices)
    devices.push_back({{"device", d.device}, {"busy_ms", d.busy_ms}, {"comm_ms", d.comm_ms}});
  return {{"placement", s.placement}, {"measured_ms", s.measured_ms}, {"devices", devices}};
}

json workload_to_json(const StoredWorkload& w) {
  json samples = json::array();
  for (const StoredSample& s : w.samples) samples.push_back(sample_to_json(s));
  return {{"model", w.model}, {"graph_fingerprint", w.graph_fingerprint}, {"batch_size", w.batch_size},
          {"samples", samples}};
}

Result<StoredSample> sample_from_json(const json& j, const std::string& path) {
  if (Status s = jf::expect_object(j, path); !s) return s;
  StoredSample out;
  if (!j.contains("placement") || !j.at("placement").is_object())
    return jf::field_error(jf::join(path, "placement"), "expected a placement object");
  out.placement = j.at("placement");
  if (Status s = jf::read(j, "measured_ms", out.measured_ms, path, true); !s) return s;
  if (!(out.measured_ms > 0)) return jf::field_error(jf::join(path, "measured_ms"), "must be > 0");
  auto devices = j.find("devices");
  if (devices == j.end()) return out;
  if (!devices->is_array()) return jf::field_error(jf::join(path, "devices"), "expected an array");
  for (size_t i = 0; i < devices->size(); ++i) {
    const std::string at = jf::join(path, "devices[" + std::to_string(i) + "]");
    const json& d = devices->at(i);
    if (Status s = jf::expect_object(d, at); !s) return s;
    DeviceStats ds;
    if (Status s = jf::read(d, "device", ds.device, at, true); !s) return s;
    if (Status s = jf::read(d, "busy_ms", ds.busy_ms, at); !s) return s;
    if (Status s = jf::read(d, "comm_ms", ds.comm_ms, at); !s) return s;
    out.devices.push_back(std::move(ds));
  }
  return out;
}

// A workload's model must be a readable layer graph with the fingerprint it claims.
Result<StoredWorkload> workload_from_json(const json& j, const std::string& path) {
  if (Status s = jf::expect_object(j, path); !s) return s;
  StoredWorkload out;
  if (Status s = jf::read(j, "graph_fingerprint", out.graph_fingerprint, path, true); !s) return s;
  if (Status s = jf::read(j, "batch_size", out.batch_size, path, true); !s) return s;
  if (out.batch_size < 1) return jf::field_error(jf::join(path, "batch_size"), "must be at least 1");
  if (!j.contains("model")) return jf::field_error(jf::join(path, "model"), "missing required field");
  out.model = j.at("model");
  Result<LayerGraph> graph = model_from_json(out.model);
  if (!graph) return graph.status().nested_in(jf::join(path, "model"));
  if (graph_fingerprint(*graph) != out.graph_fingerprint)
    return jf::field_error(jf::join(path, "graph_fingerprint"), "does not match the stored model");
  auto samples = j.find("samples");
  if (samples == j.end() || !samples->is_array()) return jf::field_error(jf::join(path, "samples"), "expected an array");
  for (size_t i = 0; i < samples->size(); ++i) {
    Result<StoredSample> s = sample_from_json(samples->at(i), jf::join(path, "samples[" + std::to_string(i) + "]"));
    if (!s) return s.status();
    out.samples.push_back(std::move(*s));
  }
  return out;
}

}  // namespace

int StoredCalibration::stored_samples() const {
  int n = 0;
  for (const StoredWorkload& w : workloads) n += static_cast<int>(w.samples.size());
  return n;
}

int add_samples(StoredCalibration& s, const LayerGraph& graph, const Cluster& cluster, int64_t batch_size,
                const std::vector<CalibrationSample>& samples) {
  const std::string fingerprint = graph_fingerprint(graph);
  StoredWorkload* workload = nullptr;
  for (StoredWorkload& w : s.workloads)
    if (w.graph_fingerprint == fingerprint && w.batch_size == batch_size) workload = &w;
  if (!workload) {
    s.workloads.push_back({model_to_json(graph), fingerprint, batch_size, {}});
    workload = &s.workloads.back();
  }
  int added = 0;
  for (const CalibrationSample& sample : samples) {
    if (!sample.measured.ok || !(sample.measured.step_ms > 0)) continue;
    workload->samples.push_back(
        {placement_to_json(sample.placement, graph, cluster), sample.measured.step_ms, sample.measured.devices});
    ++added;
  }
  // Oldest first out: the workloads in the order they were first measured, samples in the order added.
  int excess = s.stored_samples() - kMaxStoredSamples;
  for (auto w = s.workloads.begin(); excess > 0 && w != s.workloads.end();) {
    const int drop = std::min<int>(excess, static_cast<int>(w->samples.size()));
    w->samples.erase(w->samples.begin(), w->samples.begin() + drop);
    excess -= drop;
    w = w->samples.empty() ? s.workloads.erase(w) : w + 1;
  }
  return added;
}

json stored_calibration_to_json(const StoredCalibration& s) {
  json workloads = json::array();
  for (const StoredWorkload& w : s.workloads) workloads.push_back(workload_to_json(w));
  return {{"format", kFormat},
          {"cluster_fingerprint", s.cluster_fingerprint},
          {"timing_method", s.timing_method},
          {"fitted_at", s.fitted_at},
          {"measurements", s.measurements},
          {"calibration", calibration_to_json(s.calibration)},
          {"workloads", workloads}};
}

Result<StoredCalibration> stored_calibration_from_json(const json& j, const Cluster& cluster, int timing_method) {
  if (Status s = jf::expect_object(j, "calibration file"); !s) return s;
  std::string format;
  if (Status s = jf::read(j, "format", format, "", true); !s) return s;
  if (format == "tapp-calibration-v1")
    return Status::error("format: tapp-calibration-v1 is an older calibration without the measurements it was "
                         "fitted from, so it cannot be refitted; run `tapp-cli calibrate` again to replace it");
  if (format != kFormat)
    return Status::error("format: \"" + format + "\" is not a TAPP calibration (expected " + kFormat + ")");
  StoredCalibration out;
  if (Status s = jf::read(j, "cluster_fingerprint", out.cluster_fingerprint, "", true); !s) return s;
  if (Status s = jf::read(j, "timing_method", out.timing_method, "", true); !s) return s;
  if (Status s = jf::read(j, "fitted_at", out.fitted_at, "", true); !s) return s;
  if (Status s = jf::read(j, "measurements", out.measurements, "", true); !s) return s;
  if (out.measurements < 1) return Status::error("measurements: must be at least 1");
  const std::string expected = cluster_fingerprint(cluster);
  if (out.cluster_fingerprint != expected)
    return Status::error("cluster_fingerprint: the calibration was fitted on another cluster (" +
                         out.cluster_fingerprint + ", this cluster is " + expected + ")");
  if (out.timing_method != timing_method)
    return Status::error("timing_method: the calibration was measured with timing method " +
                         std::to_string(out.timing_method) + ", this build times with method " +
                         std::to_string(timing_method));
  if (!j.contains("calibration")) return Status::error("calibration: missing required field");
  Result<Calibration> c = calibration_from_json(j.at("calibration"));
  if (!c) return c.status();
  if (!c->device_factor.empty() && static_cast<int>(c->device_factor.size()) != cluster.num_devices())
    return Status::error("calibration.device_factor: has " + std::to_string(c->device_factor.size()) +
                         " factors for " + std::to_string(cluster.num_devices()) + " devices");
  out.calibration = std::move(*c);
  auto workloads = j.find("workloads");
  if (workloads == j.end() || !workloads->is_array()) return jf::field_error("workloads", "expected an array");
  for (size_t i = 0; i < workloads->size(); ++i) {
    Result<StoredWorkload> w = workload_from_json(workloads->at(i), "workloads[" + std::to_string(i) + "]");
    if (!w) return w.status();
    out.workloads.push_back(std::move(*w));
  }
  return out;
}

std::string calibration_key(const std::string& cluster_fingerprint) {
  return "calibration-" + cluster_fingerprint;
}

Result<std::optional<StoredCalibration>> find_calibration(ProfileCache& store, const Cluster& cluster,
                                                          int timing_method) {
  const std::string fingerprint = cluster_fingerprint(cluster);
  std::optional<std::string> text = store.get(calibration_key(fingerprint));
  if (!text) return std::optional<StoredCalibration>{};
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return Status::error("stored calibration for cluster " + fingerprint + " is not valid JSON (corrupt); " +
                         "run `tapp-cli calibrate` again to replace it");
  Result<StoredCalibration> s = stored_calibration_from_json(j, cluster, timing_method);
  if (!s) return s.status().with_context("stored calibration for cluster " + fingerprint);
  return std::optional<StoredCalibration>(std::move(*s));
}

Status save_calibration(ProfileCache& store, const StoredCalibration& s) {
  return store.put(calibration_key(s.cluster_fingerprint), stored_calibration_to_json(s).dump(2));
}

ChosenCalibration choose_calibration(ProfileCache& store, const Cluster& cluster) {
  ChosenCalibration chosen{default_calibration(), {}, ""};
  Result<std::optional<StoredCalibration>> found = find_calibration(store, cluster, profile_timing_method());
  if (!found) {
    chosen.refused = found.error_message();
  } else if (found->has_value() && (*found)->measurements < kMinMeasurementsToUse) {
    chosen.waiting = "a fit from " + std::to_string((*found)->measurements) +
                     " measurement(s) is stored for this cluster; it is used from " +
                     std::to_string(kMinMeasurementsToUse) + " on";
  } else if (found->has_value()) {
    chosen.calibration = (*found)->calibration;
    chosen.used = calibration_used(*found);
  }
  return chosen;
}

std::string utc_now_iso8601() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

}  // namespace tapp
