// service/http/framing.cpp — see framing.h.
#include "service/http/framing.h"

#include <cctype>
#include <vector>

namespace tapp::service {
namespace {

HeadVerdict bad(const std::string& message, const std::string& field = "request") { return {400, message, field}; }

bool is_tchar(unsigned char c) {
  return std::isalnum(c) || (c != 0 && std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) !=
                                           std::string_view::npos);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

HeadVerdict check_request_line(std::string_view line, bool& http10) {
  auto sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return bad("malformed request line");
  auto sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1 || line.find(' ', sp2 + 1) != std::string_view::npos)
    return bad("malformed request line (expected METHOD SP target SP HTTP/1.1)");
  for (unsigned char c : line.substr(0, sp1))
    if (!is_tchar(c)) return bad("malformed method");
  for (unsigned char c : line.substr(sp1 + 1, sp2 - sp1 - 1))
    if (c <= 0x20 || c == 0x7f) return bad("malformed request target");
  std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return bad("unsupported HTTP version \"" + printable(version) + "\" (HTTP/1.1 or HTTP/1.0)");
  http10 = version == "HTTP/1.0";
  return {};
}

}  // namespace

size_t find_head_end(std::string_view bytes, const HeadLimits& limits, HeadVerdict& verdict) {
  const size_t scan = std::min(bytes.size(), limits.max_head_bytes);
  for (size_t i = 0; i < scan; ++i) {
    if (bytes[i] == '\n' && (i == 0 || bytes[i - 1] != '\r')) {
      verdict = bad("bare LF in the request head (lines end in CRLF)");
      return 0;
    }
    if (bytes[i] == '\r' && i + 1 < bytes.size() && bytes[i + 1] != '\n') {
      verdict = bad("bare CR in the request head");
      return 0;
    }
    if (bytes[i] == '\n' && i >= 3 && bytes[i - 1] == '\r' && bytes[i - 2] == '\n' && bytes[i - 3] == '\r')
      return i + 1;
  }
  if (bytes.size() >= limits.max_head_bytes)
    verdict = {431, "request head larger than " + std::to_string(limits.max_head_bytes) + " bytes", "headers"};
  return 0;
}

HeadVerdict check_request_head(std::string_view head, const HeadLimits& limits) {
  if (head.size() > limits.max_head_bytes)
    return {431, "request head larger than " + std::to_string(limits.max_head_bytes) + " bytes", "headers"};
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") return bad("incomplete request head");
  std::string_view rest = head.substr(0, head.size() - 2);  // each line keeps its CRLF terminator
  auto eol = rest.find("\r\n");
  bool http10 = false;
  if (HeadVerdict v = check_request_line(rest.substr(0, eol), http10); !v.ok()) return v;
  rest.remove_prefix(eol + 2);

  size_t fields = 0, content_lengths = 0, hosts = 0;
  bool has_te = false;
  std::vector<std::string_view> codings;
  while (!rest.empty()) {
    eol = rest.find("\r\n");
    std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    if (++fields > limits.max_fields)
      return {431, "more than " + std::to_string(limits.max_fields) + " header fields", "headers"};
    if (line.empty()) return bad("empty header line");
    if (line[0] == ' ' || line[0] == '\t')
      return bad("obsolete line folding (a header line starting with whitespace) is not accepted", "headers");
    auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return bad("malformed header line \"" + printable(line) + "\"", "headers");
    std::string_view name = line.substr(0, colon);
    for (unsigned char c : name)
      if (!is_tchar(c))
        return bad("malformed header name \"" + printable(name) + "\" (no whitespace before the colon)", "headers");
    std::string_view value = trim(line.substr(colon + 1));
    for (unsigned char c : value)
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return bad("control byte in the value of " + std::string(name), std::string(name));
    if (iequals(name, "Content-Length")) {
      if (++content_lengths > 1) return bad("Content-Length given more than once", "Content-Length");
      if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string_view::npos)
        return bad("Content-Length must be one decimal number, got \"" + printable(value) + "\"", "Content-Length");
    } else if (iequals(name, "Transfer-Encoding")) {
      has_te = true;
      size_t start = 0;
      for (;;) {
        size_t comma = value.find(',', start);
        codings.push_back(trim(value.substr(start, comma == std::string_view::npos ? comma : comma - start)));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else if (iequals(name, "Host")) {
      ++hosts;
    }
  }
  if (has_te) {
    if (http10) return bad("Transfer-Encoding is not allowed in an HTTP/1.0 request", "Transfer-Encoding");
    if (content_lengths) return bad("both Transfer-Encoding and Content-Length given", "Transfer-Encoding");
    if (codings.size() != 1 || !iequals(codings[0], "chunked")) {
      std::string list;
      for (std::string_view c : codings) list += (list.empty() ? "" : ", ") + printable(c);
      return bad("Transfer-Encoding must be exactly \"chunked\" (the only coding this server reads), got \"" + list +
                     "\"",
                 "Transfer-Encoding");
    }
  }
  if (!http10 && hosts != 1)
    return bad(hosts == 0 ? "an HTTP/1.1 request needs a Host header" : "Host given more than once", "Host");
  if (http10 && hosts > 1) return bad("Host given more than once", "Host");
  return {};
}

}  // namespace tapp::service
