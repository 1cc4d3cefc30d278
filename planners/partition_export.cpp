#include "planners/partition_export.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "model/layer_graph.h"

namespace tapp {
namespace {

std::string device_names(const std::vector<int>& devices, const Cluster& c) {
  std::string s;
  for (int d : devices) s += (s.empty() ? "" : "+") + c.devices[d].name;
  return s;
}

std::string layer_range(const PipelineStage& s, const LayerGraph& g) {
  const std::string& first = g.layers[s.first_layer].name;
  return s.num_layers() == 1 ? first : first + ".." + g.layers[s.end_layer - 1].name;
}

std::string stage_label(int index, const PipelineStage& s, const LayerGraph& g, const Cluster& c) {
  return "stage " + std::to_string(index) + " (" + layer_range(s, g) + " on " + device_names(s.devices, c) +
         ")";
}

// What each format does with a stage that runs on several devices.
std::string replication_word(PartitionFormat f) {
  switch (f) {
    case PartitionFormat::pipe:
      return "Pipe has no replicas of a partition";
    case PartitionFormat::deepspeed:
      return "DeepSpeed replicates the whole pipeline (its data-parallel dimension)";
    case PartitionFormat::megatron:
      return "Megatron replicates the whole pipeline (--data-parallel size)";
    case PartitionFormat::pippy:
      return "torch.distributed.pipelining replicates the whole pipeline (DDP/FSDP over the other mesh "
             "dimension)";
  }
  return "";
}

// Formats that hand each stage only the previous stage's output (one activation).
bool passes_one_activation(PartitionFormat f) { return f != PartitionFormat::pippy; }

// Whether a layer of `st` reads a layer of stage `t`.
bool reads_stage(const PipelineStage& st, int t, const std::vector<int>& stage_of_layer,
                 const LayerGraph& g) {
  for (int j = st.first_layer; j < st.end_layer; ++j)
    for (int i : g.layers[j].inputs)
      if (stage_of_layer[i] == t) return true;
  return false;
}

// Every layer of stage s > 0 reads only layers of its own stage or the last
// layer of stage s - 1; the first stage alone reads the model input.
Status check_chain_between_stages(const std::vector<PipelineStage>& stages,
                                  const std::vector<int>& stage_of_layer, const LayerGraph& g,
                                  const Cluster& c, PartitionFormat f) {
  const std::string fmt = partition_format_name(f);
  for (size_t s = 1; s < stages.size(); ++s) {
    const PipelineStage& st = stages[s];
    const int prev = static_cast<int>(s) - 1;
    if (!reads_stage(st, prev, stage_of_layer, g))
      return Status::error(stage_label(static_cast<int>(s), st, g, c) + " does not read " +
                           stage_label(prev, stages[prev], g, c) +
                           ": the placement runs them side by side as parallel branches, which " + fmt +
                           " cannot (its stages form a chain)");
    for (int j = st.first_layer; j < st.end_layer; ++j) {
      const Layer& layer = g.layers[j];
      if (layer.inputs.empty())
        return Status::error("layer '" + layer.name + "' of " + stage_label(static_cast<int>(s), st, g, c) +
                             " reads the model input: " + fmt + " gives the input to the first stage only");
      for (int i : layer.inputs) {
        const int t = stage_of_layer[i];
        if (t == static_cast<int>(s) || (t == prev && i == stages[t].end_layer - 1)) continue;
        return Status::error(
            "layer '" + layer.name + "' of " + stage_label(static_cast<int>(s), st, g, c) + " reads '" +
            g.layers[i].name + "' of " + stage_label(t, stages[t], g, c) + ": " + fmt +
            " passes only the previous stage's last output to the next stage (a skip connection "
            "across the cut); cut where the model is a chain" +
            (f == PartitionFormat::pipe ? " or declare the skip with torch.distributed.pipeline.sync.skip"
                                        : ""));
      }
    }
  }
  return Status::ok();
}

// pipelining passes every value that crosses a split point, but runs its
// stages as a chain: stages the plan runs side by side will not overlap.
void add_parallel_branch_notes(PartitionExport& e, const std::vector<int>& stage_of_layer,
                               const LayerGraph& g, const Cluster& c) {
  for (size_t s = 1; s < e.stages.size(); ++s)
    if (!reads_stage(e.stages[s], static_cast<int>(s) - 1, stage_of_layer, g))
      e.notes.push_back(
          stage_label(static_cast<int>(s), e.stages[s], g, c) + " does not read stage " +
          std::to_string(s - 1) +
          ": the plan runs them side by side; torch.distributed.pipelining runs its stages one after "
          "the other, so they will not overlap as costed");
}

// A device that runs two stages: Pipe and pipelining accept it (notes), DeepSpeed and Megatron do not.
Status check_one_stage_per_device(const std::vector<PipelineStage>& stages, const LayerGraph& g,
                                  const Cluster& c, PartitionFormat f, std::vector<std::string>& notes) {
  std::map<int, int> first_stage;
  for (size_t s = 0; s < stages.size(); ++s)
    for (int d : stages[s].devices) {
      auto [it, fresh] = first_stage.emplace(d, static_cast<int>(s));
      if (fresh) continue;
      const std::string both = "device " + c.devices[d].name + " runs " +
                               stage_label(it->second, stages[it->second], g, c) + " and " +
                               stage_label(static_cast<int>(s), stages[s], g, c);
      switch (f) {
        case PartitionFormat::deepspeed:
        case PartitionFormat::megatron:
          return Status::error(
              both + ": " + partition_format_name(f) +
              " gives every pipeline stage its own rank (process and device)" +
              (f == PartitionFormat::megatron
                   ? std::string("; its virtual pipeline needs the same number of chunks on every rank, "
                                 "assigned round-robin")
                   : std::string()));
        case PartitionFormat::pipe:
          notes.push_back(both +
                          ": give Pipe both partitions on that device (they run one after the other there)");
          break;
        case PartitionFormat::pippy:
          notes.push_back(both +
                          ": build both PipelineStages on that rank and use a multi-stage schedule "
                          "(ScheduleInterleaved1F1B or ScheduleLoopedBFS)");
          break;
      }
    }
  return Status::ok();
}

// Replicas: none for Pipe; one count for the whole pipeline elsewhere; no
// parameter averaging every K steps anywhere.
Result<int> pipeline_replicas(const Placement& p, const std::vector<PipelineStage>& stages,
                              const LayerGraph& g, const Cluster& c, PartitionFormat f) {
  const int replicas = static_cast<int>(stages.front().devices.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    const int r = static_cast<int>(stages[s].devices.size());
    const std::string group = "group " + std::to_string(stages[s].groups.front());
    if (r > 1 && f == PartitionFormat::pipe)
      return Status::error(
          group + " of " + stage_label(static_cast<int>(s), stages[s], g, c) + " has " + std::to_string(r) +
          " replicas: " + replication_word(f) +
          " (replicating every stage alike is DistributedDataParallel around whole pipelines)");
    if (r != replicas)
      return Status::error(group + " of " + stage_label(static_cast<int>(s), stages[s], g, c) + " has " +
                           std::to_string(r) + " replica(s) but stage 0 has " + std::to_string(replicas) +
                           ": " + replication_word(f) +
                           ", not single stages (PipeDream-style per-stage replicas)");
  }
  if (replicas > 1 && p.aggregation_every > 1)
    return Status::error(
        "placement.aggregation_every: " + std::to_string(p.aggregation_every) + ": " +
        partition_format_name(f) +
        " all-reduces the replicas' gradients every step; parameter averaging every K steps is not "
        "one of its modes");
  return replicas;
}

// Branches inside a stage pass the checks between stages, but an
// nn.Sequential (or a LayerSpec list) of the graph's layers cannot run them:
// the user's module for that stage must, and then the counts are not its children's.
void add_inner_branch_note(PartitionExport& e, const LayerGraph& g) {
  for (size_t j = 1; j < g.layers.size(); ++j) {
    const Layer& layer = g.layers[j];
    if (layer.inputs == std::vector<int>{static_cast<int>(j) - 1}) continue;
    const std::string reads =
        layer.inputs.empty() ? "the model input" : "'" + g.layers[layer.inputs.front()].name + "'";
    e.notes.push_back("the model is not a chain (layer '" + layer.name + "' reads " + reads +
                      (layer.inputs.size() > 1 ? " and more" : "") +
                      "): the counts are of the layer graph's layers, so they are the children of your "
                      "nn.Sequential only if it lists these layers one by one; wrap each branchy block and "
                      "count blocks instead");
    return;
  }
}

void add_schedule_notes(PartitionExport& e) {
  const std::string plan = schedule_name(e.schedule);
  switch (e.format) {
    case PartitionFormat::pipe:
      if (e.schedule != Schedule::gpipe)
        e.notes.push_back(
            "Pipe runs GPipe's fill-drain schedule; the plan was costed with " + plan +
            ", so Pipe keeps every micro-batch's activations (more memory than the breakdown's peak)");
      break;
    case PartitionFormat::deepspeed:
    case PartitionFormat::megatron:
      if (e.schedule == Schedule::gpipe)
        e.notes.push_back(
            partition_format_name(e.format) +
            " runs 1F1B; the plan was costed with gpipe, so it holds fewer micro-batches' activations "
            "(less memory than the breakdown's peak)");
      break;
    case PartitionFormat::pippy:
      break;
  }
}

std::string pippy_schedule_class(Schedule s) {
  switch (s) {
    case Schedule::gpipe:
      return "ScheduleGPipe";
    case Schedule::one_f_one_b:
    case Schedule::timed_1f1b:  // PiPPy's 1F1B: its own order
      return "Schedule1F1B";
    case Schedule::interleaved_1f1b:
      return "ScheduleInterleaved1F1B";
    case Schedule::al:  // refused by pipeline_stages: no format runs AL
      return "";
  }
  return "ScheduleGPipe";
}

void add_settings(PartitionExport& e, const LayerGraph& g) {
  const int S = static_cast<int>(e.stages.size());
  const std::string m = std::to_string(e.micro_batches);
  const std::string mbs = e.micro_batch_size > 0 ? std::to_string(e.micro_batch_size) : "";
  switch (e.format) {
    case PartitionFormat::pipe:
      e.settings.push_back("chunks=" + m);
      e.settings.push_back(
          "torchgpipe: GPipe(model, balance=..., devices=..., chunks=" + m +
          "); torch's Pipe: move partition k's layers to its device, Pipe splits where the device "
          "changes");
      break;
    case PartitionFormat::deepspeed:
      e.settings.push_back("num_stages=" + std::to_string(S));
      e.settings.push_back("gradient_accumulation_steps=" + m);
      if (!mbs.empty()) e.settings.push_back("train_micro_batch_size_per_gpu=" + mbs);
      e.settings.push_back(
          "stock PipelineModule computes `parts` itself (partition_method uniform|parameters|type:REGEX); to "
          "impose "
          "these, override PipelineModule._partition_layers to set self.parts");
      break;
    case PartitionFormat::megatron: {
      e.settings.push_back("--pipeline-model-parallel-size " + std::to_string(S));
      if (!mbs.empty()) e.settings.push_back("--micro-batch-size " + mbs);
      const bool uniform =
          std::all_of(e.balance.begin(), e.balance.end(), [&](int n) { return n == e.balance[0]; });
      if (uniform) {
        e.settings.push_back("--num-layers " + std::to_string(g.layers.size()));
      } else if (S >= 3 && std::all_of(e.balance.begin() + 1, e.balance.end() - 1,
                                       [&](int n) { return n == e.balance[1]; })) {
        e.settings.push_back("--decoder-first-pipeline-num-layers " + std::to_string(e.balance.front()));
        e.settings.push_back("--decoder-last-pipeline-num-layers " + std::to_string(e.balance.back()));
      }
      std::string layout;
      for (int n : e.balance) layout += (layout.empty() ? "" : "|") + std::string("t*") + std::to_string(n);
      e.settings.push_back("--pipeline-model-parallel-layout \"" + layout + "\"");
      e.notes.push_back(
          "Megatron counts transformer layers: these counts are of the layer graph's layers, so they "
          "carry over only where one of them is one Megatron layer");
      break;
    }
    case PartitionFormat::pippy:
      e.settings.push_back("n_microbatches=" + m);
      e.settings.push_back(pippy_schedule_class(e.schedule));
      break;
  }
  if (e.data_parallel_degree > 1)
    e.notes.push_back(
        "each stage has " + std::to_string(e.data_parallel_degree) +
        " replicas: " + replication_word(e.format) +
        "; pipeline replica k is replica k of every stage (data-parallel "
        "degree " +
        std::to_string(e.data_parallel_degree) +
        "), which trains as the plan does: TAPP sends micro-batch m through replica m mod r of each "
        "stage and all-reduces each stage's gradients every step");
}

}  // namespace

std::string partition_format_name(PartitionFormat f) {
  switch (f) {
    case PartitionFormat::pipe:
      return "pipe";
    case PartitionFormat::deepspeed:
      return "deepspeed";
    case PartitionFormat::megatron:
      return "megatron";
    case PartitionFormat::pippy:
      return "pippy";
  }
  return "?";
}

Result<PartitionFormat> partition_format_from_name(const std::string& name) {
  for (PartitionFormat f : all_partition_formats())
    if (partition_format_name(f) == name) return f;
  return Status::field_error("format",
                             "unknown \"" + name + "\"; expected pipe, deepspeed, megatron or pippy");
}

const std::vector<PartitionFormat>& all_partition_formats() {
  static const std::vector<PartitionFormat> all{PartitionFormat::pipe, PartitionFormat::deepspeed,
                                                PartitionFormat::megatron, PartitionFormat::pippy};
  return all;
}

Result<std::vector<PipelineStage>> pipeline_stages(const Placement& p, const LayerGraph& g,
                                                   const Cluster& c) {
  if (p.is_data_parallel())
    return Status::error(
        "the placement is data parallel (" + data_parallel_mode_name(p.data_parallel) + " over " +
        std::to_string(p.num_groups()) + (p.num_groups() == 1 ? " device" : " devices") +
        "): every device trains the whole model, so there is no pipeline to partition "
        "(train it with DistributedDataParallel)");
  if (p.schedule == Schedule::al || g.is_al_form())
    return Status::field_error("placement.schedule", "an Associated Learning placement trains by local losses, which "
                                                     "none of the export formats runs");
  for (int grp = 0; grp < p.num_groups() && grp < static_cast<int>(p.group_replica_weights.size()); ++grp) {
    const auto& w = p.group_replica_weights[grp];
    if (p.replica_count(grp) > 1 && !w.empty() && std::any_of(w.begin(), w.end(), [&](int x) { return x != w[0]; }))
      return Status::field_error("placement.replica_weights." + std::to_string(grp),
                                 "its replicas take unequal shares of the micro-batches, which none of the export "
                                 "formats divides (each gives a stage's replicas equal shares)");
  }
  if (p.layer_group.size() != g.layers.size() || g.layers.empty())
    return Status::field_error("placement.layers", "has " + std::to_string(p.layer_group.size()) +
                                                       " layers, the model " +
                                                       std::to_string(g.layers.size()));
  std::vector<int> last_of_group(p.num_groups(), -1);
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const int grp = p.layer_group[i];
    if (grp < 0 || grp >= p.num_groups())
      return Status::field_error("placement.layers." + g.layers[i].name,
                                 "group " + std::to_string(grp) + " does not exist");
    last_of_group[grp] = static_cast<int>(i);
  }
  std::vector<PipelineStage> stages;
  std::vector<char> closed(p.num_groups(), 0);
  for (int i = 0; i < static_cast<int>(g.layers.size());) {
    const int grp = p.layer_group[i];
    if (closed[grp]) {
      // Find where the group was left: the layer of another group that came between.
      int gap = i - 1;
      while (gap > 0 && p.layer_group[gap] == grp) --gap;
      return Status::error("group " + std::to_string(grp) + " (on " +
                           device_names(p.devices_of_group(grp), c) + ") is not contiguous: it holds '" +
                           g.layers[i].name + "' after '" + g.layers[gap].name + "' of group " +
                           std::to_string(p.layer_group[gap]) +
                           "; pipeline partitions are consecutive layer ranges in the model's order");
    }
    int j = i;
    while (j < static_cast<int>(g.layers.size()) && p.layer_group[j] == grp) ++j;
    closed[grp] = 1;
    const std::vector<int> devices = p.devices_of_group(grp);
    if (!stages.empty() && stages.back().devices == devices) {  // consecutive groups on the same devices
      stages.back().end_layer = j;
      stages.back().groups.push_back(grp);
    } else {
      stages.push_back({i, j, {grp}, devices});
    }
    i = j;
  }
  return stages;
}

Result<PartitionExport> export_partition(const Placement& p, const LayerGraph& g, const Cluster& c,
                                         PartitionFormat format, int64_t batch_size) {
  auto stages = pipeline_stages(p, g, c);
  if (!stages) return stages.status();
  PartitionExport e;
  e.format = format;
  e.stages = std::move(*stages);
  e.schedule = p.schedule;
  e.micro_batches = std::max(1, p.micro_batches);
  std::vector<int> stage_of_layer(g.layers.size());
  for (size_t s = 0; s < e.stages.size(); ++s)
    for (int i = e.stages[s].first_layer; i < e.stages[s].end_layer; ++i)
      stage_of_layer[i] = static_cast<int>(s);
  if (passes_one_activation(format))
    if (Status s = check_chain_between_stages(e.stages, stage_of_layer, g, c, format); !s) return s;
  if (Status s = check_one_stage_per_device(e.stages, g, c, format, e.notes); !s) return s;
  auto replicas = pipeline_replicas(p, e.stages, g, c, format);
  if (!replicas) return replicas.status();
  e.data_parallel_degree = *replicas;
  if (batch_size > 0) {
    const int64_t per_replica = (batch_size + e.data_parallel_degree - 1) / e.data_parallel_degree;
    e.micro_batch_size = (per_replica + e.micro_batches - 1) / e.micro_batches;
    // DeepSpeed and Megatron train micro-batch size x micro-batches x replicas samples a step.
    const int64_t trained = e.micro_batch_size * e.micro_batches * e.data_parallel_degree;
    if (trained != batch_size && (format == PartitionFormat::deepspeed || format == PartitionFormat::megatron))
      e.notes.push_back("the batch of " + std::to_string(batch_size) + " does not split into " +
                        std::to_string(e.data_parallel_degree) + " replica(s) x " + std::to_string(e.micro_batches) +
                        " equal micro-batches, which " + partition_format_name(format) +
                        " needs: these settings train " + std::to_string(trained) +
                        " samples a step; a batch that is a multiple of " +
                        std::to_string(int64_t{e.data_parallel_degree} * e.micro_batches) + " trains the plan's");
  }
  for (const PipelineStage& s : e.stages) {
    e.balance.push_back(s.num_layers());
    e.parts.push_back(s.first_layer);
  }
  e.parts.push_back(static_cast<int>(g.layers.size()));
  for (size_t s = 1; s < e.stages.size(); ++s)
    e.split_points.push_back(g.layers[e.stages[s].first_layer].name);
  for (const PipelineStage& s : e.stages)
    if (s.groups.size() > 1) {
      std::string groups;
      for (int grp : s.groups) groups += (groups.empty() ? "" : ", ") + std::to_string(grp);
      e.notes.push_back("groups " + groups + " run back to back on " + device_names(s.devices, c) +
                        ": one stage");
    }
  if (format == PartitionFormat::pippy) add_parallel_branch_notes(e, stage_of_layer, g, c);
  if (passes_one_activation(format)) add_inner_branch_note(e, g);
  add_schedule_notes(e);
  add_settings(e, g);
  return e;
}

nlohmann::json partition_export_to_json(const PartitionExport& e, const LayerGraph& g, const Cluster& c) {
  nlohmann::json j;
  j["format"] = partition_format_name(e.format);
  j["stages"] = nlohmann::json::array();
  for (const PipelineStage& s : e.stages) {
    nlohmann::json layers = nlohmann::json::array(), devices = nlohmann::json::array();
    for (int i = s.first_layer; i < s.end_layer; ++i) layers.push_back(g.layers[i].name);
    for (int d : s.devices) devices.push_back(c.devices[d].name);
    j["stages"].push_back({{"layers", layers}, {"devices", devices}, {"groups", s.groups}});
  }
  switch (e.format) {
    case PartitionFormat::pipe: {
      j["balance"] = e.balance;
      nlohmann::json devices = nlohmann::json::array();
      for (const PipelineStage& s : e.stages) devices.push_back(c.devices[s.devices.front()].name);
      j["devices"] = devices;
      j["chunks"] = e.micro_batches;
      break;
    }
    case PartitionFormat::deepspeed:
      j["parts"] = e.parts;
      break;
    case PartitionFormat::megatron:
      j["layers_per_stage"] = e.balance;
      break;
    case PartitionFormat::pippy: {
      j["split_points"] = e.split_points;
      nlohmann::json spec = nlohmann::json::object();
      for (const std::string& name : e.split_points) spec[name] = "SplitPoint.BEGINNING";
      j["split_spec"] = spec;
      break;
    }
  }
  j["micro_batches"] = e.micro_batches;
  j["micro_batch_size"] = e.micro_batch_size > 0 ? nlohmann::json(e.micro_batch_size) : nlohmann::json();
  j["data_parallel_degree"] = e.data_parallel_degree;
  j["schedule"] = schedule_name(e.schedule);
  j["settings"] = e.settings;
  j["notes"] = e.notes;
  return j;
}

}  // namespace tapp
