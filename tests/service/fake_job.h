// tests/service/fake_job.h — a stand-in job function for the service tests (test-only code).
//
// Used in process by the runner and router tests, and in a job's child process
// by the test-only job program (test_job_main.cpp) that tests start tapp-server
// with (--job-program), so real-server and browser tests run quickly.
// Emits the same progress phases as placer's optimize() (profiling, baselines,
// optimizing with a falling best step time, done), polls `cancel` every 10 ms,
// and returns a result of the same shape as optimize() (best placement with
// layers coloured by device, a GPipe timeline, a baselines table), built from
// the request's model (zoo layer names when known) and cluster. The numbers
// are made up and labelled so (result.fake = true).
// Thread safety: the returned function may run on several threads at once.
#pragma once

#include "service/jobs.h"

namespace tapp::testing {

using service::JobFn;

struct FakeJobOptions {
  int iteration_ms = 40;       // sleep per iteration
  int default_iterations = 25;  // when options.iterations is 0
  bool fail = false;           // every job fails (tests of the failure path)
};

JobFn make_fake_job(FakeJobOptions options = {});

}  // namespace tapp::testing
