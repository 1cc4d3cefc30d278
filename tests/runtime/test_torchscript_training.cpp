// TorchScript models imported as layers that run their own code
// (profiler/torchscript_layers.h) train on the runtime split across 2 devices
// exactly like single-device training: every process loads the same file.
// Models saved by python3-torch in the test; small inputs and batches.
#include "tests/torch_doctest.h"  // LibTorch + doctest (glog's CHECK macros removed)
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "profiler/compute_threads.h"
#include "profiler/model_loader.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_support.h"

using namespace tapp;
using namespace tapp::test;
namespace fs = std::filesystem;

namespace {

const fs::path& models_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::path(TAPP_BIN_DIR).parent_path() / "test-scratch" / "runtime" / "torchscript";
    fs::remove_all(d);
    fs::create_directories(d);
    std::string cmd = std::string(TAPP_PYTHON) + " " + TAPP_SOURCE_DIR + "/tests/profiler/make_generic_torchscript.py " +
                      d.string() + " 2>/dev/null";
    int rc = std::system(cmd.c_str());
    REQUIRE_MESSAGE((WIFEXITED(rc) && WEXITSTATUS(rc) == 0), "python3 with torch could not save the models: ", cmd);
    return d;
  }();
  return dir;
}

// The first half of the layers on device 0, the rest on device 1; returns the imported graph.
LayerGraph check_split_equals_single(const std::string& model, int64_t input_size, int micro_batches) {
  CAPTURE(model);
  ModelOptions mo;
  mo.input_size = input_size;
  mo.torchscript = ScriptImport::layers;
  auto g = load_model((models_dir() / (model + ".pt")).string(), mo);
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  std::ifstream in(models_dir() / "expected.json");
  CHECK(g->total_params() == nlohmann::json::parse(in).at(model).get<int64_t>());
  const int n = static_cast<int>(g->layers.size());
  std::vector<int> layer_device(n, 0);
  for (int l = n / 2; l < n; ++l) layer_device[l] = 1;
  RunOptions o = test_options();
  o.batch_size = 4;
  o.steps = 1;
  RunResult r = run_placement(*g, local_cluster(2), by_device(layer_device, micro_batches, Schedule::gpipe), o);
  INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
  REQUIRE(r.report.ok);
  // The reference on one thread like the workers: with BatchNorm over 4 samples at 1x1 or 2x2,
  // another reduction order alone moved mobilenet_v2's weights by up to 5 after two steps.
  set_compute_threads(1);
  check_same_parameters(r.layer_parameters, reference_parameters(*g, o), *g);
  check_trained(r.layer_parameters, *g, o);
  check_no_orphans(r);
  return *g;
}

// The same for the model saved both ways, `model`_traced and `model`_scripted.
void check_traced_and_scripted(const std::string& model, int64_t input_size, int micro_batches) {
  for (const char* how : {"_traced", "_scripted"}) check_split_equals_single(model + how, input_size, micro_batches);
}

}  // namespace

// One micro-batch where BatchNorm is used: its statistics are per micro-batch.
TEST_CASE("torchvision resnet18 (traced) split over 2 devices trains like one device") {
  check_split_equals_single("resnet18_traced", 32, 1);
}

TEST_CASE("torchvision mobilenet_v2 (scripted) split over 2 devices trains like one device") {
  check_split_equals_single("mobilenet_v2_scripted", 32, 1);
}

// forward returns GoogLeNetOutputs(logits, aux2, aux1): the loss is the logits'; the aux heads are dropped.
TEST_CASE("torchvision googlenet (scripted, with auxiliary heads: forward returns a tuple) split over 2 devices trains like one device") {
  check_split_equals_single("googlenet_aux_scripted", 32, 1);
}

TEST_CASE("torchvision's VisionTransformer (traced) split over 2 devices with 2 micro-batches trains like one device") {
  check_split_equals_single("vit_tiny_traced", 32, 2);
}

TEST_CASE("a Transformer language model, traced and scripted, split over 2 devices trains like one device") {
  check_traced_and_scripted("lm", 8, 2);
}

// The head reads the embedding's table on the other device: each worker keeps a
// copy and their gradients are summed, so the table takes both uses' gradient.
TEST_CASE("a language model whose head shares the embedding's table trains like one device with the two apart") {
  check_split_equals_single("lm_tied_traced", 8, 2);
}

TEST_CASE("a Transformer over sequences of vectors (no embedding) split over 2 devices trains like one device") {
  check_split_equals_single("dense_sequence_traced", 10, 2);
}

TEST_CASE("a module called twice, split over 2 devices, trains its one weight like one device") {
  check_traced_and_scripted("shared_linear", 0, 2);
}

TEST_CASE("a model that returns a dict of its hidden state and logits, split over 2 devices, trains like one device") {
  check_traced_and_scripted("dict_out", 0, 2);
}

TEST_CASE("a GRU over sequences of vectors, traced and scripted, split over 2 devices trains like one device") {
  check_traced_and_scripted("gru", 10, 2);
}

// Class scores per pixel ({4, 16, 16}): labels {16, 16} a sample, the loss
// their mean cross-entropy (a segmentation model).
TEST_CASE("a tiny U-Net scoring every pixel, traced and scripted, split over 2 devices trains like one device") {
  check_traced_and_scripted("unet_seg", 16, 2);
}

// The forward reads the input's size first and upsamples to it last: the sizes
// past the batch are fixed by the import, so they fold to constants and the
// module still cuts into layers (it was one layer, which no placement splits).
TEST_CASE("a segmentation model that upsamples to its input's size cuts into layers and trains split like one device") {
  for (const std::string model : {"upsampled_seg_traced", "upsampled_seg_scripted"}) {
    const LayerGraph g = check_split_equals_single(model, 16, 2);
    CHECK(g.layers.size() >= 3);
    CHECK(g.label_shape() == Shape{16, 16});
  }
}
