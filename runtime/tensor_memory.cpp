#include "runtime/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>

namespace tapp {
namespace {

// Each block starts with its size; 64 bytes keep the data at c10's alignment.
constexpr size_t kHeader = 64;
std::atomic<int64_t> live_bytes{0}, peak_bytes{0};

void counted_free(void* data) {
  if (!data) return;
  char* base = static_cast<char*>(data) - kHeader;
  int64_t n = 0;
  std::memcpy(&n, base, sizeof(n));
  live_bytes.fetch_sub(n, std::memory_order_relaxed);
  c10::free_cpu(base);
}

// LibTorch 2.3 made allocate non-const and copy_data pure (the CUDA build's 2.11).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define TAPP_ALLOCATE_CONST
#define TAPP_ALLOCATOR_COPY_DATA
#else
#define TAPP_ALLOCATE_CONST const
#endif

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) TAPP_ALLOCATE_CONST override {
    char* base = static_cast<char*>(c10::alloc_cpu(nbytes + kHeader));
    const int64_t n = static_cast<int64_t>(nbytes);
    std::memcpy(base, &n, sizeof(n));
    const int64_t now = live_bytes.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t peak = peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* data = base + kHeader;
    return {data, data, &counted_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_free; }
#ifdef TAPP_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
};

}  // namespace

void install_tensor_memory_counter() {
  static CountingCpuAllocator allocator;
  static bool installed = false;
  if (installed) return;
  installed = true;
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
}

int64_t tensor_bytes_now() { return live_bytes.load(std::memory_order_relaxed); }
int64_t tensor_bytes_peak() { return peak_bytes.load(std::memory_order_relaxed); }

}  // namespace tapp
