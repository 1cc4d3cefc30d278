// service/jobs.h — the bounded job queue and the runner threads that execute jobs.
//
// Owns: a FIFO of queued job ids (bounded: a full queue refuses new jobs), N
// runner threads, each job's cancel flag and latest progress, and the core
// leases: a job whose evaluator measures (measure | hybrid) holds as many
// cores as its cluster's local devices need (sum of speed * threads, at most
// the machine's cores) so two jobs never measure on the same cores at once.
// Data flow: submit -> JobStore.insert -> queue -> runner: JobFn(request,
// progress, cancel) -> JobStore (status, throttled events, result or error).
// The job function is injected: the server binds a supervisor that runs each
// job in its own child process (job_supervisor.h); the unit tests bind
// in-process fakes (tests/service/fake_job.h).
// Thread safety: all public methods are thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "placer/optimize.h"
#include "service/job_report.h"
#include "service/job_store.h"

namespace tapp::service {

struct JobInput {
  std::string id;
  nlohmann::json request;  // the POST /placements body as stored
  std::string upload;      // uploaded model file bytes (empty if none)
};

using JobFn = std::function<Result<nlohmann::json>(const JobInput& input, const ProgressFn& progress,
                                                   const std::atomic<bool>& cancel)>;

// Cores a job must hold while it runs: 0 for `simulate`, else its cluster's
// local core demand rounded up, clamped to [1, total_cores].
int cores_needed(const nlohmann::json& request, int total_cores);

// A counting semaphore over the machine's cores.
class CoreLeases {
 public:
  explicit CoreLeases(int total) : total_(total), free_(total) {}
  // Blocks until `n` cores are free or `cancel` is set (polled every 50 ms); false when cancelled.
  bool acquire(int n, const std::atomic<bool>& cancel);
  void release(int n);
  int free_cores();
  int total() const { return total_; }

 private:
  const int total_;
  int free_;
  std::mutex mu_;
  std::condition_variable cv_;
};

struct JobsOptions {
  int runners = 1;
  int queue_size = 64;
  int total_cores = 0;  // 0 = std::thread::hardware_concurrency()
  double event_interval_s = 0.25;  // a progress event is stored at least this often while a job runs
  int max_events_per_job = 2000;
};

enum class SubmitError { none, queue_full, store_failed };

class JobRunner {
 public:
  JobRunner(JobStore& store, JobFn fn, JobsOptions options);
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Starts the runner threads; `recovered` are already-queued ids (oldest first).
  void start(const std::vector<std::string>& recovered = {});
  // Stops taking jobs, cancels running ones (they stay in their running state
  // in the store, as after a crash, so the next start runs them again) and joins.
  void stop();

  // Stores and enqueues a job. On success job.id is set.
  SubmitError submit(JobRecord& job, const std::string& upload, std::string* error);
  // Cancels a queued or running job. Returns false when the job is not found
  // or already finished (then `status` holds its state).
  Result<bool> cancel(const std::string& id, std::string* status);
  // Latest in-memory progress of a running job (null if not running here).
  nlohmann::json live_progress(const std::string& id);

  int queued();
  int running();
  int queue_capacity() const { return options_.queue_size; }
  CoreLeases& cores() { return cores_; }

 private:
  struct Running {
    std::atomic<bool> cancel{false};          // polled by the job function
    std::atomic<bool> user_cancelled{false};  // DELETE (vs. server shutdown)
    nlohmann::json progress;
    std::string phase;
    double last_event_s = 0;
    double best_step_ms = 0;
    int events = 0;
  };
  void run_loop();
  void run_one(const std::string& id);
  void on_progress(const std::string& id, Running& r, const ProgressEvent& e);

  JobStore& store_;
  JobFn fn_;
  JobsOptions options_;
  CoreLeases cores_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::map<std::string, std::shared_ptr<Running>> running_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tapp::service
