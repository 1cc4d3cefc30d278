#include "profiler/torchscript_import.h"

#include "profiler/torchscript_file.h"
#include "profiler/torchscript_layers.h"

#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace tapp {
namespace jit = torch::jit;

namespace {

// Layers being built plus which graph values carry activations (layer index,
// or -1 for the model input) and lists of activations (for aten::cat).
struct Walk {
  LayerGraph graph;
  std::map<const jit::Value*, int> act;
  std::map<const jit::Value*, std::vector<int>> act_list;
  std::map<std::string, int> name_count;
  // Weight shapes recorded per layer for the consistency check after inference.
  std::map<int, std::vector<int64_t>> weight_shape;
};

std::string op_name(const jit::Node* n) { return n->kind().toQualString(); }

std::optional<c10::IValue> const_value(const jit::Value* v) { return jit::toIValue(v); }

Result<std::vector<int64_t>> int_list(const jit::Node* n, size_t i) {
  const jit::Value* v = n->input(i);
  if (auto iv = const_value(v)) {
    if (iv->isIntList()) return iv->toIntVector();
    if (iv->isInt()) return std::vector<int64_t>{iv->toInt()};
  }
  if (v->node()->kind() == c10::prim::ListConstruct) {
    std::vector<int64_t> out;
    for (const jit::Value* e : v->node()->inputs()) {
      auto iv = const_value(e);
      if (!iv || !iv->isInt())
        return Status::error(op_name(n) + ": argument " + std::to_string(i) + " is not a constant");
      out.push_back(iv->toInt());
    }
    return out;
  }
  return Status::error(op_name(n) + ": argument " + std::to_string(i) +
                       " is not a constant list of integers");
}

Result<int64_t> int_arg(const jit::Node* n, size_t i) {
  auto iv = const_value(n->input(i));
  if (!iv || !iv->isInt())
    return Status::error(op_name(n) + ": argument " + std::to_string(i) + " is not a constant integer");
  return iv->toInt();
}

Result<double> double_arg(const jit::Node* n, size_t i) {
  auto iv = const_value(n->input(i));
  if (!iv || !(iv->isDouble() || iv->isInt()))
    return Status::error(op_name(n) + ": argument " + std::to_string(i) + " is not a constant number");
  return iv->isDouble() ? iv->toDouble() : static_cast<double>(iv->toInt());
}

Result<bool> bool_arg(const jit::Node* n, size_t i) {
  auto iv = const_value(n->input(i));
  if (!iv || !iv->isBool())
    return Status::error(op_name(n) + ": argument " + std::to_string(i) + " is not a constant bool");
  return iv->toBool();
}

bool is_none(const jit::Value* v) { return v->type()->kind() == c10::TypeKind::NoneType || v->mustBeNone(); }

Result<std::vector<int64_t>> tensor_shape(const jit::Node* n, size_t i) {
  auto iv = const_value(n->input(i));
  if (!iv || !iv->isTensor())
    return Status::error(op_name(n) + ": argument " + std::to_string(i) +
                         " is not a parameter of the module");
  return iv->toTensor().sizes().vec();
}

// A pair attribute from an int list of 1 or 2 entries; empty -> fallback.
Status set_pair(int64_t out[2], const std::vector<int64_t>& v, const int64_t fallback[2],
                const std::string& what) {
  if (v.empty()) {
    out[0] = fallback[0], out[1] = fallback[1];
  } else if (v.size() == 1) {
    out[0] = out[1] = v[0];
  } else if (v.size() == 2) {
    out[0] = v[0], out[1] = v[1];
  } else {
    return Status::error(what + " must have one or two entries");
  }
  return Status::ok();
}

// "self.features.0.weight" -> "features.0"; otherwise "<op>_<index>".
std::string layer_name(Walk& w, const jit::Node* n, const std::string& op) {
  std::string base;
  if (n->inputs().size() > 1) {
    std::string dbg = n->input(1)->debugName();
    const std::string suffix = ".weight";
    if (dbg.rfind("self.", 0) == 0 && dbg.size() > suffix.size() &&
        dbg.compare(dbg.size() - suffix.size(), suffix.size(), suffix) == 0)
      base = dbg.substr(5, dbg.size() - 5 - suffix.size());
  }
  if (base.empty()) base = op + "_" + std::to_string(w.graph.layers.size());
  int k = w.name_count[base]++;
  return k == 0 ? base : base + "_" + std::to_string(k + 1);
}

Status fail(const jit::Node* n, const std::string& why) {
  return Status::error("TorchScript op '" + op_name(n) + "': " + why);
}

bool uses_activation(const Walk& w, const jit::Node* n) {
  for (const jit::Value* v : n->inputs())
    if (w.act.count(v) || w.act_list.count(v)) return true;
  for (const jit::Block* b : n->blocks())
    for (const jit::Node* inner : b->nodes())
      if (uses_activation(w, inner)) return true;
  return false;
}

// Maps one node that reads activations to a layer (or passes it through).
Status map_node(Walk& w, const jit::Node* n) {
  const std::string op = op_name(n);
  auto src = [&](size_t i) -> Result<int> {
    auto it = w.act.find(n->input(i));
    if (it == w.act.end())
      return fail(
          n, "argument " + std::to_string(i) + " is not an activation (constant operands are not supported)");
    return it->second;
  };
  Layer l;
  std::vector<int> inputs;
  auto one_input = [&]() -> Status {
    auto s = src(0);
    if (!s) return s.status();
    inputs = {*s};
    return Status::ok();
  };

  if (!n->blocks().empty()) return fail(n, "control flow on activations is not supported");
  if (op == "prim::ListConstruct") {
    std::vector<int> items;
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      auto s = src(i);
      if (!s) return s.status();
      items.push_back(*s);
    }
    w.act_list[n->output()] = items;
    return Status::ok();
  }
  // Ops that produce no tensor from an activation (aten::size, aten::dim, ...) are shape queries.
  bool tensor_out = false;
  for (const jit::Value* o : n->outputs())
    if (o->type()->kind() == c10::TypeKind::TensorType) tensor_out = true;
  if (!tensor_out) return Status::ok();
  if (n->outputs().size() != 1) return fail(n, "ops with several outputs are not supported");

  if (op == "aten::contiguous" || op == "aten::clone" || op == "aten::detach") {
    auto s = src(0);
    if (!s) return s.status();
    w.act[n->output()] = *s;
    return Status::ok();
  }
  Status st;
  if (op == "aten::conv2d" || op == "aten::_convolution") {
    if (!(st = one_input())) return st;
    l.op = "conv2d";
    auto wshape = tensor_shape(n, 1);
    if (!wshape) return wshape.status();
    if (wshape->size() != 4) return fail(n, "expected a 4-d weight");
    l.attrs.out = (*wshape)[0];
    l.attrs.kernel[0] = (*wshape)[2], l.attrs.kernel[1] = (*wshape)[3];
    l.attrs.bias = !is_none(n->input(2));
    const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    auto stride = int_list(n, 3);
    if (!stride) return stride.status();
    if (!(st = set_pair(l.attrs.stride, *stride, one, op + " stride"))) return st;
    auto padding = int_list(n, 4);
    if (!padding)
      return fail(n, "padding must be a constant list of integers (string padding is not supported)");
    if (!(st = set_pair(l.attrs.padding, *padding, zero, op + " padding"))) return st;
    auto dilation = int_list(n, 5);
    if (!dilation) return dilation.status();
    for (int64_t d : *dilation)
      if (d != 1) return fail(n, "dilation other than 1 is not supported");
    size_t groups_at = 6;
    if (op == "aten::_convolution") {
      auto transposed = bool_arg(n, 6);
      if (!transposed) return transposed.status();
      if (*transposed) return fail(n, "transposed convolution is not supported");
      groups_at = 8;
    }
    auto groups = int_arg(n, groups_at);
    if (!groups) return groups.status();
    l.attrs.groups = *groups;
    w.weight_shape[static_cast<int>(w.graph.layers.size())] = *wshape;
  } else if (op == "aten::linear") {
    if (!(st = one_input())) return st;
    l.op = "linear";
    auto wshape = tensor_shape(n, 1);
    if (!wshape) return wshape.status();
    if (wshape->size() != 2) return fail(n, "expected a 2-d weight");
    l.attrs.out = (*wshape)[0];
    l.attrs.bias = !is_none(n->input(2));
    w.weight_shape[static_cast<int>(w.graph.layers.size())] = *wshape;
  } else if (op == "aten::batch_norm") {
    if (!(st = one_input())) return st;
    l.op = "batchnorm2d";
    auto eps = double_arg(n, 7);
    if (!eps) return eps.status();
    l.attrs.eps = *eps;
    if (!is_none(n->input(1))) {
      auto wshape = tensor_shape(n, 1);
      if (!wshape) return wshape.status();
      w.weight_shape[static_cast<int>(w.graph.layers.size())] = *wshape;
    }
  } else if (op == "aten::relu" || op == "aten::relu_") {
    if (!(st = one_input())) return st;
    l.op = "relu";
  } else if (op == "aten::relu6" || op == "aten::relu6_") {
    if (!(st = one_input())) return st;
    l.op = "relu6";
  } else if (op == "aten::hardtanh" || op == "aten::hardtanh_") {
    if (!(st = one_input())) return st;
    auto lo = double_arg(n, 1), hi = double_arg(n, 2);
    if (!lo || !hi || *lo != 0.0 || *hi != 6.0) return fail(n, "only hardtanh(0, 6) (ReLU6) is supported");
    l.op = "relu6";
  } else if (op == "aten::softmax" || op == "aten::log_softmax") {
    if (!(st = one_input())) return st;
    auto dim = int_arg(n, 1);
    if (!dim) return dim.status();
    l.op = op == "aten::softmax" ? "softmax" : "log_softmax";
    l.attrs.dim = *dim;  // negative dims are resolved once the input rank is known
  } else if (op == "aten::sigmoid" || op == "aten::sigmoid_") {
    if (!(st = one_input())) return st;
    l.op = "sigmoid";
  } else if (op == "aten::tanh" || op == "aten::tanh_") {
    if (!(st = one_input())) return st;
    l.op = "tanh";
  } else if (op == "aten::max_pool2d" || op == "aten::avg_pool2d") {
    if (!(st = one_input())) return st;
    l.op = op == "aten::max_pool2d" ? "maxpool2d" : "avgpool2d";
    const int64_t zero[2] = {0, 0};
    auto k = int_list(n, 1), s = int_list(n, 2), p = int_list(n, 3);
    if (!k) return k.status();
    if (!s) return s.status();
    if (!p) return p.status();
    if (!(st = set_pair(l.attrs.kernel, *k, zero, op + " kernel"))) return st;
    if (!(st = set_pair(l.attrs.stride, *s, l.attrs.kernel, op + " stride"))) return st;
    if (!(st = set_pair(l.attrs.padding, *p, zero, op + " padding"))) return st;
    size_t ceil_at = 4;
    if (op == "aten::max_pool2d") {
      auto d = int_list(n, 4);
      if (!d) return d.status();
      for (int64_t v : *d)
        if (v != 1) return fail(n, "dilation other than 1 is not supported");
      ceil_at = 5;
    }
    auto ceil = bool_arg(n, ceil_at);
    if (!ceil) return ceil.status();
    l.attrs.ceil_mode = *ceil;
  } else if (op == "aten::adaptive_avg_pool2d") {
    if (!(st = one_input())) return st;
    l.op = "adaptive_avgpool2d";
    auto size = int_list(n, 1);
    if (!size) return size.status();
    const int64_t one[2] = {1, 1};
    if (!(st = set_pair(l.attrs.kernel, *size, one, op + " output size"))) return st;
  } else if (op == "aten::flatten") {
    if (!(st = one_input())) return st;
    auto start = int_arg(n, 1), end = int_arg(n, 2);
    if (!start) return start.status();
    if (!end) return end.status();
    if (*start != 1 || *end != -1) return fail(n, "only flatten(x, 1, -1) (keeping the batch) is supported");
    l.op = "flatten";
  } else if (op == "aten::view" || op == "aten::reshape") {
    if (!(st = one_input())) return st;
    const jit::Node* list = n->input(1)->node();
    bool flat = false;
    if (auto iv = const_value(n->input(1)); iv && iv->isIntList()) {
      auto v = iv->toIntVector();
      flat = v.size() == 2 && v[1] == -1;
    } else if (list->kind() == c10::prim::ListConstruct && list->inputs().size() == 2) {
      auto last = const_value(list->input(1));
      flat = last && last->isInt() && last->toInt() == -1;
    }
    if (!flat) return fail(n, "only view/reshape to (batch, -1) is supported");
    l.op = "flatten";
  } else if (op == "aten::dropout" || op == "aten::dropout_" || op == "aten::feature_dropout" ||
             op == "aten::feature_dropout_") {
    if (!(st = one_input())) return st;
    l.op = "dropout";
    auto p = double_arg(n, 1);
    if (!p) return p.status();
    l.attrs.p = *p;
  } else if (op == "aten::add" || op == "aten::add_") {
    auto a = src(0), b = src(1);
    if (!a) return a.status();
    if (!b) return b.status();
    if (n->inputs().size() > 2) {
      auto alpha = double_arg(n, 2);
      if (!alpha || *alpha != 1.0) return fail(n, "only alpha = 1 is supported");
    }
    l.op = "add";
    inputs = {*a, *b};
  } else if (op == "aten::cat") {
    auto it = w.act_list.find(n->input(0));
    if (it == w.act_list.end()) return fail(n, "the tensor list is not built from activations");
    auto dim = int_arg(n, 1);
    if (!dim) return dim.status();
    if (*dim == 0) return fail(n, "concatenation along the batch dim is not supported");
    l.op = "concat";
    l.attrs.dim = *dim;
    inputs = it->second;
  } else {
    return fail(n,
                "not supported (supported: conv2d, linear, batch_norm, relu, relu6, sigmoid, tanh, softmax, "
                "log_softmax, max_pool2d, "
                "avg_pool2d, adaptive_avg_pool2d, flatten, view/reshape to (batch, -1), dropout, add, cat)");
  }
  l.name = layer_name(w, n, l.op);
  for (int i : inputs)
    if (i >= 0) l.inputs.push_back(i);
  if (l.inputs.size() != inputs.size() && l.inputs.size() > 0)
    return fail(n, "an op mixing the model input with other layers is not supported");
  if (inputs.size() > 1 && l.inputs.empty())
    return fail(n, "an op reading the model input twice is not supported");
  w.graph.layers.push_back(std::move(l));
  w.act[n->output()] = static_cast<int>(w.graph.layers.size()) - 1;
  return Status::ok();
}

// The per-sample input shape from the first layer that reads the model input.
Result<Shape> guess_input_shape(const Walk& w, int64_t side) {
  for (size_t i = 0; i < w.graph.layers.size(); ++i) {
    const Layer& l = w.graph.layers[i];
    if (!l.inputs.empty()) continue;
    auto ws = w.weight_shape.find(static_cast<int>(i));
    if (l.op == "conv2d") return Shape{ws->second[1] * l.attrs.groups, side, side};
    if (l.op == "batchnorm2d" && ws != w.weight_shape.end()) return Shape{ws->second[0], side, side};
    if (l.op == "linear") return Shape{ws->second[1]};
    // flatten/relu/... first: look for the first linear's input features.
    for (const auto& [j, shape] : w.weight_shape) {
      if (w.graph.layers[j].op == "conv2d")
        return Shape{shape[1] * w.graph.layers[j].attrs.groups, side, side};
      if (w.graph.layers[j].op == "linear") {
        int64_t f = shape[1];
        if (f % (side * side) == 0 && f / (side * side) <= 4) return Shape{f / (side * side), side, side};
        return Shape{f};
      }
    }
    break;
  }
  return Status::error("cannot tell the model's input shape from its first layer");
}

// Turns negative torch dims (concat, softmax) into positive ones from each
// layer's rank, which follows from the input rank alone.
Status resolve_negative_dims(LayerGraph& g) {
  std::vector<int64_t> rank(g.layers.size());
  for (size_t i = 0; i < g.layers.size(); ++i) {
    Layer& l = g.layers[i];
    int64_t in_rank = l.inputs.empty() ? static_cast<int64_t>(g.input_shape.size()) : rank[l.inputs[0]];
    rank[i] = (l.op == "flatten" || l.op == "linear") ? 1 : in_rank;
    bool has_dim = l.op == "concat" || l.op == "softmax" || l.op == "log_softmax";
    if (has_dim && l.attrs.dim < 0) {
      l.attrs.dim += in_rank + 1;  // torch dims count the batch
      if (l.attrs.dim < 1)
        return Status::error("layer '" + l.name + "' (" + l.op + "): dim refers to the batch or beyond");
    }
  }
  return Status::ok();
}

// Shapes inferred and consistent with every weight.
Status infer_and_check(LayerGraph& g, const Walk& w) {
  if (Status s = infer_shapes(g); !s) return s;
  for (const auto& [i, shape] : w.weight_shape) {
    const Layer& l = g.layers[i];
    int64_t expected = 0, got = 0;
    if (l.op == "conv2d") expected = shape[1] * l.attrs.groups, got = l.input_shapes[0][0];
    if (l.op == "linear") expected = shape[1], got = l.input_shapes[0][0];
    if (l.op == "batchnorm2d") expected = shape[0], got = l.input_shapes[0][0];
    if (expected != got)
      return Status::error("layer '" + l.name + "' (" + l.op + "): its weights expect " +
                           std::to_string(expected) + " input features/channels but the input shape gives " +
                           std::to_string(got));
  }
  return Status::ok();
}

// Thrown by walk_module when LibTorch cannot load the file at all (then the
// per-layer import, which loads it the same way, is not tried).
struct NotLoadable {
  std::string what;
  bool refused_by_libtorch = true;  // false: it loaded, but a tensor is corrupt (the message says which)
};

// Whether the forward (calls inlined) reads a parameter more than once: a
// module called twice, or a weight tied to another op's. Mapped op by op,
// each op would own a copy of it, which would train apart; the per-layer
// import keeps one parameter and lends it. (Checked before freezing: its
// constant pooling merges equal tensors, such as freshly initialised
// BatchNorm weights, which are not shared.)
bool reads_a_parameter_twice(const jit::Module& module) {
  std::shared_ptr<jit::Graph> g = module.get_method("forward").graph()->copy();
  jit::Inline(*g);
  std::set<const c10::TensorImpl*> parameters, read;
  for (const at::Tensor& p : module.parameters(/*recurse=*/true)) parameters.insert(p.unsafeGetTensorImpl());
  std::function<bool(const jit::Block*)> twice = [&](const jit::Block* b) {
    for (const jit::Node* n : b->nodes()) {
      if (n->kind() == c10::prim::GetAttr) {
        auto v = value_in_module(module, n->output());
        if (v && v->isTensor() && parameters.count(v->toTensor().unsafeGetTensorImpl()) &&
            !read.insert(v->toTensor().unsafeGetTensorImpl()).second)
          return true;
      }
      for (const jit::Block* inner : n->blocks())
        if (twice(inner)) return true;
    }
    return false;
  };
  return twice(g->block());
}

Result<LayerGraph> walk_module(const std::string& path, const ModelOptions& options) {
  jit::Module module;
  if (Status s = load_script_module(path, module); !s)
    throw NotLoadable{s.message(), s.code() != ErrorCode::invalid_argument};
  module.eval();
  if (reads_a_parameter_twice(module))
    return Status::error("a parameter is read by several ops (a module called twice, or a tied weight), which the "
                         "op-by-op mapping would copy");
  jit::Module frozen = jit::freeze_module(module);
  auto graph = frozen.get_method("forward").graph();
  keep_first_output(*graph);
  if (graph->inputs().size() != 2)
    return Status::error("forward takes " + std::to_string(graph->inputs().size() - 1) +
                         " inputs; only a single tensor input is supported");
  Walk w;
  w.graph.name = std::filesystem::path(path).stem().string();
  w.act[graph->inputs()[1]] = -1;
  for (const jit::Node* n : graph->nodes()) {
    if (!uses_activation(w, n)) continue;
    if (Status s = map_node(w, n); !s) return s;
  }
  if (graph->outputs().size() != 1) return Status::error("forward must return one tensor");
  auto out = w.act.find(graph->outputs()[0]);
  if (out == w.act.end() || out->second < 0)
    return Status::error("forward must return the output of a layer");
  if (out->second != static_cast<int>(w.graph.layers.size()) - 1)
    return Status::error("forward returns layer '" + w.graph.layers[out->second].name +
                         "' but later ops are computed too; only the last op may be the output");

  std::vector<int64_t> sides = {options.input_size};
  if (options.input_size == 0) sides = guessed_input_sizes();
  Status first_error;
  for (int64_t side : sides) {
    auto shape = guess_input_shape(w, side);
    if (!shape) return shape.status();
    LayerGraph g = w.graph;
    g.input_shape = *shape;
    if (Status s = resolve_negative_dims(g); !s) return s;
    Status s = infer_and_check(g, w);
    if (s) return g;
    if (first_error) first_error = s;
    if (shape->size() != 3) break;  // a flat input does not depend on the side
  }
  if (options.input_size == 0)
    return first_error.with_context("no common image size fits the model; pass the input size");
  return first_error.with_context("input size " + std::to_string(options.input_size));
}

}  // namespace

namespace {
// The ops import; `loadable` says whether LibTorch loaded the file at all.
Result<LayerGraph> import_ops(const std::string& path, const ModelOptions& options, bool& loadable) {
  loadable = true;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return Status::error(path + ": no such file");
  auto refusal = [&](std::string what) {
    if (what.size() > 300) what = what.substr(0, 300) + "...";
    return Status::error(path + ": not a loadable TorchScript module (" + what +
                         "); save models with torch.jit.script(model).save(path) or torch.jit.trace, "
                         "not torch.save");
  };
  try {
    auto g = walk_module(path, options);
    if (!g) return g.status().with_context(path);
    return g;
  } catch (const NotLoadable& e) {
    loadable = false;
    return e.refused_by_libtorch ? refusal(e.what) : Status::error(path + ": " + e.what);
  } catch (const c10::Error& e) {
    return refusal(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::error(path + ": " + e.what());
  }
}
}  // namespace

Result<LayerGraph> import_torchscript(const std::string& path, const ModelOptions& options) {
  if (options.torchscript == ScriptImport::layers) return import_torchscript_layers(path, options);
  bool loadable = true;
  Result<LayerGraph> ops = import_ops(path, options, loadable);
  // A file LibTorch cannot load fails the per-layer import the same way (a
  // corrupt upload can take LibTorch seconds and gigabytes to refuse: once is enough).
  if (ops || options.torchscript == ScriptImport::ops || !loadable) return ops;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return ops;
  Result<LayerGraph> layers = import_torchscript_layers(path, options);
  if (layers) return layers;
  return Status::error(ops.error_message() + "; running its own code per layer failed too: " + layers.error_message());
}

Result<LayerGraph> import_torchscript_ops(const std::string& path, const ModelOptions& options) {
  bool loadable = true;
  return import_ops(path, options, loadable);
}

}  // namespace tapp
