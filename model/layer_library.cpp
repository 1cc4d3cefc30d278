#include "model/layer_library.h"


#include <nlohmann/json.hpp>

#include "common/checked_math.h"
#include "common/json_fields.h"
#include "common/read_file.h"

namespace tapp {
namespace jf = json_fields;
using nlohmann::json;

namespace {

// Memory-bound layers (pools, activations, concat) cost about their output
// traffic; 10 GB/s per thread is a conservative figure for a CPU core.
constexpr double kBytesPerSecondPerThread = 10e9;

Status read_shape(const json& j, const std::string& key, Shape& out, const std::string& path, bool required) {
  const std::string where = jf::join(path, key);
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return required ? Status::error(where + ": missing required field") : Status::ok();
  if (!it->is_array()) return Status::error(where + ": expected an array, got " + jf::type_name(*it));
  out.clear();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& d = (*it)[i];
    int64_t n = 0;
    if (!jf::integer_value(d, n))
      return Status::error(where + "[" + std::to_string(i) + "]: expected an integer, got " +
                           jf::type_name(d));
    out.push_back(n);
  }
  return Status::ok();
}

Result<LayerRow> row_from_json(const json& j, const std::string& path) {
  LayerRow r;
  if (Status s = jf::expect_object(j, path); !s) return s;
  Status s;
  if (!(s = jf::read(j, "name", r.name, path, true))) return s;
  if (!(s = jf::read(j, "op", r.op, path, true))) return s;
  if (!(s = jf::read(j, "op_class", r.op_class, path))) return s;
  if (r.op_class.empty()) r.op_class = op_class(r.op);
  auto ins = j.find("input_shapes");
  if (ins != j.end() && !ins->is_null()) {
    if (!ins->is_array())
      return Status::error(path + ".input_shapes: expected an array, got " + jf::type_name(*ins));
    for (size_t i = 0; i < ins->size(); ++i) {
      json wrapper = {{"s", (*ins)[i]}};
      Shape sh;
      if (!(s = read_shape(wrapper, "s", sh, "", true)))
        return Status::error(path + ".input_shapes[" + std::to_string(i) + "]" + s.message().substr(1));
      r.input_shapes.push_back(sh);
    }
  }
  if (!(s = read_shape(j, "output_shape", r.output_shape, path, true))) return s;
  if (!(s = jf::read(j, "params", r.params, path))) return s;
  // Without param_bytes, float32 weights: 4 bytes a parameter, where that count fits in int64.
  if (!checked_mul(r.params, 4, r.param_bytes) && !j.contains("param_bytes"))
    return Status::error(path + ".params: " + std::to_string(r.params) +
                         " parameters are more bytes than a 64-bit count holds");
  if (!(s = jf::read(j, "param_bytes", r.param_bytes, path))) return s;
  if (!(s = jf::read(j, "macs", r.macs, path))) return s;
  if (!(s = jf::read(j, "activation_bytes", r.activation_bytes, path))) return s;
  if (!(s = jf::read(j, "next_layers", r.next_layers, path))) return s;
  if (!(s = jf::read(j, "forward_ms", r.forward_ms, path))) return s;
  if (!(s = jf::read(j, "backward_ms", r.backward_ms, path))) return s;
  // The first negative count or time, named.
  const std::pair<const char*, nlohmann::json> counts[] = {
      {"params", r.params}, {"param_bytes", r.param_bytes}, {"macs", r.macs},
      {"activation_bytes", r.activation_bytes}, {"forward_ms", r.forward_ms}, {"backward_ms", r.backward_ms}};
  for (const auto& [field, value] : counts)
    if (value.get<double>() < 0) return Status::error(path + "." + field + ": must be non-negative, got " + value.dump());
  return r;
}

}  // namespace

double LayerLibrary::total_forward_ms() const {
  double t = 0;
  for (const auto& r : rows) t += r.forward_ms;
  return t;
}

double LayerLibrary::total_backward_ms() const {
  double t = 0;
  for (const auto& r : rows) t += r.backward_ms;
  return t;
}

LayerLibrary library_skeleton(const LayerGraph& graph) {
  LayerLibrary lib;
  lib.model = graph.name;
  lib.input_shape = graph.input_shape;
  const auto consumers = graph.consumers();
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const Layer& l = graph.layers[i];
    LayerRow r;
    r.name = l.name;
    r.op = l.op;
    r.op_class = op_class(l.op);
    r.input_shapes = l.input_shapes;
    r.output_shape = l.output_shape;
    r.params = l.params;
    r.param_bytes = l.param_bytes();
    r.macs = l.macs;
    r.activation_bytes = l.activation_bytes();
    for (int c : consumers[i]) r.next_layers.push_back(graph.layers[c].name);
    lib.rows.push_back(std::move(r));
  }
  return lib;
}

EstimatedMs estimated_layer_ms(int64_t macs, int64_t activation_bytes, int64_t samples, double gmacs_per_s,
                               int threads) {
  const double t = threads > 0 ? threads : 1;
  const double compute_s = static_cast<double>(macs) * samples / (gmacs_per_s * 1e9 * t);
  const double memory_s = static_cast<double>(activation_bytes) * samples / (kBytesPerSecondPerThread * t);
  return {(compute_s + memory_s) * 1e3, (2 * compute_s + memory_s) * 1e3};
}

LayerLibrary estimated_library(const LayerGraph& graph, int64_t batch_size, double gmacs_per_s, int threads) {
  LayerLibrary lib = library_skeleton(graph);
  lib.batch_size = batch_size;
  lib.threads = threads;
  lib.measured = false;
  for (auto& r : lib.rows) {
    const EstimatedMs ms = estimated_layer_ms(r.macs, r.activation_bytes, batch_size, gmacs_per_s, threads);
    r.forward_ms = ms.forward;
    r.backward_ms = ms.backward;
  }
  lib.whole_step_ms = lib.total_forward_ms() + lib.total_backward_ms();
  lib.sum_to_step_ratio = 1.0;
  return lib;
}

nlohmann::json library_to_json(const LayerLibrary& lib) {
  json rows = json::array();
  for (const auto& r : lib.rows) {
    rows.push_back({{"name", r.name},
                    {"op", r.op},
                    {"op_class", r.op_class},
                    {"input_shapes", r.input_shapes},
                    {"output_shape", r.output_shape},
                    {"params", r.params},
                    {"param_bytes", r.param_bytes},
                    {"macs", r.macs},
                    {"activation_bytes", r.activation_bytes},
                    {"next_layers", r.next_layers},
                    {"forward_ms", r.forward_ms},
                    {"backward_ms", r.backward_ms}});
  }
  nlohmann::json out = {{"model", lib.model},
          {"device_kind", lib.device_kind},
          {"threads", lib.threads},
          {"batch_size", lib.batch_size},
          {"input_shape", lib.input_shape},
          {"flops_unit", "multiply-adds per sample (conv2d and linear)"},
          {"measured", lib.measured},
          {"whole_step_ms", lib.whole_step_ms},
          {"sum_to_step_ratio", lib.sum_to_step_ratio},
          {"total_forward_ms", lib.total_forward_ms()},
          {"total_backward_ms", lib.total_backward_ms()},
          {"rows", rows}};
  if (!lib.device_name.empty()) {
    out["device_name"] = lib.device_name;
    out["device_memory_mb"] = lib.device_memory_mb;
  }
  return out;
}

Result<LayerLibrary> library_from_json(const nlohmann::json& j) {
  LayerLibrary lib;
  if (Status s = jf::expect_object(j, "library"); !s) return s;
  Status s;
  const std::string p = "library";
  if (!(s = jf::read(j, "model", lib.model, p, true))) return s;
  if (!(s = jf::read(j, "device_kind", lib.device_kind, p))) return s;
  if (!(s = jf::read(j, "device_name", lib.device_name, p))) return s;
  if (!(s = jf::read(j, "device_memory_mb", lib.device_memory_mb, p))) return s;
  if (lib.device_memory_mb < 0) return Status::error("library.device_memory_mb: must not be negative");
  if (!(s = jf::read(j, "threads", lib.threads, p))) return s;
  if (!(s = jf::read(j, "batch_size", lib.batch_size, p))) return s;
  if (!(s = read_shape(j, "input_shape", lib.input_shape, p, false))) return s;
  if (!(s = jf::read(j, "measured", lib.measured, p))) return s;
  if (!(s = jf::read(j, "whole_step_ms", lib.whole_step_ms, p))) return s;
  if (!(s = jf::read(j, "sum_to_step_ratio", lib.sum_to_step_ratio, p))) return s;
  if (lib.threads <= 0) return Status::error("library.threads: must be positive");
  if (lib.batch_size <= 0) return Status::error("library.batch_size: must be positive");
  auto rows = j.find("rows");
  if (rows == j.end() || rows->is_null()) return Status::error("library.rows: missing required field");
  if (!rows->is_array()) return Status::error("library.rows: expected an array, got " + jf::type_name(*rows));
  for (size_t i = 0; i < rows->size(); ++i) {
    auto r = row_from_json((*rows)[i], "library.rows[" + std::to_string(i) + "]");
    if (!r) return r.status();
    lib.rows.push_back(std::move(*r));
  }
  return lib;
}

std::vector<int64_t> profile_batch_sizes(int64_t batch) {
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < batch; b *= 2) sizes.push_back(b);
  sizes.push_back(batch);
  return sizes;
}

namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// One library of the file against the model; `at` is "" or "[k]" for an array.
Status check_library_for(const LayerLibrary& lib, const LayerGraph& g, const std::string& at) {
  auto bad = [&](const std::string& field, const std::string& what) { return Status::field_error(at + field, what); };
  if (lib.model != g.name)
    return bad("model", "\"" + lib.model + "\", the plan's model is \"" + g.name + "\"");
  if (!lib.input_shape.empty() && lib.input_shape != g.input_shape)
    return bad("input_shape", shape_text(lib.input_shape) + ", the model's input is " + shape_text(g.input_shape));
  if (lib.rows.size() != g.layers.size())
    return bad("rows", std::to_string(lib.rows.size()) + " layers, the model \"" + g.name + "\" has " +
                           std::to_string(g.layers.size()));
  for (size_t i = 0; i < lib.rows.size(); ++i) {
    const LayerRow& r = lib.rows[i];
    const Layer& l = g.layers[i];
    const std::string row = "rows[" + std::to_string(i) + "]";
    if (r.name != l.name) return bad(row + ".name", "\"" + r.name + "\", the model's layer " + std::to_string(i) + " is \"" + l.name + "\"");
    if (r.op != l.op) return bad(row + ".op", "\"" + r.op + "\", the model's layer \"" + l.name + "\" is \"" + l.op + "\"");
    if (r.params != l.params)
      return bad(row + ".params", std::to_string(r.params) + ", the model's layer \"" + l.name + "\" has " +
                                      std::to_string(l.params));
    if (!(r.forward_ms >= 0) || !(r.backward_ms >= 0))
      return bad(row + (r.forward_ms >= 0 ? ".backward_ms" : ".forward_ms"), "must be a time >= 0");
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<LayerLibrary>> load_library_file(const std::string& path, const LayerGraph& graph,
                                                    int64_t batch_size) {
  const std::string file = "layer library '" + path + "'";
  Result<std::string> text = read_file(path);
  if (!text) return text.status().with_context(file);
  const json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::error(file + ": not valid JSON");
  const bool many = j.is_array();
  if (many && j.empty()) return Status::error(file + ": an empty array (expected one layer library or several)");
  std::vector<LayerLibrary> out;
  for (size_t k = 0; k < (many ? j.size() : 1); ++k) {
    const std::string at = many ? "[" + std::to_string(k) + "]." : "";
    Result<LayerLibrary> lib = library_from_json(many ? j[k] : j);
    if (!lib) return Status::error(file + ": " + (many ? "[" + std::to_string(k) + "] " : "") + lib.error_message());
    if (Status s = check_library_for(*lib, graph, at); !s) return s.with_context(file);
    out.push_back(std::move(*lib));
  }
  bool has_batch = false;
  std::string sizes;
  for (const LayerLibrary& lib : out) {
    has_batch = has_batch || lib.batch_size == batch_size;
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(lib.batch_size);
  }
  if (!has_batch)
    return Status::field_error("batch_size", sizes + ", the plan's batch is " + std::to_string(batch_size) +
                                                 " (profile it at that batch: tapp-cli profile --batch " +
                                                 std::to_string(batch_size) + " --json)")
        .with_context(file);
  return out;
}

}  // namespace tapp
