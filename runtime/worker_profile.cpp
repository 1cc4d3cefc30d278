// runtime/worker_profile.cpp — see worker_profile.h.
#include "runtime/worker_profile.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/allocator.h"
#include "model/model_json.h"
#include "profiler/accelerator.h"
#include "profiler/profiler.h"
#include "runtime/worker_group.h"

namespace tapp {
namespace {
using Clock = std::chrono::steady_clock;

// One connection to a listener; closes on destruction. Reads and writes give
// up at the deadline with an error naming the worker.
class WorkerConnection {
 public:
  WorkerConnection(std::string where, double timeout_s)
      : where_(std::move(where)),
        deadline_(Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))) {}
  ~WorkerConnection() {
    if (fd_ >= 0) close(fd_);
  }
  Status open() {
    Result<int> fd = connect_to_worker(where_, kWorkerConnectTimeoutS);
    if (!fd) return fd.status();
    fd_ = *fd;
    return Status::ok();
  }
  Status send_all(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return Status::error("worker " + where_ + ": the connection was lost while sending");
      off += static_cast<size_t>(n);
    }
    return Status::ok();
  }
  Result<std::string> read_line() {
    std::string line;
    char ch = 0;
    while (true) {
      if (Status s = read_bytes(&ch, 1); !s) return s;
      if (ch == '\n') return line;
      line.push_back(ch);
      if (line.size() > 64 * 1024) return Status::error("worker " + where_ + ": a reply line over 64 KiB");
    }
  }
  Result<std::string> read_payload(int64_t n) {
    std::string out(static_cast<size_t>(n), '\0');
    if (Status s = read_bytes(out.data(), out.size()); !s) return s;
    return out;
  }

 private:
  Status read_bytes(char* into, size_t n) {
    size_t got = 0;
    while (got < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) return Status::error("worker " + where_ + ": no reply in time");
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) <= 0) continue;
      ssize_t r = recv(fd_, into + got, n - got, 0);
      if (r <= 0) return Status::error("worker " + where_ + ": the connection closed before the reply was complete");
      got += static_cast<size_t>(r);
    }
    return Status::ok();
  }

  std::string where_;
  Clock::time_point deadline_;
  int fd_ = -1;
};

std::string first_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon == std::string::npos) break;
      std::string model = line.substr(colon + 1);
      model.erase(0, model.find_first_not_of(" \t"));
      return model;
    }
  return "unknown CPU";
}

std::string error_line(const std::string& message) { return encode_error_reply(message) + "\n"; }

}  // namespace

Result<WorkerDevice> describe_worker_device(const std::string& where, const std::string& device_kind, int threads,
                                            double timeout_s) {
  WorkerConnection c(where, timeout_s);
  if (Status s = c.open(); !s) return s;
  if (Status s = c.send_all(encode_device_request(device_kind, threads) + "\n"); !s) return s;
  Result<std::string> line = c.read_line();
  if (!line) return line.status();
  Result<ListenerReply> reply = decode_listener_reply(*line);
  if (!reply) return reply.status().with_context("worker " + where);
  if (reply->kind == ListenerReply::Kind::error)
    return Status::error("worker " + where + " cannot describe its device: " + reply->text);
  if (reply->kind != ListenerReply::Kind::device)
    return Status::error("worker " + where + ": expected a device reply, got \"" + line->substr(0, 80) + "\"");
  nlohmann::json j = nlohmann::json::parse(reply->text, nullptr, false);
  if (j.is_discarded()) return Status::error("worker " + where + ": its device reply is not valid JSON");
  auto device = worker_device_from_json(j);
  if (!device) return device.status().with_context("worker " + where);
  return device;
}

Result<ProfileReply> profile_on_worker(const std::string& where, const ProfileRequest& request, double timeout_s) {
  WorkerConnection c(where, timeout_s);
  if (Status s = c.open(); !s) return s;
  const std::string payload = encode_profile_request(request);
  if (Status s = c.send_all(encode_profile_header(static_cast<int64_t>(payload.size())) + "\n" + payload); !s) return s;
  Result<std::string> line = c.read_line();
  if (!line) return line.status();
  Result<ListenerReply> reply = decode_listener_reply(*line);
  if (!reply) return reply.status().with_context("worker " + where);
  if (reply->kind == ListenerReply::Kind::error) return Status::error("worker " + where + " cannot profile: " + reply->text);
  if (reply->kind != ListenerReply::Kind::profile)
    return Status::error("worker " + where + ": expected a profile reply, got \"" + line->substr(0, 80) + "\"");
  Result<std::string> body = c.read_payload(reply->payload_bytes);
  if (!body) return body.status();
  auto decoded = decode_profile_reply(*body);
  if (!decoded) return decoded.status().with_context("worker " + where);
  return decoded;
}

WorkerCostsFn worker_costs(ProfileCache* cache, double profile_timeout_s) {
  return [cache, profile_timeout_s](const LayerGraph& graph, const Device& device,
                                    const std::vector<int64_t>& batch_sizes, uint64_t seed,
                                    bool may_measure) -> Result<OwnDeviceCosts> {
    FileProfileCache file_cache(default_cache_dir());
    ProfileCache& store = cache ? *cache : file_cache;
    Result<WorkerDevice> hw = describe_worker_device(device.where, device.kind, device.threads);
    if (!hw) return hw.status();
    OwnDeviceCosts out;
    out.fingerprint = hw->fingerprint();
    out.detail = "worker " + device.where + " (" + hw->describe() + ")";
    std::vector<int64_t> missing;
    for (int64_t b : batch_sizes) {
      if (auto hit = cached_library_at(store, graph, worker_profile_cache_key(graph, out.fingerprint, b))) {
        out.libraries.push_back(std::move(*hit));
        ++out.cached;
      } else {
        missing.push_back(b);
      }
    }
    if (!missing.empty() && may_measure) {
      ProfileRequest request;
      request.model = model_to_json(graph);
      request.device_kind = device.kind;
      request.threads = device.threads;
      request.batch_sizes = missing;
      request.seed = seed;
      Result<ProfileReply> reply = profile_on_worker(device.where, request, profile_timeout_s);
      if (!reply) return reply.status();
      if (reply->device.fingerprint() != out.fingerprint)
        return Status::error("worker " + device.where + " answered for another device (" + reply->device.describe() +
                             ", asked for " + hw->describe() + ")");
      if (reply->libraries.empty() && out.libraries.empty()) {
        std::string why = reply->skipped.empty() ? "no profile came back" : reply->skipped.front().second;
        return Status::error("worker " + device.where + " cannot profile: " + why);
      }
      for (LayerLibrary& lib : reply->libraries) {
        if (lib.rows.size() != graph.layers.size())
          return Status::error("worker " + device.where + ": its profile at batch " + std::to_string(lib.batch_size) +
                               " has " + std::to_string(lib.rows.size()) + " layers, the model " +
                               std::to_string(graph.layers.size()));
        lib.model = graph.name;
        store.put(worker_profile_cache_key(graph, out.fingerprint, lib.batch_size), library_to_json(lib).dump());
        out.libraries.push_back(std::move(lib));
        ++out.measured;
      }
    }
    std::sort(out.libraries.begin(), out.libraries.end(),
              [](const LayerLibrary& a, const LayerLibrary& b) { return a.batch_size < b.batch_size; });
    return out;
  };
}

WorkerDevice this_worker_device(const std::string& device_kind, int threads) {
  WorkerDevice d;
  d.device_kind = device_kind;
  d.threads = threads;
  d.cpu_model = first_cpu_model();
  d.libtorch_version = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                       std::to_string(TORCH_VERSION_PATCH);
  d.timing_method = profile_timing_method();
  d.allocator = allocator_name(running_allocator());
  if (cuda_index(device_kind))  // a GPU this worker does not have stays unnamed: profiling it says why
    if (Result<GpuInfo> gpu = gpu_for_device(device_kind))
      d.gpu = gpu->name + ", " + std::to_string(gpu->total_bytes >> 20) + " MiB";
  return d;
}

std::string answer_device_request(const ListenerRequest& request) {
  return encode_device_reply(this_worker_device(request.device_kind, request.threads));
}

std::string answer_profile_request(const std::string& payload) {
  Result<ProfileRequest> request = decode_profile_request(payload);
  if (!request) return error_line(request.error_message());
  Result<LayerGraph> graph = model_from_json(request->model);
  if (!graph) return error_line("model: " + graph.error_message());
  ProfileReply reply;
  reply.device = this_worker_device(request->device_kind, request->threads);
  FileProfileCache cache(default_cache_dir());
  for (int64_t b : request->batch_sizes) {
    ProfileOptions po;
    po.device = request->device_kind;
    po.threads = request->threads;
    po.batch_size = b;
    po.warmup_runs = kProfileWarmupRuns;
    po.runs = kProfileRuns;
    po.seed = request->seed;
    Result<LayerLibrary> lib = profile_cached(*graph, po, &cache);
    if (lib)
      reply.libraries.push_back(std::move(*lib));
    else
      reply.skipped.emplace_back(b, lib.error_message());
  }
  if (reply.libraries.empty())
    return error_line(reply.skipped.empty() ? "nothing to profile" : reply.skipped.front().second);
  const std::string body = encode_profile_reply(reply);
  return encode_profile_header(static_cast<int64_t>(body.size())) + "\n" + body;
}

}  // namespace tapp
