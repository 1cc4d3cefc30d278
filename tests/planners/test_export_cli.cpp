// `tapp-cli export`: the command line end to end (estimated costs): the four
// formats and the per-stage breakdown in JSON, and refusals with exit code 2.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Run {
  int exit_code = -1;
  std::string out;
};

Run export_cli(const std::string& args, bool with_stderr = false) {
  const std::string examples = std::string(TAPP_SOURCE_DIR) + "/examples/";
  std::string cmd = std::string(TAPP_BIN_DIR) + "/tapp-cli export " + args + " --devices " + examples +
                    "cluster_2cpu.json --costs estimated" + (with_stderr ? " 2>&1" : " 2>/dev/null");
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string example(const std::string& name) { return std::string(TAPP_SOURCE_DIR) + "/examples/" + name; }

}  // namespace

TEST_CASE("tapp-cli export writes all four formats and the breakdown of every stage") {
  Run r = export_cli(example("placement_alexnet_cifar_2stage.json") + " --model alexnet_cifar --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["formats"]["pipe"]["balance"] == nlohmann::json({8, 13}));
  CHECK(j["formats"]["pipe"]["devices"] == nlohmann::json({"cpu0", "cpu1"}));
  CHECK(j["formats"]["deepspeed"]["parts"] == nlohmann::json({0, 8, 21}));
  CHECK(j["formats"]["megatron"]["layers_per_stage"] == nlohmann::json({8, 13}));
  CHECK(j["formats"]["pippy"]["split_points"] == nlohmann::json({"conv4"}));
  const auto& stages = j["breakdown"]["stages"];
  REQUIRE(stages.size() == 2u);
  CHECK(stages[1]["layers"][0] == "conv4");
  for (const auto& s : stages) {
    const auto& d = s["devices"][0];
    CHECK(d["micro_batches"] == 4);
    CHECK(d["forward_ms"].get<double>() > 0);
    CHECK(d["backward_ms"].get<double>() > 0);
    CHECK(d["peak_memory_bytes"].get<int64_t>() > 0);
    CHECK(d.contains("bubble_ms"));
  }
  CHECK(j["breakdown"]["step_ms"].get<double>() > 0);
}

TEST_CASE("tapp-cli export: a format that cannot express the placement exits 2 naming the device and why") {
  // Its cpu0 holds two stages (conv1..relu3 and fc7..fc8).
  Run r = export_cli(
      example("placement_alexnet_cifar_noncontiguous.json") + " --model alexnet_cifar --format deepspeed",
      true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("device cpu0 runs stage 0") != std::string::npos);
  CHECK(r.out.find("its own rank") != std::string::npos);
  // Pipe takes it (two partitions on cpu0), so `all` succeeds and says which format refused.
  Run all =
      export_cli(example("placement_alexnet_cifar_noncontiguous.json") + " --model alexnet_cifar", true);
  CHECK(all.exit_code == 0);
  CHECK(all.out.find("balance [8, 10, 3]") != std::string::npos);
  CHECK(all.out.find("deepspeed: cannot express it") != std::string::npos);
  Run bad = export_cli(
      example("placement_alexnet_cifar_2stage.json") + " --model alexnet_cifar --format fsdp", true);
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("--format: unknown \"fsdp\"") != std::string::npos);
}
