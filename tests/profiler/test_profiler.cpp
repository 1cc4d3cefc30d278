// LibTorch side of the profiler: GraphModel vs LayerGraph, timing, cache,
// TorchScript import of files saved by python3-torch, and the CLI's answers
// to bad input. Small models and batches only.
#include <sys/wait.h>
#include <unistd.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "profiler/accelerator.h"
#include "profiler/compute_threads.h"
#include "model/model_json.h"
#include "profiler/cost_profiles.h"
#include "profiler/profiler.h"
#include "profiler/torch_model.h"
#include "profiler/torchscript_import.h"
#include "profiler/torch_warnings.h"
#include "model/zoo.h"
#include "profiler/model_loader.h"

#include "tests/torch_doctest.h"  // after the LibTorch headers: doctest's CHECK wins
#include "tests/model/memory_profile_cache.h"
#include "tests/model/tiny_transformer.h"

using namespace tapp;
namespace fs = std::filesystem;

namespace {
const std::string kSource = TAPP_SOURCE_DIR;
const std::string kBin = TAPP_BIN_DIR;

fs::path scratch(const std::string& name) {
  fs::path p = fs::path(kBin).parent_path() / "test-scratch" / "profiler" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

int exit_code_of(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ProfileOptions quick() {
  ProfileOptions o;
  o.batch_size = 2;
  o.warmup_runs = 1;
  o.runs = 2;
  return o;
}

// Saves the models of make_torchscript.py once per test run.
const fs::path& torchscript_dir() {
  static const fs::path dir = [] {
    fs::path d = scratch("torchscript");
    std::string cmd =
        std::string(TAPP_PYTHON) + " " + kSource + "/tests/profiler/make_torchscript.py " + d.string();
    REQUIRE_MESSAGE(exit_code_of(cmd) == 0, "python3 with torch could not save the models: ", cmd);
    return d;
  }();
  return dir;
}
}  // namespace

TEST_CASE("LibTorch modules of the small zoo models have the layer graph's parameters and output shape") {
  for (const char* name : {"alexnet_cifar", "vgg5", "mlp", "tiny_inception"}) {
    auto g = zoo_model(name);
    REQUIRE(g.is_ok());
    auto m = GraphModel::build(*g, 7);
    REQUIRE(m.is_ok());
    int64_t n = 0;
    for (const auto& p : (*m)->parameters()) n += p.numel();
    CHECK_MESSAGE(n == g->total_params(), name);
    torch::NoGradGuard no_grad;
    auto [x, y] = synthetic_batch(*g, 3, 1);
    auto out = (*m)->forward(x);
    CHECK(out.sizes().vec() == std::vector<int64_t>{3, 10});
  }
}

TEST_CASE("the LibTorch alexnet has torchvision's parameter count") {
  auto g = zoo_model("alexnet");
  auto m = GraphModel::build(*g, 1);
  REQUIRE(m.is_ok());
  int64_t n = 0;
  for (const auto& p : (*m)->parameters()) n += p.numel();
  CHECK(n == 61100840);
}

TEST_CASE("profiling a small model gives positive forward and backward times and a whole-step ratio") {
  auto g = zoo_model("vgg5");
  auto lib = profile_model(*g, quick());
  REQUIRE_MESSAGE(lib.is_ok(), lib.error_message());
  CHECK(lib->measured);
  CHECK(lib->batch_size == 2);
  REQUIRE(lib->rows.size() == g->layers.size());
  for (const auto& r : lib->rows) CHECK_MESSAGE(r.forward_ms > 0, r.name);
  CHECK(lib->rows[g->index_of("conv2")].backward_ms > 0);
  CHECK(lib->rows[g->index_of("fc1")].backward_ms > 0);
  CHECK(lib->whole_step_ms > 0);
  CHECK(lib->sum_to_step_ratio ==
        doctest::Approx((lib->total_forward_ms() + lib->total_backward_ms()) / lib->whole_step_ms));
}

TEST_CASE("the CPU-time clock gives positive times and is refused with several threads") {
  auto g = zoo_model("tiny_inception");
  ProfileOptions o = quick();
  o.cpu_clock = true;
  auto lib = profile_model(*g, o);
  REQUIRE_MESSAGE(lib.is_ok(), lib.error_message());
  CHECK(lib->rows[0].forward_ms > 0);
  CHECK(lib->whole_step_ms > 0);
  o.threads = 2;
  CHECK(profile_model(*g, o).error_message() ==
        "the CPU-time clock measures one thread; use it with threads = 1");
}

TEST_CASE("a profile is measured once and then read from the cache with the same rows") {
  fs::path dir = scratch("cache");
  FileProfileCache cache(dir.string());
  auto g = zoo_model("mlp");
  bool hit = true;
  auto first = profile_cached(*g, quick(), &cache, &hit);
  REQUIRE(first.is_ok());
  CHECK_FALSE(hit);
  auto second = profile_cached(*g, quick(), &cache, &hit);
  REQUIRE(second.is_ok());
  CHECK(hit);
  CHECK(library_to_json(*second) == library_to_json(*first));

  // Another batch size is another key.
  ProfileOptions other = quick();
  other.batch_size = 3;
  profile_cached(*g, other, &cache, &hit);
  CHECK_FALSE(hit);

  // A corrupt entry is measured again, not trusted.
  std::ofstream(dir / (profile_cache_key(*g, "cpu", 1, 2) + ".json")) << "{ not json";
  auto third = profile_cached(*g, quick(), &cache, &hit);
  REQUIRE(third.is_ok());
  CHECK_FALSE(hit);
}

TEST_CASE("cache keys separate models, input sizes, threads and batch sizes") {
  auto a = zoo_model("vgg5");
  auto b = zoo_model("vgg5", {64, 0});
  CHECK(profile_cache_key(*a, "cpu", 1, 16) != profile_cache_key(*b, "cpu", 1, 16));
  CHECK(profile_cache_key(*a, "cpu", 1, 16) != profile_cache_key(*a, "cpu", 2, 16));
  CHECK(profile_cache_key(*a, "cpu", 1, 16) != profile_cache_key(*a, "cpu", 1, 8));
  CHECK(profile_cache_key(*a, "cpu", 1, 16).rfind("vgg5-3x32x32-", 0) == 0);
}

TEST_CASE("a profile timed under glibc's malloc is not reused under tcmalloc: the allocator is part of the key") {
  auto a = zoo_model("vgg5");
  CHECK(profile_cache_key(*a, "cpu", 1, 16, Allocator::glibc) != profile_cache_key(*a, "cpu", 1, 16, Allocator::tcmalloc));
  CHECK(profile_cache_key(*a, "cpu", 1, 16) == profile_cache_key(*a, "cpu", 1, 16, running_allocator()));
  const std::string key = profile_cache_key(*a, "cpu", 1, 16, Allocator::tcmalloc);
  CHECK(key.substr(key.size() - 9) == "-tcmalloc");
}

TEST_CASE("a scripted PyTorch model is imported with its layers in execution order, edges and parameters") {
  const fs::path& dir = torchscript_dir();
  auto expected = nlohmann::json::parse(read_text(dir / "expected.json"));
  for (const char* file : {"branchy_scripted.pt", "branchy_traced.pt"}) {
    CAPTURE(file);
    auto g = load_model((dir / file).string(), {32, 0});
    REQUIRE_MESSAGE(g.is_ok(), g.error_message());
    CHECK(g->input_shape == Shape{3, 32, 32});
    CHECK(g->total_params() == expected["branchy_params"].get<int64_t>());
    std::vector<std::string> ops;
    for (const auto& l : g->layers) ops.push_back(l.op);
    CHECK(ops == std::vector<std::string>{"conv2d", "batchnorm2d", "relu", "maxpool2d", "conv2d", "conv2d",
                                          "concat", "add", "relu", "adaptive_avgpool2d", "flatten", "dropout",
                                          "linear"});
    // Edges: both branch convolutions read the pool; cat reads both; add reads cat and the pool.
    CHECK(g->layers[4].inputs == std::vector<int>{3});
    CHECK(g->layers[5].inputs == std::vector<int>{3});
    CHECK(g->layers[6].inputs == std::vector<int>{4, 5});
    CHECK(g->layers[7].inputs == std::vector<int>{6, 3});
    CHECK(g->layers[0].name == "stem.0");
    CHECK(g->layers[4].name == "b1");
    CHECK_FALSE(g->layers[5].attrs.bias);
    CHECK(g->layers[5].attrs.padding[0] == 1);
    CHECK(g->layers[11].attrs.p == doctest::Approx(0.25));
    CHECK(g->num_classes == 10);
    // It runs and profiles like any other layer graph.
    auto lib = profile_model(*g, quick());
    REQUIRE(lib.is_ok());
    CHECK(lib->rows.back().forward_ms > 0);
  }
}

TEST_CASE("a traced MLP is imported with a flat input shape read from its first layer") {
  auto g = load_model((torchscript_dir() / "mlp_traced.pt").string());
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  CHECK(g->input_shape == Shape{20});
  CHECK(g->layers.size() == 3);
  CHECK(g->layers[1].op == "tanh");
  CHECK(g->total_params() == 387);
}

TEST_CASE("a TorchScript model with an unsupported op is rejected naming the op") {
  // The op-by-op mapping; the automatic import then runs it as torchscript layers (test_torchscript_layers.cpp).
  ModelOptions ops;
  ops.torchscript = ScriptImport::ops;
  auto g = load_model((torchscript_dir() / "exp_scripted.pt").string(), ops);
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.error_message().find("TorchScript op 'aten::exp': not supported") != std::string::npos);
}

TEST_CASE("ReLU6 and a log-softmax head with a negative dim are imported and run") {
  for (const char* file : {"classifier_scripted.pt", "classifier_traced.pt"}) {
    CAPTURE(file);
    auto g = load_model((torchscript_dir() / file).string());
    REQUIRE_MESSAGE(g.is_ok(), g.error_message());
    REQUIRE(g->layers.size() == 4);
    CHECK(g->layers[1].op == "relu6");
    CHECK(g->layers[3].op == "log_softmax");
    CHECK(g->layers[3].attrs.dim == 1);
    auto m = GraphModel::build(*g, 3);
    REQUIRE(m.is_ok());
    torch::NoGradGuard no_grad;
    auto out = (*m)->forward(torch::randn({4, 20}));
    CHECK(out.exp().sum(1).allclose(torch::ones({4})));
  }
}

TEST_CASE("missing and corrupt TorchScript files are errors, not crashes") {
  fs::path dir = scratch("bad_pt");
  auto missing = load_model((dir / "none.pt").string());
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.error_message().find("none.pt: no such file") != std::string::npos);
  std::ofstream(dir / "corrupt.pt") << "this is not a zip archive";
  auto corrupt = load_model((dir / "corrupt.pt").string());
  REQUIRE_FALSE(corrupt.is_ok());
  CHECK(corrupt.error_message().find("not a loadable TorchScript module") != std::string::npos);
}

// A fuzzed archive whose conv weight claims shape [14, 8, 3, 3] over the
// storage of a [4, 8, 3, 3] one: LibTorch loads it, and freezing or a forward
// read past the storage (a crash under the fuzzer, now and then).
TEST_CASE("a TorchScript tensor larger than its storage is refused, naming the tensor") {
  const std::string file = kSource + "/tests/fuzz/regressions/torchscript/tensor_storage_too_small.pt";
  for (ScriptImport how : {ScriptImport::automatic, ScriptImport::ops, ScriptImport::layers}) {
    CAPTURE(static_cast<int>(how));
    ModelOptions options;
    options.torchscript = how;
    auto g = load_model(file, options);
    REQUIRE_FALSE(g.is_ok());
    CHECK(g.error_message().find("tensor 'b3.weight' of shape [14, 8, 3, 3]") != std::string::npos);
    CHECK(g.error_message().find("reaches 4032 bytes but its storage holds 1152") != std::string::npos);
  }
  // A traced module's tensor constant (in its code, not an attribute), raised from 4 elements to 40.
  REQUIRE(load_model((torchscript_dir() / "scaled_traced.pt").string()).is_ok());
  auto constant = load_model((torchscript_dir() / "constant_too_large.pt").string());
  REQUIRE_FALSE(constant.is_ok());
  CHECK(constant.error_message().find("a tensor constant of __torch__.Scaled.forward of shape [40]") !=
        std::string::npos);
  CHECK(constant.error_message().find("reaches 160 bytes but its storage holds 16") != std::string::npos);
}

TEST_CASE("tapp-cli answers bad input with a message and exit code 2") {
  const std::string cli = kBin + "/tapp-cli";
  fs::path dir = scratch("cli");
  std::ofstream(dir / "corrupt.pt") << "garbage";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"profile alexnett", "unknown model 'alexnett'; known models are alexnet"},
      {"profile " + kSource + "/tests/fixtures/models/malformed.json", "malformed JSON"},
      {"profile " + kSource + "/schemas/examples/model/invalid/unknown_op.json",
       "unknown op 'softmax_fancy'"},
      {"profile " + kSource + "/tests/fixtures/models/mismatched_add.json", "mismatched shapes"},
      {"profile " + (dir / "missing.pt").string(), "no such file"},
      {"profile " + (dir / "corrupt.pt").string(), "not a loadable TorchScript module"},
      {"profile " + kSource + "/tests/fuzz/regressions/torchscript/tensor_storage_too_small.pt",
       "tensor 'b3.weight'"},
      {"profile vgg5 --batch 0", "must be positive"},
      {"profile alexnet --no-cache --batch 10000000", "use a smaller batch or input size"},
      {"export-model nope", "unknown model 'nope'"},
  };
  for (const auto& [args, message] : cases) {
    CAPTURE(args);
    fs::path err = dir / "stderr.txt";
    int rc = exit_code_of(cli + " " + args + " >/dev/null 2>" + err.string());
    CHECK(rc == 2);
    CHECK(read_text(err).find(message) != std::string::npos);
  }
}

TEST_CASE("tiny transformers profile layer by layer: token ids get no gradient, attention gets a backward time") {
  const ModelOptions o = test::tiny_transformer(8, 30, 1, 16, 2);
  for (const char* name : {"gpt2", "bert_base"}) {
    auto g = zoo_model(name, o);
    REQUIRE_MESSAGE(g.is_ok(), g.error_message());
    auto lib = profile_model(*g, quick());
    REQUIRE_MESSAGE(lib.is_ok(), lib.error_message());
    REQUIRE(lib->rows.size() == g->layers.size());
    for (const auto& r : lib->rows) CHECK_MESSAGE(r.forward_ms > 0, r.name);
    const std::string attention = std::string(name) == "gpt2" ? "h.0.attn" : "encoder.layer.0.attention.self";
    CHECK(lib->rows[g->index_of(attention)].backward_ms > 0);
    CHECK(lib->whole_step_ms > 0);
  }
  ModelOptions v = o;
  v.input_size = 32;
  v.vocabulary = 0;
  v.num_classes = 4;
  auto vit = zoo_model("vit_b_16", v);
  REQUIRE(vit.is_ok());
  auto m = GraphModel::build(*vit, 3);
  REQUIRE(m.is_ok());
  int64_t n = 0;
  for (const auto& p : (*m)->parameters()) n += p.numel();
  CHECK(n == vit->total_params());
  auto [x, y] = synthetic_batch(*vit, 2, 1);
  CHECK((*m)->forward(x).sizes().vec() == std::vector<int64_t>{2, 4});
}

TEST_CASE("the text classifiers build, run and profile: an LSTM layer has the graph's parameters and a backward time") {
  for (const char* name : {"text_lstm", "text_transformer"}) {
    const bool lstm = std::string(name) == "text_lstm";
    auto g = zoo_model(name, test::tiny_transformer(8, 30, 2, 16, lstm ? 0 : 2, 3));
    REQUIRE_MESSAGE(g.is_ok(), g.error_message());
    auto m = GraphModel::build(*g, 3);
    REQUIRE(m.is_ok());
    int64_t n = 0;
    for (const auto& p : (*m)->parameters()) n += p.numel();
    CHECK(n == g->total_params());
    auto [x, y] = synthetic_batch(*g, 2, 1);
    CHECK((*m)->forward(x).sizes().vec() == std::vector<int64_t>{2, 3});
    auto lib = profile_model(*g, quick());
    REQUIRE_MESSAGE(lib.is_ok(), lib.error_message());
    const std::string deep = lstm ? "lstm.1" : "encoder.1.attention";
    CHECK(lib->rows[g->index_of(deep)].forward_ms > 0);
    CHECK(lib->rows[g->index_of(deep)].backward_ms > 0);
  }
}

TEST_CASE("tapp-cli profiles a tiny gpt2 from its options") {
  const std::string cli = kBin + "/tapp-cli";
  fs::path dir = scratch("gpt2");
  REQUIRE(exit_code_of(cli + " profile gpt2 --input-size 8 --vocab 50 --layers 1 --width 16 --heads 2 --batch 2 "
                             "--runs 1 --warmup 0 --no-cache > " + (dir / "table.txt").string()) == 0);
  const std::string table = read_text(dir / "table.txt");
  CHECK(table.find("lm_head") != std::string::npos);
  CHECK(table.find("Attention") != std::string::npos);
  CHECK(exit_code_of(cli + " profile gpt2 --heads 5 --width 16 --estimate > /dev/null 2>&1") == 2);
}

TEST_CASE("tapp-cli --torchscript picks how a TorchScript model is imported") {
  const std::string cli = kBin + "/tapp-cli";
  const std::string file = (torchscript_dir() / "exp_scripted.pt").string();  // aten::exp: no LayerGraph op
  fs::path dir = scratch("torchscript_flag");
  CHECK(exit_code_of(cli + " export-model " + file + " --torchscript ops > /dev/null 2>&1") == 2);
  REQUIRE(exit_code_of(cli + " export-model " + file + " --torchscript layers --out " + (dir / "layers.json").string()) ==
          0);
  CHECK(read_text(dir / "layers.json").find("\"torchscript\"") != std::string::npos);
  CHECK(exit_code_of(cli + " export-model " + file + " --torchscript fast > " + (dir / "err.txt").string() +
                     " 2>&1") == 2);
  CHECK(read_text(dir / "err.txt").find("--torchscript") != std::string::npos);
}

TEST_CASE("a model exported by tapp-cli export-model profiles like the zoo model") {
  const std::string cli = kBin + "/tapp-cli";
  fs::path dir = scratch("export");
  const std::string file = (dir / "tiny.json").string();
  REQUIRE(exit_code_of(cli + " export-model tiny_inception --out " + file) == 0);
  const std::string est = " --estimate --json --batch 4 > ";
  REQUIRE(exit_code_of(cli + " profile tiny_inception" + est + (dir / "zoo.json").string()) == 0);
  REQUIRE(exit_code_of(cli + " profile " + file + est + (dir / "file.json").string()) == 0);
  auto a = nlohmann::json::parse(read_text(dir / "zoo.json"));
  auto b = nlohmann::json::parse(read_text(dir / "file.json"));
  CHECK(a == b);
  CHECK(a["rows"].size() == zoo_model("tiny_inception")->layers.size());

  // And a measured profile through the CLI uses the cache directory it is given.
  const std::string cache = (dir / "cache").string();
  REQUIRE(exit_code_of(cli + " profile mlp --batch 2 --runs 1 --warmup 0 --cache-dir " + cache + " > " +
                       (dir / "table.txt").string()) == 0);
  CHECK(read_text(dir / "table.txt").find("sum-of-layers / whole-step ratio") != std::string::npos);
  CHECK(std::distance(fs::directory_iterator(cache), fs::directory_iterator()) == 1);
  REQUIRE(exit_code_of(cli + " profile mlp --batch 2 --runs 1 --warmup 0 --cache-dir " + cache + " > " +
                       (dir / "table2.txt").string()) == 0);
  CHECK(read_text(dir / "table2.txt").find("(cached profile)") != std::string::npos);
}

TEST_CASE("set_compute_threads sizes LibTorch's and OpenBLAS's pools together") {
  // Debian's LibTorch computes with OpenBLAS (libopenblas0-pthread; without it a
  // Linear layer is ~35x slower), whose pool we size ourselves. PyTorch's own
  // builds use MKL, which at::set_num_threads sizes: then only LibTorch's pool is checked.
  if (openblas_threads() == 0) {
    REQUIRE_MESSAGE(at::hasMKL(), "LibTorch's BLAS is neither OpenBLAS (loaded) nor MKL");
    set_compute_threads(2);
    CHECK(at::get_num_threads() == 2);
    set_compute_threads(0);  // clamped: never zero threads
    CHECK(at::get_num_threads() == 1);
    return;
  }
  set_compute_threads(2);
  CHECK(at::get_num_threads() == 2);
  CHECK(openblas_threads() == 2);
  set_compute_threads(1);
  CHECK(at::get_num_threads() == 1);
  CHECK(openblas_threads() == 1);  // a one-thread device must not keep a second BLAS thread spinning
  set_compute_threads(0);          // clamped: never zero threads
  CHECK(at::get_num_threads() == 1);
}

namespace {
using MemoryCache = test::MemoryProfileCache;

Cluster cluster_of(const std::vector<std::pair<std::string, int>>& kinds_and_threads) {
  Cluster c;
  for (const auto& [kind, threads] : kinds_and_threads) {
    Device d;
    d.name = "d" + std::to_string(c.devices.size());
    d.kind = kind;
    d.threads = threads;
    c.devices.push_back(d);
  }
  return c;
}
}  // namespace

TEST_CASE("the cost rule profiles each distinct device kind and thread count at every micro-batch size, reporting each size and layer") {
  auto g = load_model("mlp");
  REQUIRE(g.is_ok());
  MemoryCache cache;
  CostProfileOptions o;
  o.batch_size = 2;  // sizes 1 and 2
  o.cache = &cache;
  std::vector<ProfileProgress> seen;
  o.progress = [&](const ProfileProgress& p) { seen.push_back(p); };
  CostProfiles p = cost_profiles(*g, cluster_of({{"cpu", 1}, {"cpu", 2}, {"cpu", 1}}), o).value();
  CHECK(p.origin() == "profiled");
  CHECK(p.measured == 4);  // (cpu x1, cpu x2) x (1, 2)
  REQUIRE(p.libraries.size() == 4);
  CHECK(p.libraries[0].threads == 1);
  CHECK(p.libraries[2].threads == 2);
  CHECK(p.batch_sizes() == std::vector<int64_t>{1, 2});
  CHECK(cache.entries.size() == 4);
  const int layers = static_cast<int>(g->layers.size());
  // Per profile: a start (layer 0), every layer, the whole step (layer layers + 1).
  REQUIRE(seen.size() == static_cast<size_t>(4 * (layers + 2)));
  for (int set = 1; set <= 2; ++set)
    for (int64_t size : {1, 2})
      for (int layer = 0; layer <= layers + 1; ++layer) {
        CAPTURE(set);
        CAPTURE(size);
        CAPTURE(layer);
        CHECK(std::count_if(seen.begin(), seen.end(), [&](const ProfileProgress& e) {
                return e.device_set == set && e.device_sets == 2 && e.batch_size == size && e.layer == layer &&
                       e.sizes == 2 && (layer == 0 || e.layers == layers);
              }) == 1);
      }
  CHECK(seen.back().fraction() > 0.9);

  // The same job again: every profile from the cache, nothing measured or reported.
  seen.clear();
  CostProfiles again = cost_profiles(*g, cluster_of({{"cpu", 1}, {"cpu", 2}}), o).value();
  CHECK(again.origin() == "cache");
  CHECK(again.cached == 4);
  CHECK(seen.empty());
}

TEST_CASE("the cost rule names a size it cannot profile and estimates a device kind with no profile") {
  auto g = load_model("mlp");
  REQUIRE(g.is_ok());
  MemoryCache cache;
  CostProfileOptions o;
  o.batch_size = 2;
  o.cache = &cache;
  // A GPU this machine does not have: cuda:0 without CUDA, one past its last GPU with it.
  const std::string absent = "cuda:" + std::to_string(gpu_count());
  CostProfiles p = cost_profiles(*g, cluster_of({{absent, 1}}), o).value();
  CHECK(p.origin() == "estimated");
  REQUIRE(p.skipped.size() == 2);
  CHECK(p.skipped[0].device_kind == absent);
  CHECK(p.skipped[0].error.find("device '" + absent + "': this ") != std::string::npos);
  REQUIRE(p.libraries.size() == 1);
  CHECK(p.libraries[0].device_kind == absent);
  CHECK_FALSE(p.libraries[0].measured);

  o.source = CostSource::cached_only;  // `tapp-cli plan --costs auto` on an empty cache: never measures
  CostProfiles cached_only = cost_profiles(*g, cluster_of({{"cpu", 1}}), o).value();
  CHECK(cached_only.origin() == "estimated");
  CHECK(cached_only.measured == 0);
  CHECK(cache.entries.empty());
}

TEST_CASE("a device with a layer library measured elsewhere is priced from that file, named relative to the cluster file") {
  auto g = load_model("mlp");
  REQUIRE(g.is_ok());
  const fs::path dir = fs::temp_directory_path() / ("tapp-device-costs-" + std::to_string(::getpid()));
  fs::create_directories(dir / "profiles");
  LayerLibrary measured = estimated_library(*g, 2, 1.0);
  measured.measured = true;
  std::ofstream(dir / "profiles" / "mlp_b2.json") << library_to_json(measured).dump();
  std::ofstream(dir / "cluster.json") << R"({"devices": [{"name": "here"},
      {"name": "there", "threads": 4, "speed": 3, "costs": {"library": "profiles/mlp_b2.json"}},
      {"name": "remote", "where": "127.0.0.1:9", "costs": "worker"}]})";
  auto cluster = load_cluster((dir / "cluster.json").string());
  REQUIRE_MESSAGE(cluster.is_ok(), cluster.error_message());
  const std::string library_path = (dir / "profiles" / "mlp_b2.json").string();
  CHECK(cluster->devices[1].costs.library_path == library_path);

  MemoryCache cache;
  CostProfileOptions o;
  o.batch_size = 2;
  o.cache = &cache;
  o.source = CostSource::estimated;  // this host's devices estimated; the library is read all the same
  CostProfiles p = cost_profiles(*g, *cluster, o).value();
  CHECK(p.device_libraries[0].empty());
  REQUIRE(p.device_libraries[1].size() == 1);
  CHECK(p.device_libraries[1][0].rows[0].forward_ms == measured.rows[0].forward_ms);
  CHECK(p.devices[1].from == CostsFrom::library);
  CHECK(p.devices[1].detail == "layer library '" + library_path + "'");
  CHECK(p.devices[2].from == CostsFrom::host);  // --costs estimated does not ask the worker
  REQUIRE(p.notes.size() == 1);
  CHECK(p.notes[0].rfind("devices[2].costs (remote): estimated here", 0) == 0);
  CHECK(p.libraries.size() == 1);  // only this host's kind and threads (cpu x1) are estimated

  o.batch_size = 4;
  auto wrong_batch = cost_profiles(*g, *cluster, o);
  REQUIRE_FALSE(wrong_batch.is_ok());
  CHECK(wrong_batch.error_message() == "devices[1].costs.library: layer library '" + library_path +
                                           "': batch_size: 2, the plan's batch is 4 (profile it at that batch: "
                                           "tapp-cli profile --batch 4 --json)");

  o.batch_size = 2;
  o.source = CostSource::profile;  // the worker must be asked, and no one here can ask it
  auto no_hook = cost_profiles(*g, *cluster, o);
  CHECK(no_hook.error_message() == "devices[2].costs: \"worker\": this caller cannot ask a remote worker to profile");
  fs::remove_all(dir);
}

namespace {

// One training step's loss and parameter gradients of `graph` on `device` (weights from seed 1).
std::pair<double, std::vector<torch::Tensor>> step_on(const LayerGraph& graph, const torch::Device& device) {
  auto model = GraphModel::build(graph, 1).value();
  model->set_training(false);  // dropout off: the same function on both devices
  auto [x, y] = synthetic_batch(graph, 4, 7);
  model->to(device);
  torch::Tensor loss = training_loss(model->forward(x.to(device)), y.to(device), 4);
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().to(torch::kCPU));
  return {loss.item<double>(), grads};
}

}  // namespace

TEST_CASE("a model on the GPU computes the loss and gradients it computes on the CPU (GPU only)") {
  if (gpu_count() == 0) {
    MESSAGE("skipped: no GPU that CUDA can use here");
    return;
  }
  // Full float32 on the GPU: cuDNN's convolutions default to TF32 (10-bit mantissa), whose
  // gradients differ from the CPU's by 2-4% here (H100, alexnet_cifar).
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  for (const LayerGraph& g : {zoo_model("alexnet_cifar").value(), zoo_model("tiny_inception").value(),
                              zoo_model("gpt2", test::tiny_transformer(16, 64, 2, 32, 4)).value()}) {
    CAPTURE(g.name);
    auto [cpu_loss, cpu_grads] = step_on(g, torch::kCPU);
    auto [gpu_loss, gpu_grads] = step_on(g, torch::Device(torch::kCUDA, 0));
    CHECK(gpu_loss == doctest::Approx(cpu_loss).epsilon(1e-3));
    REQUIRE(gpu_grads.size() == cpu_grads.size());
    for (size_t k = 0; k < cpu_grads.size(); ++k) {
      CAPTURE(k);
      const double err = (gpu_grads[k] - cpu_grads[k]).norm().item<double>() / (cpu_grads[k].norm().item<double>() + 1e-12);
      CHECK(err < 1e-3);
    }
  }
}

TEST_CASE("the profiler times a model on cuda:0 and names the GPU; an absent GPU is refused naming it (GPU only)") {
  if (gpu_count() == 0) {
    MESSAGE("skipped: no GPU that CUDA can use here");
    return;
  }
  auto g = zoo_model("vgg5").value();
  ProfileOptions o;
  o.device = "cuda:0";
  o.batch_size = 8;
  o.runs = 3;
  auto lib = profile_model(g, o);
  REQUIRE_MESSAGE(lib.is_ok(), lib.error_message());
  const GpuInfo gpu = gpu_for_device("cuda:0").value();
  CHECK(lib->measured);
  CHECK(lib->device_kind == "cuda:0");
  CHECK(lib->device_name == gpu.name);
  CHECK(lib->device_memory_mb == gpu.total_bytes >> 20);
  CHECK(lib->whole_step_ms > 0);
  for (const LayerRow& r : lib->rows)
    if (r.macs > 0) CHECK(r.forward_ms > 0);
  // The name and memory survive the library's JSON.
  LayerLibrary back = library_from_json(library_to_json(*lib)).value();
  CHECK(back.device_name == gpu.name);
  CHECK(back.device_memory_mb == lib->device_memory_mb);
  MESSAGE(gpu.name << ": vgg5 at batch 8, step " << lib->whole_step_ms << " ms, per-layer sum / step "
                   << lib->sum_to_step_ratio);

  o.device = "cuda:" + std::to_string(gpu_count());
  auto absent = profile_model(g, o);
  REQUIRE_FALSE(absent.is_ok());
  CHECK(absent.error_message().find("device '" + o.device + "': this machine has " + std::to_string(gpu_count()) +
                                    " GPU") == 0);
  // More than the GPU holds: refused before anything is allocated, naming the sizes.
  o.device = "cuda:0";
  o.batch_size = (gpu.free_bytes / std::max<int64_t>(1, g.layers.front().activation_bytes())) + 1;
  auto too_big = profile_model(g, o);
  REQUIRE_FALSE(too_big.is_ok());
  CHECK(too_big.error_message().find("MiB free") != std::string::npos);
}

// A model that warns in its forward (torchvision's scripted GoogLeNet) warned once a layer run
// and once a step on every worker; LibTorch's printer now sees each message once.
TEST_CASE("a warning LibTorch is given again and again goes to its printer once, from any thread") {
  print_each_torch_warning_once();
  const int64_t before = torch_warnings_repeated();
  for (int i = 0; i < 3; ++i) TORCH_WARN("tapp test: the same warning");
  CHECK(torch_warnings_repeated() == before + 2);
  TORCH_WARN("tapp test: another warning");
  CHECK(torch_warnings_repeated() == before + 2);
  std::thread([] {
    print_each_torch_warning_once();
    TORCH_WARN("tapp test: the same warning");
  }).join();
  CHECK(torch_warnings_repeated() == before + 3);
}
