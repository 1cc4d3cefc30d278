// common/host_port.h — the one parser of "host:port" endpoints.
//
// Owns `HostPort` and `parse_host_port`. Every part that reads an endpoint
// (a device's `where` in cluster.json, `tapp-worker --listen/--store`, the
// remote-host allow-list check, `tapp-cli --server`) goes through this one
// function, so they agree on brackets and on what is an error:
//   "host:port" and "[ipv6]:port" are accepted (the brackets are stripped:
//   `host` is what getaddrinfo wants); a missing port, a port that is not a
//   number or is outside 1..65535, an empty host, an unclosed bracket and an
//   unbracketed IPv6 address ("::1:80", ambiguous) are refused with a message
//   that starts with the field's name.
// Data flow: text -> HostPort -> (connect/bind/resolve) -> format_host_port
// for messages. Thread safety: pure functions of their arguments.
// Header-only: tapp_common is an INTERFACE library.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace tapp {

struct HostPort {
  std::string host;  // without brackets: "10.0.0.2", "worker-3", "::1"
  int port = 0;      // 1..65535
};

// "[::1]:7000" for an IPv6 host, "host:7000" otherwise.
inline std::string format_host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}
inline std::string format_host_port(const HostPort& hp) { return format_host_port(hp.host, hp.port); }

namespace host_port_detail {

inline Result<int> parse_port(const std::string& digits, const std::string& field, const std::string& text) {
  const std::string got = " in \"" + text + "\"";
  if (digits.empty()) return Status::error(field + ": missing port after ':'" + got + " (expected host:port)");
  if (digits.find_first_not_of("0123456789") != std::string::npos)
    return Status::error(field + ": port \"" + digits + "\" is not a number" + got);
  // At most 5 digits is checked before converting, so stoi cannot overflow.
  const int port = digits.size() > 5 ? 0 : std::stoi(digits);
  if (digits.size() > 5 || port < 1 || port > 65535)
    return Status::error(field + ": port " + digits + " is out of range (1-65535)" + got);
  return port;
}

}  // namespace host_port_detail

// Parses `text` as host:port (or [ipv6]:port). `field` names the input in the
// error ("devices[1].where", "--listen"). With `default_port`, a text with no
// port at all ("host", "[::1]") takes it (URLs: http://host means port 80).
inline Result<HostPort> parse_host_port(const std::string& text, const std::string& field,
                                        std::optional<int> default_port = std::nullopt) {
  const std::string got = " in \"" + text + "\"";
  if (text.empty()) return Status::error(field + ": expected host:port, got an empty string");
  HostPort out;
  std::string rest;  // what follows the host: "" or ":<port>"
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return Status::error(field + ": '[' without a closing ']'" + got);
    out.host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
    if (!rest.empty() && rest.front() != ':')
      return Status::error(field + ": expected ':' and a port after ']'" + got);
  } else {
    const auto colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos)
      return Status::error(field + ": more than one ':'" + got + " (write an IPv6 host in brackets: [::1]:port)");
    out.host = text.substr(0, colon);
    rest = colon == std::string::npos ? "" : text.substr(colon);
  }
  if (out.host.empty()) return Status::error(field + ": empty host" + got + " (expected host:port)");
  if (out.host.find_first_of(" \t\r\n/[]") != std::string::npos)
    return Status::error(field + ": host \"" + out.host + "\" has a character a host name cannot have" + got);
  if (rest.empty()) {
    if (!default_port) return Status::error(field + ": missing port" + got + " (expected host:port)");
    out.port = *default_port;
    return out;
  }
  auto port = host_port_detail::parse_port(rest.substr(1), field, text);
  if (!port) return port.status();
  out.port = *port;
  return out;
}

}  // namespace tapp
