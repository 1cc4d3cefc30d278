// profiler/torch_warnings.h — how LibTorch's warnings reach the user.
//
// Owns `print_each_torch_warning_once`. LibTorch prints a warning every time
// code issues it, so a TorchScript model that warns in its forward (torchvision's
// scripted GoogLeNet: "Scripted GoogleNet always returns GoogleNetOutputs
// Tuple") printed a line per layer run while profiling and per step on every
// worker; Python shows each warning once. After the call, each distinct
// message goes to LibTorch's own printer the first time only.
// Thread safety: LibTorch 1.13 keeps the handler per thread, so a thread that
// may run model code calls this first (the programs' mains do); the messages
// seen are shared by the process, under a lock.
#pragma once

#include <cstdint>

namespace tapp {

// Installs the once-per-message printer for the calling thread (idempotent).
void print_each_torch_warning_once();
// How many warnings it has held back as repeats so far (process-wide).
int64_t torch_warnings_repeated();

}  // namespace tapp
