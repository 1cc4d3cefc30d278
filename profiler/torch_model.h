// profiler/torch_model.h — runnable LibTorch modules for a LayerGraph.
//
// Owns `GraphModel`: one LibTorch module per layer (or a tensor op for
// flatten/concat/add), built from a LayerGraph whose shapes were inferred.
// Layer i's weights are initialised from (seed, i) alone, so a worker that
// builds only its own layers holds exactly the weights single-device training
// would: this is what makes pipelined training comparable to one process.
// `torchscript` layers instead run slices of a saved module, loaded by each
// process from its file (profiler/torchscript_layers.h): weights from the file.
// An lm_head reads its tied token_embedding's table: the same tensor when
// both layers are built here (one parameter, owned by the embedding), or a
// copy initialised from the embedding's seed when only the head is built here
// (a pipeline stage without the embedding; the runtime sums the two copies'
// gradients across workers so they stay equal, as Megatron-LM does).
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

// A parameter read by more than one layer, which may run on different
// workers: a tied lm_head's table (the token_embedding owns it), or a weight a
// TorchScript layer reads that an earlier layer owns. A worker that builds the
// owner or a reader holds a copy; the runtime sums the copies' gradients, so
// each takes the gradient single-device training would (the sum of all uses).
struct SharedParameter {
  int owner = -1;
  std::vector<int> readers;   // ascending
  std::vector<int64_t> shape;
  torch::Tensor tensor;       // the copy held here; undefined where no owner or reader is built
  std::string name;           // the owner's name, for the timeline
};

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

  // Layer i's own parameters (none for an lm_head: its table is the embedding's).
  std::vector<torch::Tensor> layer_parameters(int i) const;
  // What the optimizer updates: the built layers' parameters in layer order,
  // then the copies of shared parameters whose owner is not built here.
  std::vector<torch::Tensor> parameters() const;
  // Every shared parameter of the graph, in owner order (the same list on
  // every worker: the runtime's collectives follow it).
  std::vector<SharedParameter> shared_parameters() const;
  // The table lm_head layer `head` reads, as held here: the embedding's own
  // parameter, this model's copy, or undefined when neither layer is built here.
  torch::Tensor tied_table(int head) const;
  void set_training(bool on);
  // Moves every parameter, tied copy and buffer built here to `device` in
  // place (the tensors returned by parameters() stay the same objects).
  void to(const torch::Device& device);
  // The labels an al_labels layer (a model in AL form) turns into its one-hot
  // output; without them it outputs zeros of that shape (what the profiler times).
  void set_labels(const torch::Tensor& labels) { labels_ = labels; }
  bool has_layer(int i) const { return built_[i]; }
  const LayerGraph& graph() const { return graph_; }

 private:
  explicit GraphModel(const LayerGraph& graph) : graph_(graph) {}
  LayerGraph graph_;
  std::vector<bool> built_;
  std::vector<torch::nn::AnyModule> modules_;  // empty AnyModule for tensor ops
  std::vector<std::shared_ptr<torch::nn::Module>> holders_;
  std::vector<torch::Tensor> tied_tables_;  // per layer: the table an lm_head reads
  std::shared_ptr<ScriptProgram> script_;   // the torchscript layers, when there are any
  torch::Tensor labels_;                    // for al_labels
};

// A batch of synthetic training data, identical in every process for a seed:
// inputs {batch, input_shape...} (float, or int64 ids in [0, input_vocabulary)
// for a token model) and integer labels in [0, num_classes): {batch, label_shape...}:
// {batch}, {batch, T} (one per token) or {batch, H, W} (one per pixel).
std::pair<torch::Tensor, torch::Tensor> synthetic_batch(const LayerGraph& graph, int64_t batch_size,
                                                        uint64_t seed);

// Cross-entropy of logits {B, C} with labels {B}, of {B, T, V} with {B, T}, or
// of {B, C, H, W} with {B, H, W}, summed over the samples (and tokens or
// pixels) and divided by the full batch's samples (times T, or H x W): the
// gradients of a batch's micro-batches add up to the gradient of the full
// batch's mean loss (PyTorch's CrossEntropyLoss).
torch::Tensor training_loss(const torch::Tensor& logits, const torch::Tensor& labels, int64_t full_batch);

}  // namespace tapp
