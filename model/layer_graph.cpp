#include "model/layer_graph.h"

#include "common/checked_math.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <sstream>

namespace tapp {
namespace {

// Kernel, stride and padding beyond this describe no real layer and would overflow the shape formulas.
constexpr int64_t kMaxSide = int64_t{1} << 31;

const std::map<std::string, std::string>& op_classes() {
  static const std::map<std::string, std::string> classes = {
      {"conv2d", "Convolution"},
      {"linear", "Fully-Connected"},
      {"relu", "Relu"},
      {"sigmoid", "Activation"},
      {"tanh", "Activation"},
      {"maxpool2d", "Pooling"},
      {"avgpool2d", "Pooling"},
      {"adaptive_avgpool2d", "Pooling"},
      {"flatten", "Flatten"},
      {"dropout", "Dropout"},
      {"batchnorm2d", "Normalization"},
      {"concat", "Concat"},
      {"add", "Add"},
      {"identity", "Identity"},
      {"relu6", "Relu"},
      {"softmax", "Activation"},
      {"log_softmax", "Activation"},
      {"torchscript", "Unknown"},
  };
  return classes;
}

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t span = in + 2 * p - k;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // PyTorch: the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// The element count, or INT64_MAX when it does not fit.
int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n = sat_mul(n, d);
  return n;
}

// Counts whose float32 bytes (x4), and the memory rule's 3x on top, still fit in int64.
constexpr int64_t kMaxCount = kInt64Max / 16;
// One dimension or attribute: beyond any real model, refused before it enters a product.
constexpr int64_t kMaxExtent = int64_t{1} << 31;

// a * b * ... as a count of at most kMaxCount; false (out untouched) otherwise.
bool count_of(std::initializer_list<int64_t> factors, int64_t& out) {
  int64_t n = 1;
  for (int64_t f : factors)
    if (!checked_mul(n, f, n) || n > kMaxCount) return false;
  out = n;
  return true;
}

Status err(const Layer& l, const std::string& what) {
  return Status::error("layer '" + l.name + "' (" + l.op + "): " + what);
}

Status need_chw(const Layer& l, const Shape& in) {
  if (in.size() != 3) return err(l, "expects a C x H x W input, got " + shape_to_string(in));
  return Status::ok();
}

// A torchscript layer carries what the importer measured; only its sanity is checked.
Status infer_script_layer(Layer& l) {
  const ScriptSlice& s = l.attrs.script;
  if (s.file.empty()) return err(l, "attrs.script.file is empty");
  if (s.begin < 0 || s.end <= s.begin) return err(l, "attrs.script node range is empty");
  if (s.output_shape.empty()) return err(l, "attrs.script.output_shape is empty");
  for (int64_t d : s.output_shape)
    if (d <= 0 || d > kMaxExtent) return err(l, "output has a dimension out of range " + shape_to_string(s.output_shape));
  if (numel(s.output_shape) > kMaxCount) return err(l, "output larger than 2^59 elements");
  if (s.params < 0 || s.params > kMaxCount || s.macs < 0 || s.macs > kMaxCount)
    return err(l, "attrs.script params and macs must be in [0, 2^59]");
  l.output_shape = s.output_shape;
  l.params = s.params;
  l.macs = s.macs;
  return Status::ok();
}

Status infer_layer(Layer& l) {
  const auto& ins = l.input_shapes;
  const LayerAttrs& a = l.attrs;
  l.params = 0;
  l.macs = 0;
  if (l.op == "torchscript") return infer_script_layer(l);
  bool multi = l.op == "concat" || l.op == "add";
  if (!multi && ins.size() != 1)
    return err(l, "takes exactly one input, got " + std::to_string(ins.size()));
  if (multi && ins.size() < 2) return err(l, "takes at least two inputs");
  const Shape& in = ins[0];
  for (int64_t d : in)
    if (d <= 0) return err(l, "input has an empty dimension " + shape_to_string(in));
  if (numel(in) > kMaxCount) return err(l, "input larger than 2^59 elements " + shape_to_string(in));
  for (int64_t v : {a.out, a.kernel[0], a.kernel[1], a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.groups})
    if (v > kMaxExtent) return err(l, "attrs above 2^31: " + std::to_string(v));

  if (l.op == "conv2d") {
    if (Status s = need_chw(l, in); !s) return s;
    if (a.out <= 0) return err(l, "attrs.out must be positive");
    if (a.groups <= 0 || in[0] % a.groups || a.out % a.groups)
      return err(l, "attrs.groups must divide input channels " + std::to_string(in[0]) +
                        " and out " + std::to_string(a.out));
    for (int i = 0; i < 2; ++i)
      if (a.kernel[i] <= 0 || a.stride[i] <= 0 || a.padding[i] < 0)
        return err(l, "kernel and stride must be positive, padding non-negative");
    for (int i = 0; i < 2; ++i)
      if (a.kernel[i] > kMaxSide || a.stride[i] > kMaxSide || a.padding[i] > kMaxSide)
        return err(l, "kernel, stride and padding must be at most " + std::to_string(kMaxSide));
    int64_t h = (in[1] + 2 * a.padding[0] - a.kernel[0]) / a.stride[0] + 1;
    int64_t w = (in[2] + 2 * a.padding[1] - a.kernel[1]) / a.stride[1] + 1;
    if (h <= 0 || w <= 0 || in[1] + 2 * a.padding[0] < a.kernel[0] ||
        in[2] + 2 * a.padding[1] < a.kernel[1])
      return err(l, "kernel larger than padded input " + shape_to_string(in));
    l.output_shape = {a.out, h, w};
    int64_t per_out = 0, weights = 0;
    if (!count_of({in[0] / a.groups, a.kernel[0], a.kernel[1]}, per_out) || !count_of({a.out, per_out}, weights) ||
        !count_of({1, weights + (a.bias ? a.out : 0)}, l.params))
      return err(l, "parameter count " + std::to_string(a.out) + " x " + std::to_string(in[0] / a.groups) +
                        " x " + std::to_string(a.kernel[0]) + " x " + std::to_string(a.kernel[1]) + " is over 2^59");
    if (!count_of({a.out, h, w, per_out}, l.macs)) return err(l, "multiply-add count is over 2^59");
  } else if (l.op == "linear") {
    if (in.size() != 1) return err(l, "expects a flat input, got " + shape_to_string(in));
    if (a.out <= 0) return err(l, "attrs.out must be positive");
    l.output_shape = {a.out};
    int64_t weights = 0;
    if (!count_of({in[0], a.out}, weights) || !count_of({1, weights + (a.bias ? a.out : 0)}, l.params))
      return err(l, "parameter count " + std::to_string(in[0]) + " x " + std::to_string(a.out) + " is over 2^59");
    l.macs = weights;
  } else if (l.op == "maxpool2d" || l.op == "avgpool2d") {
    if (Status s = need_chw(l, in); !s) return s;
    for (int i = 0; i < 2; ++i)
      if (a.kernel[i] <= 0 || a.stride[i] <= 0 || a.padding[i] < 0 ||
          a.padding[i] * 2 > a.kernel[i])
        return err(l, "kernel and stride must be positive, padding at most half the kernel");
    for (int i = 0; i < 2; ++i)
      if (a.kernel[i] > kMaxSide || a.stride[i] > kMaxSide)
        return err(l, "kernel and stride must be at most " + std::to_string(kMaxSide));
    int64_t h = pool_out(in[1], a.kernel[0], a.stride[0], a.padding[0], a.ceil_mode);
    int64_t w = pool_out(in[2], a.kernel[1], a.stride[1], a.padding[1], a.ceil_mode);
    if (h <= 0 || w <= 0) return err(l, "window larger than input " + shape_to_string(in));
    l.output_shape = {in[0], h, w};
  } else if (l.op == "adaptive_avgpool2d") {
    if (Status s = need_chw(l, in); !s) return s;
    if (a.kernel[0] <= 0 || a.kernel[1] <= 0) return err(l, "attrs.kernel (output size) must be positive");
    l.output_shape = {in[0], a.kernel[0], a.kernel[1]};
  } else if (l.op == "flatten") {
    l.output_shape = {numel(in)};
  } else if (l.op == "batchnorm2d") {
    if (Status s = need_chw(l, in); !s) return s;
    l.output_shape = in;
    l.params = 2 * in[0];
  } else if (l.op == "concat") {
    if (a.dim < 1 || a.dim > static_cast<int64_t>(in.size()))
      return err(l, "attrs.dim out of range for " + shape_to_string(in));
    Shape out = in;
    size_t d = static_cast<size_t>(a.dim - 1);
    for (size_t i = 1; i < ins.size(); ++i) {
      if (ins[i].size() != in.size()) return err(l, "inputs differ in rank");
      for (size_t k = 0; k < in.size(); ++k)
        if (k != d && ins[i][k] != in[k])
          return err(l, "mismatched shapes " + shape_to_string(in) + " and " + shape_to_string(ins[i]));
      if (!checked_add(out[d], ins[i][d], out[d])) return err(l, "concatenated size overflows");
    }
    l.output_shape = out;
  } else if (l.op == "add") {
    for (size_t i = 1; i < ins.size(); ++i)
      if (ins[i] != in)
        return err(l, "mismatched shapes " + shape_to_string(in) + " and " + shape_to_string(ins[i]));
    l.output_shape = in;
  } else if (l.op == "dropout") {
    if (a.p < 0 || a.p >= 1) return err(l, "attrs.p must be in [0, 1)");
    l.output_shape = in;
  } else if (l.op == "softmax" || l.op == "log_softmax") {
    if (a.dim < 1 || a.dim > static_cast<int64_t>(in.size()))
      return err(l, "attrs.dim out of range for " + shape_to_string(in));
    l.output_shape = in;
  } else {  // relu sigmoid tanh identity relu6
    l.output_shape = in;
  }
  int64_t elements = 0;
  if (!count_of({numel(l.output_shape)}, elements))
    return err(l, "output " + shape_to_string(l.output_shape) + " has more than " + std::to_string(kMaxCount) +
                      " elements per sample");
  return Status::ok();
}

}  // namespace

bool ScriptSlice::operator==(const ScriptSlice& o) const {
  return file == o.file && hash == o.hash && expand == o.expand && begin == o.begin && end == o.end &&
         output_shape == o.output_shape && params == o.params && macs == o.macs;
}

bool LayerAttrs::operator==(const LayerAttrs& o) const {
  return script == o.script && out == o.out && std::equal(kernel, kernel + 2, o.kernel) &&
         std::equal(stride, stride + 2, o.stride) && std::equal(padding, padding + 2, o.padding) &&
         groups == o.groups && bias == o.bias && ceil_mode == o.ceil_mode && p == o.p &&
         eps == o.eps && dim == o.dim;
}

bool is_known_op(const std::string& op) { return op_classes().count(op) > 0; }

const std::vector<std::string>& known_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v;
    for (const auto& kv : op_classes()) v.push_back(kv.first);
    return v;
  }();
  return ops;
}

std::string op_class(const std::string& op) {
  auto it = op_classes().find(op);
  return it == op_classes().end() ? "Unknown" : it->second;
}

int64_t Layer::activation_bytes() const { return sat_mul(numel(output_shape), 4); }

int64_t LayerGraph::total_params() const {
  int64_t n = 0;
  for (const auto& l : layers) n = sat_add(n, l.params);
  return n;
}

int64_t LayerGraph::total_macs() const {
  int64_t n = 0;
  for (const auto& l : layers) n = sat_add(n, l.macs);
  return n;
}

std::vector<std::vector<int>> LayerGraph::consumers() const {
  std::vector<std::vector<int>> out(layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    for (int p : layers[i].inputs) out[p].push_back(static_cast<int>(i));
  for (auto& c : out) c.erase(std::unique(c.begin(), c.end()), c.end());
  return out;
}

int LayerGraph::index_of(const std::string& layer_name) const {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].name == layer_name) return static_cast<int>(i);
  return -1;
}

Status infer_shapes(LayerGraph& graph) {
  if (graph.layers.empty()) return Status::error("model has no layers");
  if (graph.input_shape.empty()) return Status::error("input_shape is empty");
  for (int64_t d : graph.input_shape)
    if (d <= 0) return Status::error("input_shape has a non-positive dimension");
  std::map<std::string, int> seen;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    Layer& l = graph.layers[i];
    if (l.name.empty()) return Status::error("layer " + std::to_string(i) + " has no name");
    if (!seen.emplace(l.name, static_cast<int>(i)).second)
      return Status::error("layer name '" + l.name + "' is used twice");
    if (!is_known_op(l.op)) return err(l, "unknown op; known ops are conv2d, linear, relu, ...");
    l.input_shapes.clear();
    if (l.inputs.empty()) l.input_shapes.push_back(graph.input_shape);
    for (int p : l.inputs) {
      if (p < 0 || p >= static_cast<int>(i))
        return err(l, "input " + std::to_string(p) + " is not an earlier layer");
      l.input_shapes.push_back(graph.layers[p].output_shape);
    }
    if (Status s = infer_layer(l); !s) return s.at_field("layers[" + std::to_string(i) + "]");
  }
  if (graph.input_vocab < 0) return Status::error("input_vocab must be positive (token ids) or 0 (float input)");
  const Shape& out = graph.layers.back().output_shape;
  if (out.size() != 1 && out.size() != 2)
    return Status::error("the last layer '" + graph.layers.back().name +
                         "' must output class scores (a flat vector) or per-token scores (tokens x vocabulary), got " +
                         shape_to_string(out));
  graph.num_classes = out.back();
  return Status::ok();
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "x" : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace tapp
