#include "model/zoo.h"

#include <algorithm>
#include <functional>
#include <map>

#include "model/model_json.h"

namespace tapp {
namespace {

// Appends layers to a graph; `int` handles are layer indices, kInput the model input.
constexpr int kInput = -1;

struct Conv {
  int64_t out, kh, kw, sh = 1, sw = 1, ph = 0, pw = 0;
  bool bias = true;
};

class Builder {
 public:
  Builder(std::string name, Shape input_shape) {
    g_.name = std::move(name);
    g_.input_shape = std::move(input_shape);
  }

  int add(const std::string& name, const std::string& op, std::vector<int> inputs, LayerAttrs attrs = {}) {
    Layer l;
    l.name = name;
    l.op = op;
    l.attrs = attrs;
    for (int i : inputs)
      if (i != kInput) l.inputs.push_back(i);
    g_.layers.push_back(std::move(l));
    return static_cast<int>(g_.layers.size()) - 1;
  }
  int conv(const std::string& name, int in, const Conv& c) {
    LayerAttrs a;
    a.out = c.out;
    a.kernel[0] = c.kh, a.kernel[1] = c.kw;
    a.stride[0] = c.sh, a.stride[1] = c.sw;
    a.padding[0] = c.ph, a.padding[1] = c.pw;
    a.bias = c.bias;
    return add(name, "conv2d", {in}, a);
  }
  int bn(const std::string& name, int in, double eps = 1e-5) {
    LayerAttrs a;
    a.eps = eps;
    return add(name, "batchnorm2d", {in}, a);
  }
  int relu(const std::string& name, int in) { return add(name, "relu", {in}); }
  int pool(const std::string& name, const std::string& op, int in, int64_t k, int64_t s, int64_t p = 0,
           bool ceil_mode = false) {
    LayerAttrs a;
    a.kernel[0] = a.kernel[1] = k;
    a.stride[0] = a.stride[1] = s;
    a.padding[0] = a.padding[1] = p;
    a.ceil_mode = ceil_mode;
    return add(name, op, {in}, a);
  }
  int maxpool(const std::string& name, int in, int64_t k, int64_t s, int64_t p = 0) {
    return pool(name, "maxpool2d", in, k, s, p);
  }
  int avgpool(const std::string& name, int in, int64_t k, int64_t s, int64_t p = 0) {
    return pool(name, "avgpool2d", in, k, s, p);
  }
  int adaptive(const std::string& name, int in, int64_t side) {
    LayerAttrs a;
    a.kernel[0] = a.kernel[1] = side;
    return add(name, "adaptive_avgpool2d", {in}, a);
  }
  int linear(const std::string& name, int in, int64_t out) {
    LayerAttrs a;
    a.out = out;
    return add(name, "linear", {in}, a);
  }
  int dropout(const std::string& name, int in, double p = 0.5) {
    LayerAttrs a;
    a.p = p;
    return add(name, "dropout", {in}, a);
  }
  int flatten(const std::string& name, int in) { return add(name, "flatten", {in}); }
  int concat(const std::string& name, std::vector<int> ins) { return add(name, "concat", ins); }
  int sum(const std::string& name, std::vector<int> ins) { return add(name, "add", ins); }

  // torchvision's BasicConv2d: conv without bias, batchnorm (eps 0.001), relu.
  int basic_conv(const std::string& name, int in, Conv c) {
    c.bias = false;
    int x = conv(name + ".conv", in, c);
    x = bn(name + ".bn", x, 0.001);
    return relu(name + ".relu", x);
  }

  LayerGraph take() { return std::move(g_); }

 private:
  LayerGraph g_;
};

Shape image(int64_t side) { return {3, side, side}; }

LayerGraph alexnet(int64_t side, int64_t classes) {
  Builder b("alexnet", image(side));
  int x = b.conv("conv1", kInput, {64, 11, 11, 4, 4, 2, 2});
  x = b.relu("relu1", x);
  x = b.maxpool("pool1", x, 3, 2);
  x = b.conv("conv2", x, {192, 5, 5, 1, 1, 2, 2});
  x = b.relu("relu2", x);
  x = b.maxpool("pool2", x, 3, 2);
  x = b.conv("conv3", x, {384, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu3", x);
  x = b.conv("conv4", x, {256, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu4", x);
  x = b.conv("conv5", x, {256, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu5", x);
  x = b.maxpool("pool5", x, 3, 2);
  x = b.adaptive("avgpool", x, 6);
  x = b.flatten("flatten", x);
  x = b.dropout("drop6", x);
  x = b.linear("fc6", x, 4096);
  x = b.relu("relu6", x);
  x = b.dropout("drop7", x);
  x = b.linear("fc7", x, 4096);
  x = b.relu("relu7", x);
  b.linear("fc8", x, classes);
  return b.take();
}

LayerGraph vgg16(int64_t side, int64_t classes) {
  Builder b("vgg16", image(side));
  const std::vector<std::vector<int64_t>> blocks = {
      {64, 64}, {128, 128}, {256, 256, 256}, {512, 512, 512}, {512, 512, 512}};
  int x = kInput;
  for (size_t blk = 0; blk < blocks.size(); ++blk) {
    for (size_t i = 0; i < blocks[blk].size(); ++i) {
      std::string id = std::to_string(blk + 1) + "_" + std::to_string(i + 1);
      x = b.conv("conv" + id, x, {blocks[blk][i], 3, 3, 1, 1, 1, 1});
      x = b.relu("relu" + id, x);
    }
    x = b.maxpool("pool" + std::to_string(blk + 1), x, 2, 2);
  }
  x = b.adaptive("avgpool", x, 7);
  x = b.flatten("flatten", x);
  x = b.linear("fc6", x, 4096);
  x = b.relu("relu6", x);
  x = b.dropout("drop6", x);
  x = b.linear("fc7", x, 4096);
  x = b.relu("relu7", x);
  x = b.dropout("drop7", x);
  b.linear("fc8", x, classes);
  return b.take();
}

// torchvision ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution.
int bottleneck(Builder& b, const std::string& n, int in, int64_t width, int64_t stride, bool downsample) {
  int x = b.conv(n + ".conv1", in, {width, 1, 1, 1, 1, 0, 0, false});
  x = b.bn(n + ".bn1", x);
  x = b.relu(n + ".relu1", x);
  x = b.conv(n + ".conv2", x, {width, 3, 3, stride, stride, 1, 1, false});
  x = b.bn(n + ".bn2", x);
  x = b.relu(n + ".relu2", x);
  x = b.conv(n + ".conv3", x, {width * 4, 1, 1, 1, 1, 0, 0, false});
  x = b.bn(n + ".bn3", x);
  int shortcut = in;
  if (downsample) {
    shortcut = b.conv(n + ".downsample.conv", in, {width * 4, 1, 1, stride, stride, 0, 0, false});
    shortcut = b.bn(n + ".downsample.bn", shortcut);
  }
  x = b.sum(n + ".add", {x, shortcut});
  return b.relu(n + ".relu3", x);
}

LayerGraph resnet50(int64_t side, int64_t classes) {
  Builder b("resnet50", image(side));
  int x = b.conv("conv1", kInput, {64, 7, 7, 2, 2, 3, 3, false});
  x = b.bn("bn1", x);
  x = b.relu("relu", x);
  x = b.maxpool("maxpool", x, 3, 2, 1);
  const int64_t blocks[4] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    int64_t width = 64 << s;
    for (int64_t i = 0; i < blocks[s]; ++i) {
      int64_t stride = (i == 0 && s > 0) ? 2 : 1;
      x = bottleneck(b, "layer" + std::to_string(s + 1) + "." + std::to_string(i), x, width, stride, i == 0);
    }
  }
  x = b.adaptive("avgpool", x, 1);
  x = b.flatten("flatten", x);
  b.linear("fc", x, classes);
  return b.take();
}

// The Inception v3 blocks of torchvision (models/inception.py), branch by branch.
int inception_a(Builder& b, const std::string& n, int in, int64_t pool_features) {
  int b1 = b.basic_conv(n + ".branch1x1", in, {64, 1, 1});
  int b5 = b.basic_conv(n + ".branch5x5_1", in, {48, 1, 1});
  b5 = b.basic_conv(n + ".branch5x5_2", b5, {64, 5, 5, 1, 1, 2, 2});
  int b3 = b.basic_conv(n + ".branch3x3dbl_1", in, {64, 1, 1});
  b3 = b.basic_conv(n + ".branch3x3dbl_2", b3, {96, 3, 3, 1, 1, 1, 1});
  b3 = b.basic_conv(n + ".branch3x3dbl_3", b3, {96, 3, 3, 1, 1, 1, 1});
  int bp = b.avgpool(n + ".branch_pool.avgpool", in, 3, 1, 1);
  bp = b.basic_conv(n + ".branch_pool", bp, {pool_features, 1, 1});
  return b.concat(n + ".concat", {b1, b5, b3, bp});
}

int inception_b(Builder& b, const std::string& n, int in) {
  int b3 = b.basic_conv(n + ".branch3x3", in, {384, 3, 3, 2, 2});
  int bd = b.basic_conv(n + ".branch3x3dbl_1", in, {64, 1, 1});
  bd = b.basic_conv(n + ".branch3x3dbl_2", bd, {96, 3, 3, 1, 1, 1, 1});
  bd = b.basic_conv(n + ".branch3x3dbl_3", bd, {96, 3, 3, 2, 2});
  int bp = b.maxpool(n + ".branch_pool", in, 3, 2);
  return b.concat(n + ".concat", {b3, bd, bp});
}

int inception_c(Builder& b, const std::string& n, int in, int64_t c7) {
  int b1 = b.basic_conv(n + ".branch1x1", in, {192, 1, 1});
  int b7 = b.basic_conv(n + ".branch7x7_1", in, {c7, 1, 1});
  b7 = b.basic_conv(n + ".branch7x7_2", b7, {c7, 1, 7, 1, 1, 0, 3});
  b7 = b.basic_conv(n + ".branch7x7_3", b7, {192, 7, 1, 1, 1, 3, 0});
  int bd = b.basic_conv(n + ".branch7x7dbl_1", in, {c7, 1, 1});
  bd = b.basic_conv(n + ".branch7x7dbl_2", bd, {c7, 7, 1, 1, 1, 3, 0});
  bd = b.basic_conv(n + ".branch7x7dbl_3", bd, {c7, 1, 7, 1, 1, 0, 3});
  bd = b.basic_conv(n + ".branch7x7dbl_4", bd, {c7, 7, 1, 1, 1, 3, 0});
  bd = b.basic_conv(n + ".branch7x7dbl_5", bd, {192, 1, 7, 1, 1, 0, 3});
  int bp = b.avgpool(n + ".branch_pool.avgpool", in, 3, 1, 1);
  bp = b.basic_conv(n + ".branch_pool", bp, {192, 1, 1});
  return b.concat(n + ".concat", {b1, b7, bd, bp});
}

int inception_d(Builder& b, const std::string& n, int in) {
  int b3 = b.basic_conv(n + ".branch3x3_1", in, {192, 1, 1});
  b3 = b.basic_conv(n + ".branch3x3_2", b3, {320, 3, 3, 2, 2});
  int b7 = b.basic_conv(n + ".branch7x7x3_1", in, {192, 1, 1});
  b7 = b.basic_conv(n + ".branch7x7x3_2", b7, {192, 1, 7, 1, 1, 0, 3});
  b7 = b.basic_conv(n + ".branch7x7x3_3", b7, {192, 7, 1, 1, 1, 3, 0});
  b7 = b.basic_conv(n + ".branch7x7x3_4", b7, {192, 3, 3, 2, 2});
  int bp = b.maxpool(n + ".branch_pool", in, 3, 2);
  return b.concat(n + ".concat", {b3, b7, bp});
}

int inception_e(Builder& b, const std::string& n, int in) {
  int b1 = b.basic_conv(n + ".branch1x1", in, {320, 1, 1});
  int b3 = b.basic_conv(n + ".branch3x3_1", in, {384, 1, 1});
  int b3a = b.basic_conv(n + ".branch3x3_2a", b3, {384, 1, 3, 1, 1, 0, 1});
  int b3b = b.basic_conv(n + ".branch3x3_2b", b3, {384, 3, 1, 1, 1, 1, 0});
  b3 = b.concat(n + ".branch3x3.concat", {b3a, b3b});
  int bd = b.basic_conv(n + ".branch3x3dbl_1", in, {448, 1, 1});
  bd = b.basic_conv(n + ".branch3x3dbl_2", bd, {384, 3, 3, 1, 1, 1, 1});
  int bda = b.basic_conv(n + ".branch3x3dbl_3a", bd, {384, 1, 3, 1, 1, 0, 1});
  int bdb = b.basic_conv(n + ".branch3x3dbl_3b", bd, {384, 3, 1, 1, 1, 1, 0});
  bd = b.concat(n + ".branch3x3dbl.concat", {bda, bdb});
  int bp = b.avgpool(n + ".branch_pool.avgpool", in, 3, 1, 1);
  bp = b.basic_conv(n + ".branch_pool", bp, {192, 1, 1});
  return b.concat(n + ".concat", {b1, b3, bd, bp});
}

LayerGraph inception_v3(int64_t side, int64_t classes) {
  Builder b("inception_v3", image(side));
  int x = b.basic_conv("Conv2d_1a_3x3", kInput, {32, 3, 3, 2, 2});
  x = b.basic_conv("Conv2d_2a_3x3", x, {32, 3, 3});
  x = b.basic_conv("Conv2d_2b_3x3", x, {64, 3, 3, 1, 1, 1, 1});
  x = b.maxpool("maxpool1", x, 3, 2);
  x = b.basic_conv("Conv2d_3b_1x1", x, {80, 1, 1});
  x = b.basic_conv("Conv2d_4a_3x3", x, {192, 3, 3});
  x = b.maxpool("maxpool2", x, 3, 2);
  x = inception_a(b, "Mixed_5b", x, 32);
  x = inception_a(b, "Mixed_5c", x, 64);
  x = inception_a(b, "Mixed_5d", x, 64);
  x = inception_b(b, "Mixed_6a", x);
  x = inception_c(b, "Mixed_6b", x, 128);
  x = inception_c(b, "Mixed_6c", x, 160);
  x = inception_c(b, "Mixed_6d", x, 160);
  x = inception_c(b, "Mixed_6e", x, 192);
  x = inception_d(b, "Mixed_7a", x);
  x = inception_e(b, "Mixed_7b", x);
  x = inception_e(b, "Mixed_7c", x);
  x = b.adaptive("avgpool", x, 1);
  x = b.dropout("dropout", x);
  x = b.flatten("flatten", x);
  b.linear("fc", x, classes);
  return b.take();
}

// AlexNet's five convolutions and three fully-connected layers sized for
// 32x32 inputs (3x3 kernels, three 2x2 pools, 1024-wide classifier).
LayerGraph alexnet_cifar(int64_t side, int64_t classes) {
  Builder b("alexnet_cifar", image(side));
  int x = b.conv("conv1", kInput, {64, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu1", x);
  x = b.maxpool("pool1", x, 2, 2);
  x = b.conv("conv2", x, {192, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu2", x);
  x = b.maxpool("pool2", x, 2, 2);
  x = b.conv("conv3", x, {384, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu3", x);
  x = b.conv("conv4", x, {256, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu4", x);
  x = b.conv("conv5", x, {256, 3, 3, 1, 1, 1, 1});
  x = b.relu("relu5", x);
  x = b.maxpool("pool5", x, 2, 2);
  x = b.flatten("flatten", x);
  x = b.dropout("drop6", x);
  x = b.linear("fc6", x, 1024);
  x = b.relu("relu6", x);
  x = b.dropout("drop7", x);
  x = b.linear("fc7", x, 1024);
  x = b.relu("relu7", x);
  b.linear("fc8", x, classes);
  return b.take();
}

// VGG5 as used by PipeLearn/FedAdapt for CIFAR-10: three 3x3 conv+BN+ReLU
// (32, 64, 64 channels) with two 2x2 max pools, then 128-wide and output FC.
LayerGraph vgg5(int64_t side, int64_t classes) {
  Builder b("vgg5", image(side));
  int x = b.conv("conv1", kInput, {32, 3, 3, 1, 1, 1, 1});
  x = b.bn("bn1", x);
  x = b.relu("relu1", x);
  x = b.maxpool("pool1", x, 2, 2);
  x = b.conv("conv2", x, {64, 3, 3, 1, 1, 1, 1});
  x = b.bn("bn2", x);
  x = b.relu("relu2", x);
  x = b.maxpool("pool2", x, 2, 2);
  x = b.conv("conv3", x, {64, 3, 3, 1, 1, 1, 1});
  x = b.bn("bn3", x);
  x = b.relu("relu3", x);
  x = b.flatten("flatten", x);
  x = b.linear("fc1", x, 128);
  x = b.relu("relu4", x);
  b.linear("fc2", x, classes);
  return b.take();
}

LayerGraph mlp(int64_t side, int64_t classes) {
  Builder b("mlp", image(side));
  int x = b.flatten("flatten", kInput);
  x = b.linear("fc1", x, 512);
  x = b.relu("relu1", x);
  x = b.linear("fc2", x, 256);
  x = b.relu("relu2", x);
  b.linear("fc3", x, classes);
  return b.take();
}

// A few-thousand-parameter network with both kinds of branching: an
// Inception-style block (three branches, concat) and a residual add.
LayerGraph tiny_inception(int64_t side, int64_t classes) {
  Builder b("tiny_inception", image(side));
  int x = b.conv("stem.conv", kInput, {16, 3, 3, 1, 1, 1, 1});
  x = b.bn("stem.bn", x);
  x = b.relu("stem.relu", x);
  x = b.maxpool("stem.pool", x, 2, 2);
  int b1 = b.conv("mixed.branch1x1", x, {8, 1, 1});
  int b3 = b.conv("mixed.branch3x3_1", x, {8, 1, 1});
  b3 = b.relu("mixed.branch3x3_relu", b3);
  b3 = b.conv("mixed.branch3x3_2", b3, {8, 3, 3, 1, 1, 1, 1});
  int bp = b.maxpool("mixed.branch_pool.maxpool", x, 3, 1, 1);
  bp = b.conv("mixed.branch_pool", bp, {16, 1, 1});
  x = b.concat("mixed.concat", {b1, b3, bp});
  x = b.relu("mixed.relu", x);
  int r = b.conv("res.conv1", x, {32, 3, 3, 1, 1, 1, 1, false});
  r = b.bn("res.bn1", r);
  r = b.relu("res.relu1", r);
  r = b.conv("res.conv2", r, {32, 3, 3, 1, 1, 1, 1, false});
  r = b.bn("res.bn2", r);
  x = b.sum("res.add", {r, x});
  x = b.relu("res.relu", x);
  x = b.adaptive("avgpool", x, 1);
  x = b.flatten("flatten", x);
  b.linear("fc", x, classes);
  return b.take();
}

// ---------------------------------------------------------------- transformers
//
// Granularity: one layer per op (embeddings, then per block layer_norm,
// self_attention, the residual add, layer_norm, the two MLP linears around a
// gelu, the second add). Every layer boundary is a real tensor a pipeline can
// send, so a planner may cut between blocks (one {T, D} tensor crosses) or
// inside one (the residual crosses as well, which the task graph already
// carries for any DAG); coarser sub-block layers would hide the attention's
// cost, which grows with T^2 while the MLP's grows with T, from the profile.
// Dropout layers are left out: they hold no parameters, and training must
// stay comparable with single-device training in the runtime's tests.

struct TransformerShape {
  int64_t tokens, vocabulary, positions, layers, width, heads;
};

int64_t or_default(int64_t value, int64_t fallback) { return value > 0 ? value : fallback; }

// One block, pre-norm (GPT-2, ViT: x + attn(ln(x)), then x + mlp(ln(x))) or
// post-norm (BERT: ln(x + attn(x)), then ln(x + mlp(x))).
struct BlockNames {
  std::string ln1, attention, add1, ln2, fc1, gelu, fc2, add2;
};

int pre_norm_block(Builder& b, const BlockNames& n, int x, const TransformerShape& s, bool causal, double eps) {
  LayerAttrs norm;
  norm.eps = eps;
  LayerAttrs attn;
  attn.heads = s.heads;
  attn.causal = causal;
  int h = b.add(n.ln1, "layer_norm", {x}, norm);
  h = b.add(n.attention, "self_attention", {h}, attn);
  x = b.sum(n.add1, {h, x});
  h = b.add(n.ln2, "layer_norm", {x}, norm);
  h = b.linear(n.fc1, h, 4 * s.width);
  h = b.add(n.gelu, "gelu", {h});
  h = b.linear(n.fc2, h, s.width);
  return b.sum(n.add2, {h, x});
}

int post_norm_block(Builder& b, const BlockNames& n, int x, const TransformerShape& s, double eps) {
  LayerAttrs norm;
  norm.eps = eps;
  LayerAttrs attn;
  attn.heads = s.heads;
  int h = b.add(n.attention, "self_attention", {x}, attn);
  h = b.sum(n.add1, {h, x});
  x = b.add(n.ln1, "layer_norm", {h}, norm);
  h = b.linear(n.fc1, x, 4 * s.width);
  h = b.add(n.gelu, "gelu", {h});
  h = b.linear(n.fc2, h, s.width);
  h = b.sum(n.add2, {h, x});
  return b.add(n.ln2, "layer_norm", {h}, norm);
}

int token_embedding(Builder& b, const std::string& name, int64_t vocabulary, int64_t width,
                    double init_std = LayerAttrs{}.init_std) {
  LayerAttrs a;
  a.entries = vocabulary;
  a.out = width;
  a.init_std = init_std;
  return b.add(name, "token_embedding", {kInput}, a);
}

int table(Builder& b, const std::string& name, const std::string& op, int in, int64_t entries) {
  LayerAttrs a;
  a.entries = entries;
  return b.add(name, op, {in}, a);
}

// GPT-2 (HuggingFace's GPT2LMHeadModel names): token and position embeddings,
// causal pre-norm blocks, a final layer norm and logits against the token table.
LayerGraph gpt2(const std::string& name, const TransformerShape& s) {
  Builder b(name, {s.tokens});
  int x = token_embedding(b, "wte", s.vocabulary, s.width);
  x = table(b, "wpe", "position_embedding", x, s.positions);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    x = pre_norm_block(b, {p + "ln_1", p + "attn", p + "add_1", p + "ln_2", p + "mlp.c_fc", p + "mlp.gelu",
                           p + "mlp.c_proj", p + "add_2"},
                       x, s, /*causal=*/true, 1e-5);
  }
  LayerAttrs norm;
  norm.eps = 1e-5;
  x = b.add("ln_f", "layer_norm", {x}, norm);
  LayerAttrs head;
  head.tie = "wte";
  b.add("lm_head", "lm_head", {x}, head);
  return b.take();
}

// BertModel: word, position and token-type embeddings with a layer norm,
// post-norm blocks, and the pooler (first token -> linear -> tanh); with
// `classes`, a classifier on the pooler as BertForSequenceClassification.
LayerGraph bert(const TransformerShape& s, int64_t classes) {
  Builder b("bert_base", {s.tokens});
  int x = token_embedding(b, "embeddings.word_embeddings", s.vocabulary, s.width);
  x = table(b, "embeddings.position_embeddings", "position_embedding", x, s.positions);
  x = table(b, "embeddings.token_type_embeddings", "token_type_embedding", x, 2);
  LayerAttrs norm;
  norm.eps = 1e-12;
  x = b.add("embeddings.LayerNorm", "layer_norm", {x}, norm);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    x = post_norm_block(b, {p + "attention.output.LayerNorm", p + "attention.self", p + "attention.output.add",
                            p + "output.LayerNorm", p + "intermediate.dense", p + "intermediate.gelu",
                            p + "output.dense", p + "output.add"},
                        x, s, 1e-12);
  }
  x = b.add("pooler.first_token", "select_token", {x});
  x = b.linear("pooler.dense", x, s.width);
  x = b.add("pooler.activation", "tanh", {x});
  if (classes > 0) b.linear("classifier", x, classes);
  return b.take();
}

// The classes from the first token (a class token), layer-normalised: ViT's
// head (torchvision normalises every token and keeps the first; layer norm is
// per token, so keeping the first and then normalising is the same function at
// 1/T of the cost), and the text Transformer's.
void first_token_head(Builder& b, int x, const std::string& norm_name, double eps, const std::string& head,
                      int64_t classes) {
  x = b.add("class_token_out", "select_token", {x});
  LayerAttrs norm;
  norm.eps = eps;
  x = b.add(norm_name, "layer_norm", {x}, norm);
  b.linear(head, x, classes);
}

// torchvision's vit_b_16: a 16x16 stride-16 convolution as the patch
// embedding, the patches as a sequence, the class token, learned positions,
// pre-norm blocks, and the head on the class token (first_token_head).
LayerGraph vit(const TransformerShape& s, int64_t side, int64_t classes) {
  constexpr int64_t kPatch = 16;
  Builder b("vit_b_16", image(side));
  int x = b.conv("conv_proj", kInput, {s.width, kPatch, kPatch, kPatch, kPatch});
  x = b.add("patches", "to_sequence", {x});
  x = b.add("class_token", "class_token", {x});
  x = table(b, "encoder.pos_embedding", "position_embedding", x, (side / kPatch) * (side / kPatch) + 1);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
    x = pre_norm_block(b, {p + "ln_1", p + "self_attention", p + "add_1", p + "ln_2", p + "mlp.0", p + "mlp.1",
                           p + "mlp.3", p + "add_2"},
                       x, s, /*causal=*/false, 1e-6);
  }
  first_token_head(b, x, "encoder.ln", 1e-6, "heads.head", classes);
  return b.take();
}

// Text classifiers over token ids (the Pipeline AL seed's LSTM and Transformer
// settings, small enough to train here): an embedding, `layers` LSTM layers of
// `width` or encoder blocks, then the classes from the last token (LSTM) or
// the first, a class token the data puts there (Transformer). The embedding
// starts as PyTorch's nn.Embedding does, N(0, 1): with GPT-2's 0.02, BP through
// the 4 LSTM layers barely trained (python3-torch: 45-49% test accuracy on the
// generated text set against 68-92% at N(0, 1), 10 epochs, Adam 0.003).
constexpr double kTextEmbeddingStd = 1.0;

LayerGraph text_lstm(const TransformerShape& s, int64_t classes) {
  Builder b("text_lstm", {s.tokens});
  int x = token_embedding(b, "embedding", s.vocabulary, s.width, kTextEmbeddingStd);
  LayerAttrs lstm;
  lstm.out = s.width;
  for (int64_t i = 0; i < s.layers; ++i) x = b.add("lstm." + std::to_string(i), "lstm", {x}, lstm);
  LayerAttrs last;
  last.index = s.tokens - 1;
  x = b.add("last_token", "select_token", {x}, last);
  b.linear("classifier", x, classes);
  return b.take();
}

LayerGraph text_transformer(const TransformerShape& s, int64_t classes) {
  Builder b("text_transformer", {s.tokens});
  int x = token_embedding(b, "embedding", s.vocabulary, s.width, kTextEmbeddingStd);
  x = table(b, "position_embedding", "position_embedding", x, s.positions);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "encoder." + std::to_string(i) + ".";
    x = pre_norm_block(b, {p + "ln_1", p + "attention", p + "add_1", p + "ln_2", p + "mlp.fc1", p + "mlp.gelu",
                           p + "mlp.fc2", p + "add_2"},
                       x, s, /*causal=*/false, 1e-5);
  }
  first_token_head(b, x, "ln_f", 1e-5, "classifier", classes);
  return b.take();
}

bool is_text_classifier(const std::string& name) { return name == "text_lstm" || name == "text_transformer"; }

Result<TransformerShape> transformer_shape(const std::string& name, const ModelOptions& o) {
  for (int64_t v : {o.vocabulary, o.layers, o.width, o.heads})
    if (v < 0) return Status::error(name + ": vocabulary, layers, width and heads must be positive");
  const bool medium = name == "gpt2_medium";
  const bool bert = name == "bert_base";
  const bool text = is_text_classifier(name);
  TransformerShape s;
  s.layers = or_default(o.layers, medium ? 24 : text ? 4 : 12);
  s.width = or_default(o.width, medium ? 1024 : text ? 64 : 768);
  s.heads = or_default(o.heads, medium ? 16 : text ? 4 : 12);
  s.vocabulary = or_default(o.vocabulary, bert ? 30522 : text ? 1000 : 50257);
  const int64_t context = bert ? 512 : text ? 32 : 1024;
  s.tokens = or_default(o.input_size, context);
  s.positions = std::max(context, s.tokens);  // the table's rows; a shorter sequence uses the first ones
  if (name != "text_lstm" && s.width % s.heads)
    return Status::error(name + ": " + std::to_string(s.heads) + " heads do not divide the width " +
                         std::to_string(s.width));
  return s;
}

Result<LayerGraph> build_transformer(const std::string& name, const ModelOptions& o) {
  auto shape = transformer_shape(name, o);
  if (!shape) return shape.status();
  if (name == "gpt2" || name == "gpt2_medium") {
    if (o.num_classes > 0)
      return Status::error(name + " predicts the next token over its vocabulary; set the vocabulary, not classes");
    return gpt2(name, *shape);
  }
  if (name == "bert_base") return bert(*shape, o.num_classes);
  if (name == "text_lstm") {
    if (o.heads > 0) return Status::error("text_lstm has no attention heads to set");
    return text_lstm(*shape, or_default(o.num_classes, 4));
  }
  if (name == "text_transformer") return text_transformer(*shape, or_default(o.num_classes, 4));
  const int64_t side = or_default(o.input_size, 224);
  if (side % 16) return Status::error("vit_b_16: the image side " + std::to_string(side) + " is not a multiple of 16");
  if (o.vocabulary > 0) return Status::error("vit_b_16 reads images; it has no vocabulary");
  return vit(*shape, side, or_default(o.num_classes, 1000));
}

bool is_transformer(const std::string& name) {
  return name == "gpt2" || name == "gpt2_medium" || name == "bert_base" || name == "vit_b_16" ||
         is_text_classifier(name);
}

struct ZooEntry {
  std::function<LayerGraph(int64_t, int64_t)> build;
  int64_t default_side, default_classes;
};

const std::map<std::string, ZooEntry>& zoo() {
  static const std::map<std::string, ZooEntry> entries = {
      {"alexnet", {alexnet, 224, 1000}},
      {"vgg16", {vgg16, 224, 1000}},
      {"resnet50", {resnet50, 224, 1000}},
      {"inception_v3", {inception_v3, 299, 1000}},
      {"alexnet_cifar", {alexnet_cifar, 32, 10}},
      {"vgg5", {vgg5, 32, 10}},
      {"mlp", {mlp, 32, 10}},
      {"tiny_inception", {tiny_inception, 32, 10}},
  };
  return entries;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> zoo_names() {
  return {"alexnet", "vgg16",         "resnet50",  "inception_v3", "gpt2", "gpt2_medium", "bert_base", "vit_b_16",
          "alexnet_cifar", "vgg5", "mlp", "tiny_inception", "text_lstm", "text_transformer"};
}

Result<LayerGraph> zoo_model(const std::string& name, const ModelOptions& options) {
  if (is_transformer(name)) {
    if (options.input_size < 0 || options.num_classes < 0)
      return Status::error(name + ": input size and class count must be positive");
    auto g = build_transformer(name, options);
    if (!g) return g.status();
    if (Status s = infer_shapes(*g); !s) return s.with_context(name);
    return g;
  }
  auto it = zoo().find(name);
  if (it == zoo().end()) {
    std::string known;
    for (const auto& n : zoo_names()) known += (known.empty() ? "" : ", ") + n;
    return Status::error("unknown model '" + name + "'; known models are " + known +
                         " (or a path to a .json layer graph or a .pt TorchScript file)");
  }
  if (options.vocabulary || options.layers || options.width || options.heads)
    return Status::error(name + " has no vocabulary, layer count, width or heads to set (transformers only)");
  if (options.input_size < 0) return Status::error("input size must be positive");
  if (options.num_classes < 0) return Status::error("class count must be positive");
  int64_t side = options.input_size ? options.input_size : it->second.default_side;
  int64_t classes = options.num_classes ? options.num_classes : it->second.default_classes;
  LayerGraph g = it->second.build(side, classes);
  if (Status s = infer_shapes(g); !s) return s.with_context(name + " at input size " + std::to_string(side));
  return g;
}

bool is_torchscript_path(const std::string& name_or_path) {
  return ends_with(name_or_path, ".pt") || ends_with(name_or_path, ".pth");
}

Result<LayerGraph> load_layer_graph(const std::string& name_or_path, const ModelOptions& options) {
  if (ends_with(name_or_path, ".json")) return read_model_json_file(name_or_path);
  if (is_torchscript_path(name_or_path))
    return Status::error(name_or_path + ": a TorchScript file is imported by the profiler (profiler/model_loader.h)");
  return zoo_model(name_or_path, options);
}

Result<ScriptImport> script_import_from_name(const std::string& name) {
  if (name == "auto") return ScriptImport::automatic;
  if (name == "ops") return ScriptImport::ops;
  if (name == "layers") return ScriptImport::layers;
  return Status::error("unknown TorchScript import \"" + name + "\"; expected \"auto\", \"ops\" or \"layers\"");
}

}  // namespace tapp
