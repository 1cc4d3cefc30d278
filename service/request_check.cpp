// service/request_check.cpp — POST /placements validation (see request_check.h).
#include "service/request_check.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <vector>

#include "common/base64.h"
#include "common/checked_math.h"

#include "common/host_port.h"
#include "core/placement.h"
#include "placer/optimize.h"
#include "model/model_json.h"
#include "model/zoo.h"
#include "service/job_limits.h"

namespace tapp::service {
using nlohmann::json;

int json_nesting_depth(const std::string& text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

namespace {

struct DuplicateKey {
  std::string key;
};

}  // namespace

bool parse_json_body(const std::string& text, int max_depth, json& out, FieldError& err) {
  if (text.empty()) {
    err = {400, "expected a JSON object, got an empty body", "body"};
    return false;
  }
  // Raw control bytes are never valid JSON (strings escape them); nlohmann's
  // lexer takes a NUL for the end of input, so "{...}\0junk" would parse.
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      err = {400, std::string("invalid JSON: control byte ") + hex + " at offset " + std::to_string(i), "body"};
      return false;
    }
  }
  if (json_nesting_depth(text) > max_depth) {
    err = {400, "JSON nested deeper than " + std::to_string(max_depth) + " levels", "body"};
    return false;
  }
  // A key given twice is read differently by different parsers (first or last wins): refuse it.
  std::vector<std::set<std::string>> keys;
  auto strict = [&keys](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      throw DuplicateKey{parsed.get<std::string>()};
    return true;
  };
  try {
    out = json::parse(text, strict);  // strict: exactly one value, only whitespace after it
  } catch (const DuplicateKey& d) {
    err = {400, "invalid JSON: key \"" + d.key.substr(0, 100) + "\" appears twice in one object", "body"};
    return false;
  } catch (const json::exception& e) {
    err = {400, std::string("invalid JSON: ") + e.what(), "body"};
    return false;
  }
  return true;
}

FieldError field_error_from(const Status& status, const std::string& fallback_field) {
  int http = 400;
  switch (status.code()) {
    case ErrorCode::too_large: http = 413; break;
    case ErrorCode::forbidden: http = 403; break;
    case ErrorCode::not_found: http = 404; break;
    case ErrorCode::internal: http = 500; break;
    default: break;
  }
  return {http, status.message(), status.field().empty() ? fallback_field : status.field()};
}

Status check_remote_hosts(const Cluster& cluster, const std::set<std::string>& allowed) {
  for (int i = 0; i < cluster.num_devices(); ++i) {
    const Device& d = cluster.devices[i];
    if (d.is_local()) continue;
    const std::string field = "cluster.devices[" + std::to_string(i) + "].where";
    auto endpoint = parse_host_port(d.where, field);
    if (!endpoint) return endpoint.status().at_field(field);
    if (!allowed.count(endpoint->host))
      return Status::field_error(
          field, "remote host \"" + endpoint->host + "\" is not in this server's --allow-remote-hosts",
          ErrorCode::forbidden);
  }
  return Status::ok();
}

// A request names no file on the server (as models are uploaded, never passed as paths):
// a layer library a device's costs come from is read by tapp-cli plan/optimize, not by a server.
Status check_device_costs(const Cluster& cluster) {
  for (int i = 0; i < cluster.num_devices(); ++i)
    if (cluster.devices[i].costs.from == CostsFrom::library)
      return Status::field_error("cluster.devices[" + std::to_string(i) + "].costs.library",
                                 "a server reads no file a request names; use tapp-cli plan or optimize "
                                 "without --server for a layer library, or \"worker\" costs",
                                 ErrorCode::forbidden);
  return Status::ok();
}

// Nor does an inline layer graph: a TorchScript layer names its module's path
// on the machine that runs it, which only the server's own import of an upload sets.
Status check_layer_files(const LayerGraph& graph) {
  for (size_t i = 0; i < graph.layers.size(); ++i)
    if (graph.layers[i].op == "torchscript")
      return Status::field_error("model.layers[" + std::to_string(i) + "].attrs.file",
                                 "a server reads no file a request names; upload the TorchScript module "
                                 "as model_file {name, base64}",
                                 ErrorCode::forbidden);
  return Status::ok();
}

namespace {

bool is_zoo_like_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The model's training state against the limit: the configured one, never above
// what the cluster could hold at all (its largest device's memory x its device count).
bool check_model_size(const LayerGraph& graph, const Cluster& cluster, Optimizer optimizer, const CheckLimits& limits,
                      FieldError& err) {
  int64_t largest_mb = 0, largest_bytes = 0;
  for (const Device& d : cluster.devices) {
    largest_mb = std::max(largest_mb, d.memory_mb);
    largest_bytes = std::max(largest_bytes, device_memory_bytes(d));
  }
  const int64_t capacity = sat_mul(largest_bytes, cluster.num_devices());
  const int64_t limit = limits.max_model_bytes > 0 ? std::min(limits.max_model_bytes, capacity) : capacity;
  const int64_t params = graph.total_params();
  const int64_t bytes = training_state_bytes(sat_mul(params, 4), optimizer);  // float32 parameters, core's memory rule
  if (bytes <= limit) return true;
  std::string why = limit == capacity ? "the cluster holds at most " + with_commas(capacity) + " (largest device " +
                                            std::to_string(largest_mb) + " MiB x " +
                                            std::to_string(cluster.num_devices()) + " device(s))"
                                      : "this server's --max-model-bytes is " + with_commas(limit);
  err = {400,
         "model: " + (params == kInt64Max ? std::string("more than 2^63") : with_commas(params)) +
             " parameters need " + (bytes == kInt64Max ? std::string("more than 2^63") : with_commas(bytes)) +
             " bytes for training (weights, gradients, " + optimizer_name(optimizer) + " state: " +
             std::to_string(training_state_bytes(4, optimizer)) + " bytes a parameter); " + why,
         "model"};
  return false;
}

bool check_model_file(const json& mf, const CheckLimits& limits, Submission& out, FieldError& err) {
  if (!mf.is_object()) {
    err = {400, std::string("expected an object {name, base64}, got ") + mf.type_name(), "model_file"};
    return false;
  }
  for (auto it = mf.begin(); it != mf.end(); ++it)
    if (it.key() != "name" && it.key() != "base64") {
      err = {400, "unknown field (known: name, base64)", "model_file." + it.key()};
      return false;
    }
  auto name = mf.find("name");
  if (name == mf.end() || !name->is_string()) {
    err = {400, "expected a file name (string) ending in .pt", "model_file.name"};
    return false;
  }
  std::string n = name->get<std::string>();
  if (n.size() < 4 || n.size() > 128 || n.substr(n.size() - 3) != ".pt" || !is_zoo_like_name(n.substr(0, n.size() - 3))) {
    err = {400, "must be a plain file name ending in .pt (letters, digits, _ and -)", "model_file.name"};
    return false;
  }
  auto b64 = mf.find("base64");
  if (b64 == mf.end() || !b64->is_string()) {
    err = {400, "expected the file's bytes as a base64 string", "model_file.base64"};
    return false;
  }
  const std::string& text = b64->get_ref<const std::string&>();
  if (text.size() / 4 * 3 > limits.max_upload_bytes) {
    err = {413, "file larger than " + std::to_string(limits.max_upload_bytes) + " bytes", "model_file.base64"};
    return false;
  }
  if (!base64_decode(text, out.upload) || out.upload.empty()) {
    err = {400, "not valid base64 (or empty)", "model_file.base64"};
    return false;
  }
  out.label = n;
  return true;
}

}  // namespace

bool check_submission(const json& body, const CheckLimits& limits, Submission& out, FieldError& err) {
  if (!body.is_object()) {
    err = {400, std::string("expected an object {model, cluster, options}, got ") + body.type_name(), "body"};
    return false;
  }
  json request = body;
  if (auto mf = body.find("model_file"); mf != body.end()) {  // null too: a present field has its type
    if (!check_model_file(*mf, limits, out, err)) return false;
    if (body.contains("model") && !body["model"].is_null()) {
      err = {400, "give either model or model_file, not both", "model_file"};
      return false;
    }
    request.erase("model_file");
    request["model"] = "upload:" + out.label;
  } else {
    request.erase("model_file");
  }

  // Placer's parser: types, ranges and the cluster; errors name the field.
  // The service's own options (the job's memory limit) are checked apart.
  Result<OptimizeRequest> parsed = optimize_request_from_json(without_service_options(request));
  Result<std::optional<int64_t>> memory_limit = requested_memory_limit_mib(request);
  if (parsed && !memory_limit) parsed = memory_limit.status();
  if (!parsed) {
    err = field_error_from(parsed.status());
    return false;
  }
  std::optional<LayerGraph> graph;  // the model's layer graph, when it can be built here (not for uploads)
  const json& model = request["model"];
  if (model.is_string()) {
    std::string m = model.get<std::string>();
    if (out.upload.empty()) {
      if (!is_zoo_like_name(m)) {
        err = {400, "must be a zoo model name (letters, digits, _ and -); files on the server are not read, "
                    "upload one as model_file {name, base64}",
               "model"};
        return false;
      }
      std::vector<std::string> known = zoo_names();
      if (std::find(known.begin(), known.end(), m) == known.end()) {
        std::string list;
        for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
        err = {400, "unknown model \"" + m + "\" (known: " + list + "; or give a layer graph object or model_file)",
               "model"};
        return false;
      }
      out.label = m;
      Result<LayerGraph> zoo = zoo_model(m, ModelOptions{parsed->input_size, parsed->num_classes});
      if (!zoo) {
        err = field_error_from(zoo.status().at_field("model"));  // a zoo layer is not a request field
        return false;
      }
      graph = std::move(zoo.value());
    }
  } else {
    if (!model.contains("layers") || !model["layers"].is_array()) {
      err = {400, "a layer graph needs a layers array", "model.layers"};
      return false;
    }
    if (model["layers"].size() > limits.max_layers) {
      err = {400, "at most " + std::to_string(limits.max_layers) + " layers", "model.layers"};
      return false;
    }
    Result<LayerGraph> inline_graph = model_from_json(model);
    if (!inline_graph) {
      err = field_error_from(inline_graph.status().nested_in("model"));
      return false;
    }
    if (Status s = check_layer_files(*inline_graph); !s) {
      err = field_error_from(s);
      return false;
    }
    graph = std::move(inline_graph.value());
    out.label = parsed->model;
  }
  const Cluster& cluster = parsed->cluster;
  if (cluster.num_devices() > limits.max_devices) {
    err = {400, "at most " + std::to_string(limits.max_devices) + " devices", "cluster.devices"};
    return false;
  }
  if (Status s = check_remote_hosts(cluster, limits.allowed_remote_hosts); !s) {
    err = field_error_from(s);
    return false;
  }
  if (Status s = check_device_costs(cluster); !s) {
    err = field_error_from(s);
    return false;
  }
  if (graph && !check_model_size(*graph, cluster, parsed->optimizer, limits, err)) return false;
  if (!out.upload.empty()) request["model_file"] = json{{"name", out.label}, {"bytes", out.upload.size()}};
  out.request = std::move(request);
  return true;
}

}  // namespace tapp::service
