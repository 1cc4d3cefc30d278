#include "service/cli/model_inputs.h"

#include <iostream>

#include "profiler/model_loader.h"

namespace tapp::cli {

void add_torchscript_option(CLI::App& sub, std::string& name) {
  sub.add_option("--torchscript", name,
                 "how a TorchScript model is imported: auto (ops, else layers; the default), ops (each aten op "
                 "a layer op, weights from the seed) or layers (slices of the module's own code, its weights)");
}

bool set_torchscript_import(const std::string& command, const std::string& name, ModelOptions& options) {
  auto named = script_import_from_name(name);
  if (!named) {
    std::cerr << "tapp-cli " << command << ": --torchscript: " << named.error_message() << "\n";
    return false;
  }
  options.torchscript = *named;
  return true;
}

std::optional<ModelAndCluster> load_model_and_cluster(const std::string& command, const std::string& model,
                                                      int64_t input_size, int64_t classes,
                                                      const std::string& torchscript,
                                                      const std::string& devices_path) {
  ModelOptions mo;
  mo.input_size = input_size;
  mo.num_classes = classes;
  if (!set_torchscript_import(command, torchscript, mo)) return std::nullopt;
  auto graph = load_model(model, mo);
  if (!graph) {
    std::cerr << "tapp-cli " << command << ": " << graph.error_message() << "\n";
    return std::nullopt;
  }
  auto cluster = load_cluster(devices_path);
  if (!cluster) {
    std::cerr << "tapp-cli " << command << ": " << cluster.error_message() << "\n";
    return std::nullopt;
  }
  return ModelAndCluster{std::move(*graph), std::move(*cluster)};
}

}  // namespace tapp::cli
