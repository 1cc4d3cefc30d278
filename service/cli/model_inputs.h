// service/cli/model_inputs.h — the model and cluster most subcommands start from.
//
// Owns `load_model_and_cluster`: MODEL (zoo name, JSON layer graph or
// TorchScript file, with --input-size / --classes) and the --devices file.
// Bad input is printed as one line, "tapp-cli COMMAND: <error naming the
// field>", and the caller exits 2.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/layer_graph.h"
#include "core/cluster.h"

namespace tapp::cli {

struct ModelAndCluster {
  LayerGraph graph;
  Cluster cluster;
};

std::optional<ModelAndCluster> load_model_and_cluster(const std::string& command, const std::string& model,
                                                      int64_t input_size, int64_t classes,
                                                      const std::string& devices_path);

}  // namespace tapp::cli
