#include "runtime/control_channel.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/fingerprint.h"
#include "runtime/job.h"

namespace tapp {
namespace {
using nlohmann::json;

// The store's keys: the only place they are spelled.
const std::string kJobKey = "job";
std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }
// Replica 0 (a group's first device, or an unreplicated group's only one) keeps the plain key.
std::string params_key(int layer, int replica) {
  return "params/" + std::to_string(layer) + (replica == 0 ? "" : "/r" + std::to_string(replica));
}
std::string report_key(int rank) { return "report/" + std::to_string(rank); }
std::string done_key(int rank) { return "done/" + std::to_string(rank); }
std::string error_key(int rank) { return "error/" + std::to_string(rank); }

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string to_string(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

std::string encode_report(const WorkerReport& report) {
  json steps = json::array();
  for (const WorkerStep& s : report.steps) {
    json timeline = json::array();
    for (const TaskSpan& t : s.timeline) timeline.push_back({t.task, t.start_ms, t.end_ms});
    steps.push_back({{"step_ms", s.step_ms}, {"busy_ms", s.busy_ms}, {"comm_ms", s.comm_ms}, {"timeline", timeline}});
  }
  return json{{"rank", report.rank}, {"steps", steps}, {"peak_rss_bytes", report.peak_rss_bytes},
              {"peak_tensor_bytes", report.peak_tensor_bytes}}.dump();
}

Result<WorkerReport> decode_report(const std::string& text) {
  WorkerReport r;
  try {
    const json j = json::parse(text);
    r.rank = j.at("rank").get<int>();
    r.peak_rss_bytes = j.at("peak_rss_bytes").get<int64_t>();
    r.peak_tensor_bytes = j.value("peak_tensor_bytes", int64_t{0});
    for (const json& s : j.at("steps")) {
      WorkerStep step;
      step.step_ms = s.at("step_ms").get<double>();
      step.busy_ms = s.at("busy_ms").get<double>();
      step.comm_ms = s.at("comm_ms").get<double>();
      for (const json& t : s.at("timeline"))
        step.timeline.push_back(TaskSpan{t.at(0).get<std::string>(), t.at(1).get<double>(), t.at(2).get<double>()});
      r.steps.push_back(std::move(step));
    }
  } catch (const std::exception& e) {
    return Status::error(std::string("worker report: ") + e.what());
  }
  return r;
}

std::string encode_job(const Job& job) { return job_to_json(job).dump(); }

Result<Job> decode_job(const std::string& text) {
  try {
    return job_from_json(json::parse(text));
  } catch (const std::exception& e) {
    return Status::error(std::string("job: ") + e.what());
  }
}

std::string encode_ping() { return "ping"; }
std::string encode_pong() { return "pong"; }
std::string encode_bad_request() { return "error bad request"; }

std::string encode_job_request(int store_port, int rank, int world) {
  return "job " + std::to_string(store_port) + " " + std::to_string(rank) + " " + std::to_string(world);
}

std::string encode_device_request(const std::string& device_kind, int threads) {
  return "device " + device_kind + " " + std::to_string(threads);
}

std::string encode_profile_header(int64_t payload_bytes) { return "profile " + std::to_string(payload_bytes); }

Result<ListenerRequest> decode_listener_request(const std::string& line) {
  ListenerRequest r;
  if (line == encode_ping()) return r;
  std::istringstream in(line);
  std::string word, extra;
  if (line.rfind("device ", 0) == 0) {
    if (!(in >> word >> r.device_kind >> r.threads) || (in >> extra) || r.threads < 1 || r.threads > 256)
      return Status::error("expected \"device <kind> <threads 1..256>\", got \"" + line + "\"");
    r.kind = ListenerRequest::Kind::device;
    return r;
  }
  if (line.rfind("profile ", 0) == 0) {
    if (!(in >> word >> r.payload_bytes) || (in >> extra) || r.payload_bytes < 1 ||
        r.payload_bytes > kMaxProfilePayloadBytes)
      return Status::error("expected \"profile <bytes>\" (at most 256 MiB), got \"" + line + "\"");
    r.kind = ListenerRequest::Kind::profile;
    return r;
  }
  if (!(in >> word >> r.store_port >> r.rank >> r.world) || word != "job" || (in >> extra))
    return Status::error("expected \"ping\" or \"job <store_port> <rank> <world>\", got \"" + line + "\"");
  if (r.store_port < 1 || r.store_port > 65535 || r.world < 1 || r.rank < 0 || r.rank >= r.world)
    return Status::error("job request out of range: \"" + line + "\"");
  r.kind = ListenerRequest::Kind::job;
  return r;
}

std::string WorkerDevice::fingerprint() const {
  const std::string text = "worker-device-v1\x1e" + device_kind + "\x1f" + std::to_string(threads) + "\x1f" + cpu_model +
                           "\x1f" + libtorch_version + "\x1f" + std::to_string(timing_method) + "\x1f" + allocator +
                           (gpu.empty() ? "" : "\x1f" + gpu);  // CPU devices keep their earlier fingerprints
  return hex16(fnv1a64(text));
}

std::string WorkerDevice::describe() const {
  return (gpu.empty() ? "" : gpu + " on ") + (cpu_model.empty() ? "unknown CPU" : cpu_model) + ", " + device_kind +
         " x" + std::to_string(threads) +
         " threads, LibTorch " + libtorch_version + ", timing method " + std::to_string(timing_method) + ", " + allocator;
}

json worker_device_to_json(const WorkerDevice& d) {
  json j = {{"device_kind", d.device_kind}, {"threads", d.threads},
            {"cpu_model", d.cpu_model},     {"libtorch_version", d.libtorch_version},
            {"allocator", d.allocator},     {"timing_method", d.timing_method},
            {"fingerprint", d.fingerprint()}};
  if (!d.gpu.empty()) j["gpu"] = d.gpu;
  return j;
}

Result<WorkerDevice> worker_device_from_json(const json& j) {
  WorkerDevice d;
  try {
    d.device_kind = j.at("device_kind").get<std::string>();
    d.threads = j.at("threads").get<int>();
    d.cpu_model = j.at("cpu_model").get<std::string>();
    d.libtorch_version = j.at("libtorch_version").get<std::string>();
    d.allocator = j.at("allocator").get<std::string>();
    d.timing_method = j.at("timing_method").get<int>();
    d.gpu = j.value("gpu", std::string());
  } catch (const std::exception& e) {
    return Status::error(std::string("worker device: ") + e.what());
  }
  return d;
}

std::string encode_device_reply(const WorkerDevice& device) { return "device " + worker_device_to_json(device).dump(); }

std::string encode_profile_request(const ProfileRequest& r) {
  return json{{"model", r.model}, {"device_kind", r.device_kind}, {"threads", r.threads},
              {"batch_sizes", r.batch_sizes}, {"seed", r.seed}}
      .dump();
}

Result<ProfileRequest> decode_profile_request(const std::string& text) {
  ProfileRequest r;
  try {
    const json j = json::parse(text);
    r.model = j.at("model");
    r.device_kind = j.at("device_kind").get<std::string>();
    r.threads = j.at("threads").get<int>();
    r.batch_sizes = j.at("batch_sizes").get<std::vector<int64_t>>();
    r.seed = j.at("seed").get<uint64_t>();
  } catch (const std::exception& e) {
    return Status::error(std::string("profile request: ") + e.what());
  }
  if (r.threads < 1 || r.threads > 256) return Status::error("profile request: threads must be in [1, 256]");
  if (r.batch_sizes.empty() || r.batch_sizes.size() > 64)
    return Status::error("profile request: batch_sizes must list 1 to 64 sizes");
  for (int64_t b : r.batch_sizes)
    if (b < 1 || b > 65536) return Status::error("profile request: batch sizes must be in [1, 65536]");
  return r;
}

std::string encode_profile_reply(const ProfileReply& r) {
  json libs = json::array(), skipped = json::array();
  for (const LayerLibrary& lib : r.libraries) libs.push_back(library_to_json(lib));
  for (const auto& [batch, why] : r.skipped) skipped.push_back({{"batch_size", batch}, {"error", why}});
  return json{{"device", worker_device_to_json(r.device)}, {"libraries", libs}, {"skipped", skipped}}.dump();
}

Result<ProfileReply> decode_profile_reply(const std::string& text) {
  ProfileReply r;
  try {
    const json j = json::parse(text);
    auto device = worker_device_from_json(j.at("device"));
    if (!device) return device.status();
    r.device = *device;
    for (const json& lj : j.at("libraries")) {
      auto lib = library_from_json(lj);
      if (!lib) return lib.status().with_context("profile reply");
      r.libraries.push_back(std::move(*lib));
    }
    for (const json& sj : j.at("skipped"))
      r.skipped.emplace_back(sj.at("batch_size").get<int64_t>(), sj.at("error").get<std::string>());
  } catch (const std::exception& e) {
    return Status::error(std::string("profile reply: ") + e.what());
  }
  return r;
}

std::string encode_error_reply(const std::string& message) {
  std::string one_line = message.substr(0, message.find('\n'));
  return "error " + one_line;
}

Result<ListenerReply> decode_listener_reply(const std::string& line) {
  ListenerReply r;
  if (line.rfind("device ", 0) == 0) {
    r.kind = ListenerReply::Kind::device;
    r.text = line.substr(7);
    return r;
  }
  if (line.rfind("error ", 0) == 0) {
    r.kind = ListenerReply::Kind::error;
    r.text = line.substr(6);
    return r;
  }
  std::istringstream in(line);
  std::string word, extra;
  if (line.rfind("profile ", 0) == 0 && (in >> word >> r.payload_bytes) && !(in >> extra) && r.payload_bytes > 0 &&
      r.payload_bytes <= kMaxProfilePayloadBytes) {
    r.kind = ListenerReply::Kind::profile;
    return r;
  }
  return Status::error("expected \"device <json>\", \"profile <bytes>\" or \"error <message>\" from the worker, got \"" +
                       line.substr(0, 200) + "\"");
}

std::string encode_exit(int exit_code) { return "exit " + std::to_string(exit_code); }

std::optional<int> decode_exit(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  int code = 0;
  if (!(in >> word >> code) || word != "exit") return std::nullopt;
  return code;
}

void ControlChannel::publish_job(const Job& job) { store_.set(kJobKey, to_bytes(encode_job(job))); }

Result<Job> ControlChannel::read_job() { return decode_job(to_string(store_.get(kJobKey))); }

void ControlChannel::step_finished(int rank) { store_.add(progress_key(rank), 1); }

void ControlChannel::publish_parameters(int layer, const std::vector<float>& flat, int replica) {
  std::vector<uint8_t> bytes(flat.size() * sizeof(float));
  if (!flat.empty()) std::memcpy(bytes.data(), flat.data(), bytes.size());
  store_.set(params_key(layer, replica), bytes);
}

void ControlChannel::publish_report(const WorkerReport& report) {
  store_.set(report_key(report.rank), to_bytes(encode_report(report)));
}

void ControlChannel::mark_done(int rank) {
  store_.set(done_key(rank), to_bytes("1"));
  // TCPStore's set is not acknowledged: read the key back so the coordinator
  // has it before this process exits (else it sees exit 0 without "done").
  store_.get(done_key(rank));
}

void ControlChannel::publish_error(int rank, const std::string& message) noexcept {
  try {
    store_.set(error_key(rank), to_bytes(message));
    store_.get(error_key(rank));  // acknowledged before the worker exits, as in mark_done
  } catch (...) {
  }
}

int64_t ControlChannel::steps_finished(int rank) { return store_.add(progress_key(rank), 0); }

bool ControlChannel::is_done(int rank) { return store_.check({done_key(rank)}); }

bool ControlChannel::all_done(int world) {
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(done_key(r));
  return store_.check(keys);
}

std::string ControlChannel::error_of(int rank) {
  const std::string key = error_key(rank);
  return store_.check({key}) ? to_string(store_.get(key)) : "";
}

Result<WorkerReport> ControlChannel::report_of(int rank) {
  auto report = decode_report(to_string(store_.get(report_key(rank))));
  if (!report) return report.status().with_context("worker " + std::to_string(rank));
  return report;
}

std::optional<std::vector<float>> ControlChannel::parameters_of(int layer, int replica) {
  const std::string key = params_key(layer, replica);
  if (!store_.check({key})) return std::nullopt;
  const std::vector<uint8_t> bytes = store_.get(key);
  std::vector<float> flat(bytes.size() / sizeof(float));
  if (!flat.empty()) std::memcpy(flat.data(), bytes.data(), flat.size() * sizeof(float));
  return flat;
}

}  // namespace tapp
