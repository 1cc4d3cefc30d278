// service/job_limits.h — the per-job options that only the service reads (today: the memory limit).
//
// Owns `options.memory_limit_mib` of a POST /placements body: placer's request
// parser does not know it, so the service checks it at submission, the
// supervisor reads it when it starts the job's process, and the job removes it
// before handing the request to the placer. Also the default: the machine's
// memory divided by the number of jobs that run at once.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/status.h"

namespace tapp::service {

inline constexpr int64_t kMinJobMemoryLimitMiB = 256;  // a LibTorch process starts near 200 MiB
inline constexpr int64_t kMaxJobMemoryLimitMiB = int64_t{16} << 20;  // 16 TiB

// options.memory_limit_mib when the request sets it; an error naming the field
// when it is not an integer in [kMinJobMemoryLimitMiB, kMaxJobMemoryLimitMiB].
Result<std::optional<int64_t>> requested_memory_limit_mib(const nlohmann::json& request);

// The request as placer's parser expects it: without the service's own options.
nlohmann::json without_service_options(nlohmann::json request);

// The machine's physical memory divided among `job_slots` jobs, in MiB (at least the minimum).
int64_t memory_share_mib(int job_slots);

}  // namespace tapp::service
