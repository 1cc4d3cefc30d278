#include "profiler/compute_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>

namespace tapp {
namespace {

// Looked up at run time: OpenBLAS is LibTorch's BLAS here through Debian's
// libblas.so.3 alternative, not a library we link ourselves.
template <typename Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

void set_openblas_threads(int threads) {
  if (auto set = openblas_symbol<void (*)(int)>("openblas_set_num_threads")) set(threads);
}

}  // namespace

void set_compute_threads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  set_openblas_threads(threads);
}

int openblas_threads() {
  auto get = openblas_symbol<int (*)()>("openblas_get_num_threads");
  return get ? get() : 0;
}

ScopedComputeThreads::ScopedComputeThreads(int threads)
    : torch_threads_(at::get_num_threads()), blas_threads_(openblas_threads()) {
  set_compute_threads(threads);
}

ScopedComputeThreads::~ScopedComputeThreads() {
  at::set_num_threads(torch_threads_);
  if (blas_threads_ > 0) set_openblas_threads(blas_threads_);
}

}  // namespace tapp
