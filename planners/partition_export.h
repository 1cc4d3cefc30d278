// planners/partition_export.h — a placement as the partition the user's training stack accepts.
//
// Owns `export_partition`: Placement (+ its LayerGraph and Cluster) -> the
// pipeline stages it describes (consecutive layer ranges in the graph's order,
// each on one device or one replica set) -> one format's partition:
//   pipe       PyTorch's Pipe / torchgpipe: `balance`, layers per partition,
//              and the device of each partition; `chunks` = micro-batches.
//   deepspeed  DeepSpeed PipelineModule's `parts`: the start layer of every
//              stage then the layer count (stage s holds parts[s] .. parts[s+1]-1).
//   megatron   layers per pipeline stage, with the flags that express them.
//   pippy      torch.distributed.pipelining: the layers a new stage begins at
//              (pipe_split() before them, split_spec {name: SplitPoint.BEGINNING}).
// A placement a format cannot express comes back as an error naming the group
// or layer and why: data parallel (no pipeline), a group whose layers are not
// consecutive, a stage that reads more than the previous stage's output
// (skip connections or parallel branches across a cut; Pipe, DeepSpeed and
// Megatron pass one activation from stage to stage), a device with two stages
// (DeepSpeed, Megatron: one rank per stage), replicas (Pipe has none; the
// others replicate the whole pipeline, so every stage needs the same replica
// count; parameter averaging every K steps is not theirs). What a format does
// differently from the plan as costed (its schedule, whole-pipeline replicas)
// is said in `notes`.
// No LibTorch: the counts are the layer graph's layers in its order, which is
// the user's nn.Sequential only when that holds the same layers as children.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/placement.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

enum class PartitionFormat { pipe, deepspeed, megatron, pippy };
std::string partition_format_name(PartitionFormat f);  // "pipe" | "deepspeed" | "megatron" | "pippy"
Result<PartitionFormat> partition_format_from_name(const std::string& name);
const std::vector<PartitionFormat>& all_partition_formats();

// Consecutive layers [first_layer, end_layer) that run on the same devices.
struct PipelineStage {
  int first_layer = 0, end_layer = 0;
  std::vector<int> groups;   // the placement's groups in it (consecutive groups on the same devices merge)
  std::vector<int> devices;  // Placement::devices_of_group: the device, then its further replicas
  int num_layers() const { return end_layer - first_layer; }
};

// The placement's stages in layer order, or why it has none: data parallel,
// or a group whose layers are not consecutive (the error names the group,
// its device and the layer of another group in between).
Result<std::vector<PipelineStage>> pipeline_stages(const Placement& p, const LayerGraph& g, const Cluster& c);

struct PartitionExport {
  PartitionFormat format = PartitionFormat::pipe;
  std::vector<PipelineStage> stages;
  std::vector<int> balance;               // pipe, megatron: layers per stage
  std::vector<int> parts;                 // deepspeed: stage start layers, then the layer count
  std::vector<std::string> split_points;  // pippy: the first layer of stages 1 .. S-1
  int micro_batches = 1;
  int64_t micro_batch_size = 0;         // ceil(batch / (replicas x micro-batches)); 0 when no batch given
  int data_parallel_degree = 1;         // replicas of the whole pipeline (1: none)
  Schedule schedule = Schedule::gpipe;  // the plan's
  std::vector<std::string>
      settings;                    // how to hand it over: "chunks=4", "--pipeline-model-parallel-size 3", ...
  std::vector<std::string> notes;  // where the format differs from the plan as costed
};

// batch_size: the training batch the plan was made for (only for the
// micro-batch size in `settings`; 0 leaves it out).
Result<PartitionExport> export_partition(const Placement& p, const LayerGraph& g, const Cluster& c,
                                         PartitionFormat format, int64_t batch_size = 0);

// {"format", "stages": [{"layers": [names], "devices": [names], "groups"}],
//  "balance" | "parts" | "layers_per_stage" | "split_points" + "split_spec",
//  "micro_batches", "micro_batch_size", "data_parallel_degree", "schedule", "settings", "notes"}.
nlohmann::json partition_export_to_json(const PartitionExport& e, const LayerGraph& g, const Cluster& c);

}  // namespace tapp
