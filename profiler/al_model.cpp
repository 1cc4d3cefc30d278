#include "profiler/al_model.h"

#include "profiler/torch_model.h"

namespace tapp {

torch::Tensor al_one_hot(const torch::Tensor& labels, int64_t classes) {
  return torch::one_hot(labels.to(torch::kLong), classes).to(torch::kFloat);
}

torch::Tensor al_local_loss(const torch::Tensor& bridge, const torch::Tensor& target, const torch::Tensor& decoder,
                            const torch::Tensor& target_input, int64_t full_batch) {
  const double n = static_cast<double>(full_batch);
  // The association term pulls b_l(s_l) towards t_l, not t_l towards b_l(s_l):
  // with gradient into g_l the target path collapses onto the bridge's outputs
  // (digits, 4 blocks: 6% test accuracy, below chance).
  torch::Tensor association = (bridge - target.detach()).pow(2).sum() / n;
  torch::Tensor autoencoder = (decoder - target_input.detach()).pow(2).sum() / n;
  return association + autoencoder;
}

Result<std::shared_ptr<AlModel>> AlModel::build(const LayerGraph& al_form, uint64_t seed) {
  if (!al_form.is_al_form()) return Status::field_error("model", "is not in AL form (make_al_form)");
  auto model = GraphModel::build(al_form, seed);
  if (!model) return model.status();
  std::shared_ptr<AlModel> m(new AlModel());
  m->model_ = *model;
  return m;
}

const LayerGraph& AlModel::graph() const { return model_->graph(); }

AlBlockOutput AlModel::forward_block(int b, const torch::Tensor& s_in, const torch::Tensor& t_in, int64_t full_batch) {
  const LayerGraph& g = graph();
  const AlBlock& blk = g.al_blocks[b];
  const torch::Tensor s0 = s_in.detach(), t0 = t_in.detach();
  std::vector<torch::Tensor> outs(blk.last - blk.first + 1);
  auto out_of = [&](int layer) -> const torch::Tensor& { return outs[layer - blk.first]; };
  for (int i = blk.first; i <= blk.last; ++i) {
    const Layer& l = g.layers[i];
    torch::Tensor y;
    if (l.op == "al_labels") {
      y = t0;
    } else {
      std::vector<torch::Tensor> ins;
      if (l.inputs.empty()) ins.push_back(s0);
      // An input from an earlier block is s_{b-1} or t_{b-1} (make_al_form's valid cuts).
      for (int p : l.inputs) ins.push_back(p >= blk.first ? out_of(p) : (p == blk.target_input ? t0 : s0));
      y = model_->forward_layer(i, ins);
    }
    outs[i - blk.first] = y;
  }
  const torch::Tensor& t_prev = blk.target_input >= blk.first ? out_of(blk.target_input) : t0;
  return {out_of(blk.output), out_of(blk.target),
          al_local_loss(out_of(blk.bridge), out_of(blk.target), out_of(blk.decoder), t_prev, full_batch)};
}

std::vector<torch::Tensor> AlModel::block_parameters(int b) const {
  const AlBlock& blk = graph().al_blocks[b];
  std::vector<torch::Tensor> out;
  for (int i = blk.first; i <= blk.last; ++i)
    for (auto& p : model_->layer_parameters(i)) out.push_back(p);
  return out;
}

std::vector<torch::Tensor> AlModel::layer_parameters(int layer) const { return model_->layer_parameters(layer); }

torch::Tensor AlModel::predict(const torch::Tensor& x) {
  const LayerGraph& g = graph();
  std::vector<torch::Tensor> outs(g.layers.size());
  // f_1..f_L: every original layer, in order.
  torch::Tensor s;
  for (size_t b = 0; b < g.al_blocks.size(); ++b) {
    const AlBlock& blk = g.al_blocks[b];
    for (int i = blk.first; i <= blk.output; ++i) {
      const Layer& l = g.layers[i];
      if (l.op == "al_labels") continue;
      std::vector<torch::Tensor> ins;
      if (l.inputs.empty()) ins.push_back(x);
      for (int p : l.inputs) ins.push_back(outs[p]);
      outs[i] = model_->forward_layer(i, ins);
    }
  }
  // b_L: the bridge's layers follow the last block's output and end at its sigmoid.
  const AlBlock& last = g.al_blocks.back();
  torch::Tensor t = outs[last.output];
  for (int i = last.output + 1; i <= last.bridge; ++i) t = model_->forward_layer(i, {t});
  // h_L..h_1: each decoder's linear and sigmoid on the estimate of t_l.
  for (auto it = g.al_blocks.rbegin(); it != g.al_blocks.rend(); ++it)
    t = model_->forward_layer(it->decoder, {model_->forward_layer(it->decoder_input, {t})});
  return t;
}

void AlModel::set_training(bool on) { model_->set_training(on); }

}  // namespace tapp
