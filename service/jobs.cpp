// service/jobs.cpp — queue, runners and core leases (see jobs.h).
#include "service/jobs.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/cluster.h"

namespace tapp::service {
using nlohmann::json;

int cores_needed(const json& request, int total_cores) {
  std::string evaluator = evaluator_kind_name(EvaluatorKind::simulate);
  if (auto o = request.find("options"); o != request.end() && o->is_object())
    if (auto e = o->find("evaluator"); e != o->end() && e->is_string()) evaluator = e->get<std::string>();
  if (Result<EvaluatorKind> kind = evaluator_kind_from_name(evaluator, "options.evaluator");
      kind && *kind == EvaluatorKind::simulate)
    return 0;
  auto c = request.find("cluster");
  if (c == request.end()) return 1;
  Result<Cluster> cluster = cluster_from_json(*c);
  if (!cluster) return 1;
  int n = static_cast<int>(std::ceil(cluster->emulated_core_demand() - 1e-9));
  return std::clamp(n, 1, std::max(1, total_cores));
}

bool CoreLeases::acquire(int n, const std::atomic<bool>& cancel) {
  n = std::min(n, total_);
  std::unique_lock<std::mutex> lock(mu_);
  while (free_ < n) {
    if (cancel.load()) return false;
    cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
  free_ -= n;
  return true;
}

void CoreLeases::release(int n) {
  n = std::min(n, total_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_ += n;
  }
  cv_.notify_all();
}

int CoreLeases::free_cores() {
  std::lock_guard<std::mutex> lock(mu_);
  return free_;
}

namespace {
int hardware_cores(int configured) {
  if (configured > 0) return configured;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}
}  // namespace

JobRunner::JobRunner(JobStore& store, JobFn fn, JobsOptions options)
    : store_(store), fn_(std::move(fn)), options_(options), cores_(hardware_cores(options.total_cores)) {
  options_.runners = std::max(1, options_.runners);
  options_.queue_size = std::max(1, options_.queue_size);
}

JobRunner::~JobRunner() { stop(); }

void JobRunner::start(const std::vector<std::string>& recovered) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : recovered)
    if (std::find(queue_.begin(), queue_.end(), id) == queue_.end()) queue_.push_back(id);
  for (int i = 0; i < options_.runners; ++i) threads_.emplace_back([this] { run_loop(); });
}

void JobRunner::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    for (auto& [id, r] : running_) r->cancel = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

SubmitError JobRunner::submit(JobRecord& job, const std::string& upload, std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(queue_.size()) >= options_.queue_size) {
    if (error) *error = "the job queue is full (" + std::to_string(options_.queue_size) + " queued); retry later";
    return SubmitError::queue_full;
  }
  if (Status s = store_.insert(job, upload); !s) {
    if (error) *error = s.message();
    return SubmitError::store_failed;
  }
  queue_.push_back(job.id);
  cv_.notify_one();
  return SubmitError::none;
}

Result<bool> JobRunner::cancel(const std::string& id, std::string* status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = running_.find(id); it != running_.end()) {
    it->second->user_cancelled = true;
    it->second->cancel = true;
  }
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  Result<bool> moved = store_.transition(id, {kQueued, kProfiling, kOptimizing}, kCancelled, "cancelled by the user");
  if (!moved) return moved.status();
  if (*moved) {
    store_.add_event(id, json{{"phase", "cancelled"}});
    if (status) *status = kCancelled;
    return true;
  }
  Result<std::optional<JobRecord>> job = store_.get(id, false);
  if (!job) return job.status();
  if (status) *status = job->has_value() ? (*job)->status : "";
  return false;
}

json JobRunner::live_progress(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(id);
  return it == running_.end() ? json() : it->second->progress;
}

int JobRunner::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

int JobRunner::running() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(running_.size());
}

void JobRunner::run_loop() {
  for (;;) {
    std::string id;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
    }
    run_one(id);
  }
}

void JobRunner::on_progress(const std::string& id, Running& r, const ProgressEvent& e) {
  json p = progress_to_json(e);
  bool phase_changed, store_event;
  double t = now_s();
  {
    std::lock_guard<std::mutex> lock(mu_);
    phase_changed = e.phase != r.phase;
    bool improved = e.best_step_ms > 0 && (r.best_step_ms == 0 || e.best_step_ms < r.best_step_ms);
    bool last = e.total_iterations > 0 && e.iteration >= e.total_iterations;
    // Enough points for a curve of any job length: phase changes, improvements,
    // about 200 evenly spaced iterations, and at least every event_interval_s.
    int stride = std::max(1, e.total_iterations / 200);
    store_event = phase_changed || last || improved || t - r.last_event_s >= options_.event_interval_s ||
                  (e.iteration > 0 && e.iteration % stride == 0);
    if (r.events >= options_.max_events_per_job && !phase_changed) store_event = false;
    r.progress = p;
    r.phase = e.phase;
    if (e.best_step_ms > 0) r.best_step_ms = e.best_step_ms;
    if (store_event) {
      r.last_event_s = t;
      ++r.events;
    }
  }
  if (phase_changed && e.phase != "profiling" && e.phase != "waiting_for_cores")
    store_.transition(id, {kProfiling}, kOptimizing);
  if (store_event) {
    store_.add_event(id, p);
    store_.set_progress(id, p);
  }
}

void JobRunner::run_one(const std::string& id) {
  auto r = std::make_shared<Running>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_[id] = r;
  }
  auto forget = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(id);
  };
  Result<bool> started = store_.transition(id, {kQueued}, kProfiling);
  if (!started || !*started) return forget();  // cancelled while queued, or gone
  Result<std::optional<JobRecord>> job = store_.get(id, false);
  if (!job || !job->has_value()) {
    store_.transition(id, {kProfiling, kOptimizing}, kFailed,
                      job ? "job vanished from the store" : job.error_message());
    return forget();
  }
  JobInput input{id, (*job)->request, {}};
  if (Result<std::optional<std::string>> up = store_.upload(id); up && up->has_value()) input.upload = **up;

  ProgressFn progress = [this, id, r](const ProgressEvent& e) { on_progress(id, *r, e); };
  int cores = cores_needed(input.request, cores_.total());
  bool leased = false;
  Result<json> result = Status::error("cancelled");
  if (cores > 0) {
    ProgressEvent wait;
    wait.phase = "waiting_for_cores";
    progress(wait);
    leased = cores_.acquire(cores, r->cancel);
  }
  if (cores == 0 || leased) {
    try {
      result = fn_(input, progress, r->cancel);
    } catch (const std::exception& e) {
      result = Status::error(std::string("internal error: ") + e.what());
    } catch (...) {
      result = Status::error("internal error");
    }
  }
  if (leased) cores_.release(cores);

  bool user_cancelled = r->user_cancelled.load();
  bool shutting_down;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down = stopping_;
  }
  if (user_cancelled) {
    // DELETE already moved it to cancelled; nothing to store.
  } else if (result.is_ok()) {
    json p;
    bool had_done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      had_done = r->phase == "done";
      if (r->progress.is_object()) {
        r->progress["phase"] = "done";
        p = r->progress;
      }
    }
    if (p.is_object()) {
      store_.set_progress(id, p);
      if (!had_done) store_.add_event(id, p);
    }
    store_.finish_succeeded(id, *result);
  } else if (shutting_down) {
    // Left in its running state: the next start re-queues it (as after a crash).
  } else {
    store_.transition(id, {kProfiling, kOptimizing}, kFailed, result.error_message());
    store_.add_event(id, json{{"phase", "failed"}, {"error", result.error_message()}});
  }
  forget();
}

}  // namespace tapp::service
