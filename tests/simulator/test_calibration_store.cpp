#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/cluster_fingerprint.h"
#include "model/model_json.h"
#include "simulator/calibration_store.h"

using namespace tapp;
using nlohmann::json;

namespace {

Cluster pair_cluster(double edge_speed = 0.5) {
  Cluster c;
  c.devices = {{"edge", "cpu", 1, 2048, edge_speed, "local"}, {"server", "cpu", 1, 4096, 1.0, "local"}};
  return c;
}

StoredCalibration fitted_on(const Cluster& c, int method = 3) {
  StoredCalibration s;
  s.cluster_fingerprint = cluster_fingerprint(c);
  s.timing_method = method;
  s.fitted_at = "2026-11-23T09:00:00Z";
  s.measurements = 12;
  s.calibration.device_factor = {1.25, 0.9};
  s.calibration.task_overhead_ms = 0.4;
  s.calibration.step_overhead_ms = 3.5;
  return s;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("tapp-calib-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("a calibration stored for a cluster is found again for the same cluster") {
  TempDir dir;
  FileProfileCache store(dir.path.string());
  Cluster c = pair_cluster();
  REQUIRE(save_calibration(store, fitted_on(c)).is_ok());
  auto found = find_calibration(store, c, 3);
  REQUIRE(found.is_ok());
  REQUIRE(found->has_value());
  CHECK((*found)->measurements == 12);
  CHECK((*found)->calibration.device_factor == std::vector<double>{1.25, 0.9});
  CHECK((*found)->calibration.step_overhead_ms == doctest::Approx(3.5));
  CHECK(calibration_used(*found).fitted);
  CHECK(calibration_used_to_json(calibration_used(*found))["measurements"] == 12);
}

TEST_CASE("a cluster with no stored calibration uses the default") {
  TempDir dir;
  FileProfileCache store(dir.path.string());
  auto found = find_calibration(store, pair_cluster(), 3);
  REQUIRE(found.is_ok());
  CHECK_FALSE(found->has_value());
  CHECK(calibration_used_to_json(calibration_used(std::nullopt))["kind"] == "default");
}

TEST_CASE("another cluster's stored calibration is not found under this cluster's key") {
  TempDir dir;
  FileProfileCache store(dir.path.string());
  REQUIRE(save_calibration(store, fitted_on(pair_cluster(0.5))).is_ok());
  auto found = find_calibration(store, pair_cluster(0.25), 3);
  REQUIRE(found.is_ok());
  CHECK_FALSE(found->has_value());
}

TEST_CASE("a calibration file of another cluster, another timing method or corrupt is refused with the reason") {
  TempDir dir;
  FileProfileCache store(dir.path.string());
  Cluster c = pair_cluster();
  const std::string key = calibration_key(cluster_fingerprint(c));

  // An entry copied under this cluster's key from another cluster.
  REQUIRE(store.put(key, stored_calibration_to_json(fitted_on(pair_cluster(0.25))).dump()).is_ok());
  auto other_cluster = find_calibration(store, c, 3);
  REQUIRE_FALSE(other_cluster.is_ok());
  CHECK(other_cluster.error_message().find("cluster_fingerprint: the calibration was fitted on another cluster") !=
        std::string::npos);

  REQUIRE(save_calibration(store, fitted_on(c, /*method=*/2)).is_ok());
  auto other_method = find_calibration(store, c, 3);
  REQUIRE_FALSE(other_method.is_ok());
  CHECK(other_method.error_message().find("timing_method: the calibration was measured with timing method 2") !=
        std::string::npos);

  REQUIRE(store.put(key, "{\"format\": \"tapp-calibration-v1\", \"cluster_fi").is_ok());
  auto corrupt = find_calibration(store, c, 3);
  REQUIRE_FALSE(corrupt.is_ok());
  CHECK(corrupt.error_message().find("not valid JSON (corrupt)") != std::string::npos);

  json wrong = stored_calibration_to_json(fitted_on(c));
  wrong["calibration"]["device_factor"] = {1.0, 1.0, 1.0};
  REQUIRE(store.put(key, wrong.dump()).is_ok());
  auto factors = find_calibration(store, c, 3);
  REQUIRE_FALSE(factors.is_ok());
  CHECK(factors.error_message().find("calibration.device_factor: has 3 factors for 2 devices") != std::string::npos);

  json not_ours = {{"format", "something-else"}};
  REQUIRE(store.put(key, not_ours.dump()).is_ok());
  CHECK(find_calibration(store, c, 3).error_message().find("is not a TAPP calibration") != std::string::npos);
}

namespace {
// A two-layer JSON model (no zoo, no LibTorch) and a sample of it split over the pair.
LayerGraph two_layer_model() {
  auto g = model_from_json(json::parse(R"({"name": "tiny", "input_shape": [4],
    "layers": [{"name": "fc1", "op": "linear", "inputs": [], "attrs": {"out": 8}},
               {"name": "fc2", "op": "linear", "inputs": ["fc1"], "attrs": {"out": 2}}]})"));
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  return *g;
}

CalibrationSample split_sample(double measured_ms) {
  CalibrationSample s;
  s.placement.layer_group = {0, 1};
  s.placement.group_device = {0, 1};
  s.placement.micro_batches = 2;
  s.measured.ok = true;
  s.measured.step_ms = measured_ms;
  s.measured.devices = {{"edge", measured_ms / 2, 0.1, 0, 0}};
  return s;
}
}  // namespace

TEST_CASE("a stored calibration keeps the measured steps it was fitted from, with the model they are of") {
  TempDir dir;
  FileProfileCache store(dir.path.string());
  Cluster c = pair_cluster();
  LayerGraph g = two_layer_model();
  StoredCalibration s = fitted_on(c);
  CHECK(add_samples(s, g, c, 8, {split_sample(12.5), split_sample(14.0)}) == 2);
  CHECK(add_samples(s, g, c, 8, {split_sample(13.0)}) == 1);  // the same workload
  CHECK(add_samples(s, g, c, 16, {split_sample(20.0)}) == 1);  // another batch size: another workload
  REQUIRE(save_calibration(store, s).is_ok());
  auto found = find_calibration(store, c, 3);
  REQUIRE_MESSAGE(found.is_ok(), found.error_message());
  REQUIRE(found->has_value());
  const StoredCalibration& back = **found;
  CHECK(back.stored_samples() == 4);
  REQUIRE(back.workloads.size() == 2);
  CHECK(back.workloads[0].batch_size == 8);
  CHECK(back.workloads[0].graph_fingerprint == graph_fingerprint(g));
  REQUIRE(back.workloads[0].samples.size() == 3);
  CHECK(back.workloads[0].samples[2].measured_ms == doctest::Approx(13.0));
  CHECK(back.workloads[0].samples[0].devices.at(0).busy_ms == doctest::Approx(6.25));
  auto p = placement_from_json(back.workloads[0].samples[0].placement, g, c);
  REQUIRE(p.is_ok());
  CHECK(p->layer_group == std::vector<int>{0, 1});
}

TEST_CASE("the stored samples are bounded: the oldest go first") {
  Cluster c = pair_cluster();
  LayerGraph g = two_layer_model();
  StoredCalibration s = fitted_on(c);
  std::vector<CalibrationSample> many;
  for (int i = 0; i < kMaxStoredSamples + 5; ++i) many.push_back(split_sample(10.0 + i));
  add_samples(s, g, c, 8, many);
  CHECK(s.stored_samples() == kMaxStoredSamples);
  CHECK(s.workloads[0].samples.front().measured_ms == doctest::Approx(15.0));
}

TEST_CASE("an old calibration without its samples, or one whose samples are corrupt, is refused with the reason") {
  TempDir dir;
  FileProfileCache store(dir.path.string());
  Cluster c = pair_cluster();
  const std::string key = calibration_key(cluster_fingerprint(c));
  json v1 = stored_calibration_to_json(fitted_on(c));
  v1["format"] = "tapp-calibration-v1";
  v1.erase("workloads");
  REQUIRE(store.put(key, v1.dump()).is_ok());
  auto old = find_calibration(store, c, 3);
  REQUIRE_FALSE(old.is_ok());
  CHECK(old.error_message().find("tapp-calibration-v1 is an older calibration without the measurements") !=
        std::string::npos);
  CHECK(old.error_message().find("tapp-cli calibrate") != std::string::npos);

  StoredCalibration s = fitted_on(c);
  add_samples(s, two_layer_model(), c, 8, {split_sample(12.0)});
  json bad_fingerprint = stored_calibration_to_json(s);
  bad_fingerprint["workloads"][0]["graph_fingerprint"] = "0000000000000000";
  REQUIRE(store.put(key, bad_fingerprint.dump()).is_ok());
  CHECK(find_calibration(store, c, 3).error_message().find("workloads[0].graph_fingerprint: does not match") !=
        std::string::npos);

  json bad_sample = stored_calibration_to_json(s);
  bad_sample["workloads"][0]["samples"][0]["measured_ms"] = -1;
  REQUIRE(store.put(key, bad_sample.dump()).is_ok());
  CHECK(find_calibration(store, c, 3).error_message().find("workloads[0].samples[0].measured_ms: must be > 0") !=
        std::string::npos);
}

TEST_CASE("a stored fit from fewer than 3 measurements is kept but not used yet, and says so") {
  TempDir dir;
  FileProfileCache store(dir.path.string());
  Cluster c = pair_cluster();
  StoredCalibration small = fitted_on(c, profile_timing_method());
  small.measurements = kMinMeasurementsToUse - 1;
  REQUIRE(save_calibration(store, small).is_ok());
  ChosenCalibration chosen = choose_calibration(store, c);
  CHECK_FALSE(chosen.used.fitted);
  CHECK(chosen.refused.empty());
  CHECK(chosen.waiting == "a fit from 2 measurement(s) is stored for this cluster; it is used from 3 on");
  CHECK(chosen.calibration.step_overhead_ms == doctest::Approx(default_calibration().step_overhead_ms));

  small.measurements = kMinMeasurementsToUse;
  REQUIRE(save_calibration(store, small).is_ok());
  chosen = choose_calibration(store, c);
  CHECK(chosen.used.fitted);
  CHECK(chosen.waiting.empty());
  CHECK(chosen.calibration.step_overhead_ms == doctest::Approx(3.5));
}
