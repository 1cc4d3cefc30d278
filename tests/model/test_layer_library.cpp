#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/layer_library.h"

using namespace tapp;

namespace {
LayerGraph tiny_graph() {
  LayerGraph g;
  g.name = "tiny";
  g.input_shape = {3, 8, 8};
  Layer conv{"conv", "conv2d"};
  conv.attrs.out = 4;
  conv.attrs.kernel[0] = conv.attrs.kernel[1] = 3;
  conv.attrs.padding[0] = conv.attrs.padding[1] = 1;
  Layer relu{"relu", "relu"};
  relu.inputs = {0};
  Layer flat{"flat", "flatten"};
  flat.inputs = {1};
  Layer fc{"fc", "linear"};
  fc.attrs.out = 10;
  fc.inputs = {2};
  g.layers = {conv, relu, flat, fc};
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}
}  // namespace

TEST_CASE("a library skeleton has one row per layer with shapes, params, MACs and next layers") {
  LayerGraph g = tiny_graph();
  LayerLibrary lib = library_skeleton(g);
  REQUIRE(lib.rows.size() == 4);
  CHECK(lib.rows[0].op_class == "Convolution");
  CHECK(lib.rows[0].params == 4 * 3 * 9 + 4);
  CHECK(lib.rows[0].param_bytes == lib.rows[0].params * 4);
  CHECK(lib.rows[0].macs == 4 * 8 * 8 * 3 * 9);
  CHECK(lib.rows[0].next_layers == std::vector<std::string>{"relu"});
  CHECK(lib.rows[3].next_layers.empty());
  CHECK(lib.rows[3].op_class == "Fully-Connected");
  CHECK(lib.rows[2].output_shape == Shape{256});
  CHECK(lib.rows[1].activation_bytes == 4 * 8 * 8 * 4);
}

TEST_CASE("an estimated library scales times with batch size and threads and is marked estimated") {
  LayerGraph g = tiny_graph();
  LayerLibrary one = estimated_library(g, 1);
  LayerLibrary eight = estimated_library(g, 8);
  LayerLibrary eight_t2 = estimated_library(g, 8, 20.0, 2);
  CHECK_FALSE(one.measured);
  CHECK(one.rows[0].forward_ms > 0);
  CHECK(eight.rows[0].forward_ms == doctest::Approx(8 * one.rows[0].forward_ms));
  CHECK(eight_t2.rows[0].forward_ms == doctest::Approx(eight.rows[0].forward_ms / 2));
  CHECK(one.total_forward_ms() + one.total_backward_ms() == doctest::Approx(one.whole_step_ms));
}

TEST_CASE("a layer library survives a JSON round trip") {
  LayerLibrary lib = estimated_library(tiny_graph(), 4, 10.0, 2);
  lib.device_kind = "cpu";
  lib.whole_step_ms = 3.5;
  lib.sum_to_step_ratio = 0.9;
  auto back = library_from_json(library_to_json(lib));
  REQUIRE(back.is_ok());
  CHECK(back->model == "tiny");
  CHECK(back->threads == 2);
  CHECK(back->batch_size == 4);
  CHECK(back->input_shape == Shape{3, 8, 8});
  CHECK(back->whole_step_ms == 3.5);
  CHECK(back->sum_to_step_ratio == 0.9);
  REQUIRE(back->rows.size() == lib.rows.size());
  for (size_t i = 0; i < lib.rows.size(); ++i) {
    CHECK(back->rows[i].name == lib.rows[i].name);
    CHECK(back->rows[i].input_shapes == lib.rows[i].input_shapes);
    CHECK(back->rows[i].output_shape == lib.rows[i].output_shape);
    CHECK(back->rows[i].macs == lib.rows[i].macs);
    CHECK(back->rows[i].next_layers == lib.rows[i].next_layers);
    CHECK(back->rows[i].forward_ms == lib.rows[i].forward_ms);
    CHECK(back->rows[i].backward_ms == lib.rows[i].backward_ms);
  }
  CHECK(library_to_json(*back) == library_to_json(lib));
}

TEST_CASE("a library with a wrong field is rejected naming the field") {
  nlohmann::json j = library_to_json(estimated_library(tiny_graph(), 1));
  j["rows"][2]["macs"] = "many";
  CHECK(library_from_json(j).error_message() == "library.rows[2].macs: expected an integer, got string");
  j = library_to_json(estimated_library(tiny_graph(), 1));
  j.erase("rows");
  CHECK(library_from_json(j).error_message() == "library.rows: missing required field");
  j = library_to_json(estimated_library(tiny_graph(), 1));
  j["rows"][0]["input_shapes"][0][1] = 2.5;
  CHECK(library_from_json(j).error_message() ==
        "library.rows[0].input_shapes[0][1]: expected an integer, got number");
  j = library_to_json(estimated_library(tiny_graph(), 1));
  j["batch_size"] = 0;
  CHECK(library_from_json(j).error_message() == "library.batch_size: must be positive");
  // A parameter count whose float32 bytes pass int64 (a fuzzer's find: it overflowed) is refused
  // where the row gives no param_bytes, and stands where it does.
  j = library_to_json(estimated_library(tiny_graph(), 1));
  j["rows"][1]["params"] = int64_t{2577777777777777771};
  j["rows"][1].erase("param_bytes");
  CHECK(library_from_json(j).error_message() ==
        "library.rows[1].params: 2577777777777777771 parameters are more bytes than a 64-bit count holds");
  j["rows"][1]["param_bytes"] = 64;
  CHECK(library_from_json(j).is_ok());
  j["rows"][1]["param_bytes"] = -4;
  CHECK_FALSE(library_from_json(j).is_ok());
}

TEST_CASE("the library parser accepts the schema's valid examples and rejects its invalid ones") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(TAPP_SOURCE_DIR) / "schemas" / "examples" / "layer_library";
  auto parse = [](const fs::path& p) {
    std::ifstream in(p);
    return library_from_json(nlohmann::json::parse(in));
  };
  int valid = 0, invalid = 0;
  for (const auto& e : fs::directory_iterator(dir / "valid")) {
    auto lib = parse(e.path());
    CHECK_MESSAGE(lib.is_ok(), e.path().string(), ": ", lib.error_message());
    ++valid;
  }
  for (const auto& e : fs::directory_iterator(dir / "invalid")) {
    CHECK_MESSAGE(!parse(e.path()).is_ok(), e.path().string(), " was accepted");
    ++invalid;
  }
  CHECK(valid >= 1);
  CHECK(invalid >= 4);
}

namespace {
// A layer-library file in a fresh temp folder, removed with it.
struct LibraryFile {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("tapp-library-" + std::to_string(reinterpret_cast<uintptr_t>(this)));
  std::string path = (dir / "measured.json").string();
  explicit LibraryFile(const std::string& text) {
    std::filesystem::create_directories(dir);
    std::ofstream(path) << text;
  }
  ~LibraryFile() { std::filesystem::remove_all(dir); }
};

std::string library_text(const LayerGraph& g, int64_t batch) {
  LayerLibrary lib = estimated_library(g, batch);
  lib.measured = true;
  return library_to_json(lib).dump();
}
}  // namespace

TEST_CASE("a layer library measured elsewhere loads for its model, one or several batch sizes") {
  LayerGraph g = tiny_graph();
  LibraryFile one(library_text(g, 8));
  auto libs = load_library_file(one.path, g, 8);
  REQUIRE_MESSAGE(libs.is_ok(), libs.error_message());
  REQUIRE(libs->size() == 1);
  CHECK((*libs)[0].rows.size() == g.layers.size());

  nlohmann::json several = nlohmann::json::array();
  for (int64_t b : {1, 2, 4, 8}) several.push_back(nlohmann::json::parse(library_text(g, b)));
  LibraryFile many(several.dump());
  auto all = load_library_file(many.path, g, 8);
  REQUIRE_MESSAGE(all.is_ok(), all.error_message());
  CHECK(all->size() == 4);
}

TEST_CASE("a layer library for another model, input shape or batch is refused naming the file and the field") {
  LayerGraph g = tiny_graph();
  LibraryFile file(library_text(g, 8));
  const std::string at = "layer library '" + file.path + "': ";

  auto batch = load_library_file(file.path, g, 32);
  CHECK(batch.error_message() == at + "batch_size: 8, the plan's batch is 32 (profile it at that batch: tapp-cli "
                                      "profile --batch 32 --json)");

  LayerGraph renamed = g;
  renamed.name = "other";
  CHECK(load_library_file(file.path, renamed, 8).error_message() ==
        at + "model: \"tiny\", the plan's model is \"other\"");

  LayerGraph bigger = g;
  bigger.input_shape = {3, 16, 16};
  REQUIRE(infer_shapes(bigger).is_ok());
  CHECK(load_library_file(file.path, bigger, 8).error_message() ==
        at + "input_shape: [3, 8, 8], the model's input is [3, 16, 16]");

  LayerGraph wider = g;
  wider.layers[3].attrs.out = 12;
  REQUIRE(infer_shapes(wider).is_ok());
  CHECK(load_library_file(file.path, wider, 8).error_message() ==
        at + "rows[3].params: 2570, the model's layer \"fc\" has 3084");

  LayerGraph shorter = g;
  shorter.layers.pop_back();
  CHECK(load_library_file(file.path, shorter, 8).error_message() == at + "rows: 4 layers, the model \"tiny\" has 3");
}

TEST_CASE("a missing, corrupt or wrong-typed layer library file is refused naming the file") {
  LayerGraph g = tiny_graph();
  CHECK(load_library_file("/nonexistent/lib.json", g, 8).error_message() ==
        "layer library '/nonexistent/lib.json': cannot open the file");
  LibraryFile corrupt(library_text(g, 8).substr(0, 100));
  CHECK(load_library_file(corrupt.path, g, 8).error_message() ==
        "layer library '" + corrupt.path + "': not valid JSON");
  LibraryFile not_a_library(R"({"model": "tiny", "rows": 3})");
  CHECK(load_library_file(not_a_library.path, g, 8).error_message() ==
        "layer library '" + not_a_library.path + "': library.rows: expected an array, got number");
  LibraryFile empty("[]");
  CHECK(load_library_file(empty.path, g, 8).error_message().find("an empty array") != std::string::npos);
  nlohmann::json negative = nlohmann::json::parse(library_text(g, 8));
  negative["rows"][1]["forward_ms"] = -1.0;
  LibraryFile bad_time(negative.dump());
  CHECK(load_library_file(bad_time.path, g, 8).error_message() ==
        "layer library '" + bad_time.path +
            "': library.rows[1].forward_ms: must be non-negative, got -1.0");
  negative["rows"][1]["forward_ms"] = 1.0;
  negative["rows"][1]["param_bytes"] = -4;
  LibraryFile bad_bytes(negative.dump());
  CHECK(load_library_file(bad_bytes.path, g, 8).error_message() ==
        "layer library '" + bad_bytes.path + "': library.rows[1].param_bytes: must be non-negative, got -4");
}
