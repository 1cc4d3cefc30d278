// tests/runtime/runtime_test_support.h — models, clusters and checks shared by the runtime tests.
//
// Tiny models (a 7-layer chain, a conv net with concat and add branches),
// one-thread local clusters, the run options every runtime test uses, and the
// reference: single-device training in this process with the same seed, data
// and optimizer, whose parameters pipelined (and hybrid) training must equal.
#pragma once

#include "tests/torch_doctest.h"  // LibTorch + doctest (glog's CHECK macros removed)
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "profiler/torch_model.h"
#include "runtime/runtime.h"

namespace tapp::test {

inline Layer make_layer(const std::string& name, const std::string& op, std::vector<int> inputs, int64_t out = 0) {
  Layer l;
  l.name = name;
  l.op = op;
  l.inputs = std::move(inputs);
  l.attrs.out = out;
  return l;
}

// fc0 relu0 fc1 relu1 fc2 relu2 fc3: a chain of 7 layers.
inline LayerGraph chain_model() {
  LayerGraph g;
  g.name = "chain";
  g.input_shape = {12};
  g.num_classes = 5;
  g.layers = {make_layer("fc0", "linear", {}, 16), make_layer("relu0", "relu", {0}),
              make_layer("fc1", "linear", {1}, 16), make_layer("relu1", "relu", {2}),
              make_layer("fc2", "linear", {3}, 12), make_layer("relu2", "relu", {4}),
              make_layer("fc3", "linear", {5}, 5)};
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

// A small conv net with branches: stem -> (a | b) -> concat, then a residual add.
inline LayerGraph branch_model() {
  LayerGraph g;
  g.name = "branches";
  g.input_shape = {3, 8, 8};
  g.num_classes = 4;
  auto conv = [](const std::string& n, std::vector<int> in, int64_t out) {
    Layer l = make_layer(n, "conv2d", std::move(in), out);
    l.attrs.kernel[0] = l.attrs.kernel[1] = 3;
    l.attrs.padding[0] = l.attrs.padding[1] = 1;
    return l;
  };
  g.layers = {conv("stem", {}, 6),                        // 0
              make_layer("stem_relu", "relu", {0}),       // 1
              conv("a", {1}, 4),                          // 2
              make_layer("a_relu", "relu", {2}),          // 3
              conv("b", {1}, 4),                          // 4
              make_layer("b_tanh", "tanh", {4}),          // 5
              make_layer("cat", "concat", {3, 5}),        // 6  (8 channels)
              conv("c", {6}, 6),                          // 7
              make_layer("res", "add", {7, 1}),           // 8  (skip from the stem)
              make_layer("flat", "flatten", {8}),         // 9
              make_layer("fc", "linear", {9}, 4)};        // 10
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

inline Cluster local_cluster(int n) {
  Cluster c;
  c.name = "test";
  for (int i = 0; i < n; ++i) {
    Device d;
    d.name = "d" + std::to_string(i);
    d.threads = 1;
    c.devices.push_back(d);
  }
  return c;
}

inline Placement by_device(const std::vector<int>& layer_device, int micro_batches, Schedule s) {
  Placement p;
  p.layer_group = layer_device;
  int groups = *std::max_element(layer_device.begin(), layer_device.end()) + 1;
  for (int d = 0; d < groups; ++d) p.group_device.push_back(d);
  p.micro_batches = micro_batches;
  p.schedule = s;
  return p;
}

inline RunOptions test_options() {
  RunOptions o;
  o.warmup_steps = 1;
  o.steps = 2;
  o.batch_size = 12;
  o.seed = 7;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  o.timeout_s = 30;
  o.worker_binary = std::string(TAPP_BIN_DIR) + "/tapp-worker";
  o.collect_parameters = true;
  o.physical_cores = 64;  // no over-subscription warning in tests
  return o;
}

// Single-device training in this process: full-batch mean cross entropy (over every token
// for a per-token model), with the run's optimizer (o.optimizer: SGD with momentum, or Adam)
// as the workers build it.
inline std::vector<std::vector<float>> reference_parameters(const LayerGraph& g, const RunOptions& o) {
  auto model = GraphModel::build(g, o.seed);
  REQUIRE(model.is_ok());
  auto m = *model;
  m->set_training(true);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (o.optimizer == Optimizer::adam)
    opt = std::make_unique<torch::optim::Adam>(m->parameters(), torch::optim::AdamOptions(o.learning_rate));
  else
    opt = std::make_unique<torch::optim::SGD>(m->parameters(),
                                              torch::optim::SGDOptions(o.learning_rate).momentum(o.momentum));
  for (int k = 0; k < o.warmup_steps + o.steps; ++k) {
    auto [x, y] = synthetic_batch(g, o.batch_size, o.seed + k);
    torch::Tensor loss = training_loss(m->forward(x), y, o.batch_size);  // the mean over samples (and tokens)
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  std::vector<std::vector<float>> out(g.layers.size());
  for (size_t l = 0; l < g.layers.size(); ++l)
    for (auto& p : m->layer_parameters(static_cast<int>(l))) {
      torch::Tensor t = p.detach().contiguous();
      out[l].insert(out[l].end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
  return out;
}

inline void check_same_parameters(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                           const LayerGraph& g) {
  REQUIRE(got.size() == want.size());
  for (size_t l = 0; l < want.size(); ++l) {
    INFO("layer " << g.layers[l].name);
    REQUIRE(got[l].size() == want[l].size());
    double max_diff = 0;
    for (size_t i = 0; i < want[l].size(); ++i) max_diff = std::max<double>(max_diff, std::fabs(got[l][i] - want[l][i]));
    CHECK(max_diff < 1e-4);
  }
}

// Also checks that training moved the weights at all (so equality is not vacuous).
inline void check_trained(const std::vector<std::vector<float>>& got, const LayerGraph& g, const RunOptions& o) {
  auto initial = GraphModel::build(g, o.seed);
  REQUIRE(initial.is_ok());
  auto p0 = (*initial)->layer_parameters(0).at(0).contiguous();
  double diff = 0;
  for (int64_t i = 0; i < p0.numel(); ++i) diff = std::max<double>(diff, std::fabs(got[0][i] - p0.data_ptr<float>()[i]));
  CHECK(diff > 1e-5);
}

inline bool process_gone(int pid) { return kill(pid, 0) == -1 && errno == ESRCH; }

inline void check_no_orphans(const RunResult& r) {
  CHECK(!r.local_worker_pids.empty());
  for (int pid : r.local_worker_pids) {
    INFO("worker pid " << pid);
    CHECK(process_gone(pid));
  }
}

}  // namespace tapp::test
