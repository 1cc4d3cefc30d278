// runtime/tensor_memory.h — how much memory a worker's tensors hold, counted
// where LibTorch allocates it.
//
// Owns the worker's counting CPU allocator: installed once at worker start
// (before any tensor exists), it takes every CPU tensor allocation from
// LibTorch (c10::SetCPUAllocator, above the default's priority), adds its
// size to a live count and keeps the high-water mark, and hands the memory to
// c10's own alloc_cpu/free_cpu (so the process's caching malloc still serves it).
// What it counts: every byte a CPU tensor's storage holds — parameters,
// gradients, optimizer state, activations autograd saves, received buffers,
// and the temporaries of the op running at the peak. What it does not: the
// allocator's own caching and fragmentation, Gloo's and oneDNN's internal
// buffers, code and libraries (those are in RSS, which the report also carries).
// Data flow: LibTorch alloc/free -> live bytes -> peak -> WorkerReport::peak_tensor_bytes.
// Thread safety: the counts are atomics; allocation may happen on any thread.
#pragma once

#include <cstdint>

namespace tapp {

// Installs the counting allocator (idempotent).
void install_tensor_memory_counter();
// Bytes held by CPU tensors now, and the most held at once since installation.
int64_t tensor_bytes_now();
int64_t tensor_bytes_peak();

}  // namespace tapp
