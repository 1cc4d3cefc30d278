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
//   the profile exchange, for a device whose costs are "worker" (its own
//   hardware profiles the model; runtime/worker_profile.h):
//     coordinator -> listener  "device <kind> <threads>"          -> "device <WorkerDevice JSON>"
//                              "profile <n>" + n bytes of ProfileRequest JSON
//                                                                  -> "profile <n>" + n bytes of ProfileReply JSON
//     either answered "error <message>" when the worker cannot (no CUDA, a model it cannot build).
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

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "model/layer_library.h"

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
  enum class Kind { ping, job, device, profile };
  Kind kind = Kind::ping;
  int store_port = 0, rank = 0, world = 1;  // Kind::job
  std::string device_kind = "cpu";          // Kind::device
  int threads = 1;                          // Kind::device
  int64_t payload_bytes = 0;                // Kind::profile: the ProfileRequest that follows the line
};
inline constexpr int64_t kMaxProfilePayloadBytes = int64_t{256} << 20;
std::string encode_ping();
std::string encode_job_request(int store_port, int rank, int world);
std::string encode_device_request(const std::string& device_kind, int threads);
std::string encode_profile_header(int64_t payload_bytes);  // "profile <n>": request and reply

// A worker's hardware as its profiles are keyed: the host's CPU model, the
// device's kind and threads, the worker's LibTorch version, timing method and
// allocator. Profiles measured by a worker are cached under fingerprint().
struct WorkerDevice {
  std::string device_kind = "cpu";
  int threads = 1;
  std::string cpu_model, libtorch_version, allocator;
  int timing_method = 0;
  std::string gpu;  // for cuda:N: the GPU's name and memory ("NVIDIA H100 80GB HBM3, 81559 MiB"); else empty
  std::string fingerprint() const;  // 16 hex digits
  std::string describe() const;     // "AMD EPYC, 2 threads, LibTorch 1.13.0, timing method 4, tcmalloc"
};
nlohmann::json worker_device_to_json(const WorkerDevice& device);
Result<WorkerDevice> worker_device_from_json(const nlohmann::json& j);
std::string encode_device_reply(const WorkerDevice& device);

// What a coordinator asks a worker to profile: the model (JSON layer graph,
// model/model_json.h), the device's kind and threads, the micro-batch sizes.
struct ProfileRequest {
  nlohmann::json model;
  std::string device_kind = "cpu";
  int threads = 1;
  std::vector<int64_t> batch_sizes;
  uint64_t seed = 1;
};
struct ProfileReply {
  WorkerDevice device;
  std::vector<LayerLibrary> libraries;                   // ascending batch size
  std::vector<std::pair<int64_t, std::string>> skipped;  // (batch size, why it could not be profiled)
};
std::string encode_profile_request(const ProfileRequest& request);
Result<ProfileRequest> decode_profile_request(const std::string& text);
std::string encode_profile_reply(const ProfileReply& reply);
Result<ProfileReply> decode_profile_reply(const std::string& text);
std::string encode_error_reply(const std::string& message);  // "error <message>" on one line

// A listener's one-line answer: "device <json>", "profile <n>" or "error <message>".
struct ListenerReply {
  enum class Kind { device, profile, error };
  Kind kind = Kind::error;
  std::string text;           // device: the JSON; error: the message
  int64_t payload_bytes = 0;  // profile
};
Result<ListenerReply> decode_listener_reply(const std::string& line);
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
