// tapp-cli profile MODEL / export-model NAME: the profiler's command line.
//
// `profile` loads a zoo name, a JSON layer graph or a TorchScript file,
// measures it layer by layer (cached) and prints a table with totals and the
// whole-step self-check, or the LayerLibrary JSON with --json. `export-model`
// writes a model as a JSON layer graph. Bad input: message on stderr, exit 2.
#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/cluster.h"  // kMaxThreads
#include "model/model_json.h"
#include "model/profile_cache.h"
#include "profiler/profiler.h"
#include "model/zoo.h"
#include "profiler/model_loader.h"
#include "service/cli/commands.h"
#include "service/cli/model_inputs.h"

namespace tapp::cli {
namespace {

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s.empty() ? "-" : s;
}

void print_table(const LayerLibrary& lib, bool cache_hit, std::ostream& os) {
  os << "model " << lib.model << "  input " << shape_to_string(lib.input_shape) << "  batch "
     << lib.batch_size << "  device " << lib.device_kind
     << (lib.device_name.empty() ? "" : " (" + lib.device_name + ")") << "  threads " << lib.threads
     << (lib.measured ? "" : "  (estimated)") << (cache_hit ? "  (cached profile)" : "") << "\n";
  size_t wname = 4, wclass = 8, wshape = 6;
  for (const auto& r : lib.rows) {
    wname = std::max(wname, r.name.size());
    wclass = std::max(wclass, r.op_class.size());
    wshape = std::max(wshape, shape_to_string(r.output_shape).size());
  }
  auto L = [&](const std::string& s, size_t w) {
    os << std::left << std::setw(static_cast<int>(w)) << s << "  ";
  };
  auto R = [&](const std::string& s, size_t w) {
    os << std::right << std::setw(static_cast<int>(w)) << s << "  ";
  };
  L("name", wname), L("op class", wclass), L("output", wshape), R("params", 11), R("MACs", 13),
      R("act KB", 9), R("fwd ms", 9), R("bwd ms", 9);
  os << "next\n";
  for (const auto& r : lib.rows) {
    L(r.name, wname), L(r.op_class, wclass), L(shape_to_string(r.output_shape), wshape);
    R(with_commas(r.params), 11), R(with_commas(r.macs), 13), R(fixed(r.activation_bytes / 1024.0, 1), 9);
    R(fixed(r.forward_ms, 3), 9), R(fixed(r.backward_ms, 3), 9);
    os << join(r.next_layers) << "\n";
  }
  int64_t params = 0, macs = 0, act = 0;
  for (const auto& r : lib.rows) params += r.params, macs += r.macs, act += r.activation_bytes;
  os << "\n"
     << lib.rows.size() << " layers, " << with_commas(params) << " parameters ("
     << fixed(params * 4 / 1048576.0, 1) << " MiB), " << fixed(macs / 1e9, 3)
     << " G multiply-adds per sample (conv2d, linear, attention), " << fixed(act / 1048576.0, 2)
     << " MiB activations per sample\n"
     << "sum of layers: forward " << fixed(lib.total_forward_ms(), 2) << " ms + backward "
     << fixed(lib.total_backward_ms(), 2)
     << " ms = " << fixed(lib.total_forward_ms() + lib.total_backward_ms(), 2) << " ms at batch "
     << lib.batch_size << "\n"
     << "whole training step (forward + cross-entropy + backward): " << fixed(lib.whole_step_ms, 2)
     << " ms; sum-of-layers / whole-step ratio " << fixed(lib.sum_to_step_ratio, 3) << "\n";
}

// The zoo's transformers' shape (gpt2, gpt2_medium, bert_base, vit_b_16); 0 = the model's.
void add_transformer_options(CLI::App& sub, int64_t& vocabulary, int64_t& layers, int64_t& width, int64_t& heads) {
  sub.add_option("--vocab", vocabulary, "vocabulary of a token model (gpt2 50257, bert_base 30522)");
  sub.add_option("--layers", layers, "transformer blocks (gpt2 12, gpt2_medium 24)");
  sub.add_option("--width", width, "transformer width d_model (gpt2 768)");
  sub.add_option("--heads", heads, "attention heads (gpt2 12)");
}

struct ProfileArgs {
  std::string model;
  int64_t batch = 16, input_size = 0, classes = 0;
  int64_t vocabulary = 0, layers = 0, width = 0, heads = 0;  // transformers
  std::string torchscript = "auto";                          // --torchscript
  std::string device = "cpu";
  int threads = 1, runs = 5, warmup = 2;
  bool json = false, no_cache = false, estimate = false, cpu_clock = false;
  std::string cache_dir;
};

int run_profile(const ProfileArgs& a) {
  ModelOptions mo{a.input_size, a.classes, a.vocabulary, a.layers, a.width, a.heads};
  if (!set_torchscript_import("profile", a.torchscript, mo)) return 2;
  auto graph = load_model(a.model, mo);
  if (!graph) {
    std::cerr << "tapp-cli profile: " << graph.error_message() << "\n";
    return 2;
  }
  if (a.batch <= 0 || a.threads <= 0 || a.runs <= 0 || a.warmup < 0) {
    std::cerr << "tapp-cli profile: --batch, --threads and --runs must be positive\n";
    return 2;
  }
  if (a.estimate && a.device != "cpu") {
    std::cerr << "tapp-cli profile: --device " << a.device
              << ": --estimate estimates this host's CPU from multiply-adds; measure a GPU without --estimate\n";
    return 2;
  }
  LayerLibrary lib;
  bool hit = false;
  if (a.estimate) {
    lib = estimated_library(*graph, a.batch, 20.0, a.threads);
  } else {
    ProfileOptions po;
    po.device = a.device;
    po.batch_size = a.batch;
    po.threads = a.threads;
    po.runs = a.runs;
    po.warmup_runs = a.warmup;
    po.cpu_clock = a.cpu_clock;
    const bool tty = ::isatty(STDERR_FILENO);
    po.progress = [tty, name = graph->name](const ProfileProgress& p) {
      if (!p.warning.empty()) std::cerr << (tty ? "\r\033[K" : "") << p.message() << "\n";
      else if (tty) std::cerr << "\r\033[Kprofiling " << name << ": " << p.message() << std::flush;
    };
    std::unique_ptr<FileProfileCache> cache;
    if (!a.no_cache)
      cache = std::make_unique<FileProfileCache>(a.cache_dir.empty() ? default_cache_dir() : a.cache_dir);
    auto measured = profile_cached(*graph, po, cache.get(), &hit);
    if (tty) std::cerr << "\r\033[K" << std::flush;
    if (!measured) {
      std::cerr << "tapp-cli profile: " << measured.error_message() << "\n";
      return measured.status().code() == ErrorCode::invalid_argument ? 2 : 1;  // bad input: a device, a size
    }
    lib = std::move(*measured);
  }
  if (a.json)
    std::cout << library_to_json(lib).dump(1) << "\n";
  else
    print_table(lib, hit, std::cout);
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ProfileArgs>();
  auto* sub =
      app.add_subcommand("profile", "profile a model layer by layer (zoo name, model.json or model.pt)");
  sub->add_option(
         "model", args->model,
         "zoo name (" +
             [] {
               std::string s;
               for (const auto& n : zoo_names()) s += (s.empty() ? "" : ", ") + n;
               return s;
             }() +
             "), a JSON layer graph (*.json) or a TorchScript file (*.pt)")
      ->required();
  sub->add_option("--batch", args->batch, "batch size (default 16)");
  sub->add_option("--input-size", args->input_size,
                  "image side, or a token model's sequence length (default: the model's, e.g. 224; 32 for CIFAR "
                  "models; gpt2 1024)");
  sub->add_option("--classes", args->classes, "number of classes (zoo models)");
  add_transformer_options(*sub, args->vocabulary, args->layers, args->width, args->heads);
  add_torchscript_option(*sub, args->torchscript);
  sub->add_option("--device", args->device,
                  "cpu, or cuda:N where this build's LibTorch has CUDA (scripts/build_gpu.sh); default cpu");
  sub->add_option("--threads", args->threads, "CPU threads (default 1)")->check(CLI::Range(1, kMaxThreads));
  sub->add_option("--runs", args->runs, "timed runs per layer; the median is kept (default 5)");
  sub->add_option("--warmup", args->warmup, "warm-up runs before timing (default 2)");
  sub->add_flag("--json", args->json, "print the layer library as JSON");
  sub->add_option("--cache-dir", args->cache_dir,
                  "profile cache directory (default $XDG_CACHE_HOME/tapp or ~/.cache/tapp)");
  sub->add_flag("--no-cache", args->no_cache, "always measure; do not read or write the cache");
  sub->add_flag("--cpu-clock", args->cpu_clock,
                "time with the thread's CPU clock (threads 1): robust when other processes share the cores");
  sub->add_flag("--estimate", args->estimate, "estimate times from multiply-adds instead of measuring");
  sub->callback([args, &exit_code] { exit_code = run_profile(*args); });
}

void add_export_model_command(CLI::App& app, int& exit_code) {
  auto name = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto opts = std::make_shared<ModelOptions>();
  auto torchscript = std::make_shared<std::string>("auto");
  auto* sub =
      app.add_subcommand("export-model", "write a model (zoo name, .json or .pt) as a JSON layer graph");
  sub->add_option("model", *name, "zoo name, *.json or *.pt")->required();
  sub->add_option("--out", *out, "output file (default: stdout)");
  sub->add_option("--input-size", opts->input_size, "image side, or a token model's sequence length");
  sub->add_option("--classes", opts->num_classes, "number of classes");
  add_transformer_options(*sub, opts->vocabulary, opts->layers, opts->width, opts->heads);
  add_torchscript_option(*sub, *torchscript);
  sub->callback([name, out, opts, torchscript, &exit_code] {
    if (!set_torchscript_import("export-model", *torchscript, *opts)) {
      exit_code = 2;
      return;
    }
    if (const std::string why = unwritable("--out", *out); !why.empty()) {
      std::cerr << "tapp-cli export-model: " << why << "\n";
      exit_code = 2;
      return;
    }
    auto g = load_model(*name, *opts);
    if (!g) {
      std::cerr << "tapp-cli export-model: " << g.error_message() << "\n";
      exit_code = 2;
      return;
    }
    const std::string text = model_to_json(*g).dump(1) + "\n";
    if (out->empty()) {
      std::cout << text;
    } else {
      if (const std::string why = write_output("--out", *out, text); !why.empty()) {
        std::cerr << "tapp-cli export-model: " << why << "\n";
        exit_code = 1;
        return;
      }
    }
    exit_code = 0;
  });
}

}  // namespace tapp::cli
