#include "profiler/torch_model.h"

#include "profiler/torchscript_layers.h"

namespace tapp {
namespace nn = torch::nn;

namespace {

template <typename M>
std::pair<nn::AnyModule, std::shared_ptr<nn::Module>> wrap(M module) {
  return {nn::AnyModule(module), module.ptr()};
}

std::pair<nn::AnyModule, std::shared_ptr<nn::Module>> make_module(const Layer& l) {
  const LayerAttrs& a = l.attrs;
  const Shape& in = l.input_shapes.at(0);
  if (l.op == "conv2d")
    return wrap(nn::Conv2d(nn::Conv2dOptions(in[0], a.out, {a.kernel[0], a.kernel[1]})
                               .stride({a.stride[0], a.stride[1]})
                               .padding({a.padding[0], a.padding[1]})
                               .groups(a.groups)
                               .bias(a.bias)));
  if (l.op == "linear") return wrap(nn::Linear(nn::LinearOptions(in[0], a.out).bias(a.bias)));
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
  return {nn::AnyModule(), nullptr};  // flatten, concat, add, identity, relu6, softmax: tensor ops
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
  try {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < n; ++i) {
      if (!keep.empty() && !keep[i]) continue;
      if (graph.layers[i].op == "torchscript") {
        m->built_[i] = true;
        continue;
      }
      torch::manual_seed(seed * 1000003ULL + i);  // weights depend on (seed, layer) only
      auto [any, holder] = make_module(graph.layers[i]);
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
  if (l.op == "identity") return inputs.at(0);
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
  return all;
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
  torch::Tensor x = graph.input_vocab > 0 ? at::randint(graph.input_vocab, shape, gen, torch::kLong)
                                          : at::randn(shape, gen);
  std::vector<int64_t> label_shape{batch_size};
  const Shape& out = graph.layers.back().output_shape;
  if (out.size() == 2) label_shape.push_back(out[0]);  // one label per token
  torch::Tensor y = at::randint(graph.num_classes, label_shape, gen, torch::kLong);
  return {x, y};
}

torch::Tensor training_loss(const torch::Tensor& logits, const torch::Tensor& labels, int64_t full_batch) {
  const int64_t tokens = labels.dim() > 1 ? labels.numel() / std::max<int64_t>(1, labels.size(0)) : 1;
  return torch::nn::functional::cross_entropy(
             logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}),
             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
         static_cast<double>(full_batch * tokens);
}

}  // namespace tapp
