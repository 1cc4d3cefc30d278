// tests/core/fake_evaluator.h — a test evaluator with a known optimum.
//
// Step time = max over devices of (sum of its layers' costs / device speed)
// + 1 ms per cut between consecutive layers on different devices, divided by
// a mild micro-batch factor. Optionally fails every placement (to test the
// failing-reward path) or fails placements that use a given device.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "core/cluster.h"
#include "core/evaluator.h"
#include "model/layer_graph.h"

namespace tapp::testing {

class FakeEvaluator : public Evaluator {
 public:
  FakeEvaluator(std::vector<double> layer_cost_ms, Cluster cluster)
      : cost_(std::move(layer_cost_ms)), cluster_(std::move(cluster)) {}
  bool fail_all = false;
  int forbidden_device = -1;

  StepReport evaluate(const Placement& p) override {
    ++evaluations_;
    if (fail_all) return StepReport::failure(FailureKind::worker_failed, "fake failure", "fake");
    std::vector<double> load(cluster_.num_devices(), 0.0);
    double cuts = 0;
    for (size_t i = 0; i < cost_.size(); ++i) {
      int d = p.device_of_layer(static_cast<int>(i));
      if (d == forbidden_device) return StepReport::failure(FailureKind::out_of_memory, "forbidden device", "fake");
      load[d] += cost_[i] / cluster_.devices[d].speed;
      if (i > 0 && p.device_of_layer(static_cast<int>(i - 1)) != d) cuts += 1.0;
    }
    StepReport r;
    r.ok = true;
    r.source = "fake";
    double m = p.micro_batches;
    r.step_ms = *std::max_element(load.begin(), load.end()) * (1.0 + 0.5 / m) + cuts * (0.5 + 0.1 * m);
    return r;
  }
  EvaluatorKind kind() const override { return EvaluatorKind::simulate; }  // predicts, like the simulator

 private:
  std::vector<double> cost_;
  Cluster cluster_;
};

// Another evaluator's reports, each after at least `delay` (time budgets).
class SlowEvaluator : public Evaluator {
 public:
  SlowEvaluator(Evaluator& inner, std::chrono::milliseconds delay) : inner_(inner), delay_(delay) {}
  StepReport evaluate(const Placement& p) override {
    std::this_thread::sleep_for(delay_);
    return inner_.evaluate(p);
  }
  EvaluatorKind kind() const override { return inner_.kind(); }

 private:
  Evaluator& inner_;
  std::chrono::milliseconds delay_;
};

// Another evaluator's reports, each proposal shown to `watch` first (what a search proposed).
class WatchedEvaluator : public Evaluator {
 public:
  WatchedEvaluator(Evaluator& inner, std::function<void(const Placement&)> watch)
      : inner_(inner), watch_(std::move(watch)) {}
  StepReport evaluate(const Placement& p) override {
    watch_(p);
    return inner_.evaluate(p);
  }
  EvaluatorKind kind() const override { return inner_.kind(); }

 private:
  Evaluator& inner_;
  std::function<void(const Placement&)> watch_;
};

// A chain of `n` linear+relu layers (2n layers), inferred.
inline LayerGraph chain_graph(int n, int64_t width = 64) {
  LayerGraph g;
  g.name = "chain";
  g.input_shape = {width};
  for (int i = 0; i < n; ++i) {
    Layer fc;
    fc.name = "fc" + std::to_string(i);
    fc.op = "linear";
    fc.attrs.out = width;
    if (!g.layers.empty()) fc.inputs = {static_cast<int>(g.layers.size()) - 1};
    g.layers.push_back(fc);
    Layer r;
    r.name = "relu" + std::to_string(i);
    r.op = "relu";
    r.inputs = {static_cast<int>(g.layers.size()) - 1};
    g.layers.push_back(r);
  }
  Status s = infer_shapes(g);
  (void)s;
  g.num_classes = width;
  return g;
}

// Devices "d0".."d{n-1}" of memory_mb each (Device's defaults otherwise), the default link.
inline Cluster equal_cluster(int devices, int64_t memory_mb = Device{}.memory_mb) {
  Cluster c;
  c.name = "fake";
  for (int d = 0; d < devices; ++d) {
    Device dev;
    dev.name = "d" + std::to_string(d);
    dev.memory_mb = memory_mb;
    c.devices.push_back(dev);
  }
  return c;
}

}  // namespace tapp::testing
