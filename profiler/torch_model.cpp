#include "profiler/torch_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "profiler/torchscript_layers.h"

namespace tapp {
namespace nn = torch::nn;

namespace {

template <typename M>
std::pair<nn::AnyModule, std::shared_ptr<nn::Module>> wrap(M module) {
  return {nn::AnyModule(module), module.ptr()};
}

// GPT-2's and BERT's initialisation of embeddings and learned tables: N(0, 0.02).
torch::Tensor small_normal(std::vector<int64_t> shape) { return torch::randn(shape) * 0.02; }

nn::Embedding make_token_embedding(const Layer& l) {
  nn::Embedding e(nn::EmbeddingOptions(l.attrs.entries, l.attrs.out));
  e->weight.normal_(0, l.attrs.init_std);
  return e;
}

// Adds learned rows to a sequence {B, T, D}: rows 0..T-1 (positions) or row 0
// for every token (token type 0).
struct AddTableImpl : nn::Module {
  AddTableImpl(int64_t rows, int64_t width, bool per_position)
      : per_position(per_position), weight(register_parameter("weight", small_normal({rows, width}))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return x + (per_position ? weight.narrow(0, 0, x.size(1)) : weight[0]);
  }
  bool per_position;
  torch::Tensor weight;
};
TORCH_MODULE(AddTable);

// Prepends one learned token: {B, T, D} -> {B, T + 1, D} (torchvision's ViT class_token, zeros at init there).
struct ClassTokenImpl : nn::Module {
  explicit ClassTokenImpl(int64_t width) : token(register_parameter("token", small_normal({1, 1, width}))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::cat({token.expand({x.size(0), 1, x.size(2)}), x}, 1); }
  torch::Tensor token;
};
TORCH_MODULE(ClassToken);

// Multi-head self-attention with q, k, v and output projections (as
// nn.MultiheadAttention's in_proj and out_proj), softmax(QK^T / sqrt(d)) V per
// head; causal: a token attends to itself and earlier tokens only.
struct SelfAttentionImpl : nn::Module {
  SelfAttentionImpl(int64_t width, int64_t heads, bool causal, bool bias)
      : heads(heads),
        causal(causal),
        in_proj(register_module("in_proj", nn::Linear(nn::LinearOptions(width, 3 * width).bias(bias)))),
        out_proj(register_module("out_proj", nn::Linear(nn::LinearOptions(width, width).bias(bias)))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), dh = d / heads;
    torch::Tensor qkv = in_proj(x).view({b, t, 3, heads, dh}).permute({2, 0, 3, 1, 4});  // 3, B, H, T, dh
    torch::Tensor scores = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
    if (causal)
      scores = scores.masked_fill(torch::ones({t, t}, scores.options().dtype(torch::kBool)).triu(1), -std::numeric_limits<float>::infinity());
    torch::Tensor context = torch::matmul(torch::softmax(scores, -1), qkv[2]);  // B, H, T, dh
    return out_proj(context.transpose(1, 2).reshape({b, t, d}));
  }
  int64_t heads;
  bool causal;
  nn::Linear in_proj, out_proj;
};
TORCH_MODULE(SelfAttention);

// One unidirectional LSTM layer over {B, T, D}, zero initial state: the
// output sequence {B, T, H} (PyTorch's nn.LSTM(batch_first=True) output[0]).
struct LstmLayerImpl : nn::Module {
  LstmLayerImpl(int64_t width, int64_t hidden, bool bias)
      : lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(width, hidden).batch_first(true).bias(bias)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return std::get<0>(lstm(x)).contiguous(); }
  nn::LSTM lstm;
};
TORCH_MODULE(LstmLayer);

std::pair<nn::AnyModule, std::shared_ptr<nn::Module>> make_module(const Layer& l) {
  const LayerAttrs& a = l.attrs;
  const Shape& in = l.input_shapes.at(0);
  if (l.op == "token_embedding") return wrap(make_token_embedding(l));
  if (l.op == "position_embedding" || l.op == "token_type_embedding")
    return wrap(AddTable(a.entries, in.back(), l.op == "position_embedding"));
  if (l.op == "class_token") return wrap(ClassToken(in.back()));
  if (l.op == "layer_norm") return wrap(nn::LayerNorm(nn::LayerNormOptions({in.back()}).eps(a.eps)));
  if (l.op == "self_attention") return wrap(SelfAttention(in.back(), a.heads, a.causal, a.bias));
  if (l.op == "lstm") return wrap(LstmLayer(in.back(), a.out, a.bias));
  if (l.op == "conv2d")
    return wrap(nn::Conv2d(nn::Conv2dOptions(in[0], a.out, {a.kernel[0], a.kernel[1]})
                               .stride({a.stride[0], a.stride[1]})
                               .padding({a.padding[0], a.padding[1]})
                               .groups(a.groups)
                               .bias(a.bias)));
  if (l.op == "linear") return wrap(nn::Linear(nn::LinearOptions(in.back(), a.out).bias(a.bias)));
  if (l.op == "batchnorm2d") return wrap(nn::BatchNorm2d(nn::BatchNorm2dOptions(in[0]).eps(a.eps)));
  if (l.op == "maxpool2d")
    return wrap(nn::MaxPool2d(nn::MaxPool2dOptions({a.kernel[0], a.kernel[1]})
                                  .stride({a.stride[0], a.stride[1]})
                                  .padding({a.padding[0], a.padding[1]})
                                  .ceil_mode(a.ceil_mode)));
  if (l.op == "avgpool2d")
    return wrap(nn::AvgPool2d(nn::AvgPool2dOptions({a.kernel[0], a.kernel[1]})
                                  .stride({a.stride[0], a.stride[1]})
                                  .padding({a.padding[0], a.padding[1]})
                                  .ceil_mode(a.ceil_mode)));
  if (l.op == "adaptive_avgpool2d")
    return wrap(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({a.kernel[0], a.kernel[1]})));
  if (l.op == "relu") return wrap(nn::ReLU(nn::ReLUOptions(/*inplace=*/false)));
  if (l.op == "sigmoid") return wrap(nn::Sigmoid());
  if (l.op == "tanh") return wrap(nn::Tanh());
  if (l.op == "dropout") return wrap(nn::Dropout(nn::DropoutOptions(a.p)));
  // flatten, concat, add, identity, relu6, softmax, gelu, to_sequence, select_token, mean_tokens, lm_head, al_labels: tensor ops
  return {nn::AnyModule(), nullptr};
}

}  // namespace

Result<std::shared_ptr<GraphModel>> GraphModel::build(const LayerGraph& graph, uint64_t seed,
                                                      const std::vector<bool>& keep) {
  if (!keep.empty() && keep.size() != graph.layers.size())
    return Status::error("GraphModel::build: keep has the wrong size");
  if (graph.layers.empty() || graph.layers.back().output_shape.empty())
    return Status::error("GraphModel::build: shapes were not inferred");
  std::shared_ptr<GraphModel> m(new GraphModel(graph));
  const size_t n = graph.layers.size();
  m->built_.assign(n, false);
  m->modules_.resize(n);
  m->holders_.resize(n);
  bool scripted = std::any_of(graph.layers.begin(), graph.layers.end(),
                              [](const Layer& l) { return l.op == "torchscript"; });
  if (scripted) {
    auto program = ScriptProgram::load(graph, keep);
    if (!program) return program.status();
    m->script_ = *program;
  }
  m->tied_tables_.resize(n);
  auto layer_seed = [seed](size_t i) { return seed * 1000003ULL + i; };  // weights depend on (seed, layer) only
  try {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < n; ++i) {
      if (!keep.empty() && !keep[i]) continue;
      const Layer& l = graph.layers[i];
      if (l.op == "torchscript") {  // runs in script_, weights from its file
        m->built_[i] = true;
        continue;
      }
      if (l.op == "lm_head") {
        const int e = graph.index_of(l.attrs.tie);
        if (e < 0) return Status::error("GraphModel::build: lm_head '" + l.name + "' has no tied embedding");
        if (m->built_[e]) {
          m->tied_tables_[i] = m->holders_[e]->named_parameters()["weight"];
        } else {  // the embedding lives elsewhere: an equal copy, from its seed
          torch::manual_seed(layer_seed(e));
          m->tied_tables_[i] = make_token_embedding(graph.layers[e])->weight.detach().clone().requires_grad_(true);
        }
        m->built_[i] = true;
        continue;
      }
      torch::manual_seed(layer_seed(i));
      auto [any, holder] = make_module(l);
      m->modules_[i] = std::move(any);
      m->holders_[i] = std::move(holder);
      m->built_[i] = true;
    }
  } catch (const std::exception& e) {
    return Status::error(std::string("building LibTorch modules: ") + e.what());
  }
  return m;
}

torch::Tensor GraphModel::forward_layer(int i, const std::vector<torch::Tensor>& inputs) {
  const Layer& l = graph_.layers[i];
  if (l.op == "torchscript") return script_->forward(i, inputs);
  if (l.op == "flatten") return inputs.at(0).flatten(1);
  if (l.op == "gelu") return torch::gelu(inputs.at(0));
  // Contiguous, as a pipeline sends layer outputs whole.
  if (l.op == "to_sequence") return inputs.at(0).flatten(2).transpose(1, 2).contiguous();
  if (l.op == "select_token") return inputs.at(0).select(1, l.attrs.index).contiguous();
  if (l.op == "mean_tokens") return inputs.at(0).mean(1);
  if (l.op == "lm_head") return torch::matmul(inputs.at(0), tied_tables_[i].t());
  if (l.op == "identity") return inputs.at(0);
  if (l.op == "al_labels") {
    const int64_t batch = inputs.at(0).size(0);
    if (!labels_.defined()) return torch::zeros({batch, l.attrs.out}, inputs.at(0).options().dtype(torch::kFloat));
    return torch::one_hot(labels_.to(inputs.at(0).device(), torch::kLong), l.attrs.out).to(torch::kFloat);
  }
  if (l.op == "relu6") return torch::hardtanh(inputs.at(0), 0.0, 6.0);
  if (l.op == "softmax") return torch::softmax(inputs.at(0), l.attrs.dim);
  if (l.op == "log_softmax") return torch::log_softmax(inputs.at(0), l.attrs.dim);
  if (l.op == "concat") return torch::cat(inputs, l.attrs.dim);
  if (l.op == "add") {
    torch::Tensor sum = inputs.at(0);
    for (size_t k = 1; k < inputs.size(); ++k) sum = sum + inputs[k];
    return sum;
  }
  return modules_[i].forward(inputs.at(0));
}

torch::Tensor GraphModel::forward(const torch::Tensor& input) {
  std::vector<torch::Tensor> outs(graph_.layers.size());
  for (size_t i = 0; i < graph_.layers.size(); ++i) {
    std::vector<torch::Tensor> ins;
    if (graph_.layers[i].inputs.empty()) ins.push_back(input);
    for (int p : graph_.layers[i].inputs) ins.push_back(outs[p]);
    outs[i] = forward_layer(static_cast<int>(i), ins);
  }
  return outs.back();
}

std::vector<torch::Tensor> GraphModel::layer_parameters(int i) const {
  if (graph_.layers[i].op == "torchscript") return built_[i] ? script_->parameters(i) : std::vector<torch::Tensor>{};
  return holders_[i] ? holders_[i]->parameters() : std::vector<torch::Tensor>{};
}

std::vector<torch::Tensor> GraphModel::parameters() const {
  std::vector<torch::Tensor> all;
  for (size_t i = 0; i < holders_.size(); ++i)
    for (auto& p : layer_parameters(static_cast<int>(i))) all.push_back(p);
  // This worker's copy of a shared parameter whose owner is built elsewhere
  // (a tied table, a weight a TorchScript layer borrows).
  for (const SharedParameter& s : shared_parameters())
    if (!built_[s.owner] && s.tensor.defined()) all.push_back(s.tensor);
  return all;
}

std::vector<SharedParameter> GraphModel::shared_parameters() const {
  std::vector<SharedParameter> out;
  for (size_t i = 0; i < graph_.layers.size(); ++i) {
    const Layer& l = graph_.layers[i];
    const int reader = static_cast<int>(i);
    if (l.op == "lm_head") {
      const int e = graph_.index_of(l.attrs.tie);
      if (e < 0) continue;
      const Layer& table = graph_.layers[e];
      out.push_back({e, {reader}, {table.attrs.entries, table.attrs.out}, tied_table(reader), table.name});
    } else if (l.op == "torchscript" && script_) {
      for (const auto& borrowed : script_->borrowed(reader)) {
        const int owner = borrowed.first;
        const torch::Tensor& t = borrowed.second;
        auto same = std::find_if(out.begin(), out.end(), [&](const SharedParameter& s) {
          return s.owner == owner && s.tensor.defined() && s.tensor.is_same(t);
        });
        if (same != out.end()) {
          same->readers.push_back(reader);
          continue;
        }
        out.push_back({owner, {reader}, t.sizes().vec(), t, graph_.layers[owner].name});
      }
    }
  }
  // Every worker loads the whole TorchScript module: a copy counts as held
  // only where its owner or one of its readers is built.
  for (SharedParameter& s : out) {
    bool held = built_[s.owner];
    for (int r : s.readers) held = held || built_[r];
    if (!held) s.tensor = torch::Tensor();
  }
  std::stable_sort(out.begin(), out.end(), [](const SharedParameter& a, const SharedParameter& b) { return a.owner < b.owner; });
  return out;
}

torch::Tensor GraphModel::tied_table(int head) const {
  const int e = graph_.index_of(graph_.layers.at(head).attrs.tie);
  if (e >= 0 && built_[e]) return holders_[e]->named_parameters()["weight"];
  return tied_tables_[head];
}

void GraphModel::to(const torch::Device& device) {
  torch::NoGradGuard no_grad;
  for (auto& h : holders_)
    if (h) h->to(device);  // in place: tied tables aliasing an embedding's weight follow
  for (auto& t : tied_tables_)
    if (t.defined() && t.device() != device) t.set_data(t.to(device));
  if (script_) script_->to(device);
  if (labels_.defined()) labels_ = labels_.to(device);
}

void GraphModel::set_training(bool on) {
  if (script_) script_->set_training(on);
  for (auto& h : holders_)
    if (h) h->train(on);
}

std::pair<torch::Tensor, torch::Tensor> synthetic_batch(const LayerGraph& graph, int64_t batch_size,
                                                        uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> shape{batch_size};
  shape.insert(shape.end(), graph.input_shape.begin(), graph.input_shape.end());
  torch::Tensor x = graph.input_kind == InputKind::tokens ? at::randint(graph.input_vocabulary, shape, gen, torch::kLong)
                                                          : at::randn(shape, gen);
  std::vector<int64_t> label_shape{batch_size};
  for (int64_t d : graph.label_shape()) label_shape.push_back(d);
  torch::Tensor y = at::randint(graph.num_classes, label_shape, gen, torch::kLong);
  return {x, y};
}

torch::Tensor training_loss(const torch::Tensor& logits, const torch::Tensor& labels, int64_t full_batch) {
  const auto sum = torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum);
  const int64_t per_sample = labels.numel() / std::max<int64_t>(1, labels.size(0));  // tokens or pixels with a label each
  // Per pixel: the classes are the channels (dim 1), as cross_entropy takes them.
  torch::Tensor summed = labels.dim() == 3 ? torch::nn::functional::cross_entropy(logits, labels, sum)
                                           : torch::nn::functional::cross_entropy(
                                                 logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}), sum);
  return summed / static_cast<double>(full_batch * per_sample);
}

}  // namespace tapp
