// profiler/torchscript_file.h — loading a TorchScript file that may be corrupt.
//
// Owns `load_script_module`: torch::jit::load plus the check LibTorch 1.13's
// loader leaves out. It takes each tensor's sizes, strides and offset from
// the archive's pickles as they are, so a file whose tensor claims more
// elements than its storage holds (a hand-edited or damaged upload) loads, and
// the first op that reads the tensor (freezing's constant folding, a forward)
// reads past the storage: a crash or garbage. Every tensor the module holds
// (parameters, buffers, other attributes, the constants of its code) is
// checked before anything runs; the error names the tensor.
// Also owns what both importers share: `value_in_module`, `guessed_input_sizes`,
// and `keep_first_output`: how they read a forward that
// returns a tuple (torchvision's scripted GoogLeNet and Inception-v3 return
// the logits and their auxiliary heads, which only training mode fills).
// Thread safety: plain functions.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp {

// Loads `path` into `out`. Errors: LibTorch refuses the file (its message,
// code unknown), or a tensor's storage is smaller than its sizes and strides
// reach (naming it; code invalid_argument).
Status load_script_module(const std::string& path, torch::jit::Module& out);

// When `forward` (after inlining) returns a tuple built in it whose first
// element is a tensor, or a dict built in it whose "logits" (else first
// value) is one, makes that tensor the graph's one output and drops what only
// the rest needed; true when it did. The model's output (the loss
// is taken of it) is then the first element: a training-mode auxiliary
// head is not trained. Both importers and the runtime's reload call it at the
// same point, so node positions agree.
bool keep_first_output(torch::jit::Graph& g);

// The value `v` (a value of a graph of `root`'s methods) holds when the graph
// runs: GetAttr chains from self (submodules, parameters, other attributes)
// and constants; nullopt for anything computed.
std::optional<c10::IValue> value_in_module(const torch::jit::Module& root, const torch::jit::Value* v);

// The input sizes both importers try, in order, where the request gives none:
// image sides of the common datasets (ImageNet 224, CIFAR 32, MNIST 28,
// Inception 299, ...), read as sequence lengths by a model whose first op is
// a linear or a recurrent layer.
const std::vector<int64_t>& guessed_input_sizes();

}  // namespace tapp
