// Parsing the POST /placements body: defaults, values, and errors that name the field.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "placer/optimize.h"

using nlohmann::json;
using tapp::optimize_request_from_json;

namespace {
json two_devices() {
  return json{{"devices", json::array({json{{"name", "a"}}, json{{"name", "b"}, {"speed", 0.5}}})}};
}
std::string error_of(const json& body) {
  auto r = optimize_request_from_json(body);
  REQUIRE_FALSE(r.is_ok());
  return r.error_message();
}
}  // namespace

TEST_CASE("a request with a zoo model and a cluster takes the option defaults") {
  auto r = optimize_request_from_json(json{{"model", "alexnet"}, {"cluster", two_devices()}});
  REQUIRE(r.is_ok());
  CHECK(r->model == "alexnet");
  CHECK(r->model_graph.is_null());
  CHECK(r->cluster.num_devices() == 2);
  CHECK(r->cluster.devices[1].speed == doctest::Approx(0.5));
  CHECK(r->evaluator == tapp::EvaluatorKind::simulate);
  CHECK(r->batch_size == 32);
  CHECK(r->seed == 1);
  CHECK_FALSE(r->warm_start);
  CHECK(r->verify);  // the best plan and the best baseline are measured unless turned off
}

TEST_CASE("every option in the request is read") {
  json body = {{"model", "vgg16"},
               {"cluster", two_devices()},
               {"options",
                {{"evaluator", "hybrid"},
                 {"iterations", 50},
                 {"time_budget_s", 12.5},
                 {"seed", 7},
                 {"batch_size", 16},
                 {"input_size", 64},
                 {"num_classes", 10},
                 {"warm_start", true},
                 {"baselines", false},
                 {"verify", false}}}};
  auto r = optimize_request_from_json(body);
  REQUIRE(r.is_ok());
  CHECK(r->evaluator == tapp::EvaluatorKind::hybrid);
  CHECK(r->iterations == 50);
  CHECK(r->time_budget_s == doctest::Approx(12.5));
  CHECK(r->seed == 7);
  CHECK(r->batch_size == 16);
  CHECK(r->input_size == 64);
  CHECK(r->num_classes == 10);
  CHECK(r->warm_start);
  CHECK_FALSE(r->baselines);
  CHECK_FALSE(r->verify);
}

TEST_CASE("an inline layer graph is kept as the model graph") {
  json graph = {{"name", "tiny"}, {"input_shape", {4}}, {"layers", json::array()}};
  auto r = optimize_request_from_json(json{{"model", graph}, {"cluster", two_devices()}});
  REQUIRE(r.is_ok());
  CHECK(r->model == "tiny");
  CHECK(r->model_graph == graph);
}

TEST_CASE("request errors name the field") {
  CHECK(error_of(json::array()) == "request: expected an object, got array");
  CHECK(error_of(json{{"cluster", two_devices()}}) == "model: missing required field");
  CHECK(error_of(json{{"model", 3}, {"cluster", two_devices()}}).rfind("model: expected a zoo name", 0) == 0);
  CHECK(error_of(json{{"model", ""}, {"cluster", two_devices()}}).rfind("model: ", 0) == 0);
  CHECK(error_of(json{{"model", "alexnet"}}) == "cluster: missing required field");
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", 5}}).rfind("cluster: expected an object", 0) == 0);
  json bad_speed = two_devices();
  bad_speed["devices"][1]["speed"] = 2000.0;
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", bad_speed}}).rfind("cluster.devices[1].speed", 0) == 0);
  json fast = two_devices();
  fast["devices"][1]["speed"] = 4.0;
  CHECK(optimize_request_from_json(json{{"model", "alexnet"}, {"cluster", fast}, {"options", {{"evaluator", "simulate"}}}})
            .is_ok());
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", fast}, {"options", {{"evaluator", "hybrid"}}}}) ==
        "cluster.devices[1].speed: 4 cannot be emulated on this host (device \"b\"; measurement needs speed <= 1); "
        "plan for it with the evaluator \"simulate\" (tapp-cli optimize --evaluator simulate)");
  auto with = [](json options) { return json{{"model", "alexnet"}, {"cluster", two_devices()}, {"options", options}}; };
  CHECK(error_of(with(json{{"evaluator", "guess"}})).rfind("options.evaluator: must be", 0) == 0);
  CHECK(error_of(with(json{{"iterations", -3}})).rfind("options.iterations: must be in", 0) == 0);
  CHECK(error_of(with(json{{"iterations", "many"}})) == "options.iterations: expected an integer, got string");
  CHECK(error_of(with(json{{"time_budget_s", -1}})).rfind("options.time_budget_s:", 0) == 0);
  // The value as it was sent, not as a float printed to six places.
  CHECK(error_of(with(json{{"time_budget_s", -1.5}})) == "options.time_budget_s: must be in [0, 604800], got -1.5");
  CHECK(error_of(with(json{{"seed", -1}})).rfind("options.seed: expected a non-negative integer", 0) == 0);
  CHECK(error_of(with(json{{"batch_size", 0}})).rfind("options.batch_size: must be in", 0) == 0);
  CHECK(error_of(with(json{{"input_size", -5}})).rfind("options.input_size:", 0) == 0);
  CHECK(error_of(with(json{{"warm_start", "yes"}})) == "options.warm_start: expected a boolean, got string");
  CHECK(error_of(with(json{{"verify", "no"}})) == "options.verify: expected a boolean, got string");
  CHECK(error_of(with(json{{"iteration", 5}})).rfind("options.iteration: unknown option", 0) == 0);
  CHECK(error_of(with(json(3))) == "options: expected an object, got number");
  // A present field has its type: null is not "take the defaults" (it ran 600 iterations, profiled).
  CHECK(error_of(with(json())) == "options: expected an object, got null");
  json null_links = two_devices();
  null_links["links"] = nullptr;
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", null_links}}) == "cluster.links: expected an array, got null");
  json numbered = two_devices();
  numbered["description"] = 3;
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", numbered}}) == "cluster.description: expected a string, got number");
  // JSON Schema's integers: 5.0 and 1e1 are, 2.5 is not.
  auto floats = optimize_request_from_json(with(json{{"iterations", 5.0}, {"batch_size", 1e1}, {"seed", 7.0}}));
  REQUIRE(floats.is_ok());
  CHECK(floats->iterations == 5);
  CHECK(floats->batch_size == 10);
  CHECK(floats->seed == 7);
  CHECK(error_of(with(json{{"seed", 1.5}})) == "options.seed: expected an integer, got number");
  CHECK(error_of(with(json{{"seed", "x"}})) == "options.seed: expected an integer, got string");
  auto largest = optimize_request_from_json(with(json{{"seed", 18446744073709551615ULL}}));
  REQUIRE(largest.is_ok());
  CHECK(largest->seed == 18446744073709551615ULL);
  CHECK(error_of(with(json{{"iterations", 2.5}})) == "options.iterations: expected an integer, got number");
  CHECK(error_of(with(json{{"batch_size", 1e300}})) == "options.batch_size: expected an integer, got number");
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", two_devices()}, {"extra", 1}}).rfind("extra: unknown field", 0) == 0);
}

TEST_CASE("the optimizer is an option of the request: sgd by default, adam when asked, anything else names the field") {
  auto plain = optimize_request_from_json(json{{"model", "alexnet"}, {"cluster", two_devices()}});
  REQUIRE(plain.is_ok());
  CHECK(plain->optimizer == tapp::Optimizer::sgd);
  auto adam = optimize_request_from_json(
      json{{"model", "alexnet"}, {"cluster", two_devices()}, {"options", {{"optimizer", "adam"}}}});
  REQUIRE(adam.is_ok());
  CHECK(adam->optimizer == tapp::Optimizer::adam);
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", two_devices()}, {"options", {{"optimizer", "rmsprop"}}}})
            .find("options.optimizer: unknown optimizer \"rmsprop\"") == 0);
}

TEST_CASE("how a TorchScript model is imported is an option: auto by default, ops or layers, anything else names the field") {
  auto plain = optimize_request_from_json(json{{"model", "alexnet"}, {"cluster", two_devices()}});
  REQUIRE(plain.is_ok());
  CHECK(plain->torchscript == tapp::ScriptImport::automatic);
  for (auto [name, want] : {std::pair{"ops", tapp::ScriptImport::ops}, std::pair{"layers", tapp::ScriptImport::layers},
                            std::pair{"auto", tapp::ScriptImport::automatic}}) {
    auto r = optimize_request_from_json(
        json{{"model", "net.pt"}, {"cluster", two_devices()}, {"options", {{"torchscript", name}}}});
    REQUIRE_MESSAGE(r.is_ok(), name);
    CHECK(r->torchscript == want);
  }
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", two_devices()}, {"options", {{"torchscript", "fast"}}}})
            .find("options.torchscript: unknown TorchScript import \"fast\"") == 0);
  CHECK(error_of(json{{"model", "alexnet"}, {"cluster", two_devices()}, {"options", {{"torchscript", 1}}}})
            .find("options.torchscript") == 0);
}
