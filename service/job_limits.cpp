// service/job_limits.cpp — the service's own per-job options (see job_limits.h).
#include "service/job_limits.h"

#include <unistd.h>

#include <algorithm>

#include "common/json_fields.h"

namespace tapp::service {
using nlohmann::json;

namespace {
constexpr const char* kMemoryLimitKey = "memory_limit_mib";
}

Result<std::optional<int64_t>> requested_memory_limit_mib(const json& request) {
  auto options = request.find("options");
  if (options == request.end() || !options->is_object()) return std::optional<int64_t>();
  auto limit = options->find(kMemoryLimitKey);
  if (limit == options->end()) return std::optional<int64_t>();
  std::string field = std::string("options.") + kMemoryLimitKey;
  if (limit->is_null()) return Status::field_error(field, "expected an integer (MiB), got null");
  int64_t mib = 0;
  const bool whole = json_fields::integer_value(*limit, mib);  // 512 or 512.0; an unsigned past int64 is out of range
  if (!whole && !limit->is_number_unsigned())
    return Status::field_error(field, "expected an integer (MiB), got " + limit->dump());
  if (!whole || mib < kMinJobMemoryLimitMiB || mib > kMaxJobMemoryLimitMiB)
    return Status::field_error(field, "must be in [" + std::to_string(kMinJobMemoryLimitMiB) + ", " +
                                          std::to_string(kMaxJobMemoryLimitMiB) + "], got " + limit->dump());
  return std::optional<int64_t>(mib);
}

json without_service_options(json request) {
  if (auto options = request.find("options"); options != request.end() && options->is_object())
    options->erase(kMemoryLimitKey);
  return request;
}

int64_t memory_share_mib(int job_slots) {
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  int64_t total_mib = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size / (1024 * 1024) : 0;
  return std::max<int64_t>(kMinJobMemoryLimitMiB, total_mib / std::max(1, job_slots));
}

}  // namespace tapp::service
