// profiler/compute_threads.h — how many CPU threads this process computes with.
//
// Owns `set_compute_threads`: sizes LibTorch's intra-op pool and OpenBLAS's own
// thread pool together. LibTorch 1.13 does not size OpenBLAS, whose pool
// defaults to every core and spins (sched_yield) between calls: a "one-thread"
// device then keeps two cores busy and slows every other worker on the host.
// Also `ScopedComputeThreads`, the same for a scope.
#pragma once

namespace tapp {

// Sets LibTorch's and (when loaded) OpenBLAS's thread counts to `threads` (>= 1).
void set_compute_threads(int threads);

// OpenBLAS's current thread count, or 0 when OpenBLAS is not loaded.
int openblas_threads();

// Computes with `threads` for its lifetime, then restores both pools as they
// were (process-wide, as the pools are). The placer's search holds one: its
// networks are small, and an OpenBLAS pool of every core only spins between
// their calls.
class ScopedComputeThreads {
 public:
  explicit ScopedComputeThreads(int threads);
  ~ScopedComputeThreads();
  ScopedComputeThreads(const ScopedComputeThreads&) = delete;
  ScopedComputeThreads& operator=(const ScopedComputeThreads&) = delete;

 private:
  int torch_threads_, blas_threads_;
};

}  // namespace tapp
