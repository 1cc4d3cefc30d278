// profiler/torchscript_import.h — a TorchScript module (saved by PyTorch) as a LayerGraph.
//
// Owns `import_torchscript`: loads a module saved with torch.jit.script or
// torch.jit.trace, inlines its forward graph, and maps each submodule call
// (Conv2d, Linear, ReLU, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d,
// BatchNorm2d, Dropout, ...) and functional aten op (relu, flatten, add, cat,
// max_pool2d, ...) to a LayerGraph layer in execution order, with the edges
// between them; attributes come from the submodules' parameters and the
// constant arguments of the aten calls. Unsupported ops give an error naming
// the op. No LibTorch in this header; the implementation lives in
// tapp_profiler; profiler/model_loader.h routes *.pt files here.
// Data flow: .pt file -> torch::jit::Module -> inlined graph -> LayerGraph.
// Thread safety: stateless functions.
#pragma once

#include <string>

#include "common/status.h"
#include "model/layer_graph.h"
#include "model/zoo.h"

namespace tapp {

// The input shape is taken from the first layer (conv2d: {C, S, S} with
// S = options.input_size or 224; linear: {in_features}).
// options.torchscript picks the path: ops (below), layers
// (torchscript_layers.h: every op LibTorch runs, weights from the file), or
// automatic: ops first, since its layers are zoo ops the placer's features and
// the JSON format know one by one, and the generic layers when ops refuses the
// module (an op it does not map, a shape it cannot tell); an error then names
// both reasons.
Result<LayerGraph> import_torchscript(const std::string& path, const ModelOptions& options = {});

// The op-by-op mapping alone: unsupported ops give an error naming the op.
Result<LayerGraph> import_torchscript_ops(const std::string& path, const ModelOptions& options = {});

}  // namespace tapp
