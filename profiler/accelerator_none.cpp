// A LibTorch without CUDA (Debian's): no GPU, and cuda:N is refused naming the device.
#include "profiler/accelerator.h"

namespace tapp {

bool built_with_cuda() { return false; }
int gpu_count() { return 0; }

Result<GpuInfo> gpu_for_device(const std::string& kind) {
  if (!cuda_index(kind)) return Status::coded(ErrorCode::invalid_argument, "device '" + kind + "': expected cpu or cuda:N");
  return Status::coded(ErrorCode::invalid_argument, "device '" + kind + "': this LibTorch has no CUDA; use cpu");
}

}  // namespace tapp
