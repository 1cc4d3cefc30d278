// service/request_check.h — validating a POST /placements body before it becomes a job.
//
// Owns the service's own checks on top of placer's optimize_request_from_json:
// JSON nesting depth, top-level fields, a zoo name that is a name (never a
// server path), the optional uploaded TorchScript file (base64, size limit),
// option ranges, and remote workers (`where` = host:port) allowed only for
// hosts on the server's allow-list. Every error names the field.
// Data flow: body text -> parse_json_body -> check_submission -> Submission
// (request JSON to store + upload bytes) -> JobRunner::submit.
// Thread safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/status.h"

namespace tapp::service {

struct FieldError {
  int http_status = 400;
  std::string error;  // human message
  std::string field;  // "options.iterations", "cluster.devices[1].where", "body", ...
};

struct Submission {
  nlohmann::json request;  // model, cluster, options (model_file replaced by its name)
  std::string upload;      // decoded model file bytes (empty if none)
  std::string label;       // model label for lists
};

struct CheckLimits {
  int max_depth = 64;
  size_t max_upload_bytes = 6 * 1024 * 1024;
  int max_devices = 64;
  std::set<std::string> allowed_remote_hosts;
};

// Maximum nesting of arrays/objects in `text`, counted without parsing (strings skipped).
int json_nesting_depth(const std::string& text);
// Parses a JSON body; refuses nesting deeper than max_depth. Errors name "body".
bool parse_json_body(const std::string& text, int max_depth, nlohmann::json& out, FieldError& err);
// Splits "cluster.devices[1].speed: must be in (0, 1]" into field and message.
FieldError field_error_from_status(const std::string& message, int http_status = 400);

bool check_submission(const nlohmann::json& body, const CheckLimits& limits, Submission& out, FieldError& err);

bool base64_decode(const std::string& in, std::string& out);
std::string base64_encode(const std::string& in);

}  // namespace tapp::service
