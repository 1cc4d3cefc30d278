// Replicated groups in a Placement: the JSON form (a group names an array of
// devices), round-robin micro-batches, the memory rule per replica, and the
// refusals that name the field (a device twice, too few micro-batches,
// aggregation_every < 1, a replicated group in a cycle of groups).
#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>
#include <string>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "model/model_json.h"
#include "tests/model/linear_chain.h"

using namespace tapp;
using nlohmann::json;

namespace {

// fc0 -> fc1 -> fc2 -> fc3, a chain.
LayerGraph chain() { return test::linear_chain({8, 8, 8, 8}); }

Cluster devices(int n) {
  Cluster c;
  for (int i = 0; i < n; ++i) {
    Device d;
    d.name = "cpu" + std::to_string(i);
    c.devices.push_back(d);
  }
  return c;
}

std::string error_of(const json& j, const LayerGraph& g, const Cluster& c, int64_t batch = 16) {
  auto p = placement_from_json(j, g, c);
  if (!p) return p.error_message();
  Status s = validate_placement(*p, g, c, batch);
  return s ? "" : s.message();
}

}  // namespace

TEST_CASE("a replicated group round-trips through JSON and runs micro-batches round-robin") {
  LayerGraph g = chain();
  Cluster c = devices(4);
  json j = json::parse(R"({"micro_batches": 6, "aggregation_every": 3, "groups": [["cpu1", "cpu2", "cpu0"], "cpu3"],
                           "layers": {"fc0": 0, "fc1": 0, "fc2": 1, "fc3": 1}})");
  auto p = placement_from_json(j, g, c);
  REQUIRE(p.is_ok());
  CHECK(p->group_device == std::vector<int>{1, 3});
  CHECK(p->devices_of_group(0) == std::vector<int>{1, 2, 0});
  CHECK(p->replica_count(0) == 3);
  CHECK(p->replica_count(1) == 1);
  CHECK(p->has_replicated_groups());
  CHECK(p->aggregation_every == 3);
  std::vector<int> runs_on;
  for (int m = 0; m < 6; ++m) runs_on.push_back(p->device_of_micro_batch(0, m));
  CHECK(runs_on == std::vector<int>{1, 2, 0, 1, 2, 0});
  CHECK(p->device_of_micro_batch(1, 4) == 3);
  CHECK(validate_placement(*p, g, c, 12).is_ok());
  json written = placement_to_json(*p, g, c);
  CHECK(written["groups"] == json::parse(R"([["cpu1", "cpu2", "cpu0"], "cpu3"])"));
  CHECK(written["aggregation_every"] == 3);
  auto again = placement_from_json(written, g, c);
  REQUIRE(again.is_ok());
  CHECK(again->group_replicas == p->group_replicas);
}

TEST_CASE("a placement without replicas keeps its old JSON form") {
  LayerGraph g = chain();
  Cluster c = devices(2);
  auto p = placement_from_json(json::parse(R"({"micro_batches": 2, "groups": ["cpu0", "cpu1"],
                                               "layers": {"fc0": 0, "fc1": 0, "fc2": 1, "fc3": 1}})"),
                               g, c);
  REQUIRE(p.is_ok());
  CHECK(p->group_replicas.empty());
  CHECK_FALSE(p->has_replicated_groups());
  json written = placement_to_json(*p, g, c);
  CHECK(written["groups"] == json::parse(R"(["cpu0", "cpu1"])"));
  CHECK_FALSE(written.contains("aggregation_every"));
}

TEST_CASE("each replica holds its group's state and the activations of its own micro-batches") {
  LayerGraph g = chain();
  Cluster c = devices(3);
  Placement single = Placement::single_device(4, 0, 4);
  Placement p;
  p.layer_group = {0, 0, 1, 1};
  p.group_device = {0, 2};
  p.group_replicas = {{1}, {}};
  p.micro_batches = 4;
  auto bytes = estimate_device_memory_bytes(p, g, c, 16);
  // Group 0 (fc0, fc1) on devices 0 and 1, each running 2 of the 4 micro-batches of 4 samples (GPipe: both in flight).
  int64_t expected = 0;
  for (int l : {0, 1})
    expected += training_state_bytes(g.layers[l].param_bytes()) + g.layers[l].activation_bytes() * 4 * 2;
  // The gradient of fc1's output, received for the replica's 2 micro-batches, and the working
  // memory of its largest layer: its weight gradient and two activation gradients of one micro-batch.
  int64_t largest_param = 0, largest_output = 0;
  for (int l : {0, 1}) {
    largest_param = std::max(largest_param, g.layers[l].param_bytes());
    largest_output = std::max(largest_output, g.layers[l].activation_bytes());
  }
  expected += g.layers[1].activation_bytes() * 4 * 2 + largest_param + 2 * largest_output * 4;
  CHECK(bytes[0] == expected);
  CHECK(bytes[1] == expected);
  CHECK(bytes[2] > 0);
  // The unreplicated device 0 of the single placement keeps all 4 micro-batches in flight: more.
  CHECK(estimate_device_memory_bytes(single, g, c, 16)[0] > bytes[0]);
}

TEST_CASE("bad replica sets are refused naming the field") {
  LayerGraph g = chain();
  Cluster c = devices(3);
  const char* layers = R"("layers": {"fc0": 0, "fc1": 0, "fc2": 1, "fc3": 1})";
  auto doc = [&](const std::string& rest) { return json::parse("{" + rest + ", " + layers + "}"); };
  CHECK(error_of(doc(R"("micro_batches": 4, "groups": [["cpu0", "cpu0"], "cpu1"])"), g, c) ==
        "placement.groups[0][1]: device \"cpu0\" is named twice in this group");
  CHECK(error_of(doc(R"("micro_batches": 4, "groups": [["cpu0", "gpu9"], "cpu1"])"), g, c) ==
        "placement.groups[0][1]: unknown device \"gpu9\"");
  CHECK(error_of(doc(R"("micro_batches": 4, "groups": [[], "cpu1"])"), g, c) ==
        "placement.groups[0]: a replicated group names at least one device");
  CHECK(error_of(doc(R"("micro_batches": 4, "groups": [["cpu0", 3], "cpu1"])"), g, c) ==
        "placement.groups[0][1]: expected a device name, got number");
  CHECK(error_of(doc(R"("micro_batches": 2, "groups": [["cpu0", "cpu1", "cpu2"], "cpu1"])"), g, c).find(
            "placement.micro_batches: group 0 has 3 replicas") == 0);
  CHECK(error_of(doc(R"("micro_batches": 4, "aggregation_every": 0, "groups": [["cpu0", "cpu1"], "cpu2"])"), g, c)
            .find("placement.aggregation_every: must be at least 1") == 0);
  CHECK(error_of(doc(R"("micro_batches": 4, "aggregation_every": 2, "groups": ["cpu0", "cpu2"])"), g, c)
            .find("placement.aggregation_every: 2 needs a replicated group") == 0);
}

TEST_CASE("a replicated group that is both before and after another group is refused; without replicas it runs") {
  LayerGraph g = chain();
  Cluster c = devices(3);
  json cyclic = json::parse(R"({"micro_batches": 4, "groups": [["cpu0", "cpu1"], "cpu2"],
                                "layers": {"fc0": 0, "fc1": 1, "fc2": 0, "fc3": 1}})");
  CHECK(error_of(cyclic, g, c).find("placement.groups[0]: replicated group 0 is both before and after group 1") == 0);
  cyclic["groups"] = json::parse(R"(["cpu0", "cpu2"])");
  CHECK(error_of(cyclic, g, c) == "");  // a device holding two segments of one group
}

TEST_CASE("add_group appends an empty group that keeps the per-group lists aligned and the placement valid") {
  LayerGraph g = chain();
  Cluster c = devices(3);
  Placement p;
  p.layer_group = {0, 0, 1, 1};
  p.group_device = {0, 2};
  p.group_replicas = {{1}, {}};
  p.group_replica_weights = {{2, 1}, {}};
  p.micro_batches = 4;
  CHECK(p.add_group(2) == 2);
  CHECK(p.group_replicas.size() == 3);
  CHECK(p.group_replica_weights.size() == 3);
  CHECK(p.replica_count(2) == 1);
  CHECK(p.group_recompute.empty());  // no flags where none was set
  p.layer_group[3] = 2;
  CHECK(validate_placement(p, g, c, 32).is_ok());
  CHECK(p.add_group(0, true) == 3);  // recomputing: the flags appear, the others' off
  CHECK(p.group_recompute == std::vector<char>{0, 0, 0, 1});
  CHECK(validate_placement(p, g, c, 32).is_ok());  // an empty group is no stage
}

TEST_CASE("a group that holds no layer is refused from JSON naming it, and left out when a placement is written") {
  LayerGraph g = chain();
  Cluster c = devices(4);
  CHECK(error_of(json::parse(R"({"micro_batches": 2, "groups": ["cpu0", "cpu1", "cpu2"],
                                 "layers": {"fc0": 0, "fc1": 0, "fc2": 2, "fc3": 2}})"),
                 g, c) == "placement.groups[1]: no layer is in this group (device \"cpu1\"); put layers in it or remove it");
  // Written: the empty group 1 left out, group 2 (copied onto cpu3, weighed,
  // recomputing) renumbered 1 in the layers, the weights and the recompute list.
  Placement p;
  p.layer_group = {0, 0, 2, 2};
  p.group_device = {0, 1, 2};
  p.group_replicas = {{}, {}, {3}};
  p.group_replica_weights = {{}, {}, {2, 1}};
  p.group_recompute = {0, 0, 1};
  p.micro_batches = 3;
  const json written = placement_to_json(p, g, c);
  CHECK(written["groups"] == json::parse(R"(["cpu0", ["cpu2", "cpu3"]])"));
  CHECK(written["layers"] == json::parse(R"({"fc0": 0, "fc1": 0, "fc2": 1, "fc3": 1})"));
  CHECK(written["replica_weights"] == json::parse(R"({"1": [2, 1]})"));
  CHECK(written["recompute"] == json::parse("[1]"));
  auto again = placement_from_json(written, g, c);
  REQUIRE(again.is_ok());
  CHECK(again->group_device == std::vector<int>{0, 2});
  CHECK(again->devices_of_group(1) == std::vector<int>{2, 3});
  CHECK(again->group_replica_weights[1] == std::vector<int>{2, 1});
  CHECK(again->recomputes(1));
  // A data-parallel placement's groups are its replicas: each is kept.
  const json dp = placement_to_json(Placement::replicas(4, {0, 1, 2}), g, c);
  CHECK(dp["groups"].size() == 3);
  auto dp_again = placement_from_json(dp, g, c);
  REQUIRE(dp_again.is_ok());
  CHECK(dp_again->group_device == std::vector<int>{0, 1, 2});
}

TEST_CASE("data parallelism on one device is written as that device's single-device plan") {
  // The policy's data-parallel action on one device ties the single-device plan
  // (nothing to all-reduce); written as data parallel, export refused it.
  LayerGraph g = chain();
  Cluster c = devices(4);
  for (DataParallelMode mode : {DataParallelMode::bsp, DataParallelMode::hogwild}) {
    Placement one = Placement::replicas(4, {2}, mode);
    one.source = "policy";
    const json written = placement_to_json(one, g, c);
    CHECK_FALSE(written.contains("data_parallel"));
    CHECK_FALSE(written.contains("data_parallel_mode"));
    CHECK(written["groups"] == json::parse(R"(["cpu2"])"));
    CHECK(written["micro_batches"] == 1);
    CHECK(written["source"] == "policy");
    auto again = placement_from_json(written, g, c);
    REQUIRE(again.is_ok());
    CHECK_FALSE(again->is_data_parallel());
    CHECK(again->group_device == std::vector<int>{2});
    CHECK(again->layer_group == std::vector<int>{0, 0, 0, 0});
  }
}

TEST_CASE("the interleaved schedule has a name and keeps one more warm-up round in flight than 1F1B") {
  auto s = schedule_from_name("interleaved_1f1b");
  REQUIRE(s.is_ok());
  CHECK(*s == Schedule::interleaved_1f1b);
  CHECK(schedule_name(*s) == "interleaved_1f1b");
  CHECK(micro_batches_in_flight(Schedule::interleaved_1f1b, 8, 2) == 3);
  CHECK(micro_batches_in_flight(Schedule::one_f_one_b, 8, 2) == 2);
  CHECK(schedule_from_name("zigzag").error_message().find("interleaved_1f1b") != std::string::npos);
}

TEST_CASE("replica weights divide the micro-batches in proportion, interleaved; equal weights are round-robin") {
  CHECK(weighted_replica_order(6, {1, 1, 1}) == std::vector<int>{0, 1, 2, 0, 1, 2});
  CHECK(weighted_replica_order(5, {2, 2}) == std::vector<int>{0, 1, 0, 1, 0});
  CHECK(weighted_replica_order(4, {3, 1}) == std::vector<int>{0, 0, 1, 0});
  CHECK(replica_micro_batch_counts(8, {2, 1, 1}) == std::vector<int>{4, 2, 2});
  // Each replica runs at least one micro-batch, however small its weight.
  CHECK(replica_micro_batch_counts(3, {64, 1, 1}) == std::vector<int>{1, 1, 1});
  // On random weights and counts: every replica at least once, the counts
  // sum to the micro-batches and are within one of their exact share.
  uint64_t state = 12345;
  auto next = [&](int n) { state = state * 6364136223846793005ULL + 1442695040888963407ULL; return int((state >> 33) % n); };
  for (int trial = 0; trial < 500; ++trial) {
    const int r = 2 + next(5);
    std::vector<int> w(r);
    for (int& x : w) x = 1 + next(kMaxReplicaWeight);
    const int m = r + next(40);
    const auto order = weighted_replica_order(m, w);
    const auto counts = replica_micro_batch_counts(m, w);
    REQUIRE(order.size() == static_cast<size_t>(m));
    std::vector<int> seen(r, 0);
    for (int k : order) ++seen[k];
    CHECK(seen == counts);
    int total_w = 0;
    for (int x : w) total_w += x;
    for (int k = 0; k < r; ++k) {
      CHECK(counts[k] >= 1);
      const double share = double(m) * w[k] / total_w;
      CHECK((counts[k] <= std::max(1.0, share) + 1.0 && counts[k] >= share - 1.0 - (r - 1)));
    }
  }
}

TEST_CASE("replica weights round-trip through JSON, decide which device runs a micro-batch and its memory") {
  LayerGraph g = chain();
  Cluster c = devices(3);
  json j = json::parse(R"({"micro_batches": 4, "groups": [["cpu0", "cpu1"], "cpu2"], "replica_weights": {"0": [3, 1]},
                           "layers": {"fc0": 0, "fc1": 0, "fc2": 1, "fc3": 1}})");
  auto p = placement_from_json(j, g, c);
  REQUIRE(p.is_ok());
  REQUIRE(validate_placement(*p, g, c, 16).is_ok());
  CHECK(p->group_replica_weights == std::vector<std::vector<int>>{{3, 1}, {}});
  std::vector<int> runs_on;
  for (int m = 0; m < 4; ++m) runs_on.push_back(p->device_of_micro_batch(0, m));
  CHECK(runs_on == std::vector<int>{0, 0, 1, 0});
  json written = placement_to_json(*p, g, c);
  CHECK(written["replica_weights"] == json::parse(R"({"0": [3, 1]})"));
  auto again = placement_from_json(written, g, c);
  REQUIRE(again.is_ok());
  CHECK(again->group_replica_weights == p->group_replica_weights);
  // Each replica is charged its own micro-batches: cpu0 keeps three in flight, cpu1 one (round-robin: two each).
  Placement even = *p;
  even.group_replica_weights.clear();
  const auto weighed = estimate_device_memory_bytes(*p, g, c, 16), equal = estimate_device_memory_bytes(even, g, c, 16);
  CHECK(weighed[0] > equal[0]);
  CHECK(weighed[1] < equal[1]);
  CHECK(weighed[2] == equal[2]);
  // The difference is the activations and received gradients of one micro-batch (4 samples) each way.
  CHECK(weighed[0] - equal[0] == equal[1] - weighed[1]);
}

TEST_CASE("bad replica weights are refused naming the field") {
  LayerGraph g = chain();
  Cluster c = devices(3);
  auto doc = [&](const std::string& weights) {
    return json::parse(R"({"micro_batches": 4, "groups": [["cpu0", "cpu1"], "cpu2"], "replica_weights": )" + weights +
                       R"(, "layers": {"fc0": 0, "fc1": 0, "fc2": 1, "fc3": 1}})");
  };
  CHECK(error_of(doc(R"({"0": [3]})"), g, c) ==
        "placement.replica_weights.0: 1 weights for a group of 2 device(s); give one per device");
  CHECK(error_of(doc(R"({"0": [3, 0]})"), g, c) == "placement.replica_weights.0[1]: expected an integer in [1, 64]");
  CHECK(error_of(doc(R"({"0": [3, 65]})"), g, c) == "placement.replica_weights.0[1]: expected an integer in [1, 64]");
  CHECK(error_of(doc(R"({"0": [3, 1.5]})"), g, c) == "placement.replica_weights.0[1]: expected an integer in [1, 64]");
  CHECK(error_of(doc(R"({"7": [1, 1]})"), g, c) == "placement.replica_weights.7: group 7 does not exist");
  CHECK(error_of(doc(R"({"x": [1, 1]})"), g, c) == "placement.replica_weights.x: expected a group index as the key");
  CHECK(error_of(doc(R"({"0": []})"), g, c) == "placement.replica_weights.0: expected a non-empty array of weights, got array");
  CHECK(error_of(doc(R"([3, 1])"), g, c) ==
        "placement.replica_weights: expected an object of group index -> weights, got array");
  CHECK(error_of(doc(R"({"1": [2]})"), g, c) == "");  // one device, one weight: nothing to divide
  // Built in code: the same rules from validate_placement.
  auto p = placement_from_json(doc("{}"), g, c);
  REQUIRE(p.is_ok());
  p->group_replica_weights = {{2, 1, 1}, {}};
  CHECK(validate_placement(*p, g, c, 16).message() ==
        "placement.replica_weights.0: 3 weights for a group of 2 device(s); give one per device");
}

TEST_CASE("the schema's replica-weight examples: the valid one parses and validates, the invalid one is refused") {
  auto g = parse_model_json(R"({"name": "mlp", "input_shape": [64], "layers": [
      {"name": "fc0", "op": "linear", "attrs": {"out": 32}}, {"name": "relu0", "op": "relu", "inputs": ["fc0"]},
      {"name": "fc1", "op": "linear", "inputs": ["relu0"], "attrs": {"out": 16}},
      {"name": "relu1", "op": "relu", "inputs": ["fc1"]}, {"name": "fc2", "op": "linear", "inputs": ["relu1"], "attrs": {"out": 4}}]})");
  REQUIRE(g.is_ok());
  const Cluster c = devices(3);
  const std::string dir = std::string(TAPP_SOURCE_DIR) + "/schemas/examples/placement/";
  auto valid = load_placement(dir + "valid/replica_weights.json", *g, c);
  REQUIRE(valid.is_ok());
  CHECK(validate_placement(*valid, *g, c, 16).is_ok());
  CHECK(valid->group_replica_weights[0] == std::vector<int>{3, 1});
  auto invalid = load_placement(dir + "invalid/replica_weight_zero.json", *g, c);
  REQUIRE_FALSE(invalid.is_ok());
  CHECK(invalid.error_message().find("placement.replica_weights.0[1]") != std::string::npos);
}
