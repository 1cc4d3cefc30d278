// model/model_json.h — the JSON layer-graph format (schemas/model.schema.json).
//
// Owns reading and writing a LayerGraph as JSON:
//   {"name": "...", "input_shape": [3, 32, 32],
//    "layers": [{"name": "conv1", "op": "conv2d", "inputs": [],
//                "attrs": {"out": 32, "kernel": 3, "padding": 1}}, ...]}
// A layer with no inputs reads the model input; `inputs` name earlier layers,
// so DAGs (branches + concat, residual add) are expressible. Reading checks
// every field and then infers shapes; errors name the field
// ("layers[3].attrs.kernel: expected ...") or the layer.
// Data flow: file/text -> nlohmann::json -> LayerGraph (shapes inferred).
// Thread safety: stateless functions.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/status.h"
#include "model/layer_graph.h"

namespace tapp {

// Parses and infers shapes.
Result<LayerGraph> model_from_json(const nlohmann::json& j);
Result<LayerGraph> parse_model_json(const std::string& text);
Result<LayerGraph> read_model_json_file(const std::string& path);

// The canonical document: every attribute the op uses, nothing else.
nlohmann::json model_to_json(const LayerGraph& graph);

// 16 hex digits identifying the graph's structure (name excluded): the
// profile cache key of a JSON or TorchScript model.
std::string graph_fingerprint(const LayerGraph& graph);

}  // namespace tapp
