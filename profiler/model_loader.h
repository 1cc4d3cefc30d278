// profiler/model_loader.h — any model description a user may give, as a LayerGraph.
//
// Owns `load_model`: a zoo name or a JSON layer graph (model/zoo.h), or a
// TorchScript file (*.pt, *.pth) imported with LibTorch (torchscript_import.h).
// The one entry point for the CLI, the server and optimize(); it lives here,
// above model/, because only the profiler links LibTorch.
// Thread safety: stateless.
#pragma once

#include <string>

#include "common/status.h"
#include "model/layer_graph.h"
#include "model/zoo.h"

namespace tapp {

Result<LayerGraph> load_model(const std::string& name_or_path, const ModelOptions& options = {});

}  // namespace tapp
