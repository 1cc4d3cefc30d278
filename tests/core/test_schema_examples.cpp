// The schemas' examples read by the C++ parsers: every valid cluster and
// placement example loads (and the placement validates), every invalid one is
// refused, as ajv decides in tests/js/validate_schemas.js. Unknown fields
// included: the schemas forbid them, so a misspelt field is an error here too.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/model_json.h"

using namespace tapp;

namespace {

std::vector<std::string> examples(const std::string& schema, const std::string& kind) {
  std::vector<std::string> files;
  const auto dir = std::filesystem::path(TAPP_SOURCE_DIR) / "schemas" / "examples" / schema / kind;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  REQUIRE_FALSE(files.empty());
  return files;
}

// The examples' two models: an MLP (fc0 .. fc2) and a small CNN (conv1 .. fc).
LayerGraph model_for(const nlohmann::json& placement) {
  const bool cnn = placement.contains("layers") && placement["layers"].is_object() && placement["layers"].contains("conv1");
  auto g = parse_model_json(cnn ? R"({"name": "cnn", "input_shape": [3, 8, 8], "layers": [
      {"name": "conv1", "op": "conv2d", "attrs": {"out": 4, "kernel": 3}}, {"name": "relu1", "op": "relu", "inputs": ["conv1"]},
      {"name": "conv2", "op": "conv2d", "inputs": ["relu1"], "attrs": {"out": 4, "kernel": 3}},
      {"name": "relu2", "op": "relu", "inputs": ["conv2"]}, {"name": "flat", "op": "flatten", "inputs": ["relu2"]},
      {"name": "fc", "op": "linear", "inputs": ["flat"], "attrs": {"out": 4}}]})"
                                : R"({"name": "mlp", "input_shape": [64], "layers": [
      {"name": "fc0", "op": "linear", "attrs": {"out": 32}}, {"name": "relu0", "op": "relu", "inputs": ["fc0"]},
      {"name": "fc1", "op": "linear", "inputs": ["relu0"], "attrs": {"out": 16}},
      {"name": "relu1", "op": "relu", "inputs": ["fc1"]}, {"name": "fc2", "op": "linear", "inputs": ["relu1"], "attrs": {"out": 4}}]})");
  REQUIRE(g.is_ok());
  return *g;
}

// A cluster holding every device the placement names (and cpu0 .. cpu2).
Cluster cluster_for(const nlohmann::json& placement) {
  std::vector<std::string> names = {"cpu0", "cpu1", "cpu2"};
  auto add = [&](const nlohmann::json& n) {
    if (n.is_string() && std::find(names.begin(), names.end(), n.get<std::string>()) == names.end())
      names.push_back(n.get<std::string>());
  };
  if (placement.contains("groups") && placement["groups"].is_array())
    for (const auto& g : placement["groups"]) {
      add(g);
      if (g.is_array())
        for (const auto& r : g) add(r);
    }
  Cluster c;
  for (const std::string& n : names) {
    Device d;
    d.name = n;
    c.devices.push_back(d);
  }
  return c;
}

Status load_and_validate(const std::string& file) {
  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in);
  const LayerGraph g = model_for(j);
  const Cluster c = cluster_for(j);
  auto p = placement_from_json(j, g, c);
  if (!p) return p.status();
  return validate_placement(*p, g, c, 16);
}

}  // namespace

TEST_CASE("every valid cluster example loads and every invalid one is refused naming a field") {
  for (const std::string& f : examples("cluster", "valid")) {
    auto c = load_cluster(f);
    CHECK_MESSAGE(c.is_ok(), f << ": " << c.error_message());
  }
  for (const std::string& f : examples("cluster", "invalid")) {
    auto c = load_cluster(f);
    CHECK_MESSAGE(!c.is_ok(), f << " was accepted");
  }
  auto misspelt = load_cluster(std::string(TAPP_SOURCE_DIR) + "/schemas/examples/cluster/invalid/default_link_misspelt_field.json");
  REQUIRE_FALSE(misspelt.is_ok());
  CHECK(misspelt.error_message().find("default_link.latncy_ms: unknown field (expected bandwidth_mbps, latency_ms)") !=
        std::string::npos);
}

TEST_CASE("every valid placement example loads and validates, and every invalid one is refused") {
  for (const std::string& f : examples("placement", "valid")) {
    Status s = load_and_validate(f);
    CHECK_MESSAGE(s.is_ok(), f << ": " << s.message());
  }
  for (const std::string& f : examples("placement", "invalid")) CHECK_MESSAGE(!load_and_validate(f).is_ok(), f << " was accepted");
  Status unknown = load_and_validate(std::string(TAPP_SOURCE_DIR) + "/schemas/examples/placement/invalid/unknown_field.json");
  CHECK(unknown.message().rfind("placement.micro_batch: unknown field (expected ", 0) == 0);
}
