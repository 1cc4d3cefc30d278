// The server's calibrations: a cluster's fitted calibration kept in the job database (its key/value cache).
#include <doctest/doctest.h>

#include "core/cluster_fingerprint.h"
#include "server_process.h"
#include "service/job_store.h"
#include "service/sqlite_profile_cache.h"
#include "simulator/calibration_store.h"

using namespace tapp;
using namespace tapp::service;

namespace {

Cluster three_devices() {
  Cluster c;
  c.devices = {{"a", "cpu", 1, 4096, 1.0, "local"}, {"b", "cpu", 1, 4096, 0.5, "local"},
               {"c", "cpu", 2, 4096, 0.25, "local"}};
  return c;
}

StoredCalibration fitted(const Cluster& c) {
  StoredCalibration s;
  s.cluster_fingerprint = cluster_fingerprint(c);
  s.timing_method = 7;
  s.fitted_at = "2026-11-23T09:10:00Z";
  s.measurements = 9;
  s.calibration.device_factor = {1.1, 1.2, 0.8};
  s.calibration.message_overhead_ms = 0.25;
  return s;
}

}  // namespace

TEST_CASE("a calibration saved in the job database is found for its cluster after reopening") {
  const std::string path = testing::temp_dir("calibration") + "/jobs.db";
  Cluster c = three_devices();
  {
    auto store = JobStore::open(path);
    REQUIRE(store.is_ok());
    SqliteProfileCache calibrations(**store);
    REQUIRE(save_calibration(calibrations, fitted(c)).is_ok());
  }
  auto store = JobStore::open(path);
  REQUIRE(store.is_ok());
  SqliteProfileCache calibrations(**store);
  auto found = find_calibration(calibrations, c, 7);
  REQUIRE(found.is_ok());
  REQUIRE(found->has_value());
  CHECK((*found)->measurements == 9);
  CHECK((*found)->calibration.device_factor == std::vector<double>{1.1, 1.2, 0.8});

  Cluster slower = c;
  slower.devices[2].speed = 0.125;
  auto none = find_calibration(calibrations, slower, 7);
  REQUIRE(none.is_ok());
  CHECK_FALSE(none->has_value());

  auto other_method = find_calibration(calibrations, c, 8);
  REQUIRE_FALSE(other_method.is_ok());
  CHECK(other_method.error_message().find("timing_method") != std::string::npos);
}
