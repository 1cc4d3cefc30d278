// profiler/accelerator.h — the GPUs this process can compute on, for the profiler and the runtime.
//
// Owns what TAPP asks of a device kind "cuda:N" beyond LibTorch's device API:
// parsing the kind, whether this LibTorch and machine have that GPU, its name
// and total / free memory (for the memory checks and the layer library).
// Built against CUDA's runtime in a CUDA build (accelerator_cuda.cpp) and as
// "no CUDA" answers otherwise (accelerator_none.cpp): the rest of TAPP uses
// LibTorch's device-neutral calls and needs no CUDA headers. No LibTorch here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "core/cluster.h"  // cuda_index

namespace tapp {

struct GpuInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int64_t total_bytes = 0, free_bytes = 0;
};

// Whether this binary's LibTorch was built with CUDA (whether or not a GPU is present).
bool built_with_cuda();
// GPUs this process sees (0 without CUDA or without a GPU).
int gpu_count();

// The GPU a device kind names, checked: errors name the device ("device
// 'cuda:7': this machine has 1 GPU (cuda:0)", "...: this LibTorch has no
// CUDA; use cpu"). A device kind that is not cuda:N is an error too.
Result<GpuInfo> gpu_for_device(const std::string& device_kind);

}  // namespace tapp
