// runtime/control_channel.h — the one protocol between the coordinator and its workers.
//
// Owns every message the two ends exchange, so neither writes a key or a line
// of its own:
//   over the run's c10d::TCPStore (ControlChannel, both ends):
//     coordinator -> workers   the plan            "job"             (Job as JSON, runtime/job.h)
//     worker -> coordinator    a step finished     "progress/<rank>" (a counter)
//                              its parameters      "params/<layer>"  (float32, LayerGraph order;
//                                                  "params/<layer>/r<k>" from replica k > 0 of a replicated group)
//                              its report          "report/<rank>"   (WorkerReport as JSON)
//                              it is done          "done/<rank>"     (read back: TCPStore's set is not acknowledged)
//                              why it failed       "error/<rank>"    (one line, read back too)
//   over a `tapp-worker --listen` connection (one line each way, '\n' added by the sender):
//     coordinator -> listener  "ping" | "job <store_port> <rank> <world>" (the store's host is the
//                              coordinator's address as the listener sees it)
//     listener -> coordinator  "pong" | "exit <code>" when the job's process ended | "error bad request"
// Ordering: a worker's sets reach the store in the order it makes them; "done"
// and "error" are read back, so everything before them is there when they are.
// Data flow: runtime.cpp (coordinator) and worker.cpp (worker, listener) call
// these; the store itself belongs to the caller.
// Thread safety: a ControlChannel is used by one thread (c10d::Store clients
// are not shared); the encoders are pure. Store failures (timeout, lost
// connection) surface as the store's exceptions, caught by each end's boundary;
// malformed messages come back as a Status naming what was wrong.
// No LibTorch in this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace c10d {
class Store;
}

namespace tapp {

struct Job;

// One task of one step on one worker, in ms from the step's start.
struct TaskSpan {
  std::string task;  // "F s2 m3", "X s1->s2 m3", "allreduce", "optimizer", ...
  double start_ms = 0, end_ms = 0;
};

struct WorkerStep {
  double step_ms = 0, busy_ms = 0, comm_ms = 0;
  std::vector<TaskSpan> timeline;
};

// What a worker writes back after its last step: its timed steps (warm-up excluded).
struct WorkerReport {
  int rank = 0;
  std::vector<WorkerStep> steps;
  int64_t peak_rss_bytes = 0;
  int64_t peak_tensor_bytes = 0;  // the counting CPU allocator's high-water mark (runtime/worker.cpp)
};

std::string encode_report(const WorkerReport& report);
Result<WorkerReport> decode_report(const std::string& text);

// The plan every worker runs.
std::string encode_job(const Job& job);
Result<Job> decode_job(const std::string& text);

// The `tapp-worker --listen` line protocol.
struct ListenerRequest {
  enum class Kind { ping, job };
  Kind kind = Kind::ping;
  int store_port = 0, rank = 0, world = 1;  // Kind::job
};
std::string encode_ping();
std::string encode_job_request(int store_port, int rank, int world);
Result<ListenerRequest> decode_listener_request(const std::string& line);
std::string encode_pong();
std::string encode_bad_request();
std::string encode_exit(int exit_code);
std::optional<int> decode_exit(const std::string& line);  // nullopt: not an "exit <code>" line

// Both ends' view of the store; the store is not owned and outlives the channel.
class ControlChannel {
 public:
  explicit ControlChannel(c10d::Store& store) : store_(store) {}

  // Coordinator -> workers.
  void publish_job(const Job& job);
  // Worker: waits (up to the store's timeout) for the plan.
  Result<Job> read_job();

  // Worker -> coordinator.
  void step_finished(int rank);
  // `replica`: the worker's index among its group's devices (0 when not replicated).
  void publish_parameters(int layer, const std::vector<float>& flat, int replica = 0);
  void publish_report(const WorkerReport& report);
  void mark_done(int rank);
  // Best effort (the store may be what failed): never throws.
  void publish_error(int rank, const std::string& message) noexcept;

  // Coordinator reads.
  int64_t steps_finished(int rank);
  bool is_done(int rank);
  bool all_done(int world);
  std::string error_of(int rank);  // "" when the worker left none
  Result<WorkerReport> report_of(int rank);
  std::optional<std::vector<float>> parameters_of(int layer, int replica = 0);  // nullopt: not published

 private:
  c10d::Store& store_;
};

}  // namespace tapp
