#include "profiler/torchscript_file.h"

#include <algorithm>
#include <vector>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/lower_tuples.h>

namespace tapp {
namespace jit = torch::jit;

namespace {

// The bytes `t`'s sizes, strides and offset reach in its storage, or -1 when
// they cannot be valid (a negative stride or offset, or more than 2^62 bytes).
int64_t bytes_reached(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  constexpr unsigned __int128 kMax = static_cast<unsigned __int128>(1) << 62;
  if (t.storage_offset() < 0) return -1;
  unsigned __int128 last = static_cast<unsigned __int128>(t.storage_offset());
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) return -1;
    last += static_cast<unsigned __int128>(t.size(d) - 1) * static_cast<unsigned __int128>(t.stride(d));
    if (last > kMax) return -1;
  }
  const unsigned __int128 bytes = (last + 1) * t.element_size();
  return bytes > kMax ? -1 : static_cast<int64_t>(bytes);
}

// `what` names the tensor: "tensor 'b3.weight'", "a tensor constant of <function>".
Status check_tensor(const at::Tensor& t, const std::string& what) {
  if (!t.defined() || !t.has_storage()) return Status::ok();
  const int64_t reached = bytes_reached(t);
  const int64_t held = static_cast<int64_t>(t.storage().nbytes());
  if (reached >= 0 && reached <= held) return Status::ok();
  return Status::coded(
      ErrorCode::invalid_argument,
      what + " of shape " + c10::str(t.sizes()) + " and strides " + c10::str(t.strides()) + " reaches " +
          (reached < 0 ? std::string("an invalid extent") : std::to_string(reached) + " bytes") +
          " but its storage holds " + std::to_string(held) +
          " (a corrupt or hand-edited file; save it again from PyTorch)");
}

// Tensors inside an attribute value: a tensor, or lists, tuples and dicts of them.
Status check_value(const c10::IValue& v, const std::string& name) {
  if (v.isTensor()) return check_tensor(v.toTensor(), "tensor '" + name + "'");
  if (v.isList()) {
    const auto list = v.toListRef();
    for (size_t i = 0; i < list.size(); ++i)
      if (Status s = check_value(list[i], name + "[" + std::to_string(i) + "]"); !s) return s;
  } else if (v.isTuple()) {
    const auto& elems = v.toTupleRef().elements();
    for (size_t i = 0; i < elems.size(); ++i)
      if (Status s = check_value(elems[i], name + "[" + std::to_string(i) + "]"); !s) return s;
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict())
      if (Status s = check_value(kv.value(), name + "[...]"); !s) return s;
  }
  return Status::ok();
}

// Tensor constants of a graph and its nested blocks (a traced module's weights live there).
Status check_constants(const jit::Block& block, const std::string& function) {
  for (const jit::Node* n : block.nodes()) {
    if (n->kind() == c10::prim::Constant && n->output()->type()->cast<c10::TensorType>()) {
      if (Status s = check_tensor(n->t(c10::attr::value), "a tensor constant of " + function); !s) return s;
    }
    for (const jit::Block* b : n->blocks())
      if (Status s = check_constants(*b, function); !s) return s;
  }
  return Status::ok();
}

Status check_module(const jit::Module& m) {
  for (const auto& a : m.named_attributes(/*recurse=*/true))
    if (Status s = check_value(a.value, a.name); !s) return s;
  for (const jit::Function* f : m._ivalue()->compilation_unit()->get_functions()) {
    if (!f->isGraphFunction()) continue;
    const std::string name = f->qualname().qualifiedName();
    if (Status s = check_constants(*jit::toGraphFunction(*f).graph()->block(), name); !s) return s;
  }
  return Status::ok();
}

}  // namespace

Status load_script_module(const std::string& path, jit::Module& out) {
  try {
    out = jit::load(path);
  } catch (const c10::Error& e) {
    return Status::error(e.what_without_backtrace());
  }
  return check_module(out);
}

namespace {
// Whether running block b could change anything but the state of the modules it calls.
bool effects_beyond_calls(const jit::Block* b) {
  for (const jit::Node* n : b->nodes()) {
    if (n->kind() != c10::prim::CallMethod && n->hasSideEffects()) return true;
    for (const jit::Block* inner : n->blocks())
      if (effects_beyond_calls(inner)) return true;
  }
  return false;
}

// Drops the `if`s whose results nothing reads and whose branches only compute
// (a dropped head's `if self.training: aux = self.aux(x)`): dead code
// elimination keeps them because a module call might have effects.
void drop_unread_branches(jit::Block* b) {
  std::vector<jit::Node*> dead;
  for (jit::Node* n : b->nodes()) {
    if (n->kind() != c10::prim::If) continue;
    const bool unread = std::all_of(n->outputs().begin(), n->outputs().end(), [](const jit::Value* v) { return !v->hasUses(); });
    if (unread && std::none_of(n->blocks().begin(), n->blocks().end(), effects_beyond_calls)) dead.push_back(n);
  }
  for (jit::Node* n : dead) n->destroy();
}

// The tensor a tuple or dict built in forward stands for: the tuple's first
// element; the dict's "logits" (Hugging Face's outputs), else its first value.
// A dict is built whole (keys and values alternate among a DictConstruct's
// inputs) or filled by assignments in forward itself (`result["out"] = x`,
// torchvision's segmentation models; assignments under an `if` are not read).
// Null otherwise.
jit::Value* main_output(const jit::Node* n) {
  std::vector<std::pair<jit::Value*, jit::Value*>> entries;  // (key, value)
  if (n->kind() == c10::prim::TupleConstruct && !n->inputs().empty()) entries.emplace_back(nullptr, n->input(0));
  if (n->kind() == c10::prim::DictConstruct)
    for (size_t k = 0; k + 1 < n->inputs().size(); k += 2) entries.emplace_back(n->input(k), n->input(k + 1));
  if (n->kind() == c10::aten::dict && n->inputs().empty())
    for (const jit::Use& u : n->output()->uses())
      if (u.user->kind() == c10::aten::_set_item && u.offset == 0 && u.user->owningBlock() == n->owningBlock())
        entries.emplace_back(u.user->input(1), u.user->input(2));
  if (entries.empty()) return nullptr;
  jit::Value* out = entries.front().second;
  for (const auto& [key, value] : entries) {
    const auto k = key ? jit::toIValue(key) : c10::nullopt;
    if (k && k->isString() && k->toStringRef() == "logits") out = value;
  }
  return out->type()->cast<c10::TensorType>() ? out : nullptr;
}
}  // namespace

bool keep_first_output(jit::Graph& g) {
  if (g.outputs().size() != 1) return false;
  jit::Value* first = main_output(g.outputs()[0]->node());
  if (!first) return false;
  g.eraseOutput(0);
  g.registerOutput(first);
  jit::LowerSimpleTuples(g.block());  // a callee's tuple unpacked here: its parts directly
  jit::EliminateDeadCode(g.block());
  drop_unread_branches(g.block());
  jit::EliminateDeadCode(g.block());  // what only they read
  return true;
}

std::optional<c10::IValue> value_in_module(const jit::Module& root, const jit::Value* v) {
  if (v == v->owningGraph()->inputs()[0]) return root._ivalue();  // self
  const jit::Node* n = v->node();
  if (n->kind() == c10::prim::GetAttr) {
    auto parent = value_in_module(root, n->input(0));
    if (!parent || !parent->isObject()) return std::nullopt;
    return parent->toObjectRef().getAttr(n->s(c10::attr::name));
  }
  return jit::toIValue(v);
}

const std::vector<int64_t>& guessed_input_sizes() {
  static const std::vector<int64_t> sizes = {224, 32, 28, 299, 64, 96, 128, 256, 227, 112, 16};
  return sizes;
}

}  // namespace tapp
