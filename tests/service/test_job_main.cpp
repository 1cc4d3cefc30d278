// tests/service/test_job_main.cpp — tapp-test-job: a test-only job entry point for tapp-server.
//
// Why it exists: the fault-injection tests need jobs that abort, segfault,
// allocate past their memory limit, hang, or leave a process of their own
// behind, and the real-server and browser tests need jobs that finish in a
// second. None of that belongs in product code. The server's job mode is one
// library function, run_job_child (service/job_child.h); this program calls it
// with its own job function, and a test starts the server with the hidden
// flag `--job-program <build>/bin/tapp-test-job`. The server then supervises
// these jobs exactly as it supervises real ones: same arguments, report pipe,
// process group, memory limit, stall timer and verdicts.
//
// Which job runs is chosen by the request, so faulty and healthy jobs share
// one server: the cluster's first device name.
//   fault-abort     one progress line, then abort()            -> SIGABRT
//   fault-segfault  one progress line, then a write through a null pointer -> SIGSEGV
//   fault-allocate  one progress line, then touches 16 MiB blocks until an
//                   allocation fails (the memory limit), at most 2 GiB
//   fault-hang      one progress line, then sleeps with no more progress
//   fault-spawn     starts a process in a process group of its own (as the
//                   runtime starts tapp-workers), forked without exec so it
//                   holds the report pipe open, sleeping up to 20 s; then runs
//                   the fake job
//   anything else   the fake GPipe job (fake_job.h), $TAPP_FAKE_ITERATION_MS
//                   ms per iteration (default 40)
// Usage (by the server): tapp-test-job --run-job ID --db PATH --report-fd N --work-dir DIR [...]
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "fake_job.h"
#include "service/job_child.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

std::string first_device_name(const json& request) {
  const json* devices = nullptr;
  if (auto c = request.find("cluster"); c != request.end() && c->is_object())
    if (auto d = c->find("devices"); d != c->end() && d->is_array() && !d->empty()) devices = &*d;
  if (!devices || !(*devices)[0].is_object()) return "";
  return (*devices)[0].value("name", "");
}

int fake_iteration_ms() {
  const char* v = std::getenv("TAPP_FAKE_ITERATION_MS");
  return v ? std::max(1, std::atoi(v)) : 40;
}

void one_progress_line(const ProgressFn& progress) {
  ProgressEvent e;
  e.phase = "profiling";
  progress(e);
}

Result<json> allocate_until_the_limit() {
  constexpr size_t kBlock = size_t{16} << 20, kMax = size_t{2} << 30;
  std::vector<char*> blocks;
  for (size_t total = 0; total < kMax; total += kBlock) {
    char* block = new char[kBlock];  // under the limit this fails: the new-handler ends the process
    std::memset(block, 1, kBlock);
    blocks.push_back(block);
  }
  return Status::error("allocated 2 GiB without reaching a memory limit");
}

// A process of the job's own, in its own process group like a tapp-worker,
// without PR_SET_PDEATHSIG: only the server's tree kill can end it early. It
// keeps the report pipe open, so the job's end cannot be read from the pipe.
void spawn_lingering_process() {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    alarm(20);  // never outlive a test by long
    for (;;) pause();
  }
}

JobFn test_job() {
  return [](const JobInput& input, const ProgressFn& progress, const std::atomic<bool>& cancel) -> Result<json> {
    std::string kind = first_device_name(input.request);
    if (kind == "fault-abort") {
      one_progress_line(progress);
      std::abort();
    }
    if (kind == "fault-segfault") {
      one_progress_line(progress);
      volatile int* nowhere = nullptr;
      *nowhere = 1;
    }
    if (kind == "fault-allocate") {
      one_progress_line(progress);
      return allocate_until_the_limit();
    }
    if (kind == "fault-hang") {
      one_progress_line(progress);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (kind == "fault-spawn") spawn_lingering_process();
    return testing::make_fake_job({fake_iteration_ms(), 25, false})(input, progress, cancel);
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"tapp-test-job: a test-only job entry point (tests/service/test_job_main.cpp)"};
  JobChildArgs args;
  cli.add_option("--run-job", args.job_id)->required();
  cli.add_option("--db", args.db_path)->required();
  cli.add_option("--report-fd", args.report_fd)->required();
  cli.add_option("--work-dir", args.work_dir);
  cli.allow_extras();  // the server's own job flags (--allow-remote-hosts ...)
  CLI11_PARSE(cli, argc, argv);
  return run_job_child(args, [](JobStore&, const JobChildArgs&) { return test_job(); });
}
