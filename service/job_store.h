// service/job_store.h — every placement job, its inputs, progress and result, in SQLite.
//
// Owns the database file (WAL mode, synchronous=NORMAL: a committed write
// survives a SIGKILL of the server). Tables: jobs (status, request, latest
// progress, error, restarts), uploads (TorchScript bytes of a job), events
// (progress history), results, profile_cache (key -> profiled layer library),
// policies (trained policy files, POST /policies; jobs start from the latest).
// Data flow: router -> insert -> runner updates status/progress/result ->
// router reads. On start, `recover` turns jobs interrupted mid-run back into
// queued jobs exactly once per interruption (same id, restarts + 1).
// Thread safety: every method may be called from any thread; one connection
// guarded by a mutex (SQLite statements are short).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

struct sqlite3;

namespace tapp::service {

// Job states. `profiling` and `optimizing` are the running states.
inline constexpr const char* kQueued = "queued";
inline constexpr const char* kProfiling = "profiling";
inline constexpr const char* kOptimizing = "optimizing";
inline constexpr const char* kSucceeded = "succeeded";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kCancelled = "cancelled";
bool is_known_status(const std::string& s);
bool is_running_status(const std::string& s);
bool is_final_status(const std::string& s);

struct JobRecord {
  std::string id;
  int64_t seq = 0;  // insertion order
  std::string status = kQueued;
  std::string model_label;  // zoo name, graph name or upload file name (for lists)
  nlohmann::json request;   // POST /placements body (without uploaded bytes)
  nlohmann::json progress;  // latest ProgressEvent as JSON (null before the first)
  nlohmann::json result;    // null unless succeeded
  std::string error;        // failed: why
  int restarts = 0;         // times the job was re-queued after a server crash
  double created_at_s = 0, updated_at_s = 0, started_at_s = 0, finished_at_s = 0;  // unix seconds
};

struct JobEvent {
  int64_t seq = 0;
  double at_s = 0;
  nlohmann::json event;
};

struct JobPage {
  std::vector<JobRecord> jobs;  // newest first, without result
  int64_t total = 0;            // matching the filter
};

double now_s();

// A trained policy file kept by the server (tapp-cli train-policy's output).
struct StoredPolicy {
  int64_t id = 0;
  double created_at_s = 0;
  int feature_version = 0;
  nlohmann::json trained_on;
  std::string bytes;  // empty in lists
  int64_t size = 0;
};

class JobStore {
 public:
  static Result<std::unique_ptr<JobStore>> open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Inserts a queued job; fills id (when empty), seq and times. `upload` holds
  // the bytes of an uploaded model file (may be empty).
  Status insert(JobRecord& job, const std::string& upload = {});
  Result<std::optional<JobRecord>> get(const std::string& id, bool with_result = true);
  Result<JobPage> list(const std::string& status_filter, int64_t limit, int64_t offset);
  Result<std::optional<std::string>> upload(const std::string& id);

  // Moves the job to `to` only if it is in one of `from`; returns whether it moved.
  Result<bool> transition(const std::string& id, const std::vector<std::string>& from,
                          const std::string& to, const std::string& error = {});
  // Running -> succeeded with the result, in one transaction; false if no longer running.
  Result<bool> finish_succeeded(const std::string& id, const nlohmann::json& result);
  Status set_progress(const std::string& id, const nlohmann::json& progress);
  Status add_event(const std::string& id, const nlohmann::json& event);
  Result<std::vector<JobEvent>> events(const std::string& id, int64_t after_seq, int64_t limit);

  // Crash recovery: every job in a running state becomes queued (restarts + 1,
  // an event records it); returns the ids of all queued jobs, oldest first.
  Result<std::vector<std::string>> recover();
  Result<std::string> integrity_check();
  Result<std::string> journal_mode();

  // Profile cache: opaque values by key (a layer library per model+device kind).
  Status cache_put(const std::string& key, const std::string& value);
  Result<std::optional<std::string>> cache_get(const std::string& key);

  // Trained policies: kept whole; the newest of a feature version starts jobs.
  Result<StoredPolicy> add_policy(const std::string& bytes, int feature_version, const nlohmann::json& trained_on);
  Result<std::vector<StoredPolicy>> list_policies(int64_t limit);  // newest first, without bytes
  Result<std::optional<StoredPolicy>> latest_policy(int feature_version);

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  Status exec(const char* sql);
  sqlite3* db_;
  std::mutex mu_;
};

}  // namespace tapp::service
