#include "profiler/model_loader.h"

#include "profiler/torchscript_import.h"

namespace tapp {

Result<LayerGraph> load_model(const std::string& name_or_path, const ModelOptions& options) {
  if (is_torchscript_path(name_or_path)) return import_torchscript(name_or_path, options);
  return load_layer_graph(name_or_path, options);
}

}  // namespace tapp
