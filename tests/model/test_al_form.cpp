// The Associated Learning form of a layer graph (model/al_form.h): blocks, added maps and their
// sizes, valid cuts, and the errors that name the field.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include "model/al_form.h"
#include "model/zoo.h"
#include "tests/model/linear_chain.h"

namespace tapp {
namespace {

LayerGraph zoo(const std::string& name, int64_t size = 0) {
  ModelOptions o;
  o.input_size = size;
  auto g = zoo_model(name, o);
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  return *g;
}

}  // namespace

TEST_CASE("a chain cut in two becomes two blocks with bridge, target and decoder maps of the stated sizes") {
  LayerGraph src = test::linear_chain({32, 24, 10});  // input 16, classes 10
  auto al = make_al_form(src, {2}, 8);
  REQUIRE_MESSAGE(al.is_ok(), al.error_message());
  REQUIRE(al->al_blocks.size() == 2);
  CHECK(al->num_classes == 10);
  const AlBlock& b1 = al->al_blocks[0];
  const AlBlock& b2 = al->al_blocks[1];
  CHECK(al->layers[b1.first].op == "al_labels");
  CHECK(al->layers[b1.output].name == "fc1");
  CHECK(al->layers[b2.output].name == "fc2");
  CHECK(b2.first == b1.last + 1);
  CHECK(b2.last == static_cast<int>(al->layers.size()) - 1);
  CHECK(b2.target_input == b1.target);
  CHECK(b1.target_input == b1.first);
  // b_1: linear(24 -> 8); g_1: linear(10 -> 8); h_1: linear(8 -> 10); block 2: 10 -> 8, 8 -> 8, 8 -> 8.
  CHECK(al->layers[b1.bridge - 1].params == 24 * 8 + 8);
  CHECK(al->layers[b1.target - 1].params == 10 * 8 + 8);
  CHECK(al->layers[b1.decoder_input].params == 8 * 10 + 10);
  CHECK(al->layers[b2.bridge - 1].params == 10 * 8 + 8);
  CHECK(al->layers[b2.target - 1].params == 8 * 8 + 8);
  CHECK(al->layers[b2.decoder_input].params == 8 * 8 + 8);
  CHECK(al->layers[b2.decoder].output_shape == Shape{8});
  CHECK(al_cuts_of(*al) == std::vector<int>{2});
  for (int i = 0; i < static_cast<int>(al->layers.size()); ++i) CHECK(al_block_of(*al, i) == (i <= b1.last ? 0 : 1));
}

TEST_CASE("a convolutional block's bridge pools its feature map to one value per channel") {
  LayerGraph src = zoo("alexnet_cifar");
  auto cuts = balanced_al_cuts(src, 4);
  REQUIRE_MESSAGE(cuts.is_ok(), cuts.error_message());
  auto al = make_al_form(src, *cuts);
  REQUIRE_MESSAGE(al.is_ok(), al.error_message());
  REQUIRE(al->al_blocks.size() == 4);
  for (const AlBlock& b : al->al_blocks) {
    const Shape& s = al->layers[b.output].output_shape;
    const Layer& bridge = al->layers[b.bridge - 1];
    CHECK(bridge.op == "linear");
    CHECK(bridge.input_shapes[0] == Shape{s[0]});  // C after pooling (or the vector's width)
    CHECK(bridge.output_shape == Shape{kDefaultAlTargetWidth});
  }
  // Every original layer is kept once, in order.
  int next = 0;
  for (const Layer& l : al->layers)
    if (next < static_cast<int>(src.layers.size()) && l.name == src.layers[next].name) ++next;
  CHECK(next == static_cast<int>(src.layers.size()));
}

TEST_CASE("cuts are valid only where one tensor crosses: never inside a residual block") {
  LayerGraph src = zoo("resnet50", 64);
  const std::vector<int> valid = valid_al_cuts(src);
  REQUIRE(!valid.empty());
  const auto consumers = src.consumers();
  for (int k : valid)
    for (int p = 0; p < k - 1; ++p)
      for (int c : consumers[p]) CHECK_MESSAGE(c < k, "edge " << p << "->" << c << " crosses the cut before " << k);
  // A cut in the middle of a residual block (between its two convolutions) is refused, naming the cut.
  int inside = -1;
  for (int k = 2; k < static_cast<int>(src.layers.size()) && inside < 0; ++k)
    if (!std::binary_search(valid.begin(), valid.end(), k)) inside = k;
  REQUIRE(inside > 0);
  auto bad = make_al_form(src, {inside});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().field() == "al.cuts[0]");
  CHECK(bad.error_message().find("more than one tensor crosses") != std::string::npos);
}

TEST_CASE("bad AL forms get an error naming the field") {
  LayerGraph src = test::linear_chain({32, 24, 10});
  auto empty = make_al_form(src, {2, 2});
  REQUIRE_FALSE(empty.is_ok());
  CHECK(empty.status().field() == "al.cuts[1]");
  CHECK(empty.error_message().find("empty") != std::string::npos);
  auto past = make_al_form(src, {3});
  REQUIRE_FALSE(past.is_ok());
  CHECK(past.status().field() == "al.cuts[0]");
  auto width = make_al_form(src, {1}, 0);
  REQUIRE_FALSE(width.is_ok());
  CHECK(width.status().field() == "al.target_width");
  auto twice = make_al_form(*make_al_form(src, {1}), {});
  REQUIRE_FALSE(twice.is_ok());
  CHECK(twice.status().field() == "model");
  auto lm = make_al_form(zoo("gpt2", 16), {});
  if (lm.is_ok()) FAIL("a per-token language model has no AL form");
  else CHECK(lm.status().field() == "model");
  LayerGraph clash = src;
  clash.layers[1].name = "al1.bridge";
  auto taken = make_al_form(clash, {2});
  REQUIRE_FALSE(taken.is_ok());
  CHECK(taken.status().field() == "model");
  CHECK(taken.error_message().find("'al1.bridge' is taken") != std::string::npos);
  auto blocks = balanced_al_cuts(src, 9);
  REQUIRE_FALSE(blocks.is_ok());
  CHECK(blocks.status().field() == "al.blocks");
}

TEST_CASE("balanced cuts on random chains are valid, ascending and leave no block empty") {
  std::mt19937 rng(20261123);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> widths;
    const int n = 2 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) widths.push_back(4 + static_cast<int64_t>(rng() % 200));
    LayerGraph src = test::linear_chain(widths);
    const int blocks = 1 + static_cast<int>(rng() % n);
    auto cuts = balanced_al_cuts(src, blocks);
    REQUIRE_MESSAGE(cuts.is_ok(), cuts.error_message());
    REQUIRE(static_cast<int>(cuts->size()) == blocks - 1);
    auto al = make_al_form(src, *cuts, 1 + static_cast<int64_t>(rng() % 64));
    REQUIRE_MESSAGE(al.is_ok(), al.error_message());
    CHECK(static_cast<int>(al->al_blocks.size()) == blocks);
    CHECK(al_cuts_of(*al) == *cuts);
  }
}

}  // namespace tapp
