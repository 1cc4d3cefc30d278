// profiler/torch_model.h — runnable LibTorch modules for a LayerGraph.
//
// Owns `GraphModel`: one LibTorch module per layer (or a tensor op for
// flatten/concat/add), built from a LayerGraph whose shapes were inferred.
// Layer i's weights are initialised from (seed, i) alone, so a worker that
// builds only its own layers holds exactly the weights single-device training
// would: this is what makes pipelined training comparable to one process.
// `torchscript` layers instead run slices of a saved module, loaded by each
// process from its file (profiler/torchscript_layers.h): weights from the file.
// Used by the profiler (per-layer timing), the runtime (segments on workers)
// and the tests (equivalence with single-device training).
// Thread safety: a GraphModel is used by one thread at a time.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/status.h"
#include "model/layer_graph.h"

namespace tapp {

class ScriptProgram;

class GraphModel {
 public:
  // Builds the layers with keep[i] true (all layers when keep is empty).
  static Result<std::shared_ptr<GraphModel>> build(const LayerGraph& graph, uint64_t seed,
                                                   const std::vector<bool>& keep = {});

  // Runs layer i on the outputs of its inputs (in the order of Layer::inputs;
  // the model input for a layer with no inputs). Tensors carry the batch dim.
  torch::Tensor forward_layer(int i, const std::vector<torch::Tensor>& inputs);
  // Runs every layer; requires a model built with all layers.
  torch::Tensor forward(const torch::Tensor& input);

  std::vector<torch::Tensor> layer_parameters(int i) const;
  std::vector<torch::Tensor> parameters() const;  // of built layers, in layer order
  void set_training(bool on);
  bool has_layer(int i) const { return built_[i]; }
  const LayerGraph& graph() const { return graph_; }

 private:
  explicit GraphModel(const LayerGraph& graph) : graph_(graph) {}
  LayerGraph graph_;
  std::vector<bool> built_;
  std::vector<torch::nn::AnyModule> modules_;  // empty AnyModule for tensor ops
  std::vector<std::shared_ptr<torch::nn::Module>> holders_;
  std::shared_ptr<ScriptProgram> script_;  // the torchscript layers, when there are any
};

// A batch of synthetic training data, identical in every process for a seed:
// inputs {batch, input_shape...} (float, or int64 token ids in [0, input_vocab))
// and integer labels in [0, num_classes): {batch}, or {batch, tokens} when the
// last layer outputs per-token scores {tokens, vocabulary}.
std::pair<torch::Tensor, torch::Tensor> synthetic_batch(const LayerGraph& graph, int64_t batch_size,
                                                        uint64_t seed);

// Cross entropy summed over a micro-batch and divided by the full batch (and
// by the tokens per sample for per-token outputs): the gradients accumulated
// over the micro-batches equal those of the full batch's mean loss.
torch::Tensor training_loss(const torch::Tensor& logits, const torch::Tensor& labels, int64_t full_batch);

}  // namespace tapp
