// placer/training_set.cpp — see training_set.h.
#include "placer/training_set.h"

#include <algorithm>
#include <cmath>

#include "model/zoo.h"

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
  // A k x k convolution (same size at stride 1); `in` -1 = the model input.
  int conv(int in, int64_t channels, int64_t k, int64_t stride, bool bias) {
    LayerAttrs a;
    a.out = channels;
    a.kernel[0] = a.kernel[1] = k;
    a.stride[0] = a.stride[1] = stride;
    a.padding[0] = a.padding[1] = k / 2;
    a.bias = bias;
    return add("conv2d", in < 0 ? std::vector<int>{} : std::vector<int>{in}, a);
  }
  // A 3x3 convolution and its ReLU.
  int conv_relu(int in, int64_t channels) { return add("relu", {conv(in, channels, 3, 1, true)}); }
  // A convolution without bias and its batchnorm.
  int conv_bn(int in, int64_t channels, int64_t k, int64_t stride = 1) {
    return add("batchnorm2d", {conv(in, channels, k, stride, false)});
  }
  int conv_bn_relu(int in, int64_t channels, int64_t k, int64_t stride = 1) {
    return add("relu", {conv_bn(in, channels, k, stride)});
  }
  int pool(const std::string& op, int in, int64_t k, int64_t stride, int64_t padding) {
    LayerAttrs a;
    a.kernel[0] = a.kernel[1] = k;
    a.stride[0] = a.stride[1] = stride;
    a.padding[0] = a.padding[1] = padding;
    return add(op, {in}, a);
  }
  int linear(int in, int64_t out) {
    LayerAttrs a;
    a.out = out;
    return add("linear", {in}, a);
  }
  // The classifier of 10, 100 or 1000 classes (drawn).
  void classifier(int x, std::mt19937_64& rng) {
    const int64_t classes = std::vector<int64_t>{10, 100, 1000}[pick(rng, 0, 2)];
    linear(x, classes);
    g.num_classes = classes;
  }
  // Global average pool, flatten and the classifier.
  void head(int x, std::mt19937_64& rng) {
    LayerAttrs one;  // adaptive pool to 1 x 1
    x = add("adaptive_avgpool2d", {x}, one);
    classifier(add("flatten", {x}), rng);
  }
};

// ResNet-like: 3-4 stages of 1-6 basic (two 3x3) or bottleneck (1x1, 3x3,
// 1x1 x4) blocks with batchnorm, a projection shortcut where the shape changes.
void residual_body(Builder& b, std::mt19937_64& rng, int x, int64_t width) {
  const bool bottleneck = pick(rng, 0, 1) == 1;
  const int stages = pick(rng, 3, 4);
  int64_t in_channels = width;
  for (int s = 0; s < stages; ++s) {
    const int blocks = pick(rng, 1, 6);
    const int64_t w = width << s, out = bottleneck ? 4 * w : w;
    for (int k = 0; k < blocks; ++k) {
      const int64_t stride = k == 0 && s > 0 ? 2 : 1;
      int y = x;
      if (bottleneck) {
        y = b.conv_bn_relu(y, w, 1);
        y = b.conv_bn_relu(y, w, 3, stride);
        y = b.conv_bn(y, out, 1);
      } else {
        y = b.conv_bn_relu(y, w, 3, stride);
        y = b.conv_bn(y, out, 3);
      }
      const int shortcut = stride != 1 || in_channels != out ? b.conv_bn(x, out, 1, stride) : x;
      x = b.add("relu", {b.add("add", {y, shortcut})});
      in_channels = out;
    }
  }
  b.head(x, rng);
}

// Inception-like: 3-9 blocks of 2-4 parallel towers (1-3 convolutions of
// 1x1, 3x3 or 5x5 each, or a 3x3 average pool and a 1x1), joined by a
// concat; a max-pool halves the side after some blocks.
void branchy_body(Builder& b, std::mt19937_64& rng, int x, int64_t width, int64_t side) {
  const int blocks = pick(rng, 3, 9);
  for (int k = 0; k < blocks; ++k) {
    const int towers = pick(rng, 2, 4);
    std::vector<int> ends;
    for (int t = 0; t < towers; ++t) {
      const int64_t c = width << pick(rng, 0, 1);
      if (t > 0 && pick(rng, 0, 3) == 0) {
        ends.push_back(b.conv_bn_relu(b.pool("avgpool2d", x, 3, 1, 1), c, 1));
        continue;
      }
      int y = b.conv_bn_relu(x, c, 1);
      const int depth = pick(rng, 0, 2);
      for (int d = 0; d < depth; ++d) y = b.conv_bn_relu(y, c, pick(rng, 0, 1) ? 3 : 5);
      ends.push_back(y);
    }
    x = b.add("concat", ends);
    if (side > 4 && pick(rng, 0, 2) == 0) {
      x = b.pool("maxpool2d", x, 2, 2, 0);
      side /= 2;
      width = std::min<int64_t>(256, width * 2);
    }
  }
  b.head(x, rng);
}

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
    x = b.pool("maxpool2d", x, 2, 2, 0);
    channels = std::min<int64_t>(512, channels * 2);
  }
  x = b.add("flatten", {x});
  const int hidden = pick(rng, 1, 2);
  for (int k = 0; k < hidden; ++k) x = b.add("relu", {b.linear(x, int64_t{128} << pick(rng, 0, 4))});
  b.classifier(x, rng);
  infer_shapes(b.g);  // every shape is valid by construction (pools never pass below 1x1)
  return b.g;
}

LayerGraph random_deep_cnn(std::mt19937_64& rng, const std::string& name) {
  Builder b;
  // Sizes as varied as the shallow models': a family's ops must not tell a
  // policy the model is large (trained on large deep ones only, it spread
  // tiny_inception over a slow link).
  const int64_t side = std::vector<int64_t>{32, 64, 128, 224}[pick(rng, 0, 3)];
  b.g.name = name;
  b.g.input_shape = {3, side, side};
  const int64_t width = int64_t{8} << pick(rng, 0, 3);
  // Stem: a strided 7x7 (5x5 on small inputs) and a max-pool: side / 4.
  int x = b.conv_bn_relu(-1, width, side >= 128 ? 7 : 5, 2);
  x = b.pool("maxpool2d", x, 3, 2, 1);
  if (pick(rng, 0, 1) == 0)
    residual_body(b, rng, x, width);
  else
    branchy_body(b, rng, x, width, side / 4);
  infer_shapes(b.g);  // valid by construction: strides stop at a side of 1
  return b.g;
}

LayerGraph random_transformer(std::mt19937_64& rng, const std::string& name) {
  // The forms the zoo builds (gpt2: causal, tied lm_head; text_transformer:
  // pre-norm, class-token head; bert_base: post-norm, pooler and classifier)
  // at shapes of their own, so a held-out transformer's family is seen in
  // training and its size is not.
  static const char* const kForms[] = {"gpt2", "text_transformer", "bert_base"};
  const std::string form = kForms[pick(rng, 0, 2)];
  ModelOptions o;
  o.layers = pick(rng, 2, 16);
  o.width = std::vector<int64_t>{128, 256, 384, 512, 768, 1024}[pick(rng, 0, 5)];
  o.heads = o.width / 64;
  o.input_size = int64_t{64} << pick(rng, 0, 4);
  o.vocabulary = static_cast<int64_t>(std::round(std::pow(10.0, uniform(rng, 3.0, std::log10(60000.0)))));
  if (form != "gpt2") o.num_classes = std::vector<int64_t>{2, 4, 10, 100}[pick(rng, 0, 3)];
  auto g = zoo_model(form, o);  // valid by construction: 64 divides every width
  g->name = name;
  return std::move(*g);
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
  // The network: one fabric; slow links between random pairs (unequal
  // devices only); or two islands (nodes, sites) with slow, possibly
  // asymmetric links between them, as multi-node clusters and a device
  // behind a WAN link are built.
  const int network = pick(rng, 0, 2);
  if (network == 1 && !equal) {
    const int slow = pick(rng, 1, n);
    for (int k = 0; k < slow; ++k) {
      const int a = pick(rng, 0, n - 1), b = pick(rng, 0, n - 1);
      if (a == b) continue;
      Link l;
      l.from = c.devices[a].name;
      l.to = c.devices[b].name;
      l.bandwidth_mbps = std::round(uniform(rng, 50, 500));
      l.latency_ms = std::round(uniform(rng, 0.1, 2.0) * 100) / 100;
      // A pair drawn again keeps its first link (what Cluster::link read before
      // duplicates were refused); the draws above stay, so every seed's clusters do.
      if (&c.link(a, b) != &c.default_link) continue;
      c.links.push_back(l);
      std::swap(l.from, l.to);
      c.links.push_back(l);
    }
  } else if (network == 2) {
    // Devices [0, split) on one island, the rest on the other; each
    // direction across its own bandwidth (up to 4x apart), 1/1000 to 1/2 of the fabric's.
    const int split = pick(rng, 1, n - 1);
    const double across = c.default_link.bandwidth_mbps * std::pow(10.0, uniform(rng, -3.0, std::log10(0.5)));
    const double there = std::max(10.0, std::round(across)),
                 back = std::max(10.0, std::round(across / uniform(rng, 1.0, 4.0)));
    const double latency = std::round(uniform(rng, 0.5, 5.0) * 100) / 100;
    for (int a = 0; a < split; ++a)
      for (int b = split; b < n; ++b) {
        c.links.push_back(Link{c.devices[a].name, c.devices[b].name, there, latency});
        c.links.push_back(Link{c.devices[b].name, c.devices[a].name, back, latency});
      }
  }
  return c;
}

Cluster random_mesh_cluster(std::mt19937_64& rng, const std::string& name) {
  Cluster c = random_cluster(rng, name);
  c.links.clear();
  const int n = c.num_devices();
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const double mbps = c.default_link.bandwidth_mbps * std::pow(10.0, uniform(rng, -2.5, 0.0));
      const double latency = std::round(uniform(rng, 0.1, 5.0) * 100) / 100;
      c.links.push_back(Link{c.devices[a].name, c.devices[b].name, std::max(10.0, std::round(mbps)), latency});
    }
  return c;
}

}  // namespace tapp
