// profiler/al_model.h — training a model in Associated Learning form with its local losses.
//
// Owns `AlModel`: the GraphModel of an AL form (model/al_form.h) read block
// by block. A block's forward takes s_{l-1} and t_{l-1} (the model input and
// the labels' one-hot for block 1), detached so that no gradient crosses
// blocks, and returns s_l, t_l and its local loss |b_l(s_l) - t_l|^2 +
// |h_l(t_l) - t_{l-1}|^2 (sums over features, divided by `full_batch`, so a
// batch's micro-batches add up to the batch's mean). The association term
// trains f_l and b_l towards t_l (t_l is held fixed there, or the target path
// collapses onto the bridge); the autoencoder term trains g_l and h_l. `train_step` runs every
// block of every micro-batch in order with an update per (block,
// micro-batch), as AL-FM does: the sequential order of what the `al`
// schedule runs on several devices at once. `predict` is AL's inference
// path: f_1..f_L, b_L, h_L..h_1, scores over the classes.
// Thread safety: one thread at a time.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/status.h"
#include "model/layer_graph.h"

namespace tapp {

class GraphModel;

struct AlBlockOutput {
  torch::Tensor s;     // s_l, the block's last original layer (not detached)
  torch::Tensor t;     // t_l, the target map's output (not detached)
  torch::Tensor loss;  // the local loss, a scalar with its graph
};

// The labels {B} as the one-hot t_0 {B, classes} (float).
torch::Tensor al_one_hot(const torch::Tensor& labels, int64_t classes);

// A block's local loss from its outputs: |bridge - target|^2 (target held
// fixed) + |decoder - target_input|^2 (target_input = t_{l-1}, fixed), sums
// over the features divided by `full_batch`. The runtime's workers and AlModel both use it.
torch::Tensor al_local_loss(const torch::Tensor& bridge, const torch::Tensor& target, const torch::Tensor& decoder,
                            const torch::Tensor& target_input, int64_t full_batch);

class AlModel {
 public:
  // `al_form` must be in AL form (LayerGraph::is_al_form); weights as
  // GraphModel::build gives them for the seed.
  static Result<std::shared_ptr<AlModel>> build(const LayerGraph& al_form, uint64_t seed);

  int blocks() const { return static_cast<int>(graph().al_blocks.size()); }
  const LayerGraph& graph() const;
  // Block b on s_{b-1} and t_{b-1} (x and al_one_hot(labels) for b = 0).
  AlBlockOutput forward_block(int b, const torch::Tensor& s_in, const torch::Tensor& t_in, int64_t full_batch);
  // The parameters block b's update changes: f_b, b_b, g_b, h_b.
  std::vector<torch::Tensor> block_parameters(int b) const;
  std::vector<torch::Tensor> layer_parameters(int layer) const;
  // One training step over `micro_batches` slices of (x, labels): per
  // micro-batch, block by block, forward, local backward, `update(b)`.
  // Returns the sum of the local losses (each block's mean over the batch).
  template <class Update>
  double train_step(const torch::Tensor& x, const torch::Tensor& labels, int micro_batches, Update update);
  // Scores {B, classes} by the inference path f_1..f_L, b_L, h_L..h_1.
  torch::Tensor predict(const torch::Tensor& x);
  void set_training(bool on);

 private:
  std::shared_ptr<GraphModel> model_;
};

template <class Update>
double AlModel::train_step(const torch::Tensor& x, const torch::Tensor& labels, int micro_batches, Update update) {
  const int64_t batch = x.size(0);
  double total = 0;
  auto xs = x.tensor_split(micro_batches);
  auto ys = al_one_hot(labels, graph().num_classes).tensor_split(micro_batches);
  for (int m = 0; m < micro_batches; ++m) {
    torch::Tensor s = xs[m], t = ys[m];
    for (int b = 0; b < blocks(); ++b) {
      AlBlockOutput out = forward_block(b, s, t, batch);
      out.loss.backward();
      update(b);
      total += out.loss.item<double>();
      s = out.s.detach();
      t = out.t.detach();
    }
  }
  return total;
}

}  // namespace tapp
