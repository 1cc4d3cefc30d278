// placer/training_set.cpp — see training_set.h.
#include "placer/training_set.h"

#include <algorithm>
#include <cmath>

namespace tapp {
namespace {

int pick(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
double uniform(std::mt19937_64& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

struct Builder {
  LayerGraph g;
  int add(const std::string& op, std::vector<int> inputs, LayerAttrs a = {}) {
    Layer l;
    l.name = op + std::to_string(g.layers.size());
    l.op = op;
    l.inputs = std::move(inputs);
    l.attrs = a;
    g.layers.push_back(l);
    return static_cast<int>(g.layers.size()) - 1;
  }
  // A 3x3 convolution (same size) and its ReLU; `in` -1 = the model input.
  int conv_relu(int in, int64_t channels) {
    LayerAttrs a;
    a.out = channels;
    a.kernel[0] = a.kernel[1] = 3;
    a.padding[0] = a.padding[1] = 1;
    int c = add("conv2d", in < 0 ? std::vector<int>{} : std::vector<int>{in}, a);
    return add("relu", {c});
  }
};

}  // namespace

LayerGraph random_cnn(std::mt19937_64& rng, const std::string& name) {
  Builder b;
  const int64_t side = pick(rng, 0, 1) ? 64 : 32;
  b.g.name = name;
  b.g.input_shape = {3, side, side};
  const int stages = pick(rng, 3, side == 64 ? 6 : 5);
  int64_t channels = int64_t{8} << pick(rng, 0, 3);
  int x = -1;
  for (int s = 0; s < stages; ++s) {
    const int convs = pick(rng, 1, 3);
    if (x >= 0 && pick(rng, 0, 3) == 0) {
      // Two branches of the same width joined by an add.
      int left = x, right = x;
      for (int k = 0; k < convs; ++k) left = b.conv_relu(left, channels);
      right = b.conv_relu(right, channels);
      x = b.add("add", {left, right});
    } else {
      for (int k = 0; k < convs; ++k) x = b.conv_relu(x, channels);
    }
    LayerAttrs pool;
    pool.kernel[0] = pool.kernel[1] = 2;
    pool.stride[0] = pool.stride[1] = 2;
    x = b.add("maxpool2d", {x}, pool);
    channels = std::min<int64_t>(512, channels * 2);
  }
  x = b.add("flatten", {x});
  const int hidden = pick(rng, 1, 2);
  for (int k = 0; k < hidden; ++k) {
    LayerAttrs fc;
    fc.out = int64_t{128} << pick(rng, 0, 4);
    x = b.add("relu", {b.add("linear", {x}, fc)});
  }
  const int64_t classes = std::vector<int64_t>{10, 100, 1000}[pick(rng, 0, 2)];
  LayerAttrs out;
  out.out = classes;
  b.add("linear", {x}, out);
  b.g.num_classes = classes;
  infer_shapes(b.g);  // every shape is valid by construction (pools never pass below 1x1)
  return b.g;
}

Cluster random_cluster(std::mt19937_64& rng, const std::string& name) {
  Cluster c;
  c.name = name;
  const int n = std::vector<int>{2, 3, 4, 4, 6, 8}[pick(rng, 0, 5)];
  const bool equal = pick(rng, 0, 2) == 0;
  // From a slow CPU core to an accelerator: the fastest device's speed is
  // log-uniform in [0.1, 100], and the links scale with it (a cluster of fast
  // devices on a slow network is drawn too, by the slow links below).
  const double top = std::pow(10.0, uniform(rng, -1.0, 2.0));
  const int64_t memory = int64_t{512} << pick(rng, 0, 5);
  for (int d = 0; d < n; ++d) {
    Device dev;
    dev.name = "d" + std::to_string(d);
    dev.speed = equal ? top : std::max(0.01, std::round(top * uniform(rng, 0.1, 1.0) * 100) / 100);
    dev.memory_mb = equal ? memory : int64_t{512} << pick(rng, 0, 5);
    c.devices.push_back(dev);
  }
  const double gbps = std::vector<double>{1, 10, 25, 100, 200}[pick(rng, top < 1 ? 0 : 1, top < 10 ? 2 : 4)];
  c.default_link.bandwidth_mbps = gbps * 1000;
  c.default_link.latency_ms = gbps >= 100 ? 0.005 : gbps >= 10 ? 0.05 : 0.2;
  if (!equal && pick(rng, 0, 1)) {
    const int slow = pick(rng, 1, n);
    for (int k = 0; k < slow; ++k) {
      const int a = pick(rng, 0, n - 1), b = pick(rng, 0, n - 1);
      if (a == b) continue;
      Link l;
      l.from = c.devices[a].name;
      l.to = c.devices[b].name;
      l.bandwidth_mbps = std::round(uniform(rng, 50, 500));
      l.latency_ms = std::round(uniform(rng, 0.1, 2.0) * 100) / 100;
      c.links.push_back(l);
      std::swap(l.from, l.to);
      c.links.push_back(l);
    }
  }
  return c;
}

}  // namespace tapp
