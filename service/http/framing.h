// service/http/framing.h — the strict check of a request's head before Beast parses it.
//
// Owns the RFC 9112 rules whose violation makes a request's framing ambiguous
// (the request-smuggling classes) and which Boost.Beast 1.74 lets through or
// reads leniently: a repeated Content-Length (even "5, 5" or two equal lines),
// a Transfer-Encoding other than exactly "chunked", Transfer-Encoding with
// Content-Length or on HTTP/1.0, obsolete line folding, bare CR or LF, space
// before a field's colon, control bytes in a value, a missing or repeated Host
// on HTTP/1.1; plus the header count limit. The session answers any verdict
// other than ok once (400, or 431 for the limits) and closes the connection
// without reading another byte as a request.
// Data flow: session reads bytes -> find_head_end -> check_request_head ->
//            Beast's parser (headers, then the body, chunked or not).
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tapp::service {

struct HeadLimits {
  size_t max_head_bytes = 16 * 1024;  // request line + fields + the blank line
  size_t max_fields = 100;
};

struct HeadVerdict {
  int status = 0;       // 0 = acceptable; otherwise 400 or 431
  std::string message;  // why, for the error body
  std::string field;    // the header at fault ("Content-Length", "headers", "request")
  bool ok() const { return status == 0; }
};

// Where the head ends in `bytes` (the offset just past CRLF CRLF), or 0 when it
// has not all arrived. Sets `verdict` (and returns 0) when what has arrived is
// already wrong: a bare LF or CR, or more than max_head_bytes without an end.
size_t find_head_end(std::string_view bytes, const HeadLimits& limits, HeadVerdict& verdict);

// Checks a complete head (as delimited by find_head_end).
HeadVerdict check_request_head(std::string_view head, const HeadLimits& limits);

}  // namespace tapp::service
