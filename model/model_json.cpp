#include "model/model_json.h"

#include <map>
#include <set>

#include "common/fingerprint.h"
#include "common/json_fields.h"
#include "common/read_file.h"

namespace tapp {
namespace jf = json_fields;
using nlohmann::json;

namespace {

constexpr int64_t kMaxDimension = int64_t{1} << 31;

// The attributes each op accepts in JSON and which of them are required.
struct OpAttrs {
  std::set<std::string> allowed, required;
};

const std::map<std::string, OpAttrs>& op_attrs() {
  static const std::map<std::string, OpAttrs> m = {
      {"conv2d", {{"out", "kernel", "stride", "padding", "groups", "bias"}, {"out", "kernel"}}},
      {"linear", {{"out", "bias"}, {"out"}}},
      {"lstm", {{"out", "bias"}, {"out"}}},
      {"maxpool2d", {{"kernel", "stride", "padding", "ceil_mode"}, {"kernel"}}},
      {"avgpool2d", {{"kernel", "stride", "padding", "ceil_mode"}, {"kernel"}}},
      {"adaptive_avgpool2d", {{"output_size"}, {"output_size"}}},
      {"dropout", {{"p"}, {}}},
      {"batchnorm2d", {{"eps"}, {}}},
      {"concat", {{"dim"}, {}}},
      {"softmax", {{"dim"}, {}}},
      {"log_softmax", {{"dim"}, {}}},
      {"torchscript", {{"file", "hash", "expand", "nodes", "output_shape", "params", "macs", "entries"},
                       {"file", "hash", "nodes", "output_shape"}}},
      {"token_embedding", {{"entries", "out", "init_std"}, {"entries", "out"}}},
      {"position_embedding", {{"entries"}, {"entries"}}},
      {"token_type_embedding", {{"entries"}, {"entries"}}},
      {"select_token", {{"index"}, {}}},
      {"layer_norm", {{"eps"}, {}}},
      {"self_attention", {{"heads", "causal", "bias"}, {"heads"}}},
      {"lm_head", {{"tie"}, {"tie"}}},
  };
  return m;
}

std::string known_ops_list() {
  std::string s;
  for (const auto& op : known_ops())
    if (op != "al_labels") s += (s.empty() ? "" : ", ") + op;
  return s;
}

// An integer or a pair [h, w].
Status read_pair(const json& attrs, const std::string& key, int64_t out[2], const std::string& path) {
  auto it = attrs.find(key);
  if (it == attrs.end()) return Status::ok();
  const std::string where = path + "." + key;
  int64_t h = 0, w = 0;
  if (jf::integer_value(*it, h)) {
    out[0] = out[1] = h;
    return Status::ok();
  }
  if (it->is_array() && it->size() == 2 && jf::integer_value((*it)[0], h) && jf::integer_value((*it)[1], w)) {
    out[0] = h;
    out[1] = w;
    return Status::ok();
  }
  std::string got = it->is_array() ? "an array of " + std::to_string(it->size()) : jf::type_name(*it);
  return jf::field_error(where, "expected an integer or a pair of integers, got " + got);
}

// A list of positive integers (a shape) or of two node indices.
Status read_int_list(const json& attrs, const std::string& key, std::vector<int64_t>& out, const std::string& where) {
  const json& v = attrs.at(key);
  if (!v.is_array()) return jf::field_error(where + "." + key, "expected an array of integers, got " + jf::type_name(v));
  out.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t n = 0;
    if (!jf::integer_value(v[i], n) || n < 0 || n > kMaxDimension)
      return jf::field_error(where + "." + key + "[" + std::to_string(i) + "]",
                             "expected an integer in [0, 2^31], got " + v[i].dump());
    out.push_back(n);
  }
  return Status::ok();
}

// The torchscript op's slice of a saved module (layer_graph.h ScriptSlice).
Status read_script_attrs(const json& attrs, ScriptSlice& s, const std::string& where) {
  Status st;
  if (!(st = jf::read(attrs, "file", s.file, where, true))) return st;
  if (!(st = jf::read(attrs, "hash", s.hash, where, true))) return st;
  if (!(st = jf::read(attrs, "params", s.params, where))) return st;
  if (!(st = jf::read(attrs, "macs", s.macs, where))) return st;
  if (auto e = attrs.find("expand"); e != attrs.end()) {
    if (!e->is_array()) return jf::field_error(where + ".expand", "expected an array of module paths");
    for (size_t i = 0; i < e->size(); ++i) {
      if (!(*e)[i].is_string())
        return jf::field_error(where + ".expand[" + std::to_string(i) + "]", "expected a module path");
      s.expand.push_back((*e)[i].get<std::string>());
    }
  }
  std::vector<int64_t> nodes;
  if (!(st = read_int_list(attrs, "nodes", nodes, where))) return st;
  if (nodes.size() != 2 || nodes[0] >= nodes[1])
    return jf::field_error(where + ".nodes", "expected [begin, end) with begin < end");
  s.begin = nodes[0], s.end = nodes[1];
  if (!(st = read_int_list(attrs, "output_shape", s.output_shape, where))) return st;
  if (s.output_shape.empty()) return jf::field_error(where + ".output_shape", "must not be empty");
  return Status::ok();
}

Status read_attrs(const json& layer, Layer& l, const std::string& path) {
  auto it = layer.find("attrs");
  const std::string where = path + ".attrs";
  json attrs = json::object();
  if (it != layer.end() && !it->is_null()) {
    if (!it->is_object()) return jf::field_error(where, "expected an object, got " + jf::type_name(*it));
    attrs = *it;
  }
  auto spec = op_attrs().find(l.op);
  static const OpAttrs none;
  const OpAttrs& allowed = spec == op_attrs().end() ? none : spec->second;
  for (auto kv = attrs.begin(); kv != attrs.end(); ++kv)
    if (!allowed.allowed.count(kv.key()))
      return jf::field_error(where + "." + kv.key(), "not an attribute of " + l.op);
  for (const auto& r : allowed.required)
    if (!attrs.contains(r)) return jf::field_error(where + "." + r, "missing required field");

  if (l.op == "torchscript") {
    // entries: the slice reads token ids in [0, entries) (layer_graph.h infer_input_kind)
    if (Status s = jf::read(attrs, "entries", l.attrs.entries, where); !s) return s;
    if (attrs.contains("entries") && l.attrs.entries <= 0)
      return jf::field_error(where + ".entries", "must be positive (the token vocabulary)");
    return read_script_attrs(attrs, l.attrs.script, where);
  }
  LayerAttrs& a = l.attrs;
  Status s;
  if (!(s = jf::read(attrs, "out", a.out, where))) return s;
  if (!(s = read_pair(attrs, "kernel", a.kernel, where))) return s;
  if (l.op == "maxpool2d" || l.op == "avgpool2d") {  // PyTorch: stride defaults to the kernel
    a.stride[0] = a.kernel[0];
    a.stride[1] = a.kernel[1];
  }
  if (!(s = read_pair(attrs, "stride", a.stride, where))) return s;
  if (!(s = read_pair(attrs, "padding", a.padding, where))) return s;
  if (!(s = read_pair(attrs, "output_size", a.kernel, where))) return s;
  if (!(s = jf::read(attrs, "groups", a.groups, where))) return s;
  if (!(s = jf::read(attrs, "bias", a.bias, where))) return s;
  if (!(s = jf::read(attrs, "ceil_mode", a.ceil_mode, where))) return s;
  if (!(s = jf::read(attrs, "p", a.p, where))) return s;
  if (!(s = jf::read(attrs, "eps", a.eps, where))) return s;
  if (!(s = jf::read(attrs, "dim", a.dim, where))) return s;
  if (!(s = jf::read(attrs, "entries", a.entries, where))) return s;
  if (!(s = jf::read(attrs, "heads", a.heads, where))) return s;
  if (!(s = jf::read(attrs, "causal", a.causal, where))) return s;
  if (!(s = jf::read(attrs, "index", a.index, where))) return s;
  if (!(s = jf::read(attrs, "tie", a.tie, where))) return s;
  if (!(s = jf::read(attrs, "init_std", a.init_std, where))) return s;
  if (attrs.contains("init_std") && !(a.init_std > 0 && a.init_std <= 100))
    return jf::field_error(where + ".init_std", "must be in (0, 100]");
  for (const char* k : {"entries", "heads"})
    if (attrs.contains(k) && (std::string(k) == "entries" ? a.entries : a.heads) <= 0)
      return jf::field_error(where + "." + k, "must be positive");
  if (attrs.contains("index") && a.index < 0) return jf::field_error(where + ".index", "must be non-negative");
  if (attrs.contains("out") && a.out <= 0) return jf::field_error(where + ".out", "must be positive");
  if (attrs.contains("eps") && a.eps <= 0) return jf::field_error(where + ".eps", "must be positive");
  if (attrs.contains("p") && (a.p < 0 || a.p >= 1)) return jf::field_error(where + ".p", "must be in [0, 1)");
  for (const char* k : {"kernel", "stride", "output_size"})
    if (attrs.contains(k)) {
      const int64_t* v = std::string(k) == "stride" ? a.stride : a.kernel;
      if (v[0] <= 0 || v[1] <= 0) return jf::field_error(where + "." + k, "must be positive");
    }
  if (attrs.contains("padding") && (a.padding[0] < 0 || a.padding[1] < 0))
    return jf::field_error(where + ".padding", "must be non-negative");
  if (attrs.contains("groups") && a.groups <= 0) return jf::field_error(where + ".groups", "must be positive");
  // Sizes beyond 2^31 describe no trainable layer; bounding them keeps shape arithmetic exact.
  const std::pair<const char*, const int64_t*> sizes[] = {
      {"out", &a.out},         {"kernel", &a.kernel[0]},  {"kernel", &a.kernel[1]}, {"stride", &a.stride[0]},
      {"stride", &a.stride[1]}, {"padding", &a.padding[0]}, {"padding", &a.padding[1]}, {"groups", &a.groups},
      {"output_size", &a.kernel[0]}, {"output_size", &a.kernel[1]}, {"dim", &a.dim}, {"entries", &a.entries},
      {"heads", &a.heads}, {"index", &a.index}};
  for (const auto& [key, value] : sizes)
    if (attrs.contains(key) && (*value > kMaxDimension || *value < -kMaxDimension))
      return jf::field_error(where + "." + key, "must be at most " + std::to_string(kMaxDimension));
  return Status::ok();
}

Status read_layer(const json& j, size_t index, const std::map<std::string, size_t>& first_index, Layer& l) {
  const std::string path = "layers[" + std::to_string(index) + "]";
  Status s;
  if (!(s = jf::expect_object(j, path))) return s;
  if (!(s = jf::known_fields(j, path, {"name", "op", "inputs", "attrs"}))) return s;
  if (!(s = jf::read(j, "name", l.name, path, true))) return s;
  if (l.name.empty()) return jf::field_error(path + ".name", "must not be empty");
  if (!(s = jf::read(j, "op", l.op, path, true))) return s;
  if (!is_known_op(l.op) || l.op == "al_labels")  // al_labels: only the AL form writes it (model/al_form.h)
    return jf::field_error(path + ".op", "unknown op '" + l.op + "'; known ops are " + known_ops_list());
  auto ins = j.find("inputs");
  if (ins != j.end() && !ins->is_null()) {
    if (!ins->is_array())
      return jf::field_error(path + ".inputs", "expected an array of layer names, got " + jf::type_name(*ins));
    for (size_t k = 0; k < ins->size(); ++k) {
      const std::string where = path + ".inputs[" + std::to_string(k) + "]";
      const json& v = (*ins)[k];
      if (!v.is_string()) return jf::field_error(where, "expected a layer name, got " + jf::type_name(v));
      const std::string name = v.get<std::string>();
      auto found = first_index.find(name);
      if (found == first_index.end()) return jf::field_error(where, "unknown layer '" + name + "'");
      if (found->second >= index)
        return jf::field_error(where, "layer '" + name +
                             "' is not an earlier layer (layers are listed in execution order)");
      l.inputs.push_back(static_cast<int>(found->second));
    }
  }
  return read_attrs(j, l, path);
}

json pair_json(const int64_t v[2]) {
  if (v[0] == v[1]) return v[0];
  return json::array({v[0], v[1]});
}

}  // namespace

Result<LayerGraph> model_from_json(const json& j) {
  LayerGraph g;
  Status s;
  if (!(s = jf::expect_object(j, ""))) return s;
  if (!(s = jf::known_fields(j, "", {"name", "input_shape", "layers", "$schema", "description"}))) return s;
  if (!(s = jf::text_field(j, "description", ""))) return s;
  if (!(s = jf::read(j, "name", g.name, "", true))) return s;
  auto shape = j.find("input_shape");
  if (shape == j.end() || shape->is_null()) return jf::field_error("input_shape", "missing required field");
  if (!shape->is_array() || shape->empty())
    return jf::field_error("input_shape", "expected a non-empty array of positive integers");
  for (size_t i = 0; i < shape->size(); ++i) {
    const json& d = (*shape)[i];
    int64_t n = 0;
    if (!jf::integer_value(d, n) || n <= 0 || n > kMaxDimension)
      return jf::field_error("input_shape[" + std::to_string(i) + "]",
                             "expected a positive integer of at most " + std::to_string(kMaxDimension) + ", got " +
                           d.dump());
    g.input_shape.push_back(n);
  }
  auto layers = j.find("layers");
  if (layers == j.end() || layers->is_null()) return jf::field_error("layers", "missing required field");
  if (!layers->is_array()) return jf::field_error("layers", "expected an array, got " + jf::type_name(*layers));
  if (layers->empty()) return jf::field_error("layers", "must contain at least one layer");
  std::map<std::string, size_t> first_index;
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& lj = (*layers)[i];
    if (lj.is_object() && lj.contains("name") && lj["name"].is_string()) {
      auto inserted = first_index.emplace(lj["name"].get<std::string>(), i);
      if (!inserted.second)
        return jf::field_error("layers[" + std::to_string(i) + "].name", "'" + lj["name"].get<std::string>() +
                             "' is already the name of layers[" + std::to_string(inserted.first->second) +
                             "]");
    }
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    Layer l;
    if (!(s = read_layer((*layers)[i], i, first_index, l))) return s;
    g.layers.push_back(std::move(l));
  }
  if (!(s = infer_shapes(g))) return s;
  return g;
}

Result<LayerGraph> parse_model_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    return Status::error(std::string("malformed JSON: ") + e.what());
  }
  return model_from_json(j);
}

Result<LayerGraph> read_model_json_file(const std::string& path) {
  Result<std::string> text = read_file(path);
  if (!text) return text.status().with_context(path);
  auto g = parse_model_json(*text);
  if (!g) return g.status().with_context(path);
  return g;
}

json model_to_json(const LayerGraph& g) {
  json layers = json::array();
  for (const Layer& l : g.layers) {
    json inputs = json::array();
    for (int p : l.inputs) inputs.push_back(g.layers[p].name);
    const LayerAttrs& a = l.attrs;
    json attrs = json::object();
    if (l.op == "conv2d") {
      attrs = {{"out", a.out},
               {"kernel", pair_json(a.kernel)},
               {"stride", pair_json(a.stride)},
               {"padding", pair_json(a.padding)},
               {"groups", a.groups},
               {"bias", a.bias}};
    } else if (l.op == "linear" || l.op == "lstm") {
      attrs = {{"out", a.out}, {"bias", a.bias}};
    } else if (l.op == "maxpool2d" || l.op == "avgpool2d") {
      attrs = {{"kernel", pair_json(a.kernel)},
               {"stride", pair_json(a.stride)},
               {"padding", pair_json(a.padding)},
               {"ceil_mode", a.ceil_mode}};
    } else if (l.op == "adaptive_avgpool2d") {
      attrs = {{"output_size", pair_json(a.kernel)}};
    } else if (l.op == "dropout") {
      attrs = {{"p", a.p}};
    } else if (l.op == "batchnorm2d") {
      attrs = {{"eps", a.eps}};
    } else if (l.op == "concat" || l.op == "softmax" || l.op == "log_softmax") {
      attrs = {{"dim", a.dim}};
    } else if (l.op == "torchscript") {
      const ScriptSlice& sc = a.script;
      attrs = {{"file", sc.file},     {"hash", sc.hash},
               {"expand", sc.expand}, {"nodes", json::array({sc.begin, sc.end})},
               {"output_shape", sc.output_shape}, {"params", sc.params}, {"macs", sc.macs}};
      if (a.entries > 0) attrs["entries"] = a.entries;
    } else if (l.op == "token_embedding") {
      attrs = {{"entries", a.entries}, {"out", a.out}};
      if (a.init_std != LayerAttrs{}.init_std) attrs["init_std"] = a.init_std;
    } else if (l.op == "position_embedding" || l.op == "token_type_embedding") {
      attrs = {{"entries", a.entries}};
    } else if (l.op == "select_token") {
      attrs = {{"index", a.index}};
    } else if (l.op == "layer_norm") {
      attrs = {{"eps", a.eps}};
    } else if (l.op == "self_attention") {
      attrs = {{"heads", a.heads}, {"causal", a.causal}, {"bias", a.bias}};
    } else if (l.op == "lm_head") {
      attrs = {{"tie", a.tie}};
    }
    json lj = {{"name", l.name}, {"op", l.op}, {"inputs", inputs}};
    if (!attrs.empty()) lj["attrs"] = attrs;
    layers.push_back(lj);
  }
  json doc = {{"name", g.name}, {"input_shape", g.input_shape}, {"layers", layers}};
  return doc;
}

std::string graph_fingerprint(const LayerGraph& graph) {
  json j = model_to_json(graph);
  j.erase("name");
  return hex16(fnv1a64(j.dump()));
}

}  // namespace tapp
