// service/fake_job.h — a stand-in job function for tests and demos (tapp-server --fake-jobs).
//
// Emits the same progress phases as placer's optimize() (profiling, baselines,
// optimizing with a falling best step time, done), polls `cancel` every 10 ms,
// and returns a result of the same shape as optimize() (best placement with
// layers coloured by device, a GPipe timeline, a baselines table), built from
// the request's model (zoo layer names when known) and cluster. The numbers
// are made up and labelled so (result.fake = true).
// Thread safety: the returned function may run on several threads at once.
#pragma once

#include "service/jobs.h"

namespace tapp::service {

struct FakeJobOptions {
  int iteration_ms = 40;       // sleep per iteration
  int default_iterations = 25;  // when options.iterations is 0
  bool fail = false;           // every job fails (tests of the failure path)
};

JobFn make_fake_job(FakeJobOptions options = {});

}  // namespace tapp::service
