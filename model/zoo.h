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

struct ModelOptions {
  int64_t input_size = 0;   // image side; 0 = the model's default (224, 299, 32 for CIFAR models)
  int64_t num_classes = 0;  // 0 = the model's default (1000, or 10 for CIFAR models)
};

std::vector<std::string> zoo_names();
// A zoo model with shapes inferred. Unknown names list the known ones.
Result<LayerGraph> zoo_model(const std::string& name, const ModelOptions& options = {});

// A zoo name or a path to a JSON layer graph (*.json); a *.pt path is refused
// here (it needs LibTorch: profiler/model_loader.h's load_model takes all three).
Result<LayerGraph> load_layer_graph(const std::string& name_or_path, const ModelOptions& options = {});
bool is_torchscript_path(const std::string& name_or_path);  // *.pt or *.pth

}  // namespace tapp
