#include <doctest/doctest.h>

#include <cmath>

#include "model/zoo.h"

using namespace tapp;

namespace {
LayerGraph must(const std::string& name, ModelOptions o = {}) {
  auto g = zoo_model(name, o);
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  return *g;
}
void check_macs(const LayerGraph& g, double expected_g) {
  double got = static_cast<double>(g.total_macs()) / 1e9;
  CHECK_MESSAGE(std::abs(got - expected_g) / expected_g < 0.01, g.name, " GMACs ", got);
}
}  // namespace

TEST_CASE("alexnet has torchvision's parameter count and 0.714 GMACs at 224") {
  LayerGraph g = must("alexnet");
  CHECK(g.total_params() == 61100840);
  check_macs(g, 0.714);
  CHECK(g.input_shape == Shape{3, 224, 224});
  CHECK(g.num_classes == 1000);
}

TEST_CASE("vgg16 has torchvision's parameter count and 15.47 GMACs at 224") {
  LayerGraph g = must("vgg16");
  CHECK(g.total_params() == 138357544);
  check_macs(g, 15.47);
}

TEST_CASE("resnet50 has torchvision's parameter count and 4.09 GMACs at 224") {
  LayerGraph g = must("resnet50");
  CHECK(g.total_params() == 25557032);
  check_macs(g, 4.09);
  CHECK(g.layers[g.index_of("layer1.0.add")].inputs.size() == 2);
}

TEST_CASE("inception_v3 without the aux head has torchvision's parameter count and 5.71 GMACs at 299") {
  LayerGraph g = must("inception_v3");
  CHECK(g.total_params() == 23834568);
  check_macs(g, 5.71);
  CHECK(g.layers[g.index_of("Mixed_7c.concat")].output_shape == Shape{2048, 8, 8});
}

TEST_CASE("input size and class count are options") {
  LayerGraph g = must("alexnet", {256, 10});
  CHECK(g.input_shape == Shape{3, 256, 256});
  CHECK(g.num_classes == 10);
  CHECK(g.total_params() == 61100840 - 4097 * 990);
  LayerGraph c = must("vgg5", {64, 100});
  CHECK(c.num_classes == 100);
  CHECK(c.input_shape == Shape{3, 64, 64});
}

TEST_CASE("small models default to CIFAR inputs and ten classes") {
  for (const char* name : {"alexnet_cifar", "vgg5", "mlp", "tiny_inception"}) {
    LayerGraph g = must(name);
    CHECK(g.input_shape == Shape{3, 32, 32});
    CHECK(g.num_classes == 10);
    CHECK(g.total_params() < 10000000);
  }
  // PipeLearn's VGG5: 3 conv+BN (32, 64, 64), FC 4096->128->10.
  CHECK(must("vgg5").total_params() == (896 + 64) + (18496 + 128) + (36928 + 128) + 524416 + 1290);
}

TEST_CASE("the branchy small model has a concat of three branches and a residual add") {
  LayerGraph g = must("tiny_inception");
  const Layer& cat = g.layers[g.index_of("mixed.concat")];
  CHECK(cat.inputs.size() == 3);
  CHECK(cat.output_shape == Shape{32, 16, 16});
  CHECK(g.layers[g.index_of("res.add")].inputs.size() == 2);
}

TEST_CASE("an unknown model name is rejected listing the known ones") {
  auto g = load_layer_graph("alexnett");
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.error_message().find("unknown model 'alexnett'") != std::string::npos);
  CHECK(g.error_message().find("alexnet, vgg16, resnet50, inception_v3") != std::string::npos);
}

TEST_CASE("an input too small for the model is rejected naming the layer") {
  auto g = zoo_model("inception_v3", {32, 0});
  REQUIRE_FALSE(g.is_ok());
  CHECK(g.error_message().find("inception_v3 at input size 32: layer '") == 0);
}

TEST_CASE("load_layer_graph resolves zoo names") {
  auto g = load_layer_graph("mlp");
  REQUIRE(g.is_ok());
  CHECK(g->name == "mlp");
}
