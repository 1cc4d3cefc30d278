#include "simulator/calibration_store.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "core/cluster_fingerprint.h"
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

json stored_calibration_to_json(const StoredCalibration& s) {
  return {{"format", "tapp-calibration-v1"},
          {"cluster_fingerprint", s.cluster_fingerprint},
          {"timing_method", s.timing_method},
          {"fitted_at", s.fitted_at},
          {"measurements", s.measurements},
          {"calibration", calibration_to_json(s.calibration)}};
}

Result<StoredCalibration> stored_calibration_from_json(const json& j, const Cluster& cluster, int timing_method) {
  if (Status s = jf::expect_object(j, "calibration file"); !s) return s;
  std::string format;
  if (Status s = jf::read(j, "format", format, "", true); !s) return s;
  if (format != "tapp-calibration-v1")
    return Status::error("format: \"" + format + "\" is not a TAPP calibration (expected tapp-calibration-v1)");
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
