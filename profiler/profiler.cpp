#include "profiler/profiler.h"

#include "model/al_form.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "profiler/accelerator.h"
#include "profiler/compute_threads.h"
#include "profiler/torch_model.h"

namespace tapp {
namespace {

// Wall time, or this thread's CPU time (ProfileOptions::cpu_clock).
bool g_cpu_clock = false;

double now_ms() {
  if (g_cpu_clock) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The GPU a profile runs on (-1: the CPU). Its work is asynchronous, so each
// timed region starts and ends with a synchronize: the host clock then reads
// the device's time plus the launches, which eager training pays too.
int g_gpu = -1;

void wait_for_device() {
  if (g_gpu >= 0) torch::cuda::synchronize(g_gpu);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void zero_grads(GraphModel& model) {
  for (auto& p : model.parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
}

// Whether training computes the gradient of layer i's inputs: not for the
// model input (token ids cannot have one), nor, in an AL form, for inputs that
// all come from earlier blocks (AL sends no gradient back); every other does.
bool inputs_need_grad(const LayerGraph& g, int i) {
  const Layer& l = g.layers[i];
  if (l.inputs.empty()) return false;
  if (!g.is_al_form()) return true;
  const int block = al_block_of(g, i);
  for (int p : l.inputs)
    if (al_block_of(g, p) == block) return true;
  return false;
}

// Forward and backward medians of one layer on fixed inputs.
std::pair<double, double> time_layer(GraphModel& model, int i, const std::vector<torch::Tensor>& inputs,
                                     bool inputs_need_grad, const ProfileOptions& o) {
  std::vector<torch::Tensor> ins;
  for (const auto& t : inputs) ins.push_back(t.detach().clone().requires_grad_(inputs_need_grad));
  std::vector<double> fwd, bwd;
  torch::Tensor grad;
  for (int r = 0; r < o.warmup_runs + o.runs; ++r) {
    for (auto& t : ins)
      if (t.grad().defined()) t.mutable_grad() = torch::Tensor();
    wait_for_device();
    double t0 = now_ms();
    torch::Tensor out = model.forward_layer(i, ins);
    wait_for_device();
    double f = (now_ms() - t0);
    double b = 0;
    if (out.requires_grad()) {
      if (!grad.defined()) grad = torch::randn_like(out);
      wait_for_device();
      double t1 = now_ms();
      out.backward(grad);
      wait_for_device();
      b = (now_ms() - t1);
    }
    if (r >= o.warmup_runs) {
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  return {median(fwd), median(bwd)};
}

double time_whole_step(GraphModel& model, const torch::Tensor& x, const torch::Tensor& y,
                       const ProfileOptions& o) {
  std::vector<double> steps;
  for (int r = 0; r < o.warmup_runs + o.runs; ++r) {
    zero_grads(model);
    wait_for_device();
    double t0 = now_ms();
    torch::Tensor loss = training_loss(model.forward(x), y, x.size(0));
    loss.backward();
    wait_for_device();
    double ms = (now_ms() - t0);
    if (r >= o.warmup_runs) steps.push_back(ms);
  }
  return median(steps);
}

// The GPU a profile runs on, checked once: none for "cpu".
Result<std::optional<GpuInfo>> profile_gpu(const std::string& device) {
  if (device == "cpu") return std::optional<GpuInfo>();
  Result<GpuInfo> gpu = gpu_for_device(device);
  if (!gpu) return gpu.status();
  return std::optional<GpuInfo>(std::move(*gpu));
}

Status check_options(const ProfileOptions& o) {
  if (o.device != "cpu" && o.cpu_clock)
    return Status::error("device '" + o.device + "': the CPU-time clock cannot time a GPU");
  if (o.threads <= 0) return Status::error("threads must be positive");
  if (o.batch_size <= 0) return Status::error("batch size must be positive");
  if (o.runs <= 0 || o.warmup_runs < 0) return Status::error("runs must be positive");
  if (o.cpu_clock && o.threads != 1)
    return Status::error("the CPU-time clock measures one thread; use it with threads = 1");
  return Status::ok();
}

// Refuses profiles whose tensors cannot fit in RAM rather than letting the
// allocator fail or the kernel kill the process: activations, their gradients
// and the autograd copies (about 3x), plus weights, gradients and a copy.
// On a GPU, the same count against its free memory. Too large is bad input (a smaller batch).
Status check_memory(const LayerGraph& graph, int64_t batch_size, const ProfileOptions& o,
                    const std::optional<GpuInfo>& gpu) {
  double need = 0;
  for (const auto& l : graph.layers) need += 3.0 * l.activation_bytes() * batch_size + 3.0 * l.param_bytes();
  auto mib = [](double bytes) { return std::to_string(static_cast<int64_t>(bytes / (1 << 20))); };
  auto too_large = [&](const std::string& where, const std::string& has) {
    return Status::coded(ErrorCode::invalid_argument, "profiling " + graph.name + " at batch " +
                                                          std::to_string(batch_size) + where + " needs about " +
                                                          mib(need) + " MiB but " + has +
                                                          "; use a smaller batch or input size");
  };
  if (gpu) {
    if (need > 0.9 * gpu->free_bytes)
      return too_large(" on device '" + o.device + "'", gpu->name + " has " + mib(gpu->free_bytes) + " MiB free (of " +
                                                           mib(gpu->total_bytes) + ")");
    return Status::ok();
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return Status::ok();
  double ram = static_cast<double>(pages) * page;
  if (need > 0.8 * ram) return too_large("", "the machine has " + mib(ram) + " MiB");
  return Status::ok();
}

}  // namespace

double ProfileProgress::fraction() const {
  const double in_size = layers > 0 ? std::clamp(static_cast<double>(layer) / (layers + 1), 0.0, 1.0) : 0.0;
  const double in_set = (std::max(0, size_index - 1) + in_size) / std::max(1, sizes);
  return std::clamp((std::max(0, device_set - 1) + in_set) / std::max(1, device_sets), 0.0, 1.0);
}

std::string ProfileProgress::message() const {
  if (!warning.empty()) return "warning: " + warning;
  std::string m = device_kind + " x" + std::to_string(threads);
  if (device_sets > 1) m += " (" + std::to_string(device_set) + "/" + std::to_string(device_sets) + ")";
  m += ", micro-batch size " + std::to_string(batch_size);
  if (sizes > 1) m += " (" + std::to_string(size_index) + "/" + std::to_string(sizes) + ")";
  if (layer == 0) return m + ": starting";
  if (layer > layers) return m + ": " + layer_name;
  return m + ": layer " + std::to_string(layer) + "/" + std::to_string(layers) + " " + layer_name;
}

Result<LayerLibrary> profile_model(const LayerGraph& graph, const ProfileOptions& o) {
  Result<std::optional<GpuInfo>> gpu = profile_gpu(o.device);
  if (!gpu) return gpu.status();
  if (Status s = check_options(o); !s) return s;
  if (Status s = check_memory(graph, o.batch_size, o, *gpu); !s) return s;
  LayerLibrary lib = library_skeleton(graph);
  lib.device_kind = o.device;
  g_gpu = *gpu ? (*gpu)->index : -1;
  if (*gpu) {
    lib.device_name = (*gpu)->name;
    lib.device_memory_mb = (*gpu)->total_bytes >> 20;
  }
  lib.threads = o.threads;
  lib.batch_size = o.batch_size;
  lib.measured = true;
  try {
    set_compute_threads(o.threads);
    g_cpu_clock = o.cpu_clock;
    auto built = GraphModel::build(graph, o.seed);
    if (!built) return built.status();
    GraphModel& model = **built;
    model.set_training(true);
    auto [x, y] = synthetic_batch(graph, o.batch_size, o.seed);
    if (g_gpu >= 0) {
      const torch::Device gpu(torch::kCUDA, static_cast<c10::DeviceIndex>(g_gpu));
      model.to(gpu);
      x = x.to(gpu);
      y = y.to(gpu);
    }

    // Every layer's output once, to feed the layers one at a time.
    std::vector<torch::Tensor> outs(graph.layers.size());
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < graph.layers.size(); ++i) {
        std::vector<torch::Tensor> ins;
        if (graph.layers[i].inputs.empty()) ins.push_back(x);
        for (int p : graph.layers[i].inputs) ins.push_back(outs[p]);
        outs[i] = model.forward_layer(static_cast<int>(i), ins);
      }
    }
    const int n = static_cast<int>(graph.layers.size());
    ProfileProgress at;
    at.device_kind = o.device;
    at.threads = o.threads;
    at.batch_size = o.batch_size;
    at.layers = n;
    for (int i = 0; i < n; ++i) {
      const Layer& l = graph.layers[i];
      at.layer = i + 1;
      at.layer_name = l.name;
      if (o.progress) o.progress(at);
      std::vector<torch::Tensor> ins;
      if (l.inputs.empty()) ins.push_back(x);
      for (int p : l.inputs) ins.push_back(outs[p]);
      auto [f, b] = time_layer(model, i, ins, inputs_need_grad(graph, i), o);
      lib.rows[i].forward_ms = f;
      lib.rows[i].backward_ms = b;
    }
    outs.clear();
    at.layer = n + 1;
    at.layer_name = "whole training step";
    if (o.progress) o.progress(at);
    lib.whole_step_ms = time_whole_step(model, x, y, o);
  } catch (const c10::Error& e) {
    return Status::error("LibTorch error while profiling on device '" + o.device + "': " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::error(std::string("error while profiling: ") + e.what());
  }
  double sum = lib.total_forward_ms() + lib.total_backward_ms();
  lib.sum_to_step_ratio = lib.whole_step_ms > 0 ? sum / lib.whole_step_ms : 0;
  return lib;
}

Result<LayerLibrary> profile_cached(const LayerGraph& graph, const ProfileOptions& o, ProfileCache* cache,
                                    bool* cache_hit) {
  if (cache_hit) *cache_hit = false;
  std::string device = o.device + (o.cpu_clock ? "-cpuclock" : "");
  // A GPU's profile is kept for that GPU model: cuda:0 names another card on another machine.
  if (cuda_index(o.device))
    if (Result<GpuInfo> gpu = gpu_for_device(o.device)) device += "@" + gpu->name;
  if (cache) {
    // A corrupt or stale entry is re-measured and overwritten.
    if (auto hit = cached_library(*cache, graph, device, o.threads, o.batch_size)) {
      if (cache_hit) *cache_hit = true;
      return std::move(*hit);
    }
  }
  auto lib = profile_model(graph, o);
  if (!lib) return lib;
  if (cache) {
    const std::string key = profile_cache_key(graph, device, o.threads, o.batch_size);
    if (Status s = cache->put(key, library_to_json(*lib).dump(1)); !s && o.progress) {
      ProfileProgress warning;
      warning.warning = "the profile was not cached: " + s.message();
      o.progress(warning);
    }
  }
  return lib;
}

}  // namespace tapp
