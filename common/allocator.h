// common/allocator.h — which malloc this process runs with.
//
// Owns `Allocator` and `running_allocator()`: the library that defines the
// `malloc` this process calls, found with dlsym + dladdr, so a linked
// tcmalloc, an LD_PRELOADed one and glibc's own are told apart by what runs,
// not by how the binary was meant to be built.
// Why it matters: with glibc's malloc the large tensors freed every training
// step go back to the kernel and fault in again (a vgg16 64x64 step ran 2.5x
// slower, issue 14), so every binary that trains or profiles links tcmalloc
// (CMake target tapp_allocator), `--version` names the allocator, and the
// profile cache keys on it (a profile timed under one allocator is not reused
// under another).
// Thread safety: pure reads of the dynamic linker's tables. Header-only.
#pragma once

#include <dlfcn.h>
#include <malloc.h>

#include <string>

namespace tapp {

enum class Allocator { glibc, tcmalloc, other };

// The shared object that defines the `malloc` this process calls ("" if unknown).
inline std::string malloc_library_path() {
  void* symbol = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (!symbol || dladdr(symbol, &info) == 0 || !info.dli_fname) return "";
  return info.dli_fname;
}

inline Allocator running_allocator() {
  const std::string path = malloc_library_path();
  const std::string file = path.substr(path.rfind('/') + 1);
  if (file.find("tcmalloc") != std::string::npos) return Allocator::tcmalloc;
  if (file.rfind("libc.so", 0) == 0) return Allocator::glibc;
  return Allocator::other;
}

inline const char* allocator_name(Allocator a) {
  switch (a) {
    case Allocator::glibc: return "glibc";
    case Allocator::tcmalloc: return "tcmalloc";
    case Allocator::other: return "other";
  }
  return "other";
}

// "allocator: tcmalloc (/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4)", for --version.
inline std::string allocator_description() {
  return std::string("allocator: ") + allocator_name(running_allocator()) + " (" + malloc_library_path() + ")";
}

// Hands freed memory back to the kernel, whichever allocator runs: tcmalloc's
// MallocExtension_ReleaseFreeMemory (looked up at run time, so nothing links
// against it), else glibc's malloc_trim. glibc's call does nothing for memory
// tcmalloc holds, which is why the server's "after a large body" trim goes here.
inline void release_free_memory() {
  using ReleaseFn = void (*)();
  if (auto release = reinterpret_cast<ReleaseFn>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"))) {
    release();
    return;
  }
  malloc_trim(0);
}

}  // namespace tapp
