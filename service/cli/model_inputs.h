// service/cli/model_inputs.h — the model and cluster most subcommands start from.
//
// Owns `load_model_and_cluster`: MODEL (zoo name, JSON layer graph or
// TorchScript file, with --input-size / --classes / --torchscript) and the
// --devices file.
// Bad input is printed as one line, "tapp-cli COMMAND: <error naming the
// field>", and the caller exits 2.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "model/layer_graph.h"
#include "model/zoo.h"
#include "core/cluster.h"

namespace tapp::cli {

struct ModelAndCluster {
  LayerGraph graph;
  Cluster cluster;
};

// --torchscript auto|ops|layers: how a TorchScript MODEL becomes a layer graph
// (model/zoo.h ScriptImport); `name` keeps "auto" unless given.
void add_torchscript_option(CLI::App& sub, std::string& name);
// Sets options.torchscript from the --torchscript name; false (the error
// printed) when the name is not one of the three.
bool set_torchscript_import(const std::string& command, const std::string& name, ModelOptions& options);

std::optional<ModelAndCluster> load_model_and_cluster(const std::string& command, const std::string& model,
                                                      int64_t input_size, int64_t classes,
                                                      const std::string& torchscript,
                                                      const std::string& devices_path);

}  // namespace tapp::cli
