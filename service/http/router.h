// service/http/router.h — the HTTP API as a pure function: request in, response out.
//
// Owns the routes (tests call handle_request directly, without sockets):
//   GET  /healthz                      liveness + queue figures (no auth)
//   GET  /openapi.json                 the API document (schemas/openapi.json)
//   GET  /schemas/job.schema.json      the job schema
//   GET  /models                       zoo model names
//   POST /placements                   submit a job -> 202 {id, url}; 503 + Retry-After when full
//   GET  /placements?status=&limit=&offset=
//   GET  /placements/{id}              status, progress, result or error
//   GET  /placements/{id}/events?after=&limit=   progress history
//   DELETE /placements/{id}            cancel
//   GET  /, /<asset>                   the page from web/ (no auth: it holds no data)
// Errors are JSON {"error", "field"} with a 4xx/5xx status. With a token set,
// API routes need "Authorization: Bearer <token>".
// Thread safety: handle_request may run on many threads at once.
#pragma once

#include <boost/beast/http.hpp>
#include <string>

#include "service/http/app_state.h"

namespace tapp::service {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

HttpResponse handle_request(AppState& app, const HttpRequest& req);

// A JSON error response {"error": message, "field": field}.
HttpResponse error_response(int status, const std::string& message, const std::string& field,
                            unsigned version = 11, bool keep_alive = false);

// Decodes %XX escapes; false on a malformed escape or a decoded NUL.
bool percent_decode(const std::string& in, std::string& out);

}  // namespace tapp::service
