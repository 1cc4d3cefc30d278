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
  auto speed = cluster_from_json(json::parse(R"({"devices":[{"name":"a"},{"name":"b","speed":1500}]})"));
  CHECK(speed.error_message() ==
        "devices[1].speed: must be in [0.001, 1000] (relative to this host; above 1 can only be simulated)");
  auto type = cluster_from_json(json::parse(R"({"devices":[{"name":"a","threads":"two"}]})"));
  CHECK(type.error_message() == "devices[0].threads: expected an integer, got string");
  auto missing = cluster_from_json(json::parse(R"({"devices":[{"threads":1}]})"));
  CHECK(missing.error_message() == "devices[0].name: missing required field");
  auto link = cluster_from_json(json::parse(R"({"devices":[{"name":"a"}],"links":[{"from":"a","to":"z"}]})"));
  CHECK(link.error_message() == "links[0].to: unknown device \"z\"");
  auto self = cluster_from_json(json::parse(R"({"devices":[{"name":"a"}],"links":[{"from":"a","to":"a"}]})"));
  CHECK(self.error_message() == "links[0].to: a link joins two devices, got \"a\" twice");
  auto twice = cluster_from_json(json::parse(R"({"devices":[{"name":"a"},{"name":"b"}],"links":[
      {"from":"a","to":"b","bandwidth_mbps":10},{"from":"b","to":"a"},{"from":"a","to":"b","bandwidth_mbps":20}]})"));
  CHECK(twice.error_message() == "links[2]: the link a -> b is already links[0] (each direction once)");
  auto misspelt = cluster_from_json(json::parse(R"({"devices":[{"name":"a","memry_mb":512}]})"));
  CHECK(misspelt.error_message().rfind("devices[0].memry_mb: unknown field (expected name, kind, ", 0) == 0);
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

TEST_CASE("a device faster than this host parses for plans, and measurement refuses it naming the device") {
  auto c = cluster_from_json(json::parse(R"({"devices":[{"name":"a"},{"name":"b","speed":0.5},{"name":"fast","speed":4}]})"));
  REQUIRE(c.is_ok());
  CHECK(c->devices[2].speed == 4);
  CHECK(cluster_from_json(json::parse(R"({"devices":[{"name":"a","speed":1000}]})")).is_ok());
  Status s = measurable_here(*c);
  CHECK(s.message() ==
        "devices[2].speed: 4 cannot be emulated on this host (device \"fast\"; measurement needs speed <= 1)");
  CHECK(s.field() == "devices[2].speed");
  CHECK(measurable_here(*c, {0, 1}).is_ok());  // a placement that leaves the fast device out
  CHECK(measurable_here(*c, {2}, "cluster.").field() == "cluster.devices[2].speed");
}

TEST_CASE("a device says where its costs come from: this host, a layer library or its remote worker") {
  auto c = cluster_from_json(json::parse(R"({"devices":[
      {"name":"a"},
      {"name":"b","costs":{"library":"profiles/b.json"}},
      {"name":"c","where":"10.0.0.7:7000","costs":"worker"},
      {"name":"d","costs":"host"}]})"));
  REQUIRE_MESSAGE(c.is_ok(), c.error_message());
  CHECK(c->devices[0].costs.from == CostsFrom::host);
  CHECK(c->devices[1].costs.from == CostsFrom::library);
  CHECK(c->devices[1].costs.library_path == "profiles/b.json");
  CHECK(c->devices[2].costs.from == CostsFrom::worker);
  CHECK(c->devices[3].costs.from == CostsFrom::host);
  const json j = cluster_to_json(*c);
  CHECK_FALSE(j["devices"][0].contains("costs"));
  CHECK(j["devices"][1]["costs"] == json{{"library", "profiles/b.json"}});
  CHECK(j["devices"][2]["costs"] == "worker");
  auto again = cluster_from_json(j);
  REQUIRE(again.is_ok());
  CHECK(cluster_to_json(*again) == j);
}

TEST_CASE("a wrong costs field names it") {
  auto error = [](const std::string& device) {
    return cluster_from_json(json::parse(R"({"devices":[)" + device + "]}")).error_message();
  };
  CHECK(error(R"({"name":"a","costs":"worker"})") ==
        "devices[0].costs: \"worker\" needs a device hosted by a remote tapp-worker (where: \"host:port\")");
  CHECK(error(R"({"name":"a","costs":"guess"})") ==
        "devices[0].costs: expected \"host\", \"worker\" or {\"library\": \"path/to/layer_library.json\"}, got \"guess\"");
  CHECK(error(R"({"name":"a","costs":3})").rfind("devices[0].costs: expected", 0) == 0);
  CHECK(error(R"({"name":"a","costs":{"library":""}})") == "devices[0].costs.library: must not be empty");
  CHECK(error(R"({"name":"a","costs":{"library":5}})") == "devices[0].costs.library: expected a string, got number");
  CHECK(error(R"({"name":"a","costs":{}})") == "devices[0].costs.library: missing required field");
  CHECK(error(R"({"name":"a","costs":{"library":"a.json","threads":2}})").rfind("devices[0].costs.threads: unknown field", 0) == 0);
}

TEST_CASE("resolve_library_paths takes a relative library path from the cluster file's folder, and leaves the rest") {
  json c = json::parse(R"({"devices":[
      {"name":"a","costs":{"library":"profiles/b.json"}},
      {"name":"b","costs":{"library":"/abs/b.json"}},
      {"name":"c","costs":"host"},
      {"name":"d","costs":{"library":5}},
      {"name":"e","costs":{}}]})");
  const json before = c;
  resolve_library_paths(c, "/data/clusters/mine.json");
  CHECK(c["devices"][0]["costs"]["library"] == "/data/clusters/profiles/b.json");
  c["devices"][0] = before["devices"][0];
  CHECK(c == before);  // absolute, not a library, or malformed: untouched, for cluster_from_json to judge
  json odd = json::parse(R"({"devices":3})");
  resolve_library_paths(odd, "x.json");
  CHECK(odd == json::parse(R"({"devices":3})"));
}
