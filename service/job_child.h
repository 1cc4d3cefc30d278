// service/job_child.h — the entry point of a job's child process: read the job, run it, report.
//
// Owns the child's side of job_supervisor.h: opens the job database, reads the
// job's request and uploaded file, runs the job function on this thread, and
// writes progress lines and then one result or error line to the report pipe
// (job_report.h). An allocation that fails under the memory limit the
// supervisor set ends the process with JobExitCode::memory_limit; anything
// that kills the process (a signal) is judged by the supervisor. The child is
// never asked to stop: cancel and stalls end its process tree from outside.
// Entry points that call this: `tapp-server --run-job` (placer's optimize(),
// service/optimize_job.h) and the test-only job program in tests/service/.
// Thread safety: call once per process, from main.
#pragma once

#include <functional>
#include <string>

#include "service/jobs.h"

namespace tapp::service {

struct JobChildArgs {
  std::string job_id;    // --run-job
  std::string db_path;   // --db
  int report_fd = -1;    // --report-fd: where report lines go
  std::string work_dir;  // --work-dir: the job's scratch directory (the supervisor removes it)
};

// Builds the job function once the store is open (the real job keeps its
// profiles in the store).
using JobFnFactory = std::function<JobFn(JobStore& store, const JobChildArgs& args)>;

// Runs one job and returns the process's exit code (JobExitCode).
int run_job_child(const JobChildArgs& args, const JobFnFactory& make_job);

}  // namespace tapp::service
