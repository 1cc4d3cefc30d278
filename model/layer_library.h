// model/layer_library.h — the paper's "text library": one row per layer.
//
// Owns `LayerLibrary`: for every layer its name, op, op class, shapes,
// parameters, multiply-adds, activation bytes, next layers and the measured
// forward/backward milliseconds on one device kind at one batch size (median
// of several runs after warm-up). The simulator and the placer read costs from
// here; `cost_at` scales a row to another micro-batch size.
// No LibTorch here: measuring lives in profiler.h / profiler.cpp.
// Thread safety: plain values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/layer_graph.h"

namespace tapp {

struct LayerRow {
  std::string name, op, op_class;
  std::vector<Shape> input_shapes;
  Shape output_shape;
  int64_t params = 0, param_bytes = 0;
  int64_t macs = 0;              // multiply-adds per sample (conv2d, linear)
  int64_t activation_bytes = 0;  // output per sample, float32
  std::vector<std::string> next_layers;
  double forward_ms = 0, backward_ms = 0;  // at LayerLibrary::batch_size
};

struct LayerLibrary {
  std::string model;
  std::string device_kind = "cpu";
  std::string device_name;     // the GPU's name for cuda:N ("NVIDIA H100 80GB HBM3"); empty on a CPU
  int64_t device_memory_mb = 0;  // the GPU's memory; 0 on a CPU
  int threads = 1;
  int64_t batch_size = 1;
  Shape input_shape;
  std::vector<LayerRow> rows;  // same order as the LayerGraph's layers
  // Whole-model training step (forward + loss + backward) at batch_size, and
  // sum(rows fwd+bwd) / whole_step_ms: the profile's self-check.
  double whole_step_ms = 0;
  double sum_to_step_ratio = 0;
  bool measured = false;  // false when times are estimated from multiply-adds

  double total_forward_ms() const;
  double total_backward_ms() const;
};

// Rows with shapes, params and MACs from an inferred graph; times zero.
LayerLibrary library_skeleton(const LayerGraph& graph);

// Times from multiply-adds at `gmacs_per_s` per thread (no measurement): for
// tests and for sizing before a profile exists. Marked measured = false.
LayerLibrary estimated_library(const LayerGraph& graph, int64_t batch_size, double gmacs_per_s = 20.0,
                               int threads = 1);

// The rule estimated_library times each layer by, for `samples`: its
// multiply-adds at `gmacs_per_s` a thread and its output bytes at 10 GB/s a
// thread, forward once and backward twice the multiply-adds (gradients for
// the input and the weights). Timed 1F1B orders by it too (simulator/task_graph.h).
struct EstimatedMs {
  double forward = 0, backward = 0;
};
EstimatedMs estimated_layer_ms(int64_t macs, int64_t activation_bytes, int64_t samples,
                               double gmacs_per_s = 20.0, int threads = 1);

// The micro-batch sizes a cost model for `batch` is profiled at: 1, 2, 4, ...
// below the batch, then the batch itself (the micro-batch sizes of splitting
// it into 2^k parts, which the planners and the search use).
std::vector<int64_t> profile_batch_sizes(int64_t batch);

nlohmann::json library_to_json(const LayerLibrary& lib);
Result<LayerLibrary> library_from_json(const nlohmann::json& j);

// A layer-library file measured elsewhere (a device's `costs.library`): one
// library (`tapp-cli profile --json`) or an array of them (several batch
// sizes). Refused, with the file and the field named ("layer library
// 'a.json': input_shape: [3, 224, 224], the model's input is [3, 32, 32]"),
// when it is not readable JSON, not a library, or for another model (name,
// layer count, a layer's name, op or parameters), another input shape, or
// has no library at the plan's batch size, or a negative or non-finite time.
Result<std::vector<LayerLibrary>> load_library_file(const std::string& path, const LayerGraph& graph,
                                                    int64_t batch_size);

}  // namespace tapp
