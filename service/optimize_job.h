// service/optimize_job.h — the real job: placer's optimize() on a stored POST /placements request.
//
// Owns what the service adds around optimize(): the service's own options are
// removed before placer's parser sees the request (job_limits.h), remote
// workers are checked again against the server's allow-list (a job queued
// under an earlier list and recovered after a restart obeys the current one),
// an uploaded TorchScript file is written into the job's scratch directory and
// passed by path, the server's profile cache is used, and (options.policy
// "latest", the default) the search starts from the newest stored trained policy.
// Data flow: JobInput (request JSON + upload bytes) -> OptimizeRequest ->
// optimize(progress) -> result JSON (schemas/job.schema.json $defs/result).
// Runs in the job's child process (`tapp-server --run-job`, job_child.h).
// Thread safety: as optimize(); the settings are read-only.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>

#include "service/job_store.h"
#include "service/jobs.h"

namespace tapp {
class ProfileCache;
}

namespace tapp::service {

struct OptimizeJobSettings {
  std::string work_dir;                        // where an uploaded model file is written
  std::set<std::string> allowed_remote_hosts;  // hosts whose tapp-workers a job may use
  ProfileCache* profile_cache = nullptr;       // profiles and fitted calibrations; null = the per-user file cache
  // The newest stored trained policy (JobStore::latest_policy); empty = none is ever used.
  std::function<Result<std::optional<StoredPolicy>>()> latest_policy;
};

Result<nlohmann::json> run_optimize_job(const JobInput& input, const OptimizeJobSettings& settings,
                                        const ProgressFn& progress, const std::atomic<bool>& cancel);

}  // namespace tapp::service
