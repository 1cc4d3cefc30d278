// service/optimize_job.cpp — placer's optimize() as a service job (see optimize_job.h).
#include "service/optimize_job.h"

#include <filesystem>
#include <fstream>

#include "placer/policy.h"
#include "service/job_limits.h"
#include "service/request_check.h"
#include "service/result_check.h"

namespace tapp::service {
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

Result<std::string> write_upload(const JobInput& input, const std::string& work_dir) {
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  std::string path = (fs::path(work_dir) / (input.id + ".pt")).string();
  std::ofstream out(path, std::ios::binary);
  out.write(input.upload.data(), static_cast<std::streamsize>(input.upload.size()));
  if (!out) return Status::error("model_file: cannot write " + path);
  return path;
}

// options.policy "latest": the newest stored policy of this feature version,
// if any; one that cannot be read leaves the search fresh and says why.
void start_from_stored_policy(OptimizeRequest& r, const OptimizeJobSettings& settings) {
  if (r.policy_start != PolicyStart::latest || !settings.latest_policy) return;
  Result<std::optional<StoredPolicy>> stored = settings.latest_policy();
  if (!stored || !stored->has_value()) return;
  const StoredPolicy& p = **stored;
  const std::string name = "stored policy " + std::to_string(p.id);
  auto networks = load_policy_bytes(p.bytes, name);
  if (!networks) return;
  r.initial_policy = std::move(networks.value());
  r.initial_policy_name = name;
}

// The job's copy of an upload is a path on the server; its errors name the
// file the user sent instead (model_file "net.pt").
Status naming_upload(const Status& s, const std::string& path, const std::string& name) {
  std::string m = s.message();
  const std::string as_sent = "model_file \"" + name + "\"";
  for (size_t at = m.find(path); at != std::string::npos; at = m.find(path, at + as_sent.size()))
    m.replace(at, path.size(), as_sent);
  return Status::coded(s.code(), m).at_field(s.field());
}

}  // namespace

Result<json> run_optimize_job(const JobInput& input, const OptimizeJobSettings& settings, const ProgressFn& progress,
                              const std::atomic<bool>& cancel) {
  json request = without_service_options(input.request);
  const json sent = request.value("model_file", json::object());
  const std::string upload_name = sent.is_object() && sent.value("name", json()).is_string()
                                      ? sent["name"].get<std::string>() : "upload.pt";
  request.erase("model_file");
  Result<OptimizeRequest> parsed = optimize_request_from_json(request);
  if (!parsed) return parsed.status();
  if (Status s = check_remote_hosts(parsed->cluster, settings.allowed_remote_hosts); !s) return s;
  parsed->profile_cache = settings.profile_cache;
  if (!input.upload.empty()) {
    Result<std::string> path = write_upload(input, settings.work_dir);
    if (!path) return path.status();
    parsed->model = *path;
  }
  start_from_stored_policy(*parsed, settings);
  Result<json> result = optimize(*parsed, progress, cancel);
  if (!result && !input.upload.empty()) return naming_upload(result.status(), parsed->model, upload_name);
  if (result)  // a step of 0, infinity or NaN is a failed job, never a result
    if (Status s = check_result_figures(*result); !s) return s;
  return result;
}

}  // namespace tapp::service
