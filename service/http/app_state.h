// service/http/app_state.h — what every HTTP request handler shares.
//
// Owns nothing but pointers to the long-lived parts (job store, job runner)
// and the server's configuration (auth token, remote-host allow-list, web and
// schema directories, limits, allowed cross-origin callers). Built once in server_main (or a test) and
// passed by reference to handle_request on every io thread.
// Thread safety: read-only after construction; the store and runner are thread-safe.
#pragma once

#include <string>
#include <vector>

#include "service/job_store.h"
#include "service/jobs.h"
#include "service/request_check.h"

namespace tapp::service {

struct AppState {
  JobStore* store = nullptr;
  JobRunner* runner = nullptr;
  std::string token;          // empty = no auth
  std::string web_dir;        // static files of the page
  std::string openapi_json;   // served at GET /openapi.json
  std::string job_schema_json;  // served at GET /schemas/job.schema.json
  CheckLimits limits;
  size_t max_body_bytes = 8 * 1024 * 1024;
  int retry_after_s = 5;      // in 503 answers when the queue is full
  // Origins (scheme://host:port, or "*") whose pages may call the API from a
  // browser; empty = same-origin only, cross-origin writes answered 403.
  std::vector<std::string> cors_origins;
};

}  // namespace tapp::service
