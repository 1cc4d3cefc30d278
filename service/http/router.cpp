// service/http/router.cpp — routes of the job API and the page (see router.h).
#include "service/http/router.h"

#include "common/fingerprint.h"
#include "common/read_file.h"

#include <cmath>
#include <ctime>
#include <optional>
#include <string_view>
#include <vector>

#include "model/zoo.h"
#include "placer/policy.h"

namespace tapp::service {
namespace http = boost::beast::http;
using nlohmann::json;

namespace {

HttpResponse make_response(http::status status, std::string body, const std::string& content_type,
                           const HttpRequest& req) {
  HttpResponse res{status, req.version()};
  res.set(http::field::server, "tapp-server");
  res.set(http::field::content_type, content_type);
  res.set("X-Content-Type-Options", "nosniff");
  res.keep_alive(req.keep_alive());
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

HttpResponse json_response(http::status status, const json& j, const HttpRequest& req) {
  HttpResponse res =
      make_response(status, j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json", req);
  res.set(http::field::cache_control, "no-store");
  return res;
}

HttpResponse error_for(const HttpRequest& req, int status, const std::string& message, const std::string& field) {
  return error_response(status, message, field, req.version(), req.keep_alive());
}

std::string iso_time(double unix_s) {
  if (unix_s <= 0) return "";
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json time_or_null(double unix_s) { return unix_s > 0 ? json(iso_time(unix_s)) : json(); }

json job_to_json(AppState& app, const JobRecord& r, bool detail) {
  json j{{"id", r.id},
         {"url", "/placements/" + r.id},
         {"status", r.status},
         {"model", r.model_label},
         {"created_at", time_or_null(r.created_at_s)},
         {"updated_at", time_or_null(r.updated_at_s)},
         {"started_at", time_or_null(r.started_at_s)},
         {"finished_at", time_or_null(r.finished_at_s)},
         {"restarts", r.restarts}};
  json progress = r.progress;
  if (is_running_status(r.status) && app.runner) {
    json live = app.runner->live_progress(r.id);
    if (!live.is_null()) progress = live;
  }
  j["progress"] = progress;
  if (r.started_at_s > 0) {
    double end = r.finished_at_s > 0 ? r.finished_at_s : (is_running_status(r.status) ? now_s() : r.updated_at_s);
    j["elapsed_s"] = std::max(0.0, end - r.started_at_s);
  }
  if (!r.error.empty() && (r.status == kFailed || r.status == kCancelled)) j["error"] = r.error;
  if (detail) {
    j["events_url"] = "/placements/" + r.id + "/events";
    j["request"] = r.request;
    if (r.status == kSucceeded) j["result"] = r.result;
  }
  return j;
}

struct Target {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  const std::string* get(const std::string& key) const {
    for (const auto& [k, v] : query)
      if (k == key) return &v;
    return nullptr;
  }
};

bool parse_target(const std::string& target, Target& out) {
  if (target.empty() || target[0] != '/') return false;
  auto q = target.find('?');
  if (!percent_decode(target.substr(0, q), out.path)) return false;
  if (q == std::string::npos) return true;
  std::string query = target.substr(q + 1);
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    std::string part = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    if (!part.empty()) {
      auto eq = part.find('=');
      std::string k, v;
      if (!percent_decode(part.substr(0, eq), k)) return false;
      if (eq != std::string::npos && !percent_decode(part.substr(eq + 1), v)) return false;
      out.query.emplace_back(k, v);
    }
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return true;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string cur;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += path[i];
    }
  }
  if (!parts.empty() && parts.back().empty()) parts.pop_back();  // trailing slash
  return parts;
}

// Reads an integer query parameter within [lo, hi]; absent = dflt.
bool query_int(const Target& t, const std::string& key, int64_t lo, int64_t hi, int64_t dflt, int64_t& out,
               std::string& error) {
  out = dflt;
  const std::string* v = t.get(key);
  if (!v) return true;
  if (v->empty() || v->size() > 18 || v->find_first_not_of("0123456789") != std::string::npos) {
    error = "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return false;
  }
  out = std::stoll(*v);
  if (out < lo || out > hi) {
    error = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + *v;
    return false;
  }
  return true;
}

bool valid_job_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// Equal strings, compared in time that depends on neither's content nor on
// where they differ: both are hashed to a fixed width first (FNV-1a over every
// byte, twice with different seeds), so the loop length is the secret-free
// length of the given value and the comparison is of fixed size.
bool constant_time_equals(const std::string& given, const std::string& secret) {
  volatile uint64_t diff = (fnv1a64(given) ^ fnv1a64(secret)) |
                           (fnv1a64(given, 0x9e3779b97f4a7c15ULL) ^ fnv1a64(secret, 0x9e3779b97f4a7c15ULL));
  // Equal digests and equal lengths; then the exact comparison settles the (2^-128) rest.
  unsigned exact = given.size() == secret.size() ? 0u : 1u;
  for (size_t i = 0; i < secret.size(); ++i)
    exact |= static_cast<unsigned>(static_cast<unsigned char>(secret[i]) ^
                                   static_cast<unsigned char>(i < given.size() ? given[i] : 0));
  return diff == 0 && exact == 0;
}

bool authorized(const AppState& app, const HttpRequest& req) {
  if (app.token.empty()) return true;
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return false;
  std::string given(it->value());
  const std::string prefix = "Bearer ";
  if (given.size() < prefix.size() || !iequals_ascii(std::string_view(given).substr(0, prefix.size()), prefix))
    return false;
  return constant_time_equals(given.substr(prefix.size()), app.token);
}

// ---- cross-origin requests ----------------------------------------------------

// The request's Origin when it is another origin than the server's own (the
// page is served from the same host:port, so its requests are same-origin).
std::optional<std::string> cross_origin(const HttpRequest& req) {
  auto origin = req.find(http::field::origin);
  if (origin == req.end()) return std::nullopt;  // not a browser's cross-origin request
  std::string o(origin->value());
  auto host = req.find(http::field::host);
  if (host != req.end() && (iequals_ascii(o, "http://" + std::string(host->value())) ||
                            iequals_ascii(o, "https://" + std::string(host->value()))))
    return std::nullopt;
  return o;
}

bool origin_allowed(const AppState& app, const std::string& origin) {
  for (const std::string& allowed : app.cors_origins)
    if (allowed == "*" || iequals_ascii(allowed, origin)) return true;
  return false;
}

void allow_origin(HttpResponse& res, const std::string& origin) {
  res.set(http::field::access_control_allow_origin, origin);
  res.set(http::field::vary, "Origin");
}

bool is_write(http::verb v) {
  return v != http::verb::get && v != http::verb::head && v != http::verb::options;
}

HttpResponse method_not_allowed(const HttpRequest& req, const char* allow) {
  HttpResponse res = error_for(req, 405, std::string("method ") + std::string(req.method_string()) +
                                             " not allowed here (allowed: " + allow + ")",
                               "method");
  res.set(http::field::allow, allow);
  return res;
}

// ---- static files -----------------------------------------------------------

std::string mime_type(const std::string& path) {
  auto dot = path.rfind('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  if (ext == "html") return "text/html; charset=utf-8";
  if (ext == "js") return "application/javascript; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "json") return "application/json";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  if (ext == "ico") return "image/x-icon";
  if (ext == "txt") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

// Only plain names under web/: segments of [A-Za-z0-9_.-], none starting with '.'.
bool safe_asset_path(const std::string& path) {
  if (path.size() < 2 || path.size() > 200) return false;
  std::vector<std::string> parts = split_path(path);
  if (parts.empty()) return false;
  for (const std::string& p : parts) {
    if (p.empty() || p[0] == '.') return false;
    for (char c : p)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return path.back() != '/';
}

HttpResponse serve_static(AppState& app, const HttpRequest& req, const std::string& path) {
  if (req.method() != http::verb::get && req.method() != http::verb::head) return method_not_allowed(req, "GET, HEAD");
  std::string rel = path == "/" ? "/index.html" : path;
  if (!safe_asset_path(rel)) return error_for(req, 404, "not found", "path");
  if (app.web_dir.empty()) return error_for(req, 404, "not found", "path");
  Result<std::string> body = read_file(app.web_dir + rel);
  if (!body) return error_for(req, 404, "not found", "path");
  HttpResponse res = make_response(http::status::ok, std::move(*body), mime_type(rel), req);
  res.set(http::field::cache_control, "no-cache");
  if (rel == "/index.html")
    res.set("Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'");
  if (req.method() == http::verb::head) {
    res.body().clear();  // keep Content-Length of the full body
  }
  return res;
}

// ---- API --------------------------------------------------------------------

std::string_view trim_space(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "application/json", optionally with "; charset=utf-8"; nothing else (a form
// or text/plain body is what a page can send cross-origin without asking).
bool is_json_media_type(std::string_view type) {
  auto semi = type.find(';');
  if (!iequals_ascii(trim_space(type.substr(0, semi)), "application/json")) return false;
  while (semi != std::string_view::npos) {
    std::string_view rest = type.substr(semi + 1);
    semi = rest.find(';');
    std::string_view param = trim_space(rest.substr(0, semi));
    if (!iequals_ascii(param, "charset=utf-8") && !iequals_ascii(param, "charset=\"utf-8\"")) return false;
    type = rest;
  }
  return true;
}

// "application/octet-stream" (a policy file's bytes): like JSON, a type a page
// cannot send cross-origin without a preflight.
bool is_octet_stream_media_type(std::string_view type) {
  return iequals_ascii(trim_space(type), "application/octet-stream");
}

// 415 naming Content-Type when the request has none or one `accepts` refuses; else nothing.
std::optional<HttpResponse> refused_media_type(const HttpRequest& req, bool (*accepts)(std::string_view),
                                               const std::string& expected) {
  auto ct = req.find(http::field::content_type);
  if (ct == req.end()) return error_for(req, 415, "Content-Type must be " + expected + ", got none", "Content-Type");
  if (!accepts(std::string_view(ct->value().data(), ct->value().size())))
    return error_for(req, 415, "Content-Type must be " + expected + ", got " + std::string(ct->value()).substr(0, 100),
                     "Content-Type");
  return std::nullopt;
}

HttpResponse post_placement(AppState& app, const HttpRequest& req) {
  if (req.body().size() > app.max_body_bytes)
    return error_for(req, 413, "body larger than " + std::to_string(app.max_body_bytes) + " bytes", "body");
  if (auto refused = refused_media_type(req, is_json_media_type, "application/json")) return *refused;
  json body;
  FieldError err;
  if (!parse_json_body(req.body(), app.limits.max_depth, body, err)) return error_for(req, err.http_status, err.error, err.field);
  Submission sub;
  if (!check_submission(body, app.limits, sub, err)) return error_for(req, err.http_status, err.error, err.field);
  JobRecord job;
  job.request = std::move(sub.request);
  job.model_label = sub.label;
  std::string why;
  switch (app.runner->submit(job, sub.upload, &why)) {
    case SubmitError::none:
      break;
    case SubmitError::queue_full: {
      HttpResponse res = error_for(req, 503, why, "");
      res.set(http::field::retry_after, std::to_string(app.retry_after_s));
      return res;
    }
    case SubmitError::store_failed:
      return error_for(req, 500, why, "");
  }
  HttpResponse res = json_response(http::status::accepted,
                                   json{{"id", job.id}, {"url", "/placements/" + job.id}, {"status", job.status}}, req);
  res.set(http::field::location, "/placements/" + job.id);
  return res;
}

json stored_policy_json(const StoredPolicy& p) {
  return {{"id", p.id}, {"created_at", p.created_at_s}, {"feature_version", p.feature_version},
          {"trained_on", p.trained_on}, {"bytes", p.size}};
}

// POST /policies: the bytes of a policy file (tapp-cli train-policy --out),
// checked by loading it (a corrupt file or another feature version is refused
// naming the body) before it is stored; jobs start from the newest.
HttpResponse post_policy(AppState& app, const HttpRequest& req) {
  if (req.body().size() > app.max_body_bytes)
    return error_for(req, 413, "body larger than " + std::to_string(app.max_body_bytes) + " bytes", "body");
  if (auto refused = refused_media_type(req, is_octet_stream_media_type, "application/octet-stream")) return *refused;
  if (req.body().empty()) return error_for(req, 400, "empty body: send the policy file's bytes", "body");
  PolicyFileInfo info;
  auto loaded = load_policy_bytes(req.body(), "body", &info);
  if (!loaded) return error_for(req, 400, loaded.error_message(), "body");
  Result<StoredPolicy> stored = app.store->add_policy(req.body(), info.feature_version, info.trained_on);
  if (!stored) return error_for(req, 500, stored.error_message(), "");
  HttpResponse res = json_response(http::status::created, stored_policy_json(*stored), req);
  res.set(http::field::location, "/policies");
  return res;
}

HttpResponse list_policies(AppState& app, const HttpRequest& req) {
  Result<std::vector<StoredPolicy>> list = app.store->list_policies(100);
  if (!list) return error_for(req, 500, list.error_message(), "");
  json out = json::array();
  for (const StoredPolicy& p : *list) out.push_back(stored_policy_json(p));
  return json_response(http::status::ok, json{{"policies", out}, {"feature_version", kPolicyFeatureVersion}}, req);
}

HttpResponse list_placements(AppState& app, const HttpRequest& req, const Target& t) {
  std::string status;
  if (const std::string* s = t.get("status"); s && !s->empty()) {
    if (!is_known_status(*s))
      return error_for(req, 400,
                       "unknown status (known: queued, profiling, optimizing, succeeded, failed, cancelled)", "status");
    status = *s;
  }
  int64_t limit, offset;
  std::string e;
  if (!query_int(t, "limit", 1, 500, 50, limit, e)) return error_for(req, 400, e, "limit");
  if (!query_int(t, "offset", 0, int64_t{1} << 40, 0, offset, e)) return error_for(req, 400, e, "offset");
  Result<JobPage> page = app.store->list(status, limit, offset);
  if (!page) return error_for(req, 500, page.error_message(), "");
  json jobs = json::array();
  for (const JobRecord& r : page->jobs) jobs.push_back(job_to_json(app, r, false));
  return json_response(http::status::ok,
                       json{{"jobs", jobs}, {"total", page->total}, {"limit", limit}, {"offset", offset}}, req);
}

HttpResponse job_routes(AppState& app, const HttpRequest& req, const Target& t, const std::vector<std::string>& parts) {
  const std::string& id = parts[1];
  if (!valid_job_id(id)) return error_for(req, 404, "no such job", "id");
  if (parts.size() == 3) {
    if (parts[2] != "events") return error_for(req, 404, "not found", "path");
    if (req.method() != http::verb::get) return method_not_allowed(req, "GET");
    int64_t after, limit;
    std::string e;
    if (!query_int(t, "after", 0, int64_t{1} << 40, 0, after, e)) return error_for(req, 400, e, "after");
    if (!query_int(t, "limit", 1, 10000, 2000, limit, e)) return error_for(req, 400, e, "limit");
    Result<std::optional<JobRecord>> job = app.store->get(id, false);
    if (!job) return error_for(req, 500, job.error_message(), "");
    if (!job->has_value()) return error_for(req, 404, "no such job: " + id, "id");
    Result<std::vector<JobEvent>> events = app.store->events(id, after, limit);
    if (!events) return error_for(req, 500, events.error_message(), "");
    json list = json::array();
    for (const JobEvent& ev : *events) {
      json item = ev.event.is_object() ? ev.event : json::object();
      item["seq"] = ev.seq;
      item["at"] = iso_time(ev.at_s);
      list.push_back(std::move(item));
    }
    return json_response(http::status::ok, json{{"id", id}, {"status", (*job)->status}, {"events", list}}, req);
  }
  if (req.method() == http::verb::get) {
    Result<std::optional<JobRecord>> job = app.store->get(id, true);
    if (!job) return error_for(req, 500, job.error_message(), "");
    if (!job->has_value()) return error_for(req, 404, "no such job: " + id, "id");
    return json_response(http::status::ok, job_to_json(app, **job, true), req);
  }
  if (req.method() == http::verb::delete_) {
    std::string status;
    Result<bool> cancelled = app.runner->cancel(id, &status);
    if (!cancelled) return error_for(req, 500, cancelled.error_message(), "");
    if (*cancelled) return json_response(http::status::ok, json{{"id", id}, {"status", kCancelled}}, req);
    if (status.empty()) return error_for(req, 404, "no such job: " + id, "id");
    return error_for(req, 409, "job already " + status + "; only queued or running jobs can be cancelled", "id");
  }
  return method_not_allowed(req, "GET, DELETE");
}

HttpResponse route_same_origin(AppState& app, const HttpRequest& req, const Target& t,
                               const std::vector<std::string>& parts);

HttpResponse route(AppState& app, const HttpRequest& req) {
  // Headers that must not be given twice: which copy counts is where parsers disagree.
  for (http::field f : {http::field::authorization, http::field::content_type, http::field::origin})
    if (req.count(f) > 1)
      return error_for(req, 400, std::string(http::to_string(f)) + " given more than once",
                       std::string(http::to_string(f)));
  Target t;
  std::string target(req.target());
  if (target.size() > 4096 || !parse_target(target, t))
    return error_for(req, 400, "malformed request target", "path");
  if (t.path.find('\0') != std::string::npos || t.path.find('\\') != std::string::npos)
    return error_for(req, 400, "malformed path", "path");
  std::vector<std::string> parts = split_path(t.path);
  for (const std::string& p : parts)
    if (p == ".." || p == ".") return error_for(req, 400, "path segments . and .. are not allowed", "path");

  // Cross-origin: only origins named by --cors-origin, and never a write from another.
  if (std::optional<std::string> origin = cross_origin(req)) {
    const bool allowed = origin_allowed(app, *origin);
    if (req.method() == http::verb::options) {
      if (!allowed) return error_for(req, 403, "cross-origin requests from " + origin->substr(0, 100) +
                                                   " are not allowed (tapp-server --cors-origin names the allowed ones)",
                                     "Origin");
      HttpResponse res = make_response(http::status::no_content, "", "text/plain", req);
      allow_origin(res, *origin);
      res.set(http::field::access_control_allow_methods, "GET, HEAD, POST, DELETE");
      res.set(http::field::access_control_allow_headers, "Authorization, Content-Type");
      res.set(http::field::access_control_max_age, "600");
      return res;
    }
    if (!allowed && is_write(req.method()))
      return error_for(req, 403, "cross-origin " + std::string(req.method_string()) + " from " + origin->substr(0, 100) +
                                     " is not allowed (tapp-server --cors-origin names the allowed origins)",
                       "Origin");
    HttpResponse res = route_same_origin(app, req, t, parts);
    if (allowed) allow_origin(res, *origin);
    return res;
  }
  return route_same_origin(app, req, t, parts);
}

HttpResponse route_same_origin(AppState& app, const HttpRequest& req, const Target& t,
                               const std::vector<std::string>& parts) {
  if (t.path == "/healthz") {
    if (req.method() != http::verb::get && req.method() != http::verb::head) return method_not_allowed(req, "GET, HEAD");
    json j{{"ok", true}, {"service", "tapp-server"}};
    if (app.runner) {
      j["queued"] = app.runner->queued();
      j["running"] = app.runner->running();
      j["queue_capacity"] = app.runner->queue_capacity();
      j["free_cores"] = app.runner->cores().free_cores();
      j["total_cores"] = app.runner->cores().total();
    }
    return json_response(http::status::ok, j, req);
  }

  bool api = !parts.empty() && (parts[0] == "placements" || parts[0] == "openapi.json" || parts[0] == "schemas" ||
                                 parts[0] == "models" || parts[0] == "policies");
  if (!api) return serve_static(app, req, t.path);
  if (!authorized(app, req)) {
    HttpResponse res = error_for(req, 401, "missing or wrong bearer token (Authorization: Bearer <token>)", "Authorization");
    res.set(http::field::www_authenticate, "Bearer");
    return res;
  }
  if (parts[0] == "models") {
    if (parts.size() != 1) return error_for(req, 404, "not found", "path");
    if (req.method() != http::verb::get) return method_not_allowed(req, "GET");
    return json_response(http::status::ok, json{{"models", zoo_names()}}, req);
  }
  if (parts[0] == "policies") {
    if (parts.size() != 1) return error_for(req, 404, "not found", "path");
    if (req.method() == http::verb::post) return post_policy(app, req);
    if (req.method() == http::verb::get) return list_policies(app, req);
    return method_not_allowed(req, "GET, POST");
  }
  if (parts[0] == "openapi.json" || parts[0] == "schemas") {
    const std::string* doc = nullptr;
    if (parts.size() == 1 && parts[0] == "openapi.json") doc = &app.openapi_json;
    if (parts.size() == 2 && parts[0] == "schemas" && parts[1] == "job.schema.json") doc = &app.job_schema_json;
    if (!doc) return error_for(req, 404, "not found", "path");
    if (req.method() != http::verb::get) return method_not_allowed(req, "GET");
    if (doc->empty()) return error_for(req, 404, "document not loaded", "path");
    return make_response(http::status::ok, *doc, "application/json", req);
  }
  if (parts.size() == 1) {
    if (req.method() == http::verb::post) return post_placement(app, req);
    if (req.method() == http::verb::get) return list_placements(app, req, t);
    return method_not_allowed(req, "GET, POST");
  }
  if (parts.size() <= 3) return job_routes(app, req, t, parts);
  return error_for(req, 404, "not found", "path");
}

}  // namespace

bool percent_decode(const std::string& in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (i + 2 >= in.size() || !std::isxdigit(static_cast<unsigned char>(in[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(in[i + 2])))
      return false;
    char decoded = static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
    if (decoded == '\0') return false;
    out += decoded;
    i += 2;
  }
  return true;
}

HttpResponse error_response(int status, const std::string& message, const std::string& field, unsigned version,
                            bool keep_alive) {
  HttpResponse res{static_cast<http::status>(status), version};
  res.set(http::field::server, "tapp-server");
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.keep_alive(keep_alive);
  json j{{"error", message}};
  j["field"] = field.empty() ? json() : json(field);
  res.body() = j.dump(-1, ' ', false, json::error_handler_t::replace);
  res.prepare_payload();
  return res;
}

HttpResponse handle_request(AppState& app, const HttpRequest& req) {
  try {
    return route(app, req);
  } catch (const std::exception& e) {
    return error_for(req, 500, std::string("internal error: ") + e.what(), "");
  } catch (...) {
    return error_for(req, 500, "internal error", "");
  }
}

}  // namespace tapp::service
