#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "core/cluster.h"

using namespace tapp;
using nlohmann::json;

TEST_CASE("a cluster round-trips through JSON with asymmetric links") {
  json j = {{"devices", {{{"name", "edge"}, {"speed", 0.5}}, {{"name", "server"}, {"threads", 2}}}},
            {"links", {{{"from", "edge"}, {"to", "server"}, {"bandwidth_mbps", 10}, {"latency_ms", 5}},
                       {{"from", "server"}, {"to", "edge"}, {"bandwidth_mbps", 100}}}}};
  auto c = cluster_from_json(j);
  REQUIRE(c.is_ok());
  CHECK(c->link(0, 1).bandwidth_mbps == 10);
  CHECK(c->link(1, 0).bandwidth_mbps == 100);
  auto again = cluster_from_json(cluster_to_json(*c));
  REQUIRE(again.is_ok());
  CHECK(cluster_to_json(*again) == cluster_to_json(*c));
}

TEST_CASE("a malformed cluster gets an error naming the field") {
  auto speed = cluster_from_json(json::parse(R"({"devices":[{"name":"a"},{"name":"b","speed":1.5}]})"));
  CHECK(speed.error_message() == "devices[1].speed: must be in (0, 1]");
  auto type = cluster_from_json(json::parse(R"({"devices":[{"name":"a","threads":"two"}]})"));
  CHECK(type.error_message() == "devices[0].threads: expected an integer, got string");
  auto missing = cluster_from_json(json::parse(R"({"devices":[{"threads":1}]})"));
  CHECK(missing.error_message() == "devices[0].name: missing required field");
  auto link = cluster_from_json(json::parse(R"({"devices":[{"name":"a"}],"links":[{"from":"a","to":"z"}]})"));
  CHECK(link.error_message() == "links[0].to: unknown device \"z\"");
  CHECK(cluster_from_json(json::parse("[]")).error_message() == "cluster: expected an object, got array");
}

TEST_CASE("a remote device's where is host:port or [ipv6]:port, and a bad one names devices[i].where") {
  auto where = [](const std::string& w) {
    return cluster_from_json(json{{"devices", {{{"name", "a"}}, {{"name", "b"}, {"where", w}}}}});
  };
  CHECK(where("10.0.0.2:7000").is_ok());
  CHECK(where("[::1]:7000").is_ok());
  CHECK(where("worker-3:65535").is_ok());
  for (const std::string bad : {"somehost", "somehost:", ":7000", "host:70000", "host:0", "::1:7000", "[::1]7000",
                                "host:http"}) {
    auto c = where(bad);
    INFO("where: " << bad);
    REQUIRE_FALSE(c.is_ok());
    CHECK(c.error_message().rfind("devices[1].where: ", 0) == 0);
    CHECK(c.error_message().find("\"local\" or the host:port of a tapp-worker") != std::string::npos);
  }
}
