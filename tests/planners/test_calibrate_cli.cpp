// `tapp-cli calibrate`: several models measured on real workers share one fit;
// --save / --load redo it without measuring; bad input exits 2 naming it.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tests/planners/cli_run.h"

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = std::string(TAPP_BIN_DIR) + "/../test_calibrate_cli_" + name;
  std::ofstream(path) << text;
  return path;
}

const char* kTwoDevices = R"({"name": "two", "devices": [
  {"name": "a", "speed": 1.0, "memory_mb": 4096}, {"name": "b", "speed": 1.0, "memory_mb": 4096}]})";

const std::string kQuick = " --costs estimated --no-store --samples 4 --steps 1 --warmup 0 --batch 8 --seed 3 --json";

}  // namespace

TEST_CASE("tapp-cli calibrate fits several models together, and --load refits their saved measurements") {
  const std::string cluster = write_temp("cluster.json", kTwoDevices);
  const std::string saved = std::string(TAPP_BIN_DIR) + "/../test_calibrate_cli_samples.json";
  auto r = tapp::test::run_cli("calibrate mlp tiny_inception --devices " + cluster + kQuick + " --save " + saved);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j["models"].size() == 2u);
  CHECK(j["models"][0]["model"] == "mlp");
  CHECK(j["models"][1]["model"] == "tiny_inception");
  CHECK(j["models"][0]["samples"] == 2);  // the 4 samples shared between the two
  CHECK(j["models"][1]["samples"] == 2);
  std::set<std::string> placed;
  for (const auto& p : j["placements"]) {
    placed.insert(p["model"].get<std::string>());
    CHECK(p["measured_ms"].get<double>() > 0);
    CHECK(p["predicted_leave_one_out_ms"].get<double>() > 0);  // a fit from the other 3 samples
  }
  CHECK(placed == std::set<std::string>{"mlp", "tiny_inception"});
  CHECK(j["calibrated_leave_one_out"]["n"] == 4);
  // The record a plan would find keeps each model's measurements apart.
  REQUIRE(j["stored"]["workloads"].size() == 2u);
  CHECK(j["stored"]["measurements"] == 4);

  auto again = tapp::test::run_cli("calibrate --devices " + cluster + " --load " + saved + " --costs estimated --batch 8 --no-store --json");
  REQUIRE(again.exit_code == 0);
  const nlohmann::json k = nlohmann::json::parse(again.out);
  CHECK(k["models"].size() == 2u);  // the file's models, not the default ones
  CHECK(k["calibration"] == j["calibration"]);
  CHECK(k["calibrated_leave_one_out"] == j["calibrated_leave_one_out"]);
}

TEST_CASE("tapp-cli calibrate refuses an unknown model or a file that holds no samples, exit 2 naming it") {
  const std::string cluster = write_temp("cluster.json", kTwoDevices);
  auto r = tapp::test::run_cli("calibrate mlp no_such_model --devices " + cluster + kQuick, true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("no_such_model") != std::string::npos);
  const std::string junk = write_temp("junk.json", R"({"models": [{"spec": "mlp", "samples": [{"placement": 3}]}]})");
  auto bad = tapp::test::run_cli("calibrate --devices " + cluster + " --load " + junk + " --no-store", true);
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("--load") != std::string::npos);
  const std::string empty = write_temp("empty.json", "[1, 2]");
  auto none = tapp::test::run_cli("calibrate --devices " + cluster + " --load " + empty + " --no-store", true);
  CHECK(none.exit_code == 2);
  CHECK(none.out.find("is not a samples file") != std::string::npos);
}
