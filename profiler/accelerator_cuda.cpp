// A CUDA LibTorch: GPUs through CUDA's runtime API (the one LibTorch links).
#include <cuda_runtime_api.h>

#include "profiler/accelerator.h"

namespace tapp {

bool built_with_cuda() { return true; }

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear it: no driver or no GPU is an answer, not a sticky error
    return 0;
  }
  return n;
}

Result<GpuInfo> gpu_for_device(const std::string& kind) {
  const std::optional<int> index = cuda_index(kind);
  auto bad = [&](const std::string& what) {
    return Status::coded(ErrorCode::invalid_argument, "device '" + kind + "': " + what);
  };
  if (!index) return bad("expected cpu or cuda:N");
  const int n = gpu_count();
  if (n == 0) return bad("this machine has no GPU that CUDA can use; use cpu");
  if (*index >= n)
    return bad("this machine has " + std::to_string(n) + " GPU" + (n == 1 ? "" : "s") +
               " (cuda:0" + (n == 1 ? "" : " to cuda:" + std::to_string(n - 1)) + ")");
  GpuInfo info;
  info.index = *index;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, *index) != cudaSuccess) {
    cudaGetLastError();
    return Status::coded(ErrorCode::internal, "device '" + kind + "': CUDA cannot read its properties");
  }
  info.name = prop.name;
  int previous = 0;
  cudaGetDevice(&previous);
  size_t free_bytes = 0, total_bytes = 0;
  const bool ok = cudaSetDevice(*index) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  cudaSetDevice(previous);
  if (!ok) {
    cudaGetLastError();
    return Status::coded(ErrorCode::internal, "device '" + kind + "': CUDA cannot read its memory");
  }
  info.total_bytes = static_cast<int64_t>(total_bytes);
  info.free_bytes = static_cast<int64_t>(free_bytes);
  return info;
}

}  // namespace tapp
