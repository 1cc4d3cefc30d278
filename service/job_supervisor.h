// service/job_supervisor.h — runs each job in a child process of its own and watches it.
//
// Owns, per job: the child process (its own process group; with a memory
// limit, SIGKILL when the server dies, the kernel's OOM killer pointed at it
// before the server), the read end of its report pipe (job_report.h), a
// scratch directory removed when the child ends, and the verdict on how the
// job ended. The child is `program --run-job ID --db PATH --report-fd 3
// --work-dir DIR [program_args...]` (job_child.h): by default the server's own
// binary in its hidden job mode; tests name a test-only job program instead.
// Data flow: JobRunner -> supervised JobFn -> fork/exec -> child reports
// progress lines (relayed to the runner's ProgressFn) and a result or error
// line -> Result<json>. The job fails, with the cause in its error, when the
// child crashes ("crashed: signal 11 (SIGSEGV)"), runs out of its memory limit
// ("exceeded its memory limit of N MiB") or reports nothing for
// stall_timeout_s ("no progress for N s"). Cancel (the runner's flag, polled
// every 20 ms) and stalls end the child's whole process tree (process_tree.h).
// Thread safety: the returned JobFn runs on any number of runner threads at
// once; each call owns its child. Children are forked from the calling thread,
// which must outlive them (runner threads do: they wait for their child).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "service/jobs.h"

namespace tapp::service {

struct JobProcessOptions {
  std::string program;                    // the job entry point to exec
  std::vector<std::string> program_args;  // appended after the standard arguments
  std::string db_path;                    // the job database the child reads its job from
  std::string work_root;                  // each job gets work_root/<job id> while it runs
  int64_t default_memory_limit_mib = 0;   // when the request sets none; 0 = no limit
  double stall_timeout_s = 1800;          // no report line for this long fails the job
};

// The JobFn that JobRunner calls: one child process per job (see above).
JobFn make_supervised_job(JobProcessOptions options);

// How a child that left no result or error line ended, as the job's error:
// "crashed: signal 6 (SIGABRT)", "exceeded its memory limit of 512 MiB", ...
std::string describe_job_exit(int wait_status, int64_t memory_limit_mib);

// A job that reported nothing for `silent_s`: "no progress for 600 s", and,
// when its writable memory was near its limit, that too: a library may wait
// forever for memory it cannot get (OpenBLAS retries a failed allocation).
std::string describe_stall(double silent_s, int64_t data_mib, int64_t memory_limit_mib);

// "600 s", "1.5 s": a duration as the job's error shows it.
std::string format_seconds(double s);

}  // namespace tapp::service
