// model/zoo.h — built-in models as layer graphs (no LibTorch).
//
// Owns the model zoo: alexnet, vgg16, resnet50, inception_v3 (torchvision's
// layer structure and parameter counts; inception without the aux head) and
// small models that train in seconds: alexnet_cifar, vgg5 (PipeLearn), mlp,
// and a small model with branches. `load_layer_graph` resolves a zoo name or a JSON
// layer-graph file to an inferred LayerGraph (TorchScript files: profiler/model_loader.h).
// Thread safety: stateless functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/layer_graph.h"

namespace tapp {

// How a TorchScript file becomes a layer graph (profiler/torchscript_import.h):
// ops maps each aten op onto a LayerGraph op (fine layers, weights from the
// seed, few ops); layers runs the module's own code per layer (any op LibTorch
// runs, weights from the file); automatic tries ops and falls back to layers.
enum class ScriptImport { automatic, ops, layers };

struct ModelOptions {
  int64_t input_size = 0;   // image side (token models: sequence length); 0 = the model's default
  int64_t num_classes = 0;  // 0 = the model's default (1000, or 10 for CIFAR models)
  ScriptImport torchscript = ScriptImport::automatic;
};

std::vector<std::string> zoo_names();
// A zoo model with shapes inferred. Unknown names list the known ones.
Result<LayerGraph> zoo_model(const std::string& name, const ModelOptions& options = {});

// A zoo name or a path to a JSON layer graph (*.json); a *.pt path is refused
// here (it needs LibTorch: profiler/model_loader.h's load_model takes all three).
Result<LayerGraph> load_layer_graph(const std::string& name_or_path, const ModelOptions& options = {});
bool is_torchscript_path(const std::string& name_or_path);  // *.pt or *.pth

}  // namespace tapp
