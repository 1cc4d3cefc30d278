// The generic TorchScript path: torchvision models and a Transformer language
// model, saved by python3-torch in the test, cut into layers that run the
// module's own code (profiler/torchscript_layers.h). Small inputs; vit_b_16
// at 224 is imported and run forward only.
#include <sys/wait.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/model_json.h"
#include "profiler/model_loader.h"
#include "profiler/profiler.h"
#include "profiler/torch_model.h"
#include "profiler/torchscript_import.h"
#include "profiler/torchscript_layers.h"

#include "tests/torch_doctest.h"  // after the LibTorch headers: doctest's CHECK wins

using namespace tapp;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir(const std::string& name) {
  fs::path p = fs::path(TAPP_BIN_DIR).parent_path() / "test-scratch" / "profiler" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Saves the models of make_generic_torchscript.py once per test run.
const fs::path& models_dir() {
  static const fs::path dir = [] {
    fs::path d = scratch_dir("generic_torchscript");
    std::string cmd = std::string(TAPP_PYTHON) + " " + TAPP_SOURCE_DIR +
                      "/tests/profiler/make_generic_torchscript.py " + d.string() + " --vit-b-16 2>/dev/null";
    int rc = std::system(cmd.c_str());
    REQUIRE_MESSAGE((WIFEXITED(rc) && WEXITSTATUS(rc) == 0), "python3 with torch could not save the models: ", cmd);
    return d;
  }();
  return dir;
}

int64_t expected_params(const std::string& model) {
  std::ifstream in(models_dir() / "expected.json");
  return nlohmann::json::parse(in).at(model).get<int64_t>();
}

ModelOptions layers_at(int64_t input_size) {
  ModelOptions o;
  o.input_size = input_size;
  o.torchscript = ScriptImport::layers;
  return o;
}

LayerGraph imported(const std::string& model, ModelOptions options) {
  auto g = load_model((models_dir() / (model + ".pt")).string(), options);
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  return *g;
}

// The layered model's output equals the module's own forward on the same batch (eval mode).
void check_same_forward(const std::string& model, const LayerGraph& g) {
  auto built = GraphModel::build(g, 1);
  REQUIRE_MESSAGE(built.is_ok(), built.error_message());
  (*built)->set_training(false);
  auto [x, y] = synthetic_batch(g, 2, 5);
  torch::jit::Module m = torch::jit::load((models_dir() / (model + ".pt")).string());
  m.eval();
  torch::NoGradGuard no_grad;
  const c10::IValue out = m.forward({x});
  torch::Tensor want = out.isTuple()                    ? out.toTupleRef().elements()[0].toTensor()  // GoogLeNet: the logits
                       : out.isGenericDict()            ? out.toGenericDict().begin()->value().toTensor()  // its first entry
                                                        : out.toTensor();
  torch::Tensor got = (*built)->forward(x);
  REQUIRE(got.sizes().vec() == want.sizes().vec());
  CHECK(got.allclose(want, 1e-4, 1e-5));
}

ProfileOptions quick() {
  ProfileOptions o;
  o.batch_size = 2;
  o.warmup_runs = 0;
  o.runs = 1;
  return o;
}

}  // namespace

TEST_CASE("torchvision models import as layers of their own code with exact parameter counts and forward") {
  struct Case {
    std::string model;
    Shape output;
  };
  for (const Case& c : {Case{"resnet18_traced", {10}}, Case{"mobilenet_v2_scripted", {10}},
                        Case{"vit_tiny_traced", {10}}}) {
    CAPTURE(c.model);
    LayerGraph g = imported(c.model, layers_at(32));
    CHECK(g.input_shape == Shape{3, 32, 32});
    CHECK(g.input_kind == InputKind::dense);
    CHECK(g.total_params() == expected_params(c.model));
    CHECK(g.layers.size() >= 6);
    CHECK(g.layers.back().output_shape == c.output);
    CHECK(g.total_macs() > 0);
    for (const Layer& l : g.layers) CHECK(l.op == "torchscript");
    check_same_forward(c.model, g);
  }
}

TEST_CASE("a scripted GoogLeNet, whose forward returns a tuple, imports as its logits, with or without aux heads") {
  // forward returns GoogLeNetOutputs(logits, aux2, aux1); the aux heads run only in training mode.
  for (const char* model : {"googlenet_scripted", "googlenet_aux_scripted"}) {
    CAPTURE(model);
    LayerGraph g = imported(model, layers_at(32));
    CHECK(g.layers.back().output_shape == Shape{10});
    CHECK(g.total_params() == expected_params(model));  // the aux heads' left out
    check_same_forward(model, g);
    ModelOptions ops;  // the op-by-op mapping reads it the same way
    ops.input_size = 32;
    ops.torchscript = ScriptImport::ops;
    auto mapped = load_model((models_dir() / (std::string(model) + ".pt")).string(), ops);
    REQUIRE_MESSAGE(mapped.is_ok(), mapped.error_message());
    CHECK(mapped->layers.back().output_shape == Shape{10});
    CHECK(mapped->total_params() == g.total_params());
  }
}

TEST_CASE("resnet18's layers follow its blocks: residual adds read two earlier layers") {
  LayerGraph g = imported("resnet18_traced", layers_at(32));
  CHECK(g.layers[0].name == "conv1");
  CHECK(g.layers[0].params == 3 * 64 * 7 * 7);
  CHECK(g.layers[0].macs == 3 * 64 * 7 * 7 * 16 * 16);  // a 7x7 stride-2 conv: 16x16 outputs at 32x32
  int residual_reads = 0;
  for (const Layer& l : g.layers) residual_reads += l.inputs.size() == 2;
  CHECK(residual_reads >= 4);  // at least one per expanded BasicBlock of the largest stages
}

TEST_CASE("a Transformer language model, traced and scripted, imports with token inputs and per-token outputs") {
  for (const char* model : {"lm_traced", "lm_scripted"}) {
    CAPTURE(model);
    ModelOptions o;
    o.input_size = 8;  // tokens per sample
    LayerGraph g = imported(model, o);  // automatic: the op-by-op path refuses aten::embedding
    CHECK(g.input_shape == Shape{8});
    CHECK(g.input_kind == InputKind::tokens);
    CHECK(g.input_vocabulary == 100);
    CHECK(g.num_classes == 100);
    CHECK(g.layers.back().output_shape == Shape{8, 100});
    CHECK(g.total_params() == expected_params(model));
    CHECK(g.layers.size() >= 3);
    CHECK(g.layers[0].name == "embed");
    CHECK(g.layers[0].params == 100 * 32);
    auto [x, y] = synthetic_batch(g, 3, 1);
    CHECK((x.scalar_type() == c10::ScalarType::Long));
    CHECK(y.dim() == 2);
    CHECK(y.size(1) == 8);
    check_same_forward(model, g);
  }
  // Multiply-adds per token of the traced model, written out: per encoder layer the
  // packed q/k/v projection 32x96, the output projection 32x32, scores and
  // weighted sum 8x32 each, the feed-forward 32x64 + 64x32; then the 32x100 head.
  const int64_t per_layer = 32 * 96 + 32 * 32 + 8 * 32 + 8 * 32 + 32 * 64 + 64 * 32;
  ModelOptions o;
  o.input_size = 8;
  CHECK(imported("lm_traced", o).total_macs() == 8 * (4 * per_layer + 32 * 100));
}

TEST_CASE("torchscript layers profile, and round-trip through the JSON layer graph") {
  for (const char* model : {"lm_traced", "mobilenet_v2_scripted"}) {
    CAPTURE(model);
    LayerGraph g = imported(model, layers_at(std::string(model) == "lm_traced" ? 8 : 32));
    auto lib = profile_model(g, quick());
    REQUIRE_MESSAGE(lib.is_ok(), lib.error_message());
    CHECK(lib->rows.size() == g.layers.size());
    CHECK(lib->rows.back().forward_ms > 0);
    auto back = model_from_json(model_to_json(g));
    REQUIRE_MESSAGE(back.is_ok(), back.error_message());
    CHECK(back->input_kind == g.input_kind);
    CHECK(back->input_vocabulary == g.input_vocabulary);
    CHECK(graph_fingerprint(*back) == graph_fingerprint(g));
    for (size_t i = 0; i < g.layers.size(); ++i) {
      CHECK(back->layers[i].attrs == g.layers[i].attrs);
      CHECK(back->layers[i].inputs == g.layers[i].inputs);
    }
  }
}

TEST_CASE("torchvision's vit_b_16 traced at 224 imports with its 86,567,656 parameters and runs forward") {
  LayerGraph g = imported("vit_b_16_traced", layers_at(0));
  CHECK(g.input_shape == Shape{3, 224, 224});
  CHECK(g.total_params() == 86567656);
  CHECK(g.total_params() == expected_params("vit_b_16_traced"));
  CHECK(g.layers.back().output_shape == Shape{1000});
  CHECK(g.layers.size() >= 12);
  check_same_forward("vit_b_16_traced", g);
}

TEST_CASE("the automatic import falls back to the module's own code only where the op-by-op mapping refuses") {
  fs::path dir = scratch_dir("generic_fallback");
  // make_torchscript.py's exp model: aten::exp has no LayerGraph op.
  std::string cmd = std::string(TAPP_PYTHON) + " " + TAPP_SOURCE_DIR + "/tests/profiler/make_torchscript.py " +
                    dir.string() + " 2>/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  ModelOptions ops;
  ops.torchscript = ScriptImport::ops;
  auto refused = load_model((dir / "exp_scripted.pt").string(), ops);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.error_message().find("TorchScript op 'aten::exp': not supported") != std::string::npos);
  auto generic = load_model((dir / "exp_scripted.pt").string());
  REQUIRE_MESSAGE(generic.is_ok(), generic.error_message());
  CHECK(generic->layers.back().op == "torchscript");
  CHECK(generic->total_params() == 20 * 3 + 3);
  auto mapped = load_model((dir / "mlp_traced.pt").string());
  REQUIRE(mapped.is_ok());
  CHECK(mapped->layers[0].op == "linear");  // a model the mapping handles keeps its zoo ops
}


TEST_CASE("a model over sequences of vectors imports with a guessed length, or the one given") {
  // Its first op is a linear: one 32-wide vector fails in the attention's
  // transpose, a sequence of 32 of them runs; --input-size is the length.
  LayerGraph guessed = imported("dense_sequence_traced", {});
  CHECK(guessed.input_shape == Shape{32, 32});
  CHECK(guessed.total_params() == expected_params("dense_sequence_traced"));
  LayerGraph given = imported("dense_sequence_traced", layers_at(10));
  CHECK(given.input_shape == Shape{10, 32});
  CHECK(given.layers.back().output_shape == Shape{3});
  check_same_forward("dense_sequence_traced", given);
}

TEST_CASE("a model whose first op is a recurrent layer imports as a sequence of its input width, traced and scripted") {
  // nn.GRU(8, 12, bidirectional) reads the input: its weight_ih_l0 [36 x 8]
  // gives the width (the head's 24 did before); 32 steps unless given.
  for (const char* model : {"gru_traced", "gru_scripted"}) {
    CAPTURE(model);
    LayerGraph guessed = imported(model, {});
    CHECK(guessed.input_shape == Shape{32, 8});
    CHECK(guessed.total_params() == expected_params(model));
    CHECK(guessed.layers.front().name == "gru");  // not a control-flow node's name ("Uninitialized")
    LayerGraph given = imported(model, layers_at(10));
    CHECK(given.input_shape == Shape{10, 8});
    check_same_forward(model, given);
  }
}

TEST_CASE("a module no guessed input size runs asks for the input size in one line, and imports with it") {
  const std::string path = (models_dir() / "conv1d_len20_traced.pt").string();
  // Every guess (224, 32, 28, ... 16 steps) fails in the linear head: the interpreter's
  // error, a runtime_error carrying the module's tracebacks, comes back as its last line.
  auto guessed = load_model(path);
  REQUIRE_FALSE(guessed.is_ok());
  const std::string& why = guessed.error_message();
  CHECK(why.find("running the module on an example input [4x224] failed: RuntimeError: mat1 and mat2 shapes cannot be "
                 "multiplied") != std::string::npos);
  CHECK(why.find("; give its input size (an image side or a sequence length: --input-size") != std::string::npos);
  CHECK(why.find("Traceback") == std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
  LayerGraph g = imported("conv1d_len20_traced", layers_at(20));
  CHECK(g.input_shape == Shape{4, 20});
  CHECK(g.total_params() == expected_params("conv1d_len20_traced"));
  check_same_forward("conv1d_len20_traced", g);
}

TEST_CASE("a module called twice is one parameter: the import counts it once, traced and scripted") {
  // Mapped to zoo ops, each call would own a copy of the weight (595 parameters, not 323).
  for (const char* model : {"shared_linear_traced", "shared_linear_scripted"}) {
    CAPTURE(model);
    auto g = load_model((models_dir() / (std::string(model) + ".pt")).string());
    REQUIRE_MESSAGE(g.is_ok(), g.error_message());
    CHECK(g->total_params() == expected_params(model));
    check_same_forward(model, *g);
  }
}

TEST_CASE("a forward that returns a dict imports as its logits, traced and scripted") {
  // {"hidden": [16], "logits": [5]}: the logits, though second; the hidden state is not an output.
  for (const char* model : {"dict_out_traced", "dict_out_scripted"}) {
    CAPTURE(model);
    auto g = load_model((models_dir() / (std::string(model) + ".pt")).string());
    REQUIRE_MESSAGE(g.is_ok(), g.error_message());
    CHECK(g->layers.back().output_shape == Shape{5});
    CHECK(g->total_params() == expected_params(model));
  }
}

TEST_CASE("the per-layer import tries the image sides the ops import does: an MNIST model whose head views to a fixed size") {
  // view(-1, 4 * 24 * 24) is not an op the ops import maps; the per-layer
  // import ran 224, 32 and 299 only, and asked for the size.
  LayerGraph g = imported("view_28_traced", {});
  CHECK(g.input_shape == Shape{1, 28, 28});
  CHECK(g.total_params() == expected_params("view_28_traced"));
  check_same_forward("view_28_traced", g);
}

TEST_CASE("a torchscript layer whose file changed or is absent is an error naming the file, not a crash") {
  fs::path dir = scratch_dir("generic_bad");
  fs::copy_file(models_dir() / "lm_traced.pt", dir / "lm.pt");
  ModelOptions o;
  o.input_size = 8;
  auto g = load_model((dir / "lm.pt").string(), o);
  REQUIRE(g.is_ok());
  fs::copy_file(models_dir() / "lm_scripted.pt", dir / "lm.pt", fs::copy_options::overwrite_existing);
  auto changed = GraphModel::build(*g, 1);
  REQUIRE_FALSE(changed.is_ok());
  CHECK(changed.error_message().find("lm.pt: the file changed since it was imported") != std::string::npos);
  fs::remove(dir / "lm.pt");
  auto missing = GraphModel::build(*g, 1);
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.error_message().find("is not on this host") != std::string::npos);
  std::ofstream(dir / "two_inputs.pt") << "not a zip";
  auto corrupt = import_torchscript_layers((dir / "two_inputs.pt").string());
  REQUIRE_FALSE(corrupt.is_ok());
  CHECK(corrupt.error_message().find("two_inputs.pt") != std::string::npos);
}

// torchvision's scripted segmentation models: an OrderedDict filled by
// assignment (was refused), an ASPP whose list is built empty and appended to
// across submodule calls (recomputed per layer, a later layer saw it empty:
// the import failed with 4 channels for 12, deeplabv3 with 256 for 1280), the
// input's size read first.
TEST_CASE("a scripted segmentation model that fills a dict and appends to a list imports with its forward") {
  const LayerGraph g = imported("seg_dict_scripted", layers_at(16));
  CHECK(g.total_params() == expected_params("seg_dict_scripted"));
  CHECK(g.num_classes == 3);
  CHECK(g.label_shape() == Shape{16, 16});
  CHECK(g.layers.size() >= 2);
  check_same_forward("seg_dict_scripted", g);
  const LayerGraph listed = imported("listed_branches_scripted", layers_at(16));
  CHECK(listed.total_params() == expected_params("listed_branches_scripted"));
  check_same_forward("listed_branches_scripted", listed);
}
