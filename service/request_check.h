// service/request_check.h — validating a POST /placements body before it becomes a job.
//
// Owns the service's own checks on top of placer's optimize_request_from_json:
// JSON nesting depth, top-level fields, a zoo name that is a name (never a
// server path), the optional uploaded TorchScript file (base64, size limit),
// option ranges, remote workers (`where` = host:port) allowed only for
// hosts on the server's allow-list, and the model's size against what the
// cluster can hold. Every error names the field, taken from the Status's field
// path (never parsed out of the message).
// Data flow: body text -> parse_json_body -> check_submission -> Submission
// (request JSON to store + upload bytes) -> JobRunner::submit.
// Thread safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/status.h"
#include "core/cluster.h"

struct LayerGraph;

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
  size_t max_layers = 10000;  // of an inline layer graph
  // A model's training state (weights, gradients, optimizer state: 3 x 4 bytes
  // a parameter with SGD's momentum, 4 x 4 with Adam) is refused above this; 0 = the cluster's capacity (its
  // largest device's memory x its device count). Never above that capacity.
  int64_t max_model_bytes = 0;
  std::set<std::string> allowed_remote_hosts;
};

// The HTTP status and field of a parser's Status (400 unless its code says otherwise;
// `fallback_field` when it names none).
FieldError field_error_from(const Status& status, const std::string& fallback_field = "body");

// Every remote device's host (cluster.json's `where`) must be in `allowed`
// (--allow-remote-hosts): checked when a job is submitted and again when it runs,
// since a job recovered after a restart obeys the current list. Forbidden names the field.
Status check_remote_hosts(const Cluster& cluster, const std::set<std::string>& allowed);
// A device whose costs come from a layer-library file: refused (403) naming
// cluster.devices[i].costs.library, since a server reads no file a request names.
Status check_device_costs(const Cluster& cluster);
// An inline layer graph's TorchScript layer (it names a module's path): refused (403)
// naming model.layers[i].attrs.file; uploads (model_file) are imported by the server itself.
Status check_layer_files(const LayerGraph& graph);

// Maximum nesting of arrays/objects in `text`, counted without parsing (strings skipped).
int json_nesting_depth(const std::string& text);
// Parses a JSON body strictly: exactly one JSON value, no control bytes (a NUL)
// anywhere, no key repeated within an object, nesting at most max_depth. Errors name "body".
bool parse_json_body(const std::string& text, int max_depth, nlohmann::json& out, FieldError& err);

bool check_submission(const nlohmann::json& body, const CheckLimits& limits, Submission& out, FieldError& err);

}  // namespace tapp::service
