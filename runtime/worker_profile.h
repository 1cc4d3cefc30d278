// runtime/worker_profile.h — a device's costs measured where it lives: by its own remote tapp-worker.
//
// Owns both ends of the profile exchange (its messages are runtime/control_channel.h):
//   coordinator: worker_costs() is what cost_profiles (profiler/cost_profiles.h)
//     calls for a device whose costs are "worker": ask the worker for its
//     WorkerDevice ("device <kind> <threads>") -> look each micro-batch size up
//     in the profile cache under that worker's device fingerprint
//     (model/profile_cache.h worker_profile_cache_key) -> when measuring is
//     allowed, ask the worker to profile the sizes not cached ("profile <n>"):
//     it times the model on its own CPU and threads (cuda:N only where its
//     LibTorch has CUDA) -> store what came back under the same key.
//   worker: answer_device_request / answer_profile_request, run by
//     `tapp-worker --listen` in a child process (profiling sets LibTorch's
//     thread count); the worker keeps its own profile cache as well.
// Errors name the worker's host:port and what it said ("worker 10.0.0.7:7000
// cannot profile: device 'cuda:0': this LibTorch has no CUDA; use cpu").
// Thread safety: one exchange per connection; the coordinator's calls are
// independent of each other (one socket each).
#pragma once

#include <string>

#include "common/status.h"
#include "model/profile_cache.h"
#include "profiler/cost_profiles.h"
#include "runtime/control_channel.h"

namespace tapp {

inline constexpr double kWorkerConnectTimeoutS = 10;
inline constexpr double kWorkerProfileTimeoutS = 900;  // a profile of a large model at every size

// Coordinator side.
Result<WorkerDevice> describe_worker_device(const std::string& where, const std::string& device_kind, int threads,
                                            double timeout_s = kWorkerConnectTimeoutS);
Result<ProfileReply> profile_on_worker(const std::string& where, const ProfileRequest& request,
                                       double timeout_s = kWorkerProfileTimeoutS);

// The hook cost_profiles calls for "worker" devices; `cache` null: the per-user file cache.
WorkerCostsFn worker_costs(ProfileCache* cache, double profile_timeout_s = kWorkerProfileTimeoutS);

// Worker side: this host's description of a device of `device_kind` x `threads`.
WorkerDevice this_worker_device(const std::string& device_kind, int threads);
// The reply line to "device <kind> <threads>".
std::string answer_device_request(const ListenerRequest& request);
// The full reply to "profile <n>" + payload: "profile <m>\n" + m bytes, or "error <message>\n".
std::string answer_profile_request(const std::string& payload);

}  // namespace tapp
