#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/al_form.h"
#include "model/layer_library.h"
#include "model/model_json.h"
#include "model/zoo.h"

using namespace tapp;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
const std::string kSource = TAPP_SOURCE_DIR;

std::string parse_error(const std::string& text) {
  auto g = parse_model_json(text);
  return g.is_ok() ? "(accepted)" : g.error_message();
}

json base() {
  return json::parse(R"({"name": "m", "input_shape": [3, 8, 8], "layers": [
      {"name": "conv", "op": "conv2d", "attrs": {"out": 4, "kernel": 3}},
      {"name": "relu", "op": "relu", "inputs": ["conv"]},
      {"name": "flat", "op": "flatten", "inputs": ["relu"]},
      {"name": "fc", "op": "linear", "inputs": ["flat"], "attrs": {"out": 2}}]})");
}
}  // namespace

TEST_CASE("every zoo model survives export to JSON and import with the same layers, params and MACs") {
  for (const auto& name : zoo_names()) {
    auto g = zoo_model(name);
    REQUIRE(g.is_ok());
    json doc = model_to_json(*g);
    auto back = model_from_json(json::parse(doc.dump()));
    REQUIRE_MESSAGE(back.is_ok(), back.error_message());
    CHECK(back->total_params() == g->total_params());
    CHECK(back->total_macs() == g->total_macs());
    REQUIRE(back->layers.size() == g->layers.size());
    for (size_t i = 0; i < g->layers.size(); ++i) {
      CHECK(back->layers[i].name == g->layers[i].name);
      CHECK(back->layers[i].inputs == g->layers[i].inputs);
      CHECK(back->layers[i].attrs == g->layers[i].attrs);
      CHECK(back->layers[i].output_shape == g->layers[i].output_shape);
    }
    CHECK(library_to_json(library_skeleton(*back)) == library_to_json(library_skeleton(*g)));
    CHECK(graph_fingerprint(*back) == graph_fingerprint(*g));
  }
}

TEST_CASE("the graph fingerprint changes with the structure") {
  auto a = zoo_model("vgg5");
  auto b = zoo_model("vgg5", {32, 100});
  CHECK(graph_fingerprint(*a) != graph_fingerprint(*b));
}

TEST_CASE("a wrong attribute type is rejected naming the field") {
  json j = base();
  j["layers"][0]["attrs"]["kernel"] = "3x3";
  CHECK(parse_error(j.dump()) ==
        "layers[0].attrs.kernel: expected an integer or a pair of integers, got string");
  j = base();
  j["layers"][0]["attrs"]["kernel"] = {1, 2, 3};
  CHECK(parse_error(j.dump()) ==
        "layers[0].attrs.kernel: expected an integer or a pair of integers, got an array of 3");
  j = base();
  j["layers"][3]["attrs"]["out"] = 2.5;
  CHECK(parse_error(j.dump()) == "layers[3].attrs.out: expected an integer, got number");
  j = base();
  j["layers"][3]["attrs"]["out"] = 0;
  CHECK(parse_error(j.dump()) == "layers[3].attrs.out: must be positive");
  j = base();
  j["layers"][3]["attrs"]["kernel"] = 3;
  CHECK(parse_error(j.dump()) == "layers[3].attrs.kernel: not an attribute of linear");
  j = base();
  j["layers"][0]["attrs"].erase("out");
  CHECK(parse_error(j.dump()) == "layers[0].attrs.out: missing required field");
}

TEST_CASE("an unknown op is rejected listing the known ops") {
  json j = base();
  j["layers"][1]["op"] = "softmax_fancy";
  std::string e = parse_error(j.dump());
  CHECK(e.rfind("layers[1].op: unknown op 'softmax_fancy'; known ops are ", 0) == 0);
  CHECK(e.find("conv2d") != std::string::npos);
}

TEST_CASE("inputs must name earlier layers") {
  json j = base();
  j["layers"][3]["inputs"] = {"nope"};
  CHECK(parse_error(j.dump()) == "layers[3].inputs[0]: unknown layer 'nope'");
  j = base();
  j["layers"][1]["inputs"] = {"fc"};
  CHECK(parse_error(j.dump()) ==
        "layers[1].inputs[0]: layer 'fc' is not an earlier layer (layers are listed in execution order)");
  j = base();
  j["layers"][2]["name"] = "relu";
  CHECK(parse_error(j.dump()) == "layers[2].name: 'relu' is already the name of layers[1]");
}

TEST_CASE("mismatched shapes are rejected naming the layer") {
  auto g = read_model_json_file(kSource + "/tests/fixtures/models/mismatched_add.json");
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.error_message().find(
            "mismatched_add.json: layer 'sum' (add): mismatched shapes [4x8x8] and [8x8x8]") !=
        std::string::npos);
  json j = base();
  j["layers"][3]["inputs"] = {"relu"};  // linear on an image
  CHECK(parse_error(j.dump()) == "layer 'fc' (linear): expects a flat input, got [4x6x6]");
}

TEST_CASE("malformed JSON and missing files are reported, not thrown") {
  auto g = read_model_json_file(kSource + "/tests/fixtures/models/malformed.json");
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.error_message().find("malformed JSON") != std::string::npos);
  auto missing = load_layer_graph("/nonexistent/model.json");
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.error_message() == "/nonexistent/model.json: cannot open the file");
  CHECK(parse_error("[1, 2]") == "document: expected an object, got array");
  CHECK(parse_error(R"({"name": "m", "input_shape": [3]})") == "layers: missing required field");
}

TEST_CASE("the model parser accepts the schema's valid examples and rejects its invalid ones") {
  const fs::path dir = fs::path(kSource) / "schemas" / "examples" / "model";
  int valid = 0, invalid = 0;
  for (const auto& e : fs::directory_iterator(dir / "valid")) {
    auto g = read_model_json_file(e.path().string());
    CHECK_MESSAGE(g.is_ok(), e.path().string(), ": ", g.error_message());
    ++valid;
  }
  for (const auto& e : fs::directory_iterator(dir / "invalid")) {
    auto g = read_model_json_file(e.path().string());
    CHECK_MESSAGE(!g.is_ok(), e.path().string(), " was accepted");
    ++invalid;
  }
  CHECK(valid >= 3);
  CHECK(invalid >= 8);
}

TEST_CASE("a JSON model with branches loads through load_layer_graph") {
  auto g = load_layer_graph(kSource + "/schemas/examples/model/valid/branchy.json");
  REQUIRE(g.is_ok());
  const Layer& cat = g->layers[g->index_of("cat")];
  CHECK(cat.output_shape == Shape{16, 16, 16});
  CHECK(g->layers[g->index_of("add")].inputs.size() == 2);
  CHECK(g->num_classes == 5);
}

TEST_CASE("parameter counts that would overflow are refused naming the layer, never wrapped") {
  auto g = parse_model_json(R"({"name": "m", "input_shape": [1000000000],
      "layers": [{"name": "x", "op": "linear", "attrs": {"out": 1000000000}}]})");
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.status().field() == "layers[0]");
  CHECK(g.error_message().find("parameter count") != std::string::npos);
  auto conv = parse_model_json(R"({"name": "m", "input_shape": [2147483648, 8, 8],
      "layers": [{"name": "c", "op": "conv2d", "attrs": {"out": 2147483648, "kernel": 3}},
                 {"name": "f", "op": "flatten", "inputs": ["c"]},
                 {"name": "x", "op": "linear", "inputs": ["f"], "attrs": {"out": 10}}]})");
  REQUIRE_FALSE(conv.is_ok());
  CHECK(conv.status().field() == "layers[0]");
  auto pad = parse_model_json(R"({"name": "m", "input_shape": [3, 8, 8],
      "layers": [{"name": "c", "op": "conv2d", "attrs": {"out": 4, "kernel": 3, "padding": 9223372036854775807}}]})");
  REQUIRE_FALSE(pad.is_ok());
  CHECK(pad.status().field() == "layers[0].attrs.padding");
  auto fine = parse_model_json(R"({"name": "m", "input_shape": [100000],
      "layers": [{"name": "x", "op": "linear", "attrs": {"out": 100000}}]})");
  REQUIRE(fine.is_ok());
  CHECK(fine->total_params() == int64_t{100000} * 100000 + 100000);
}

TEST_CASE("whole numbers written with a decimal point are the integers JSON Schema says they are") {
  auto g = parse_model_json(R"({"name": "m", "input_shape": [3.0, 8, 8e0],
      "layers": [{"name": "c", "op": "conv2d", "attrs": {"out": 4.0, "kernel": [3.0, 3], "padding": 1.0}},
                 {"name": "f", "op": "flatten", "inputs": ["c"]},
                 {"name": "x", "op": "linear", "inputs": ["f"], "attrs": {"out": 10.0}}]})");
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  CHECK(g->input_shape == Shape{3, 8, 8});
  CHECK(g->layers[0].attrs.kernel[0] == 3);
  CHECK(g->layers[0].attrs.padding[1] == 1);
  CHECK(parse_error(R"({"name": "m", "input_shape": [2.5], "layers": [{"name": "x", "op": "linear", "attrs": {"out": 2}}]})")
            .find("input_shape[0]: expected a positive integer") != std::string::npos);
  CHECK(parse_error(R"({"name": "m", "input_shape": [3, 8, 8],
      "layers": [{"name": "c", "op": "conv2d", "attrs": {"out": 4, "kernel": [3.5, 3]}}]})")
            .find("layers[0].attrs.kernel") != std::string::npos);
}

TEST_CASE("a model that scores every pixel has a label per pixel; other output ranks are refused naming the layer") {
  // conv -> relu -> a 1x1 conv to 5 class maps: {5, 8, 8}, labels {8, 8} a sample.
  auto seg = parse_model_json(R"({"name": "seg", "input_shape": [3, 8, 8], "layers": [
      {"name": "conv", "op": "conv2d", "attrs": {"out": 4, "kernel": 3, "padding": 1}},
      {"name": "relu", "op": "relu", "inputs": ["conv"]},
      {"name": "classes", "op": "conv2d", "inputs": ["relu"], "attrs": {"out": 5, "kernel": 1}}]})");
  REQUIRE_MESSAGE(seg.is_ok(), seg.error_message());
  CHECK(seg->num_classes == 5);
  CHECK(seg->label_shape() == Shape{8, 8});
  CHECK_FALSE(seg->per_token_labels());
  CHECK(parse_model_json(base().dump())->label_shape().empty());  // a classifier: one label per sample
  // AL encodes one label per sample.
  auto al = make_al_form(*seg, {2});
  REQUIRE_FALSE(al.is_ok());
  CHECK(al.error_message().find("one label per pixel") != std::string::npos);
  // A rank-4 output (a 3-D convolution's, here a reshape) scores nothing the loss knows.
  auto wide = parse_model_json(R"({"name": "w", "input_shape": [2, 3, 4, 5], "layers": [
      {"name": "act", "op": "relu"}]})");
  REQUIRE_FALSE(wide.is_ok());
  CHECK(wide.error_message().find("the last layer 'act' must output class scores") != std::string::npos);
  CHECK(wide.error_message().find("one per pixel: C x H x W") != std::string::npos);
}
