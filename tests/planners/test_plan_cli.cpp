// `tapp-cli plan`: the command line end to end (simulate evaluator, estimated costs).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "service/cli/text_cells.h"
#include "tests/planners/cli_run.h"

namespace {

using Run = tapp::test::CliRun;

Run cli(const std::string& args, bool with_stderr = false) { return tapp::test::run_cli(args, with_stderr); }

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = std::string(TAPP_BIN_DIR) + "/../test_plan_cli_" + name;
  std::ofstream(path) << text;
  return path;
}

const char* kCluster = R"({"name": "three", "devices": [
  {"name": "a", "speed": 1.0, "memory_mb": 4096}, {"name": "b", "speed": 0.5, "memory_mb": 4096},
  {"name": "c", "speed": 0.5, "memory_mb": 4096}],
  "links": [{"from": "a", "to": "b", "bandwidth_mbps": 100, "latency_ms": 1}],
  "default_link": {"bandwidth_mbps": 1000, "latency_ms": 0.1}})";

}  // namespace

TEST_CASE("tapp-cli plan --planner all prints one JSON row per planner") {
  std::string cluster = write_temp("cluster.json", kCluster);
  Run r = cli("plan mlp --devices " + cluster + " --planner all --costs estimated --budget 20 --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["evaluator"] == "simulate");
  REQUIRE(j["rows"].size() == 12u);
  for (const auto& row : j["rows"]) {
    CHECK(row.contains("planner"));
    CHECK(row["report"].contains("step_ms"));
  }
  CHECK(j["rows"][5]["planner"] == "dp");
  CHECK(j["rows"][5]["report"]["ok"] == true);
}

TEST_CASE("tapp-cli plan writes the placement it found, and `run`'s placement loader reads it back") {
  std::string cluster = write_temp("cluster.json", kCluster);
  std::string out = std::string(TAPP_BIN_DIR) + "/../test_plan_cli_placement.json";
  Run r = cli("plan mlp --devices " + cluster + " --planner dp --costs estimated --out " + out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("planner dp") != std::string::npos);
  std::ifstream f(out);
  nlohmann::json p = nlohmann::json::parse(f);
  CHECK(p["source"] == "dp");
  CHECK(p.contains("groups"));
  CHECK(p.contains("layers"));
}

TEST_CASE("tapp-cli plan rejects a bad cluster, planner or evaluator with exit code 2 naming the field") {
  std::string bad = write_temp("bad_cluster.json", R"({"devices": [{"name": "a", "speed": 2000}]})");
  Run r = cli("plan mlp --devices " + bad + " --costs estimated", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("speed") != std::string::npos);
  // A device 4x faster than this host: planned by simulation, refused by measurement naming it.
  std::string fast = write_temp("fast_cluster.json", R"({"devices": [{"name": "a"}, {"name": "fast", "speed": 4}]})");
  Run simulated = cli("plan mlp --devices " + fast + " --planner dp --costs estimated", true);
  CHECK(simulated.exit_code == 0);
  Run measured = cli("plan mlp --devices " + fast + " --planner dp --costs estimated --evaluator measure", true);
  CHECK(measured.exit_code == 2);
  CHECK(measured.out.find("devices[1].speed: 4 cannot be emulated on this host (device \"fast\"; measurement needs "
                          "speed <= 1); use --evaluator simulate") != std::string::npos);
  Run ran = cli("run mlp --devices " + fast + " --strategy bsp --steps 1", true);  // run has no --evaluator
  CHECK(ran.exit_code == 2);
  CHECK(ran.out.find("cannot be emulated on this host") != std::string::npos);
  CHECK(ran.out.find("simulate the plan instead: tapp-cli plan") != std::string::npos);
  CHECK(ran.out.find("--evaluator") == std::string::npos);
  std::string cluster = write_temp("cluster.json", kCluster);
  Run p = cli("plan mlp --devices " + cluster + " --planner magic --costs estimated", true);
  CHECK(p.exit_code == 2);
  CHECK(p.out.find("--planner") != std::string::npos);
  Run e = cli("plan mlp --devices " + cluster + " --evaluator guess --costs estimated", true);
  CHECK(e.exit_code == 2);
  CHECK(e.out.find("--evaluator") != std::string::npos);
}

TEST_CASE("a folder where a file is expected is refused with exit code 2 naming it, never a crash") {
  // std::ifstream opens a folder and throws on the first read: each of these ended in std::terminate.
  const std::string folder = std::string(TAPP_BIN_DIR) + "/../test_plan_cli_folder.json";
  std::filesystem::create_directories(folder);
  const std::string cluster = write_temp("cluster.json", kCluster);
  for (const std::string& args :
       {"plan mlp --devices " + folder, "plan mlp --devices " + cluster + " --placement " + folder,
        "plan mlp --devices " + cluster + " --calibration " + folder, "export " + folder + " --model mlp --devices " + cluster,
        "optimize mlp --devices " + folder, "optimize mlp --devices " + cluster + " --policy " + folder + " --no-verify"}) {
    INFO(args);
    Run r = cli(args + " --costs estimated", true);
    CHECK(r.exit_code == 2);
    CHECK(r.out.find(folder) != std::string::npos);
    CHECK(r.out.find("is a folder, not a file") != std::string::npos);
  }
}

TEST_CASE("a cluster file with a bad field is refused naming the file once and the field, by every command") {
  const std::string cluster = write_temp("bad_speed_cluster.json", R"({"devices": [{"name": "a", "speed": -1}]})");
  for (const std::string& args :
       {"plan mlp --devices " + cluster, "optimize mlp --devices " + cluster + " --no-verify --iterations 2",
        "train-policy --models mlp --clusters " + cluster + " --iterations 2 --out " + cluster + ".pt"}) {
    INFO(args);
    Run r = cli(args + " --costs estimated", true);
    CHECK(r.exit_code == 2);
    const size_t named = r.out.find(cluster);
    REQUIRE(named != std::string::npos);
    CHECK(r.out.find(cluster, named + 1) == std::string::npos);
    CHECK(r.out.find(cluster + ": devices[0].speed: must be in [0.001, 1000]") != std::string::npos);
    CHECK(r.out.find("cluster.devices") == std::string::npos);  // the request's name for it, not the user's
  }
  CHECK_FALSE(std::filesystem::exists(cluster + ".pt"));
}

TEST_CASE("an output file that cannot be written is refused with exit code 2 before any work, by every command") {
  const std::string cluster = write_temp("cluster.json", kCluster);
  const std::string missing = "/nonexistent_tapp_folder/out.json";
  const std::string folder = std::filesystem::temp_directory_path().string();
  for (const std::string& args : std::vector<std::string>{
           "plan mlp --devices " + cluster + " --costs estimated --out ", "optimize mlp --devices " + cluster +
        " --costs estimated --no-verify --iterations 2 --out ", "export-model mlp --out ",
        "calibrate mlp --devices " + cluster + " --no-store --save ", "calibrate mlp --devices " + cluster + " --out ",
        "train-policy --models mlp --clusters " + cluster + " --iterations 2 --out "}) {
    for (const std::string& out : {missing, folder}) {
      INFO(args, out);
      Run r = cli(args + out, true);
      CHECK(r.exit_code == 2);
      CHECK(r.out.find(out + ": ") != std::string::npos);
      CHECK(r.out.find(out == missing ? "does not exist" : "is a folder, not a file") != std::string::npos);
      CHECK(r.out.find("placement") == std::string::npos);  // refused before planning, not after printing a plan
    }
  }
}

TEST_CASE("a seed or a flag out of its range is refused with exit code 2 naming it") {
  const std::string cluster = write_temp("cluster.json", kCluster);
  for (const std::string& args : std::vector<std::string>{
           "plan mlp --devices " + cluster + " --costs estimated --seed -1",
        "optimize mlp --devices " + cluster + " --costs estimated --no-verify --iterations 2 --seed -1",
        "optimize mlp --devices " + cluster + " --costs estimated --no-verify --iterations 2 --seed 99999999999999999999",
        "run mlp --devices " + cluster + " --strategy single --steps 1 --seed 1.5"}) {
    INFO(args);
    Run r = cli(args, true);
    CHECK(r.exit_code == 2);
    CHECK(r.out.find("--seed") != std::string::npos);
  }
  Run tpu = cli("profile mlp --estimate --device tpu", true);
  CHECK(tpu.exit_code == 2);
  CHECK(tpu.out.find("--device tpu") != std::string::npos);
  Run threads = cli("profile mlp --estimate --threads 100000", true);
  CHECK(threads.exit_code == 2);
  CHECK(threads.out.find("--threads") != std::string::npos);
}

TEST_CASE("a value wider than its column never runs into its neighbour") {
  using tapp::cli::cell;
  using tapp::cli::label;
  CHECK(cell("1.00x", 8) == "   1.00x");
  CHECK(cell("43389660.0", 8) == " 43389660.0");
  CHECK(label("TAPP (policy)", 8) + cell("0.75", 2) == "TAPP (policy)  0.75");
  CHECK(label("dp", 4) == "dp  ");
}

TEST_CASE("tapp-cli plan --placement refuses what the file cannot say by itself with exit code 2 naming the field") {
  const std::string cluster = write_temp("cluster.json", kCluster);
  Run planned = cli("plan mlp --devices " + cluster + " --planner bsp --costs estimated --json");
  REQUIRE(planned.exit_code == 0);
  nlohmann::json bsp = nlohmann::json::parse(planned.out)["placement"];
  REQUIRE(bsp["data_parallel"] == true);
  bsp["groups"] = {"a", "a"};  // a replica twice
  Run twice = cli("plan mlp --devices " + cluster + " --costs estimated --placement " +
                      write_temp("dp_twice.json", bsp.dump()), true);
  CHECK(twice.exit_code == 2);
  CHECK(twice.out.find("placement.groups[1]: a data-parallel placement names each device once") != std::string::npos);
  bsp["groups"] = {"a", "b"};
  bsp["micro_batches"] = 64;  // more than the batch
  Run micro = cli("plan mlp --devices " + cluster + " --costs estimated --placement " +
                      write_temp("dp_micro.json", bsp.dump()), true);
  CHECK(micro.exit_code == 2);
  CHECK(micro.out.find("placement.micro_batches") != std::string::npos);
}

TEST_CASE("out-of-range flags, an unwritable --out and a file of another kind are refused before any search") {
  const std::string cluster = write_temp("cluster.json", kCluster);
  const std::string optimize = "optimize mlp --devices " + cluster + " --costs estimated --no-verify ";
  // Each ran the default 600 iterations, or failed only after the search.
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {"--iterations -1", "--iterations"}, {"--time-budget -1", "--time-budget"},
           {"--time-budget nan", "--time-budget"}, {"--time-budget inf", "--time-budget"},
           {"--input-size -1", "--input-size"}, {"--batch 0", "--batch"},
           {"--iterations 1 --out " + std::string(TAPP_BIN_DIR), "--out"},
           {"--iterations 1 --out /nonexistent-folder/plan.json", "--out"}}) {
    INFO(args);
    Run r = cli(optimize + args, true);
    CHECK(r.exit_code == 2);
    CHECK(r.out.find(named) != std::string::npos);
  }
  Run limit = cli("plan mlp --devices " + cluster + " --costs estimated --exhaustive-limit -1", true);
  CHECK(limit.exit_code == 2);
  CHECK(limit.out.find("--exhaustive-limit") != std::string::npos);
  // A model file given as the calibration: read as all defaults before.
  Run model_as_calibration = cli("plan mlp --devices " + cluster + " --costs estimated --calibration " +
                                     write_temp("model_as_calibration.json", R"({"name": "m", "input_shape": [4], "layers": []})"),
                                 true);
  CHECK(model_as_calibration.exit_code == 2);
  CHECK(model_as_calibration.out.find("calibration.input_shape: unknown field (expected device_factor") != std::string::npos);
}

TEST_CASE("--costs takes both names of the cached source, auto and cached, in every command") {
  // plan, export and train-policy said auto, optimize (and the HTTP API) cached:
  // each refused the other's word for the same thing.
  const std::string cluster = write_temp("costs_names_cluster.json", kCluster);
  for (const std::string& name : {"auto", "cached"})
    for (const std::string& args :
         {"plan mlp --devices " + cluster + " --planner single", "optimize mlp --devices " + cluster +
          " --no-verify --no-baselines --iterations 2", "train-policy --models mlp --clusters " + cluster +
          " --iterations 1 --cloning-epochs 1 --out " + cluster + "." + name + ".pt"}) {
      INFO(args, " --costs ", name);
      Run r = cli(args + " --costs " + name, true);
      CHECK(r.exit_code == 0);
    }
  Run bad = cli("plan mlp --devices " + cluster + " --costs measured", true);
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("expected auto (or cached), profile or estimated") != std::string::npos);
}

TEST_CASE("tapp-cli run that outlasts its timeout says which flag gives a slow step more time") {
  // BSP's all-reduce of mlp's weights over 1 Mbit/s takes seconds: over a 1 s timeout.
  const std::string cluster = write_temp("slow_link_cluster.json", R"({"devices": [{"name": "a"}, {"name": "b"}],
      "default_link": {"bandwidth_mbps": 1, "latency_ms": 1}})");
  Run r = cli("run mlp --devices " + cluster + " --strategy bsp --timeout 1 --steps 1 --warmup 0 --batch 4", true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("tapp-cli run: timeout: no progress from the workers for 1.0 s") != std::string::npos);
  CHECK(r.out.find("; a step can take longer on slow links or devices: raise --timeout") != std::string::npos);
}

TEST_CASE("tapp-cli plan says so and exits 1 when no placement fits") {
  std::string tiny = write_temp("tiny_cluster.json", R"({"devices": [{"name": "a", "memory_mb": 1}, {"name": "b", "memory_mb": 1}]})");
  Run r = cli("plan vgg5 --devices " + tiny + " --planner time --costs estimated", true);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("memory") != std::string::npos);
}

TEST_CASE("tapp-cli plan --allow-al adds the AL form of the best pipeline row as its own row") {
  std::string cluster = write_temp("cluster.json", kCluster);
  Run r = cli("plan mlp --devices " + cluster + " --planner all --costs estimated --budget 20 --allow-al --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j.contains("al"));
  CHECK(j["al"]["planner"] == "al");
  CHECK(j["al"]["report"]["ok"] == true);
  CHECK(j["al"]["placement"]["schedule"] == "al");
  CHECK(j["al"]["report"]["step_ms"].get<double>() > 0);
  // Its blocks are a pipeline row's groups: a planner row of that name exists.
  bool found = false;
  for (const auto& row : j["rows"]) found = found || row["planner"] == j["al"]["from"];
  CHECK(found);
  // Without --allow-al there is no AL row: it changes the learning algorithm, never silently.
  Run plain = cli("plan mlp --devices " + cluster + " --planner all --costs estimated --budget 20 --json");
  REQUIRE(plain.exit_code == 0);
  CHECK_FALSE(nlohmann::json::parse(plain.out).contains("al"));
}

TEST_CASE("tapp-cli plan and run refuse al where it cannot be, with exit code 2 naming the option or field") {
  std::string cluster = write_temp("cluster.json", kCluster);
  Run r = cli("plan mlp --devices " + cluster + " --costs estimated --schedule al", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--schedule") != std::string::npos);
  // A placement whose group 0 comes back after group 1 has no AL form.
  std::string placement = write_temp("al_placement.json", R"({"groups": ["a", "b"], "micro_batches": 2,
    "layers": {"flatten": 0, "fc1": 0, "relu1": 1, "fc2": 0, "relu2": 1, "fc3": 1}})");
  Run bad = cli("plan mlp --devices " + cluster + " --costs estimated --placement " + placement + " --schedule al", true);
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.find("placement.layers[3]") != std::string::npos);
  // More micro-batches than the batch: bad input for its AL form as for the pipeline, not a failed evaluation.
  std::string contiguous = write_temp("al_contiguous.json", R"({"groups": ["a", "b"], "micro_batches": 4,
    "layers": {"flatten": 0, "fc1": 0, "relu1": 0, "fc2": 1, "relu2": 1, "fc3": 1}})");
  for (const char* schedule : {"al", "gpipe"}) {
    Run small = cli("plan mlp --devices " + cluster + " --costs estimated --batch 2 --placement " + contiguous +
                        " --schedule " + schedule, true);
    CHECK(small.exit_code == 2);
    CHECK(small.out.find("placement.micro_batches") != std::string::npos);
  }
  Run blocks = cli("run mlp --devices " + cluster + " --al-blocks 2", true);
  CHECK(blocks.exit_code == 2);
  CHECK(blocks.out.find("--al-blocks") != std::string::npos);
  Run too_many = cli("run mlp --devices " + cluster + " --schedule al --al-blocks 500", true);
  CHECK(too_many.exit_code == 2);
  CHECK(too_many.out.find("al.blocks") != std::string::npos);
}

TEST_CASE("a cluster's relative layer library path is read from beside the cluster file, by plan and by optimize") {
  // The test runs outside the source tree, so a path taken from the working directory fails.
  const std::string cluster = std::string(TAPP_SOURCE_DIR) + "/examples/cluster_devices_as_users_have_them.json";
  Run plan = cli("plan alexnet_cifar --devices " + cluster + " --planner dp --costs estimated", true);
  CHECK_MESSAGE(plan.exit_code == 0, plan.out);
  Run optimize = cli("optimize alexnet_cifar --devices " + cluster +
                         " --iterations 2 --no-baselines --no-verify --costs estimated --json", true);
  REQUIRE_MESSAGE(optimize.exit_code == 0, optimize.out);
  CHECK(optimize.out.find("cannot open") == std::string::npos);
}
