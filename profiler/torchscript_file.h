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
// Thread safety: a plain function.
#pragma once

#include <torch/script.h>

#include <string>

#include "common/status.h"

namespace tapp {

// Loads `path` into `out`. Errors: LibTorch refuses the file (its message,
// code unknown), or a tensor's storage is smaller than its sizes and strides
// reach (naming it; code invalid_argument).
Status load_script_module(const std::string& path, torch::jit::Module& out);

}  // namespace tapp
