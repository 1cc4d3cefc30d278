// Associated Learning in the search's results (placer/al_phase.h, optimize's allow_al):
// AL forms priced from the source model's libraries, the fastest over proposed cut sets
// and micro-batch counts, proposals without an AL form refused with the reason, and the
// job's "al" row beside (never in place of) the best.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/al_placement.h"
#include "model/al_form.h"
#include "placer/al_phase.h"
#include "placer/optimize.h"
#include "simulator/simulator.h"
#include "tests/core/fake_evaluator.h"
#include "tests/model/linear_chain.h"

using nlohmann::json;
using namespace tapp;

namespace {

// Layers [0, a) on device 0, [a, b) on device 1, [b, n) on device 2 (empty groups dropped).
Placement three_stages(const LayerGraph& g, int a, int b) {
  Placement p;
  const int n = static_cast<int>(g.layers.size());
  for (int i = 0; i < n; ++i) p.layer_group.push_back(i < a ? 0 : i < b ? 1 : 2);
  p.group_device = {0, 1, 2};
  p.micro_batches = 2;
  return p;
}

}  // namespace

TEST_CASE("an AL form's library keeps the source's times for its own layers and estimates only the added maps") {
  LayerGraph g = test::linear_chain({64, 48, 32, 10});
  g.num_classes = 10;
  LayerLibrary source = estimated_library(g, 8, 5.0);
  for (size_t i = 0; i < source.rows.size(); ++i) source.rows[i].forward_ms = 1.5 + static_cast<double>(i);
  source.measured = true;
  auto form = make_al_form(g, {2}, 16);
  REQUIRE_MESSAGE(form.is_ok(), form.error_message());
  LayerLibrary lib = al_form_library(source, *form);
  REQUIRE(lib.rows.size() == form->layers.size());
  CHECK(lib.batch_size == 8);
  CHECK(lib.measured);
  for (size_t i = 0; i < lib.rows.size(); ++i) {
    const int s = g.index_of(lib.rows[i].name);
    if (s >= 0) {
      CHECK(lib.rows[i].forward_ms == source.rows[s].forward_ms);
      CHECK(lib.rows[i].backward_ms == source.rows[s].backward_ms);
    } else if (form->layers[i].op == "linear") {
      CHECK_MESSAGE(lib.rows[i].forward_ms > 0, lib.rows[i].name);  // bridges, targets, decoders
    }
  }
}

TEST_CASE("the AL row is the fastest AL plan over the proposed cut sets and micro-batch counts, each set priced once") {
  LayerGraph g = test::linear_chain({64, 64, 64, 64, 10});
  g.num_classes = 10;
  Cluster c = testing::equal_cluster(3);
  std::vector<LayerLibrary> libs = {estimated_library(g, 16, 2.0)};
  AlPricing pricing;
  pricing.libraries = &libs;
  pricing.batch_size = 16;
  pricing.max_micro_batches = 8;
  Placement interleaved = three_stages(g, 2, 4);
  interleaved.layer_group = {0, 1, 0, 1, 2};  // a group that comes back: no AL form
  Placement dp;
  dp.data_parallel = DataParallelMode::bsp;
  dp.layer_group.assign(g.layers.size(), 0);
  dp.group_device = {0};
  std::vector<AlCandidate> candidates = {{"policy", three_stages(g, 2, 4)},
                                         {"dp", three_stages(g, 2, 4)},  // the same cut set again
                                         {"uniform", three_stages(g, 1, 3)},
                                         {"weird", interleaved},
                                         {"bsp", dp}};
  std::atomic<bool> cancel{false};
  AlRow row = best_al_row(g, c, candidates, pricing, cancel);
  REQUIRE(row.found);
  CHECK(row.candidates == 2);  // policy's and uniform's; dp repeats policy's, weird has none, bsp is data parallel
  REQUIRE(row.refused.size() == 1);
  CHECK(row.refused[0].rfind("weird: placement.layers", 0) == 0);
  // The same answer by hand: each cut set's AL form at 1, 2, 4, 8 micro-batches.
  double best = 1e300;
  std::string from;
  for (const auto& [name, p] : {std::pair<std::string, Placement>{"policy", three_stages(g, 2, 4)},
                                {"uniform", three_stages(g, 1, 3)}}) {
    auto plan = al_plan_from_pipeline(g, p);
    REQUIRE(plan.is_ok());
    auto cost = CostModel::build(plan->graph, c, {al_form_library(libs[0], plan->graph)});
    REQUIRE(cost.is_ok());
    Simulator sim(plan->graph, c, *cost, 16);
    for (int m : {1, 2, 4, 8}) {
      Placement q = plan->placement;
      q.micro_batches = m;
      StepReport r = sim.evaluate(q);
      REQUIRE(r.ok);
      if (r.step_ms < best) best = r.step_ms, from = name;
    }
  }
  CHECK(row.report.step_ms == doctest::Approx(best));
  CHECK(row.from == from);
  CHECK(row.plan.placement.schedule == Schedule::al);
  CHECK(row.plan.placement.micro_batches == row.pipeline.micro_batches);
  CHECK(row.plan.graph.al_blocks.size() == 3);
}

TEST_CASE("nothing with an AL form: the row says so with every reason") {
  LayerGraph g = test::linear_chain({32, 32, 10});
  g.num_classes = 10;
  std::vector<LayerLibrary> libs = {estimated_library(g, 8)};
  AlPricing pricing;
  pricing.libraries = &libs;
  pricing.batch_size = 8;
  Placement back;
  back.layer_group = {0, 1, 0};  // group 0 comes back after group 1
  back.group_device = {0, 1};
  std::atomic<bool> cancel{false};
  AlRow row = best_al_row(g, testing::equal_cluster(2), {{"policy", back}}, pricing, cancel);
  CHECK_FALSE(row.found);
  CHECK(row.candidates == 0);
  REQUIRE(row.refused.size() == 1);
  CHECK(row.refused[0].find("placement.layers[2]") != std::string::npos);
  // A model with no AL form at all (no classes) is said once, not once per proposal.
  LayerGraph no_classes = g;
  no_classes.num_classes = 0;
  Placement two = back;
  two.layer_group = {0, 0, 1};
  AlRow none = best_al_row(no_classes, testing::equal_cluster(2), {{"policy", two}, {"dp", two}, {"uniform", back}},
                           pricing, cancel);
  CHECK_FALSE(none.found);
  REQUIRE(none.refused.size() == 1);
  CHECK(none.refused[0].rfind("policy: ", 0) == 0);
}

TEST_CASE("optimize with allow_al shows the AL row beside the best; without it there is none") {
  static const std::string cache = (std::filesystem::temp_directory_path() / "tapp-test-placer-cache").string();
  setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  json body = {{"model", "mlp"},
               {"cluster",
                {{"devices", json::array({json{{"name", "a"}, {"speed", 0.5}}, json{{"name", "b"}, {"speed", 0.25}},
                                          json{{"name", "c"}, {"speed", 0.25}}})}}},
               {"options",
                {{"iterations", 20}, {"batch_size", 8}, {"seed", 3}, {"verify", false}, {"costs", "estimated"},
                 {"allow_al", true}}}};
  auto req = optimize_request_from_json(body);
  REQUIRE_MESSAGE(req.is_ok(), req.error_message());
  CHECK(req->allow_al);
  std::atomic<bool> cancel{false};
  auto r = optimize(*req, nullptr, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  const json& j = *r;
  REQUIRE(j.contains("al"));
  const json& al = j["al"];
  REQUIRE_MESSAGE(al["found"] == true, al.dump());
  CHECK(j["source"] != "al");  // never the best: AL changes the learning algorithm
  CHECK(al["step_ms"].get<double>() > 0);
  CHECK(al["faster_than_best"] == (al["step_ms"].get<double>() < j["step_ms"].get<double>()));
  CHECK(al["candidates"].get<int>() >= 1);
  // Its placement is the source model's pipeline whose groups are the blocks.
  LayerGraph g = *zoo_model("mlp");
  Cluster c = *cluster_from_json(body["cluster"]);
  auto pipeline = placement_from_json(al["placement"], g, c);
  REQUIRE_MESSAGE(pipeline.is_ok(), pipeline.error_message());
  auto plan = al_plan_from_pipeline(g, *pipeline);
  REQUIRE_MESSAGE(plan.is_ok(), plan.error_message());
  CHECK(static_cast<int>(plan->graph.al_blocks.size()) == pipeline->num_groups());
  CHECK(al["blocks"].get<int>() == pipeline->num_groups());
  CHECK(al["cuts"].size() == static_cast<size_t>(pipeline->num_groups() - 1));
  CHECK(al["micro_batches"].get<int>() == pipeline->micro_batches);

  body["options"].erase("allow_al");
  auto plain = optimize(*optimize_request_from_json(body), nullptr, cancel);
  REQUIRE(plain.is_ok());
  CHECK_FALSE(plain->contains("al"));
  body["options"]["allow_al"] = "yes";
  auto bad = optimize_request_from_json(body);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().field() == "options.allow_al");
}
