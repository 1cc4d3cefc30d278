#include "service/cli/model_inputs.h"

#include <iostream>

#include "model/zoo.h"
#include "profiler/model_loader.h"

namespace tapp::cli {

std::optional<ModelAndCluster> load_model_and_cluster(const std::string& command, const std::string& model,
                                                      int64_t input_size, int64_t classes,
                                                      const std::string& devices_path) {
  ModelOptions mo;
  mo.input_size = input_size;
  mo.num_classes = classes;
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
