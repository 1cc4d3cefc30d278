#include "core/al_placement.h"

namespace tapp {
namespace {

// The AL form's placement: block b -> group b on `block_device[b]`.
Placement al_placement(const LayerGraph& al, const std::vector<int>& block_device, int micro_batches,
                       Optimizer optimizer) {
  Placement p;
  p.layer_group.resize(al.layers.size());
  for (size_t b = 0; b < al.al_blocks.size(); ++b)
    for (int i = al.al_blocks[b].first; i <= al.al_blocks[b].last; ++i) p.layer_group[i] = static_cast<int>(b);
  p.group_device = block_device;
  p.micro_batches = micro_batches;
  p.schedule = Schedule::al;
  p.optimizer = optimizer;
  p.source = "al";
  return p;
}

}  // namespace

Result<AlPlan> al_plan_from_pipeline(const LayerGraph& source, const Placement& pipeline, int64_t target_width) {
  if (pipeline.is_data_parallel())
    return Status::field_error("placement.data_parallel", "AL runs a pipeline of blocks, not replicas of the model");
  if (pipeline.has_replicated_groups())
    return Status::field_error("placement.groups", "AL runs each block on one device (no replicated groups)");
  if (pipeline.layer_group.size() != source.layers.size() || source.layers.empty())
    return Status::field_error("placement.layers", "has " + std::to_string(pipeline.layer_group.size()) +
                                                       " entries, the model has " + std::to_string(source.layers.size()));
  std::vector<int> cuts, block_device;
  std::vector<char> seen(pipeline.num_groups(), 0);
  for (size_t i = 0; i < source.layers.size(); ++i) {
    const int g = pipeline.layer_group[i];
    if (g < 0 || g >= pipeline.num_groups())
      return Status::field_error("placement.layers[" + std::to_string(i) + "]", "group " + std::to_string(g) + " does not exist");
    if (i > 0 && g == pipeline.layer_group[i - 1]) continue;
    if (seen[g])
      return Status::field_error("placement.layers[" + std::to_string(i) + "]",
                                 "group " + std::to_string(g) + " comes back after another group: an AL block is one run of "
                                 "consecutive layers");
    seen[g] = 1;
    if (i > 0) cuts.push_back(static_cast<int>(i));
    block_device.push_back(pipeline.group_device[g]);
  }
  auto al = make_al_form(source, cuts, target_width);
  if (!al) return al.status();
  AlPlan plan{std::move(*al), {}};
  plan.placement = al_placement(plan.graph, block_device, pipeline.micro_batches, pipeline.optimizer);
  return plan;
}

Result<AlPlan> al_plan_by_blocks(const LayerGraph& source, int blocks, int devices, int micro_batches,
                                 int64_t target_width) {
  if (devices < 1) return Status::field_error("cluster.devices", "no devices");
  auto cuts = balanced_al_cuts(source, blocks);
  if (!cuts) return cuts.status();
  auto al = make_al_form(source, *cuts, target_width);
  if (!al) return al.status();
  std::vector<int> block_device;
  for (int b = 0; b < blocks; ++b) block_device.push_back(b % devices);
  AlPlan plan{std::move(*al), {}};
  plan.placement = al_placement(plan.graph, block_device, micro_batches, Optimizer::sgd);
  return plan;
}

}  // namespace tapp
