// The one host:port parser: brackets, bad and missing ports, empty hosts,
// unbracketed IPv6; every error names the field it was given.
#include <doctest/doctest.h>

#include "common/host_port.h"

using namespace tapp;

namespace {

// The error message of parsing `text` (fails the test if it parsed).
std::string error_of(const std::string& text, const std::string& field = "devices[1].where") {
  auto r = parse_host_port(text, field);
  INFO("text: " << text);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error_message().rfind(field + ": ", 0) == 0);
  return r.error_message();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("host:port splits into a host and a numeric port") {
  auto r = parse_host_port("10.0.0.2:7000", "where");
  REQUIRE(r.is_ok());
  CHECK(r->host == "10.0.0.2");
  CHECK(r->port == 7000);
  auto name = parse_host_port("worker-3.lan:65535", "where");
  REQUIRE(name.is_ok());
  CHECK(name->host == "worker-3.lan");
  CHECK(name->port == 65535);
}

TEST_CASE("a bracketed IPv6 host loses its brackets and keeps its colons") {
  auto r = parse_host_port("[::1]:8080", "--listen");
  REQUIRE(r.is_ok());
  CHECK(r->host == "::1");
  CHECK(r->port == 8080);
  auto full = parse_host_port("[fe80::1:2:3]:1", "--listen");
  REQUIRE(full.is_ok());
  CHECK(full->host == "fe80::1:2:3");
  CHECK(full->port == 1);
  CHECK(format_host_port(*full) == "[fe80::1:2:3]:1");
  CHECK(format_host_port("10.0.0.2", 7000) == "10.0.0.2:7000");
}

TEST_CASE("a missing port is refused naming the field, unless a default is given") {
  CHECK(contains(error_of("somehost"), "missing port"));
  CHECK(contains(error_of("somehost:"), "missing port"));
  CHECK(contains(error_of("[::1]"), "missing port"));
  CHECK(contains(error_of("[::1]:"), "missing port"));
  auto url = parse_host_port("example.org", "--server", 80);
  REQUIRE(url.is_ok());
  CHECK(url->port == 80);
  auto v6 = parse_host_port("[::1]", "--server", 80);
  REQUIRE(v6.is_ok());
  CHECK(v6->host == "::1");
}

TEST_CASE("a port that is not a number or outside 1..65535 is refused with the port") {
  CHECK(contains(error_of("host:http"), "port \"http\" is not a number"));
  CHECK(contains(error_of("host:-1"), "is not a number"));
  CHECK(contains(error_of("host:70000"), "port 70000 is out of range (1-65535)"));
  CHECK(contains(error_of("host:0"), "out of range"));
  CHECK(contains(error_of("host:99999999999999999999"), "out of range"));
  CHECK(contains(error_of("[::1]:65536"), "out of range"));
}

TEST_CASE("an empty host is refused") {
  CHECK(contains(error_of(":7000"), "empty host"));
  CHECK(contains(error_of("[]:7000"), "empty host"));
  CHECK(contains(error_of(""), "empty string"));
}

TEST_CASE("extra colons mean an unbracketed IPv6 address and are refused with the fix") {
  std::string msg = error_of("::1:7000");
  CHECK(contains(msg, "more than one ':'"));
  CHECK(contains(msg, "[::1]:port"));
  CHECK(contains(error_of("host:70:00"), "more than one ':'"));
}

TEST_CASE("a broken bracket is refused") {
  CHECK(contains(error_of("[::1:7000"), "without a closing ']'"));
  CHECK(contains(error_of("[::1]7000"), "expected ':' and a port after ']'"));
  CHECK(contains(error_of("host name:7000"), "cannot have"));
}
