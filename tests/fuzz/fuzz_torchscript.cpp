// tests/fuzz/fuzz_torchscript.cpp — fuzzes TorchScript loading (profiler/torchscript_import.h).
//
// Input: any bytes, written to a temp file that import_torchscript loads (the
// path an uploaded model_file takes). LibTorch (prebuilt, not instrumented)
// reads the zip archive and the pickles and compiles the archive's code; our
// importer walks the graph.
// LibTorch 1.13's loader itself crashes on some broken archives (a SEGV in
// ScriptTypeParser::parseClassConstant, with GCC and clang builds alike:
// regressions/torchscript/libtorch_segv_class_constant.pt), so each input is
// first loaded by torch::jit::load alone in a forked child; an input the child
// cannot load (it dies, LibTorch refuses it, or it takes over 1.5 s) is skipped. That is why a job
// that loads an upload must run in a process that may die (issue 13 part 1).
// A file LibTorch loads may still hold a tensor that claims more elements
// than its storage has (regressions/torchscript/tensor_storage_too_small.pt:
// freezing read past it and crashed the parent now and then); the importer
// refuses it (profiler/torchscript_file.h), so that is the importer's to catch.
// Properties: no crash, no exception and no undefined behaviour in the import
// of a file LibTorch loads: its refusals come back as an error; a module that
// imports is a graph that writes as a JSON layer graph that reads back.
// Seeds: the modules tests/profiler/make_torchscript.py saves (scripts/fuzz.sh
// makes them with python3-torch). LibTorch does not check the archive's CRCs,
// so mutations reach its unpickler and compiler, but only what it loads
// reaches our importer; run it longer from the saved modules to go deeper.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#include <sanitizer/common_interface_defs.h>
#define TAPP_FUZZ_SANITIZERS 1
#endif
#endif

#include "fuzz_support.h"
#include "model/model_json.h"
#include "profiler/torchscript_import.h"

using namespace tapp;

namespace {

// One file per process, removed at exit.
struct TempFile {
  std::string path = "/tmp/tapp-fuzz-torchscript-" + std::to_string(getpid()) + ".pt";
  ~TempFile() { std::remove(path.c_str()); }
};

const std::string& temp_path() {
  static TempFile f;
  return f.path;
}

// True when torch::jit::load alone, in a forked child, loads the file within
// 1.5 s; false when LibTorch's loader refuses it, kills the child, hangs or
// takes longer (a few corrupt archives of 30 KB make it allocate gigabytes and
// take seconds). Only a file LibTorch loads reaches the importer in this
// process: on libtorch_segv_class_constant.pt its loader sometimes throws in
// the single-threaded child and then crashes in the parent (about 1 run in 2
// under ctest), so "the child did not die" did not make the parent safe. The
// child reports nothing: no sanitizer report, no libFuzzer crash file.
bool libtorch_loads(const std::string& path) {
  pid_t pid = fork();
  if (pid < 0) return true;  // cannot tell: load it here
  if (pid == 0) {
#ifdef TAPP_FUZZ_SANITIZERS
    __sanitizer_set_death_callback(nullptr);  // libFuzzer's writes a crash file
#endif
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, SIG_DFL);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    try {
      (void)torch::jit::load(path);
    } catch (...) {
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  for (int waited_ms = 0; waited_ms < 1500; waited_ms += 2) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = temp_path();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    FUZZ_CHECK(out.good(), "cannot write " + path);
  }
  if (!libtorch_loads(path)) return 0;
  Result<LayerGraph> graph = import_torchscript(path);
  if (!graph) return 0;
  const nlohmann::json written = model_to_json(*graph);
  FUZZ_CHECK(model_from_json(written), "an imported module writes a JSON graph that does not read back: " +
                                           written.dump());
  return 0;
}
