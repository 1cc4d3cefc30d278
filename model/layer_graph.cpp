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
      {"token_embedding", "Embedding"},
      {"position_embedding", "Embedding"},
      {"token_type_embedding", "Embedding"},
      {"class_token", "Embedding"},
      {"to_sequence", "Flatten"},
      {"select_token", "Flatten"},
      {"mean_tokens", "Pooling"},
      {"lstm", "Recurrent"},
      {"layer_norm", "Normalization"},
      {"self_attention", "Attention"},
      {"gelu", "Activation"},
      {"lm_head", "Fully-Connected"},
      {"al_labels", "Identity"},
  };
  return classes;
}

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t span = in + 2 * p - k;
  if (span < 0) return 0;  // the window is larger than the padded input: PyTorch's "output size is too small"
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

Status need_sequence(const Layer& l, const Shape& in) {
  if (in.size() != 2) return err(l, "expects a sequence T x D, got " + shape_to_string(in));
  return Status::ok();
}

// The transformer ops (layer_graph.h); false when `l.op` is not one of them.
bool infer_sequence_layer(Layer& l, Status& status) {
  const LayerAttrs& a = l.attrs;
  const Shape& in = l.input_shapes[0];
  auto fail = [&](const std::string& what) {
    status = err(l, what);
    return true;
  };
  status = Status::ok();
  if (l.op == "token_embedding") {
    if (in.size() != 1) return fail("expects token ids {T}, got " + shape_to_string(in));
    if (a.entries <= 0 || a.out <= 0) return fail("attrs.entries (vocabulary) and attrs.out must be positive");
    l.output_shape = {in[0], a.out};
    if (!count_of({a.entries, a.out}, l.params)) return fail("table is over 2^59 entries");
  } else if (l.op == "position_embedding" || l.op == "token_type_embedding") {
    if (Status s = need_sequence(l, in); !s) return status = s, true;
    if (a.entries <= 0) return fail("attrs.entries must be positive");
    if (l.op == "position_embedding" && in[0] > a.entries)
      return fail("sequence of " + std::to_string(in[0]) + " tokens is longer than its " +
                  std::to_string(a.entries) + " positions");
    l.output_shape = in;
    if (!count_of({a.entries, in[1]}, l.params)) return fail("table is over 2^59 entries");
  } else if (l.op == "class_token") {
    if (Status s = need_sequence(l, in); !s) return status = s, true;
    l.output_shape = {in[0] + 1, in[1]};
    l.params = in[1];
  } else if (l.op == "to_sequence") {
    if (Status s = need_chw(l, in); !s) return status = s, true;
    l.output_shape = {in[1] * in[2], in[0]};
  } else if (l.op == "select_token") {
    if (Status s = need_sequence(l, in); !s) return status = s, true;
    if (a.index < 0 || a.index >= in[0])
      return fail("attrs.index " + std::to_string(a.index) + " is not a token of " + shape_to_string(in));
    l.output_shape = {in[1]};
  } else if (l.op == "mean_tokens") {
    if (Status s = need_sequence(l, in); !s) return status = s, true;
    l.output_shape = {in[1]};
  } else if (l.op == "lstm") {
    if (Status s = need_sequence(l, in); !s) return status = s, true;
    if (a.out <= 0) return fail("attrs.out (the hidden width) must be positive");
    const int64_t t = in[0], d = in[1], h = a.out;
    l.output_shape = {t, h};
    // PyTorch's LSTM: weight_ih 4H x D, weight_hh 4H x H, bias_ih and bias_hh 4H each.
    int64_t gates = 0, weights = 0;
    if (!count_of({4, h}, gates) || !count_of({gates, d + h}, weights) ||
        !count_of({1, weights + (a.bias ? 2 * gates : 0)}, l.params) || !count_of({t, weights}, l.macs))
      return fail("parameter or multiply-add count is over 2^59");
    // Per token, backward reads the four gates, the cell state and the output.
    if (!count_of({4, t, 6, h}, l.saved_bytes)) return fail("saved activations are over 2^59 bytes");
  } else if (l.op == "layer_norm") {
    l.output_shape = in;
    if (!count_of({2, in.back()}, l.params)) return fail("parameter count is over 2^59");
  } else if (l.op == "self_attention") {
    if (Status s = need_sequence(l, in); !s) return status = s, true;
    const int64_t t = in[0], d = in[1];
    if (a.heads <= 0 || d % a.heads)
      return fail("attrs.heads " + std::to_string(a.heads) + " must divide the width " + std::to_string(d));
    l.output_shape = in;
    int64_t square = 0, projections = 0, products = 0;
    if (!count_of({d, d}, square) || !count_of({4, square + (a.bias ? d : 0)}, l.params) ||
        !count_of({4, t, square}, projections) || !count_of({2, t, t, d}, products) ||
        !count_of({1, projections + products}, l.macs))
      return fail("parameter or multiply-add count is over 2^59");
    // q, k, v, the attention output before its projection and the output: 5 x T x D;
    // the probabilities, heads x T x T (softmax's backward needs its output; the
    // scaled, masked scores before it are temporaries no backward reads).
    int64_t per_token = 0, per_head = 0;
    if (!count_of({5, t, d}, per_token) || !count_of({1, a.heads, t, t}, per_head) ||
        !count_of({4, per_token + per_head}, l.saved_bytes))
      return fail("saved activations are over 2^59 bytes");
  } else if (l.op == "gelu") {
    l.output_shape = in;
  } else if (l.op == "lm_head") {
    return fail("needs the table of its tied embedding (infer_shapes resolves attrs.tie)");
  } else {
    return false;
  }
  return true;
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
  for (int64_t v : {a.out, a.kernel[0], a.kernel[1], a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.groups,
                    a.entries, a.heads, a.index})
    if (v > kMaxExtent) return err(l, "attrs above 2^31: " + std::to_string(v));
  if (Status s; infer_sequence_layer(l, s)) {
    if (!s) return s;
  } else if (l.op == "conv2d") {
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
  } else if (l.op == "linear") {  // {F} or a sequence {T, F}: applied to the last dimension
    if (in.size() != 1 && in.size() != 2) return err(l, "expects a flat input, got " + shape_to_string(in));
    if (a.out <= 0) return err(l, "attrs.out must be positive");
    const int64_t features = in.back(), rows = in.size() == 2 ? in[0] : 1;
    l.output_shape = in;
    l.output_shape.back() = a.out;
    int64_t weights = 0;
    if (!count_of({features, a.out}, weights) || !count_of({1, weights + (a.bias ? a.out : 0)}, l.params))
      return err(l, "parameter count " + std::to_string(features) + " x " + std::to_string(a.out) + " is over 2^59");
    if (!count_of({rows, weights}, l.macs)) return err(l, "multiply-add count is over 2^59");
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
  } else if (l.op == "al_labels") {
    if (a.out <= 0) return err(l, "attrs.out (the class count) must be positive");
    l.output_shape = {a.out};
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
  if (l.saved_bytes == 0) l.saved_bytes = elements * 4;
  return Status::ok();
}

// lm_head reads the table of an earlier token_embedding (attrs.tie): {T, D} -> {T, vocabulary}.
Status infer_lm_head(Layer& l, const LayerGraph& g, int index) {
  const Shape& in = l.input_shapes.at(0);
  if (l.input_shapes.size() != 1) return err(l, "takes exactly one input");
  if (Status s = need_sequence(l, in); !s) return s;
  const int tied = g.index_of(l.attrs.tie);
  if (tied < 0 || tied >= index || g.layers[tied].op != "token_embedding")
    return err(l, "attrs.tie '" + l.attrs.tie + "' must name an earlier token_embedding layer");
  const Layer& e = g.layers[tied];
  if (e.attrs.out != in[1])
    return err(l, "width " + std::to_string(in[1]) + " differs from its tied embedding's " +
                      std::to_string(e.attrs.out));
  l.params = 0;  // the table's parameters belong to the embedding
  l.output_shape = {in[0], e.attrs.entries};
  if (!count_of({in[0], in[1], e.attrs.entries}, l.macs) || !count_of({4, in[0], e.attrs.entries}, l.saved_bytes))
    return err(l, "multiply-add count is over 2^59");
  return Status::ok();
}

// A token_embedding, or a torchscript slice with attrs.entries (an imported
// language model's first layers), reads token ids in [0, entries).
bool reads_token_ids(const Layer& l) {
  return l.op == "token_embedding" || (l.op == "torchscript" && l.attrs.entries > 0);
}

// The model reads token ids when a layer that reads token ids reads its input;
// then every reader of the input must be one, and the ids are below the
// smallest vocabulary.
Status infer_input_kind(LayerGraph& g) {
  g.input_kind = InputKind::dense;
  g.input_vocabulary = 0;
  for (const Layer& l : g.layers) {
    if (reads_token_ids(l) && !l.inputs.empty())
      return err(l, "reads token ids: the model input, not another layer");
    if (l.inputs.empty() && reads_token_ids(l)) g.input_kind = InputKind::tokens;
  }
  if (g.input_kind == InputKind::dense) return Status::ok();
  for (const Layer& l : g.layers) {
    if (!l.inputs.empty() || l.op == "al_labels") continue;  // al_labels reads only the batch size
    if (!reads_token_ids(l))
      return err(l, "reads the model input, which holds token ids (a token_embedding reads it)");
    if (l.attrs.entries > 0 && (g.input_vocabulary == 0 || l.attrs.entries < g.input_vocabulary))
      g.input_vocabulary = l.attrs.entries;
  }
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
         eps == o.eps && dim == o.dim && entries == o.entries && heads == o.heads && causal == o.causal &&
         index == o.index && tie == o.tie && init_std == o.init_std;
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

int64_t Layer::activation_bytes() const { return output_bytes >= 0 ? output_bytes : sat_mul(numel(output_shape), 4); }

bool LayerGraph::per_token_labels() const {
  return !layers.empty() && layers.back().output_shape.size() == 2;
}

Shape LayerGraph::label_shape() const {
  if (layers.empty()) return {};
  const Shape& out = layers.back().output_shape;
  if (out.size() == 2) return {out[0]};
  if (out.size() == 3) return {out[1], out[2]};
  return {};
}

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
  if (Status s = infer_input_kind(graph); !s) return s;
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
    l.saved_bytes = 0;
    l.output_bytes = -1;
    Status s = l.op == "lm_head" ? infer_lm_head(l, graph, static_cast<int>(i)) : infer_layer(l);
    if (!s) return s.at_field("layers[" + std::to_string(i) + "]");
    l.output_bytes = sat_mul(numel(l.output_shape), 4);
  }
  const Shape& out = graph.layers.back().output_shape;
  if (out.empty() || out.size() > 3)
    return Status::error("the last layer '" + graph.layers.back().name +
                         "' must output class scores (a flat vector, one per token: T x V, or one per pixel: C x H x "
                         "W), got " +
                         shape_to_string(out));
  graph.num_classes = out.size() == 3 ? out[0] : out.back();
  // An AL form ends with its last decoder; its classes are the labels' width.
  if (graph.is_al_form()) graph.num_classes = graph.layers[graph.al_blocks[0].target_input].output_shape[0];
  return Status::ok();
}

bool AlBlock::operator==(const AlBlock& o) const {
  return first == o.first && last == o.last && output == o.output && bridge == o.bridge && target == o.target &&
         decoder == o.decoder && decoder_input == o.decoder_input && target_input == o.target_input;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "x" : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace tapp
