// profiler/zoo.h — built-in models as layer graphs (no LibTorch).
//
// Owns the model zoo: alexnet, vgg16, resnet50, inception_v3 (torchvision's
// layer structure and parameter counts; inception without the aux head) and
// small models that train in seconds: alexnet_cifar, vgg5 (PipeLearn), mlp,
// and a small model with branches. `load_model` resolves a zoo name, a JSON
// layer-graph file or a TorchScript file to an inferred LayerGraph.
// Thread safety: stateless functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "profiler/layer_graph.h"

namespace tapp {

struct ModelOptions {
  int64_t input_size = 0;   // image side; 0 = the model's default (224, 299, 32 for CIFAR models)
  int64_t num_classes = 0;  // 0 = the model's default (1000, or 10 for CIFAR models)
};

std::vector<std::string> zoo_names();
// A zoo model with shapes inferred. Unknown names list the known ones.
Result<LayerGraph> zoo_model(const std::string& name, const ModelOptions& options = {});

// A zoo name, a path to a JSON layer graph (*.json) or a TorchScript file (*.pt).
Result<LayerGraph> load_model(const std::string& name_or_path, const ModelOptions& options = {});

}  // namespace tapp
