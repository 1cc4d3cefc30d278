// profiler/torchscript_layers.h — any TorchScript module as layers that run its own code.
//
// Owns the generic TorchScript path: where mapping aten ops one by one onto
// LayerGraph ops (torchscript_import.cpp) is the wrong depth, a module's
// forward graph is cut into layers that LibTorch's interpreter runs as they
// are, so every op LibTorch has runs.
//   import:  file -> forward graph, large composite submodule calls inlined
//            (those holding over 1/16 of the parameters) -> one layer per
//            submodule call, runs of other nodes grouped; cuts only where one
//            float tensor with a batch dim crosses (ints, lists, tuples and
//            in-place writes of a later-read value are merged away; reads of
//            the input's sizes past the batch are constants) -> shapes
//            from running the module once on an example batch; parameters
//            exact (each counted at the first layer that reads it);
//            multiply-adds of conv/linear/matmul nodes, 0 for other ops.
//   execute: ScriptProgram loads the file itself (path + content hash from
//            the layers' attrs), rebuilds the same cut (the same sizes folded,
//            from the graph's input_shape) and runs layer i as a
//            graph of the cloned nodes, inlined, in the interpreter, with the
//            module's parameters as trainable leaf tensors. Weights come from
//            the file, so every process holds the same model.
// The batch is dim 0 of every tensor crossing layers; the model input is one
// float tensor or int64 token ids (when the module embeds its input).
// Thread safety: a ScriptProgram is used by one thread at a time.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/layer_graph.h"
#include "model/zoo.h"

namespace tapp {

// options.input_size: image side (default 224) or sequence length (default 32:
// of tokens, or of vectors where the first op is a linear and one vector fails).
Result<LayerGraph> import_torchscript_layers(const std::string& path, const ModelOptions& options = {});

// The torchscript layers of one LayerGraph, loaded from their file.
class ScriptProgram {
 public:
  // Loads the file the graph's torchscript layers name (the same file for all
  // of them), checks its hash, and prepares the layers with keep[i] (all when
  // keep is empty). Errors name the file ("not on this host" for a remote
  // worker without it).
  static Result<std::shared_ptr<ScriptProgram>> load(const LayerGraph& graph, const std::vector<bool>& keep);
  ~ScriptProgram();

  // Inputs in the order of Layer::inputs (the model input for a layer with none).
  torch::Tensor forward(int layer, const std::vector<torch::Tensor>& inputs);
  std::vector<torch::Tensor> parameters(int layer) const;  // the ones this layer owns
  // The parameters this layer reads that an earlier layer owns (tied weights,
  // e.g. a head sharing the embedding's table): (owner layer, tensor). Every
  // worker loads the whole module, so the tensor exists on each.
  std::vector<std::pair<int, torch::Tensor>> borrowed(int layer) const;
  void set_training(bool on);
  // Moves the module's parameters and buffers in place (parameters() keeps its tensors).
  void to(const torch::Device& device);

 private:
  struct Impl;
  explicit ScriptProgram(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapp
