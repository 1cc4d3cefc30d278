#include "profiler/torchscript_layers.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "common/fingerprint.h"
#include "common/read_file.h"
#include "profiler/torchscript_file.h"

namespace tapp {
namespace jit = torch::jit;
namespace fs = std::filesystem;

namespace {

// A submodule call is inlined (cut finer) when it holds more than 1/kFinestShare of the parameters.
constexpr int64_t kFinestShare = 16;
// Batch of the example run: 3, so that no weight or constant dim is mistaken for the batch.
constexpr int64_t kExampleBatch = 3;

Result<std::string> file_hash(const std::string& path) {
  if (Status s = regular_file(path); !s) return s.with_context(path);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  uint64_t h = kFnv1aOffset;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = fnv1a64(std::string_view(buf.data(), static_cast<size_t>(in.gcount())), h);
  }
  return hex16(h);
}

bool is_call(const jit::Node* n) { return n->kind() == c10::prim::CallMethod; }
const jit::Value* self_of(const jit::Graph& g) { return g.inputs()[0]; }

// "layer1.0.conv1" for a module value reached by GetAttr from self; nullopt otherwise.
std::optional<std::string> module_path(const jit::Value* v) {
  const jit::Value* self = self_of(*v->owningGraph());
  std::vector<std::string> names;
  while (v != self) {
    const jit::Node* n = v->node();
    if (n->kind() != c10::prim::GetAttr) return std::nullopt;
    names.push_back(n->s(c10::attr::name));
    v = n->input(0);
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += (path.empty() ? "" : ".") + *it;
  return path;
}

jit::Module submodule(const jit::Module& root, const std::string& path) {
  jit::Module m = root;
  size_t start = 0;
  while (!path.empty() && start <= path.size()) {
    size_t dot = path.find('.', start);
    m = m.attr(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start)).toModule();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return m;
}

int64_t param_count(const jit::Module& m) {
  int64_t n = 0;
  std::unordered_set<const void*> seen;
  for (const auto& p : m.parameters(/*recurse=*/true))
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  return n;
}

jit::GraphFunction* callee_of(const jit::Node* call) {
  auto cls = call->input(0)->type()->cast<c10::ClassType>();
  if (!cls) return nullptr;
  jit::Function* fn = cls->findMethod(call->s(c10::attr::name));
  return fn ? jit::tryToGraphFunction(*fn) : nullptr;
}

void inline_call(jit::Node* call) {
  jit::GraphFunction* fn = callee_of(call);
  jit::inlineCallTo(call, fn, fn->graph().get());
}

// Calls on self (helper methods) and non-forward methods of children are the
// caller's own code: inlined always, so only submodule forwards remain calls.
void inline_internal_calls(jit::Graph& g) {
  for (bool changed = true; changed;) {
    changed = false;
    for (jit::Node* n : g.nodes()) {
      if (!is_call(n) || !callee_of(n)) continue;
      if (n->input(0) == self_of(g) || n->s(c10::attr::name) != "forward") {
        inline_call(n);
        changed = true;
        break;
      }
    }
  }
}

void expand_calls(jit::Graph& g, const std::string& path) {
  std::vector<jit::Node*> calls;
  for (jit::Node* n : g.nodes())
    if (is_call(n) && n->s(c10::attr::name) == "forward" && module_path(n->input(0)) == path && callee_of(n))
      calls.push_back(n);
  for (jit::Node* n : calls) inline_call(n);
  inline_internal_calls(g);
}

// forward's graph, its module-internal calls inlined and a returned tuple read
// as its first tensor (keep_first_output): what import and reload both cut.
std::shared_ptr<jit::Graph> inlined_forward(const jit::Module& m) {
  auto g = m.get_method("forward").graph()->copy();
  inline_internal_calls(*g);
  keep_first_output(*g);
  return g;
}

std::shared_ptr<jit::Graph> expanded_forward(const jit::Module& m, const std::vector<std::string>& expand) {
  auto g = inlined_forward(m);
  for (const auto& path : expand) expand_calls(*g, path);
  return g;
}

// A constant int of `v` when it is one.
std::optional<int64_t> constant_int(const jit::Value* v) {
  const auto iv = jit::toIValue(v);
  if (iv && iv->isInt()) return iv->toInt();
  return std::nullopt;
}

// The model input's sizes other than the batch are fixed by the import (its
// input_shape, per sample): reads of them become constants, so a forward that
// reads the input's size first and uses it last (upsampling to the input's
// side, as segmentation models do) does not join every cut into one layer.
// aten::size(x, d) for d != 0, and aten::size(x) where only a slice or an
// item past the batch is used; then constant propagation folds what they fed
// (a traced forward's NumToTensor / Int). Import and reload fold alike. True
// when something was folded.
bool fold_input_sizes(std::shared_ptr<jit::Graph>& g, const Shape& per_sample) {
  const jit::Value* x = g->inputs()[1];
  const int64_t rank = 1 + static_cast<int64_t>(per_sample.size());
  const auto dim_of = [&](int64_t d) { return d < 0 ? d + rank : d; };  // a negative index from the end
  const auto replace = [&](jit::Node* read, const c10::IValue& value) {
    jit::WithInsertPoint at(read);
    read->output()->replaceAllUsesWith(g->insertConstant(value));
  };
  bool folded = false;
  std::vector<jit::Node*> dead, sizes_read;  // folded reads; aten::size(x) nodes, removed once unused
  for (jit::Node* n : g->nodes()) {
    if (n->kind() != c10::aten::size || n->input(0) != x) continue;
    if (n->inputs().size() == 2) {
      const auto d = constant_int(n->input(1));
      if (!d || dim_of(*d) < 1 || dim_of(*d) >= rank) continue;
      replace(n, per_sample[dim_of(*d) - 1]);
      dead.push_back(n);
      folded = true;
      continue;
    }
    sizes_read.push_back(n);
    for (const jit::Use& u : n->output()->uses()) {
      jit::Node* user = u.user;
      if (user->kind() == c10::aten::__getitem__) {
        const auto i = constant_int(user->input(1));
        if (!i || dim_of(*i) < 1 || dim_of(*i) >= rank) continue;
        replace(user, per_sample[dim_of(*i) - 1]);
      } else if (user->kind() == c10::aten::slice && user->inputs().size() == 4) {
        const auto start = user->input(1)->mustBeNone() ? std::optional<int64_t>(0) : constant_int(user->input(1));
        const auto end = user->input(2)->mustBeNone() ? std::optional<int64_t>(rank) : constant_int(user->input(2));
        const auto step = constant_int(user->input(3));
        if (!start || !end || !step || *step < 1) continue;
        const int64_t from = std::clamp<int64_t>(dim_of(*start), 0, rank), to = std::clamp<int64_t>(dim_of(*end), 0, rank);
        if (from < 1) continue;
        std::vector<int64_t> sizes;
        for (int64_t i = from; i < to; i += *step) sizes.push_back(per_sample[i - 1]);
        replace(user, c10::IValue(sizes));
      } else {
        continue;
      }
      dead.push_back(user);
      folded = true;
    }
  }
  for (jit::Node* n : dead) n->destroy();
  for (jit::Node* n : sizes_read)
    if (!n->hasUses()) n->destroy();
  if (folded) jit::ConstantPropagation(g);
  return folded;
}

bool calls_submodules(const jit::Node* call) {
  jit::GraphFunction* fn = callee_of(call);
  return fn && !jit::findAllNodes(*fn->graph(), c10::prim::CallMethod, /*recurse=*/true).empty();
}

// Inlines, breadth first, every composite submodule call holding over 1/kFinestShare of the parameters.
std::vector<std::string> choose_expansions(const jit::Module& m, jit::Graph& g) {
  const int64_t threshold = param_count(m) / kFinestShare;
  std::vector<std::string> expand;
  for (;;) {
    std::vector<std::string> next;
    for (jit::Node* n : g.nodes()) {
      if (!is_call(n) || n->s(c10::attr::name) != "forward") continue;
      auto path = module_path(n->input(0));
      if (!path || path->empty() || std::count(next.begin(), next.end(), *path)) continue;
      if (param_count(submodule(m, *path)) > threshold && calls_submodules(n)) next.push_back(*path);
    }
    if (next.empty()) return expand;
    for (const auto& path : next) {
      expand_calls(g, path);
      expand.push_back(path);
    }
  }
}

bool writes(const jit::Node* n, const jit::Value* v) {
  if (const c10::FunctionSchema* schema = n->maybeSchema()) {
    for (size_t i = 0; i < schema->arguments().size() && i < n->inputs().size(); ++i) {
      const auto* alias = schema->arguments()[i].alias_info();
      if (alias && alias->isWrite() && n->input(i) == v) return true;
    }
  }
  for (const jit::Block* b : n->blocks())
    for (const jit::Node* inner : b->nodes())
      if (writes(inner, v)) return true;
  return false;
}

// Nodes every layer may recompute for itself: constants, attribute reads
// (submodules, parameters, flags) and lists/tuples of them that nothing
// writes (a list built empty and appended to must stay one list: recomputed
// per layer, a later layer saw it empty).
bool rematerializable(const jit::Node* n) {
  if (!n->blocks().empty()) return false;
  const auto k = n->kind();
  if (k == c10::prim::Constant) return true;
  if (k != c10::prim::GetAttr && k != c10::prim::ListConstruct && k != c10::prim::TupleConstruct) return false;
  for (const jit::Use& u : n->output()->uses())
    if (writes(u.user, n->output())) return false;
  for (const jit::Value* in : n->inputs())
    if (in != self_of(*n->owningGraph()) && !rematerializable(in->node())) return false;
  return true;
}

void collect_uses(const jit::Node* n, std::vector<const jit::Value*>& out) {
  for (const jit::Value* v : n->inputs()) out.push_back(v);
  for (const jit::Block* b : n->blocks()) {
    for (const jit::Node* inner : b->nodes()) collect_uses(inner, out);
    for (const jit::Value* v : b->outputs()) out.push_back(v);
  }
}

// Dataflow of the expanded forward's top-level nodes.
struct Analysis {
  std::vector<jit::Node*> nodes;
  std::vector<bool> remat;
  const jit::Value* input = nullptr;                  // the model input (defined at -1)
  std::unordered_map<const jit::Value*, int> def_at;  // compute-node outputs and the input
  std::unordered_map<const jit::Value*, int> last_use;  // by a compute node; INT_MAX: the graph output
  std::vector<std::vector<const jit::Value*>> uses;     // per node: the values of def_at it reads
};

Analysis analyse(jit::Graph& g) {
  Analysis a;
  a.input = g.inputs()[1];
  a.def_at[a.input] = -1;
  for (jit::Node* n : g.nodes()) a.nodes.push_back(n);
  a.remat.resize(a.nodes.size());
  a.uses.resize(a.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    a.remat[i] = rematerializable(a.nodes[i]);
    if (a.remat[i]) continue;
    std::vector<const jit::Value*> used;
    collect_uses(a.nodes[i], used);
    for (const jit::Value* v : used)
      if (a.def_at.count(v) && std::find(a.uses[i].begin(), a.uses[i].end(), v) == a.uses[i].end()) {
        a.uses[i].push_back(v);
        a.last_use[v] = std::max(a.last_use[v], static_cast<int>(i));
      }
    for (const jit::Value* o : a.nodes[i]->outputs()) a.def_at[o] = static_cast<int>(i);
  }
  for (const jit::Value* o : g.outputs()) a.last_use[o] = INT_MAX;
  return a;
}

// What nodes [begin, end) read from earlier layers (in definition order, the
// model input first) and what they define that later layers or the output read.
struct SliceIO {
  std::vector<const jit::Value*> imports, exports;
};

SliceIO slice_io(const Analysis& a, int begin, int end) {
  SliceIO io;
  for (int i = begin; i < end; ++i) {
    if (a.remat[i]) continue;
    for (const jit::Value* v : a.uses[i])
      if (a.def_at.at(v) < begin && std::find(io.imports.begin(), io.imports.end(), v) == io.imports.end())
        io.imports.push_back(v);
    for (const jit::Value* o : a.nodes[i]->outputs()) {
      auto u = a.last_use.find(o);
      if (u != a.last_use.end() && u->second >= end) io.exports.push_back(o);
    }
  }
  std::sort(io.imports.begin(), io.imports.end(),
            [&](const jit::Value* x, const jit::Value* y) { return a.def_at.at(x) < a.def_at.at(y); });
  return io;
}

bool has_mutation(const jit::Block* b) {
  for (const jit::Node* n : b->nodes()) {
    if (const c10::FunctionSchema* schema = n->maybeSchema(); schema && schema->is_mutable()) return true;
    for (const jit::Block* inner : n->blocks())
      if (has_mutation(inner)) return true;
  }
  return false;
}

// Nodes [begin, end) as a graph (self, imports...) -> export, every call inlined.
std::shared_ptr<jit::Graph> slice_graph(jit::Graph& g, const Analysis& a, int begin, int end, const SliceIO& io) {
  auto sg = std::make_shared<jit::Graph>();
  std::unordered_map<const jit::Value*, jit::Value*> env;
  env[self_of(g)] = sg->addInput("self")->setType(self_of(g)->type());
  for (const jit::Value* v : io.imports) env[v] = sg->addInput()->setType(v->type());
  std::function<jit::Value*(jit::Value*)> map_value = [&](jit::Value* v) -> jit::Value* {
    auto it = env.find(v);
    if (it != env.end()) return it->second;
    jit::Node* clone = sg->createClone(v->node(), map_value);  // a rematerializable node
    sg->appendNode(clone);
    for (size_t k = 0; k < v->node()->outputs().size(); ++k) env[v->node()->output(k)] = clone->output(k);
    return env.at(v);
  };
  for (int i = begin; i < end; ++i) {
    if (a.remat[i]) continue;
    jit::Node* clone = sg->createClone(a.nodes[i], map_value);
    sg->appendNode(clone);
    for (size_t k = 0; k < a.nodes[i]->outputs().size(); ++k) env[a.nodes[i]->output(k)] = clone->output(k);
  }
  sg->registerOutput(env.at(io.exports.at(0)));
  jit::Inline(*sg);
  return sg;
}

// The parameters of an object (a module), its own slots only.
std::vector<at::Tensor> own_parameters(const c10::ivalue::Object& obj) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < obj.type()->numAttributes(); ++i)
    if (obj.type()->is_parameter(i) && obj.getSlot(i).isTensor()) out.push_back(obj.getSlot(i).toTensor());
  return out;
}

// The parameters a (sliced, inlined) graph reads, in order of first read: an
// attribute that is a parameter, or a list attribute holding the object's
// parameters (a scripted nn.GRU or nn.LSTM reads its weights as _flat_weights).
void parameters_read(const jit::Module& root, const jit::Block* b, std::vector<at::Tensor>& out) {
  auto add = [&](const at::Tensor& t) {
    if (std::none_of(out.begin(), out.end(), [&](const at::Tensor& p) { return p.is_same(t); })) out.push_back(t);
  };
  for (const jit::Node* n : b->nodes()) {
    if (n->kind() == c10::prim::GetAttr) {
      auto parent = value_in_module(root, n->input(0));
      if (parent && parent->isObject()) {
        const auto& obj = parent->toObjectRef();
        auto slot = obj.type()->findAttributeSlot(n->s(c10::attr::name));
        if (slot && obj.type()->is_parameter(*slot) && obj.getSlot(*slot).isTensor())  // bias=False: None
          add(obj.getSlot(*slot).toTensor());
        else if (slot && obj.getSlot(*slot).isList()) {
          const std::vector<at::Tensor> own = own_parameters(obj);
          for (const c10::IValue& v : obj.getSlot(*slot).toListRef())
            if (v.isTensor() &&
                std::any_of(own.begin(), own.end(), [&](const at::Tensor& p) { return p.is_same(v.toTensor()); }))
              add(v.toTensor());
        }
      }
    }
    for (const jit::Block* inner : n->blocks()) parameters_read(root, inner, out);
  }
}

// What went wrong in LibTorch, in a line or a few: c10's message without its
// C++ backtrace; of an interpreter failure (a std::runtime_error carrying the
// module's TorchScript and Python tracebacks) its last line, the error itself.
std::string torch_error_text(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
  if (what.find("Traceback of TorchScript") != std::string::npos) {
    const size_t end = what.find_last_not_of(" \n");
    if (end != std::string::npos) {
      const size_t line_break = what.rfind('\n', end);
      const size_t start = line_break == std::string::npos ? 0 : line_break + 1;
      what = what.substr(start, end + 1 - start);
    }
  }
  if (what.size() > 400) what = what.substr(0, 400) + "...";
  return what;
}

jit::Stack run(const jit::Code& code, const jit::Module& m, const std::vector<at::Tensor>& inputs) {
  jit::Stack stack;
  stack.emplace_back(m._ivalue());
  for (const auto& t : inputs) stack.emplace_back(t);
  jit::InterpreterState(code).run(stack);
  return stack;
}

std::string op_suffix(const jit::Node* n) {
  std::string s = n->kind().toUnqualString();
  return s.empty() ? "op" : s;
}

// ------------------------------------------------------------------ import

struct Example {
  Shape shape;         // per sample
  int64_t vocab = 0;   // > 0: token ids
  at::Tensor batch;    // kExampleBatch samples
};

// The first weight of a recurrent op's parameters (its third input: a list
// built in the graph, or a module attribute such as nn.GRU's _flat_weights).
std::optional<at::Tensor> first_recurrent_weight(const jit::Module& m, const jit::Node* n) {
  if (n->inputs().size() < 3) return std::nullopt;
  const jit::Value* params = n->input(2);
  if (params->node()->kind() == c10::prim::ListConstruct && !params->node()->inputs().empty()) {
    auto w = value_in_module(m, params->node()->input(0));
    if (w && w->isTensor()) return w->toTensor();
    return std::nullopt;
  }
  auto list = value_in_module(m, params);  // a list of tensors (isList holds for a typed one too)
  if (list && list->isList() && !list->toListRef().empty() && list->toListRef()[0].isTensor())
    return list->toListRef()[0].toTensor();
  return std::nullopt;
}

// The model input, read from the first embedding, convolution, linear or recurrent op;
// `size` is an image side, a sequence length (tokens, or vectors for a
// linear or a recurrent op), 0 for the first guess.
Result<Example> example_input(const jit::Module& m, jit::Graph& g, int64_t size) {
  auto full = g.copy();
  jit::Inline(*full);
  std::function<std::optional<Example>(const jit::Block*)> find = [&](const jit::Block* b) -> std::optional<Example> {
    for (const jit::Node* n : b->nodes()) {
      const std::string k = n->kind().toQualString();
      auto weight = [&](size_t i) -> std::optional<at::Tensor> {
        auto w = value_in_module(m, n->input(i));
        if (w && w->isTensor()) return w->toTensor();
        return std::nullopt;
      };
      if (k == "aten::embedding") {
        if (auto w = weight(0)) return Example{{size > 0 ? size : 32}, w->size(0), {}};
      } else if (k == "aten::conv1d" || k == "aten::conv2d" || k == "aten::_convolution") {
        auto w = weight(1);
        auto groups = jit::toIValue(n->input(k == "aten::_convolution" ? 8 : 6));
        if (w && (w->dim() == 3 || w->dim() == 4)) {
          int64_t c = w->size(1) * (groups && groups->isInt() ? groups->toInt() : 1);
          int64_t side = size > 0 ? size : 224;
          return Example{w->dim() == 3 ? Shape{c, side} : Shape{c, side, side}, 0, {}};
        }
      } else if (k == "aten::linear") {
        // A vector, or with a size a sequence of `size` of them (a dense sequence model's input).
        if (auto w = weight(1); w && w->dim() == 2)
          return Example{size > 0 ? Shape{size, w->size(1)} : Shape{w->size(1)}, 0, {}};
      } else if (k == "aten::lstm" || k == "aten::gru" || k == "aten::rnn_tanh" || k == "aten::rnn_relu") {
        // A recurrent layer over a sequence of vectors (batch first): its first
        // weight, weight_ih_l0 [gates x hidden, features], gives their width.
        if (auto w = first_recurrent_weight(m, n); w && w->dim() == 2)
          return Example{Shape{size > 0 ? size : 32, w->size(1)}, 0, {}};
      }
      for (const jit::Block* inner : n->blocks())
        if (auto e = find(inner)) return e;
    }
    return std::nullopt;
  };
  auto e = find(full->block());
  if (!e)
    return Status::error("cannot tell the model's input from its first layer (no embedding, convolution, linear or "
                         "recurrent op)");
  std::vector<int64_t> sizes{kExampleBatch};
  sizes.insert(sizes.end(), e->shape.begin(), e->shape.end());
  torch::manual_seed(0);
  e->batch = e->vocab > 0 ? torch::randint(e->vocab, sizes, torch::kLong) : torch::randn(sizes);
  return *e;
}

// Every top-level tensor the forward computes on the example batch (eval mode, no grad).
Result<std::unordered_map<const jit::Value*, at::Tensor>> run_once(const jit::Module& m, jit::Graph& g,
                                                                   const at::Tensor& x) {
  auto copy = g.copy();
  std::vector<const jit::Value*> originals{g.outputs()[0]};
  auto gi = g.nodes().begin();
  auto ci = copy->nodes().begin();
  for (; gi != g.nodes().end(); ++gi, ++ci) {
    if (rematerializable(*gi)) continue;
    for (size_t o = 0; o < gi->outputs().size(); ++o)
      if (gi->outputs()[o]->type()->cast<c10::TensorType>()) {
        copy->registerOutput(ci->outputs()[o]);
        originals.push_back(gi->outputs()[o]);
      }
  }
  jit::Code code(copy, "tapp_example_run");
  torch::NoGradGuard no_grad;
  jit::Stack out = run(code, m, {x});
  std::unordered_map<const jit::Value*, at::Tensor> facts;
  for (size_t i = 0; i < originals.size() && i < out.size(); ++i)
    if (out[i].isTensor()) facts[originals[i]] = out[i].toTensor();
  return facts;
}

bool crossable(const std::unordered_map<const jit::Value*, at::Tensor>& facts, const jit::Value* v) {
  auto it = facts.find(v);
  return it != facts.end() && it->second.scalar_type() == at::kFloat && it->second.dim() >= 2 &&
         it->second.size(0) == kExampleBatch;
}

// Node ranges: a layer per submodule call, other nodes grouped between them,
// then neighbours merged until every cut passes one float tensor with a batch dim.
std::vector<int> cut_layers(const Analysis& a, const std::unordered_map<const jit::Value*, at::Tensor>& facts,
                            const jit::Value* output) {
  const int n = static_cast<int>(a.nodes.size());
  std::vector<int> bounds{0, n};
  for (int i = 0; i < n; ++i)
    if (!a.remat[i] && is_call(a.nodes[i])) bounds.insert(bounds.end(), {i, i + 1});
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  // A range holding only rematerializable nodes joins the next (the last joins the previous).
  for (size_t k = 0; k + 1 < bounds.size();) {
    bool compute = false;
    for (int i = bounds[k]; i < bounds[k + 1]; ++i) compute = compute || !a.remat[i];
    if (compute || bounds.size() == 2) {
      ++k;
    } else {
      bounds.erase(bounds.begin() + static_cast<long>(k + 2 < bounds.size() ? k + 1 : k));
    }
  }
  for (;;) {
    const size_t layers = bounds.size() - 1;
    std::optional<size_t> remove;
    for (size_t k = 0; k < layers && !remove; ++k) {
      SliceIO io = slice_io(a, bounds[k], bounds[k + 1]);
      const bool reads_input = !io.imports.empty() && io.imports[0] == a.input;
      if (k > 0 && reads_input && io.imports.size() > 1) {
        remove = k;  // the model input and another layer: join the previous layer
      } else if (io.imports.empty() && k + 1 < layers) {
        remove = k + 1;  // computed from parameters alone: join its reader
      } else if (k + 1 == layers) {
        if (k > 0 && (io.exports.size() != 1 || io.exports[0] != output)) remove = k;
      } else if (io.exports.size() != 1 || !crossable(facts, io.exports[0])) {
        remove = k + 1;  // ints, lists, several values or none: join the next layer
      } else {
        for (int i = bounds[k]; i < bounds[k + 1] && !remove; ++i)
          for (const jit::Value* v : io.imports)
            if (!a.remat[i] && writes(a.nodes[i], v) && a.last_use.at(v) >= bounds[k + 1]) remove = k + 1;
      }
    }
    if (!remove) return bounds;
    bounds.erase(bounds.begin() + static_cast<long>(*remove));
  }
}

// Multiply-adds per sample of the conv/linear/matmul nodes of a layer, from one run on its example inputs.
int64_t slice_macs(const jit::Module& m, jit::Graph& sg, const std::vector<at::Tensor>& inputs) {
  auto copy = sg.copy();
  std::vector<std::string> kinds;
  for (jit::Node* n : copy->nodes()) {
    const std::string k = n->kind().toQualString();
    size_t operand = 0;
    if (k == "aten::conv1d" || k == "aten::conv2d" || k == "aten::conv3d" || k == "aten::_convolution" ||
        k == "aten::linear")
      operand = 1;
    else if (k == "aten::matmul" || k == "aten::mm" || k == "aten::bmm")
      operand = 0;
    else if (k == "aten::addmm" || k == "aten::baddbmm")
      operand = 1;
    else
      continue;
    copy->registerOutput(n->output(0));
    copy->registerOutput(n->input(operand));
    kinds.push_back(k);
  }
  if (kinds.empty()) return 0;
  jit::Code code(copy, "tapp_macs");
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> cloned;
  for (const auto& t : inputs) cloned.push_back(t.clone());
  jit::Stack out = run(code, m, cloned);
  int64_t macs = 0;
  for (size_t i = 0; i < kinds.size(); ++i) {
    const c10::IValue& o = out[1 + 2 * i];
    const c10::IValue& w = out[2 + 2 * i];
    if (!o.isTensor() || !w.isTensor()) continue;
    const at::Tensor& ot = o.toTensor();
    const at::Tensor& wt = w.toTensor();
    int64_t per_output = 0;
    if (kinds[i] == "aten::linear") per_output = wt.size(-1);
    else if (kinds[i].find("conv") != std::string::npos) per_output = wt.numel() / std::max<int64_t>(1, wt.size(0));
    else per_output = wt.size(-1);
    macs += ot.numel() * per_output / kExampleBatch;
  }
  return macs;
}

std::string slice_name(const Analysis& a, int begin, int end, std::map<std::string, int>& used) {
  std::string base;
  for (int i = begin; i < end && base.empty(); ++i)
    if (!a.remat[i] && is_call(a.nodes[i]))
      if (auto p = module_path(a.nodes[i]->input(0)); p && !p->empty()) base = *p;
  // Else its first tensor op ("gru", not the "Uninitialized" of a scripted nn.GRU's control flow).
  for (int i = begin; i < end && base.empty(); ++i)
    if (!a.remat[i] && a.nodes[i]->kind().is_aten() && !a.nodes[i]->outputs().empty() &&
        a.nodes[i]->outputs()[0]->type()->cast<c10::TensorType>())
      base = op_suffix(a.nodes[i]);
  for (int i = begin; i < end && base.empty(); ++i)
    if (!a.remat[i]) base = op_suffix(a.nodes[i]);
  int k = used[base]++;
  return k == 0 ? base : base + "_" + std::to_string(k + 1);
}

Result<LayerGraph> import_layers(const std::string& path, const ModelOptions& options) {
  auto hash = file_hash(path);
  if (!hash) return hash.status();
  jit::Module m;
  if (Status s = load_script_module(path, m); !s) return s;
  m.eval();
  auto g = inlined_forward(m);
  if (g->inputs().size() != 2)
    return Status::error("forward takes " + std::to_string(g->inputs().size() - 1) +
                         " inputs; only a single tensor input is supported");
  if (g->outputs().size() != 1 || !g->outputs()[0]->type()->cast<c10::TensorType>())
    return Status::error("forward returns " + m.get_method("forward").graph()->outputs()[0]->type()->repr_str() +
                         "; only one tensor, a tuple built in forward whose first element is a tensor, or a "
                         "dict built in forward whose \"logits\" (else first value) is one, is supported");
  std::vector<std::string> expand = choose_expansions(m, *g);

  std::unordered_map<const jit::Value*, at::Tensor> facts;
  Example example;
  Status first_error;
  // The size given, else the first op's own guess (0: an image side of 224, one vector, 32
  // tokens), a sequence of 32, then guessed_input_sizes(); each distinct input once.
  std::vector<int64_t> sizes = {options.input_size};
  if (options.input_size == 0) {
    sizes.push_back(32);
    sizes.insert(sizes.end(), guessed_input_sizes().begin(), guessed_input_sizes().end());
  }
  std::vector<Shape> tried;
  for (int64_t size : sizes) {
    auto e = example_input(m, *g, size);
    if (!e) return e.status();
    if (std::find(tried.begin(), tried.end(), e->shape) != tried.end()) continue;
    tried.push_back(e->shape);
    try {
      auto f = run_once(m, *g, e->batch);
      if (!f) return f.status();
      facts = std::move(*f);
      example = std::move(*e);
      break;
    } catch (const std::exception& err) {  // c10::Error, or the interpreter's runtime_error
      const std::string what = torch_error_text(err);
      if (first_error) first_error = Status::error("running the module on an example input " +
                                                   shape_to_string(e->shape) + " failed: " + what);
      if (options.input_size || e->vocab > 0) break;
    }
  }
  if (facts.empty())
    return first_error.with_hint(std::string(options.input_size ? "try another" : "give its") +
                                 " input size (an image side or a sequence length: --input-size, or input_size in a request)");
  if (fold_input_sizes(g, example.shape)) {  // the values changed: read them again
    auto f = run_once(m, *g, example.batch);
    if (!f) return f.status();
    facts = std::move(*f);
  }
  const jit::Value* output = g->outputs()[0];
  if (!crossable(facts, output))
    return Status::error("forward's output is not a float tensor with the batch as its first dimension");

  Analysis a = analyse(*g);
  std::vector<int> bounds = cut_layers(a, facts, output);
  LayerGraph lg;
  lg.name = fs::path(path).stem().string();
  lg.input_shape = example.shape;
  std::vector<at::Tensor> owned_so_far;
  std::map<std::string, int> names;
  std::unordered_map<const jit::Value*, int> layer_of_export;
  const std::string file = fs::absolute(path).lexically_normal().string();
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    SliceIO io = slice_io(a, bounds[k], bounds[k + 1]);
    auto sg = slice_graph(*g, a, bounds[k], bounds[k + 1], io);
    Layer l;
    l.op = "torchscript";
    l.name = slice_name(a, bounds[k], bounds[k + 1], names);
    std::vector<at::Tensor> example_inputs;
    for (const jit::Value* v : io.imports) {
      if (v == a.input) {
        example_inputs.push_back(example.batch);
        if (example.vocab > 0) l.attrs.entries = example.vocab;  // reads token ids: infer_shapes sets input_kind
        continue;
      }
      l.inputs.push_back(layer_of_export.at(v));
      example_inputs.push_back(facts.at(v));
    }
    layer_of_export[io.exports.at(0)] = static_cast<int>(k);
    ScriptSlice& s = l.attrs.script;
    s.file = file;
    s.hash = *hash;
    s.expand = expand;
    s.begin = bounds[k];
    s.end = bounds[k + 1];
    const at::Tensor& out = facts.at(io.exports[0]);
    s.output_shape.assign(out.sizes().begin() + 1, out.sizes().end());
    std::vector<at::Tensor> read;
    parameters_read(m, sg->block(), read);
    for (const auto& p : read)
      if (std::none_of(owned_so_far.begin(), owned_so_far.end(), [&](const at::Tensor& q) { return q.is_same(p); })) {
        owned_so_far.push_back(p);
        s.params += p.numel();
      }
    s.macs = slice_macs(m, *sg, example_inputs);
    lg.layers.push_back(std::move(l));
  }
  if (Status st = infer_shapes(lg); !st) return st;
  return lg;
}

}  // namespace

Result<LayerGraph> import_torchscript_layers(const std::string& path, const ModelOptions& options) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Status::error(path + ": no such file");
  try {
    auto g = import_layers(path, options);
    if (!g) return g.status().with_context(path);
    return g;
  } catch (const std::exception& e) {
    return Status::error(path + ": " + torch_error_text(e));
  }
}

// ------------------------------------------------------------------ execute

struct ScriptProgram::Impl {
  jit::Module module;
  std::shared_ptr<jit::Graph> graph;  // the expanded forward the slices point into
  struct Slice {
    std::unique_ptr<jit::Code> code;
    bool mutates = false;  // clones its inputs first: they may be leaves or another layer's output
    std::vector<at::Tensor> params;
    std::vector<std::pair<int, at::Tensor>> borrowed;  // read here, owned by an earlier layer (tied weights)
  };
  std::vector<Slice> slices;  // per LayerGraph layer; empty for other ops
};

ScriptProgram::ScriptProgram(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ScriptProgram::~ScriptProgram() = default;

Result<std::shared_ptr<ScriptProgram>> ScriptProgram::load(const LayerGraph& graph, const std::vector<bool>& keep) {
  const ScriptSlice* first = nullptr;
  for (const Layer& l : graph.layers) {
    if (l.op != "torchscript") continue;
    if (!first) first = &l.attrs.script;
    if (l.attrs.script.file != first->file || l.attrs.script.hash != first->hash || l.attrs.script.expand != first->expand)
      return Status::error("layer '" + l.name + "': torchscript layers of one model must come from one file and cut");
  }
  if (!first) return Status::error("the model has no torchscript layer");
  const std::string& file = first->file;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    return Status::error(file + ": the TorchScript file is not on this host (a worker loads the model from the path "
                                "it was imported from; sending the file to a remote tapp-worker is not supported yet)");
  auto hash = file_hash(file);
  if (!hash) return hash.status();
  if (*hash != first->hash)
    return Status::error(file + ": the file changed since it was imported (hash " + *hash + ", imported " +
                         first->hash + "); import it again");
  auto impl = std::make_unique<Impl>();
  try {
    if (Status s = load_script_module(file, impl->module); !s) return s.with_context(file);
    impl->graph = expanded_forward(impl->module, first->expand);
    fold_input_sizes(impl->graph, graph.input_shape);
    Analysis a = analyse(*impl->graph);
    impl->slices.resize(graph.layers.size());
    std::vector<at::Tensor> owned_so_far;
    std::vector<int> owner_of;  // per owned_so_far entry: the layer that owns it
    for (size_t i = 0; i < graph.layers.size(); ++i) {
      const Layer& l = graph.layers[i];
      if (l.op != "torchscript") continue;
      const ScriptSlice& s = l.attrs.script;
      if (s.end > static_cast<int64_t>(a.nodes.size()))
        return Status::error("layer '" + l.name + "': node range beyond the module's forward; import the file again");
      const int begin = static_cast<int>(s.begin), end = static_cast<int>(s.end);
      SliceIO io = slice_io(a, begin, end);
      const size_t expected_inputs = l.inputs.empty() ? 1 : l.inputs.size();
      if (io.exports.size() != 1 || io.imports.size() != expected_inputs)
        return Status::error("layer '" + l.name + "': nodes [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") do not cut the module as imported (" + std::to_string(io.imports.size()) +
                             " inputs, " + std::to_string(io.exports.size()) + " outputs)");
      auto sg = slice_graph(*impl->graph, a, begin, end, io);
      Impl::Slice& slice = impl->slices[i];
      std::vector<at::Tensor> read;
      parameters_read(impl->module, sg->block(), read);
      for (const auto& p : read) {
        auto owned = std::find_if(owned_so_far.begin(), owned_so_far.end(), [&](const at::Tensor& q) { return q.is_same(p); });
        if (owned == owned_so_far.end()) {
          owned_so_far.push_back(p);
          owner_of.push_back(static_cast<int>(i));
          slice.params.push_back(p);
        } else if (owner_of[owned - owned_so_far.begin()] != static_cast<int>(i)) {
          slice.borrowed.emplace_back(owner_of[owned - owned_so_far.begin()], p);
        }
      }
      if (!keep.empty() && !keep[i]) continue;
      slice.mutates = has_mutation(sg->block());
      slice.code = std::make_unique<jit::Code>(sg, l.name);
    }
    for (at::Tensor p : impl->module.parameters()) p.requires_grad_(true);
  } catch (const std::exception& e) {
    return Status::error(file + ": " + torch_error_text(e));
  }
  return std::shared_ptr<ScriptProgram>(new ScriptProgram(std::move(impl)));
}

torch::Tensor ScriptProgram::forward(int layer, const std::vector<torch::Tensor>& inputs) {
  Impl::Slice& s = impl_->slices.at(layer);
  if (!s.code) throw std::runtime_error("torchscript layer " + std::to_string(layer) + " is not built here");
  std::vector<at::Tensor> ins = inputs;
  if (s.mutates)
    for (auto& t : ins) t = t.clone();
  jit::Stack out = run(*s.code, impl_->module, ins);
  // Contiguous: the runtime sends layer outputs with Gloo, which refuses strided views (a permute's).
  return out.back().toTensor().contiguous();
}

std::vector<torch::Tensor> ScriptProgram::parameters(int layer) const { return impl_->slices.at(layer).params; }

std::vector<std::pair<int, torch::Tensor>> ScriptProgram::borrowed(int layer) const {
  return impl_->slices.at(layer).borrowed;
}

void ScriptProgram::set_training(bool on) { impl_->module.train(on); }

void ScriptProgram::to(const torch::Device& device) { impl_->module.to(device); }

}  // namespace tapp
