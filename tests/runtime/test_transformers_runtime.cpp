// Transformers on the runtime: tiny gpt2, bert_base and vit_b_16 split over 2
// devices train exactly like one device; GPT-2's tied table stays one
// parameter when its layers share a worker and two equal copies when they do not.
#include "tests/torch_doctest.h"  // LibTorch + doctest (glog's CHECK macros removed)

#include <numeric>

#include "model/zoo.h"
#include "profiler/torch_model.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_support.h"

using namespace tapp;
using namespace tapp::test;

namespace {

LayerGraph tiny(const std::string& name, int64_t input_size, int64_t vocabulary, int64_t classes) {
  ModelOptions o;
  o.input_size = input_size;
  o.vocabulary = vocabulary;
  o.num_classes = classes;
  o.layers = 2;
  o.width = 16;
  o.heads = 2;
  auto g = zoo_model(name, o);
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  return *g;
}

LayerGraph tiny_gpt2() { return tiny("gpt2", 6, 40, 0); }

// The first `first` layers on device 0, the rest on device 1.
std::vector<int> split_at(const LayerGraph& g, int first) {
  std::vector<int> d(g.layers.size(), 1);
  std::fill(d.begin(), d.begin() + first, 0);
  return d;
}

void check_two_devices_train_like_one(const LayerGraph& g, const std::vector<int>& layer_device, Schedule s) {
  RunOptions o = test_options();
  RunResult r = run_placement(g, local_cluster(2), by_device(layer_device, 3, s), o);
  INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
  REQUIRE(r.report.ok);
  CHECK(r.report.devices.size() == 2);
  check_same_parameters(r.layer_parameters, reference_parameters(g, o), g);
  check_trained(r.layer_parameters, g, o);
  check_no_orphans(r);
}

}  // namespace

TEST_CASE("a language model's loss is the mean cross-entropy over every token of the batch") {
  torch::manual_seed(3);
  torch::Tensor logits = torch::randn({4, 5, 7});
  torch::Tensor labels = torch::randint(7, {4, 5}, torch::kLong);
  torch::Tensor mean = torch::nn::functional::cross_entropy(logits.reshape({20, 7}), labels.reshape({20}));
  CHECK(training_loss(logits, labels, 4).item<double>() == doctest::Approx(mean.item<double>()).epsilon(1e-6));
  // Two micro-batches of 2 add up to the full batch's mean.
  torch::Tensor halves = training_loss(logits.narrow(0, 0, 2), labels.narrow(0, 0, 2), 4) +
                         training_loss(logits.narrow(0, 2, 2), labels.narrow(0, 2, 2), 4);
  CHECK(halves.item<double>() == doctest::Approx(mean.item<double>()).epsilon(1e-6));
}

TEST_CASE("a token model's synthetic batch holds int64 ids below the vocabulary and one label per token") {
  LayerGraph g = tiny_gpt2();
  auto [x, y] = synthetic_batch(g, 3, 1);
  CHECK((x.scalar_type() == torch::kLong));
  CHECK(x.sizes().vec() == std::vector<int64_t>{3, 6});
  CHECK(x.max().item<int64_t>() < 40);
  CHECK(y.sizes().vec() == std::vector<int64_t>{3, 6});
  auto m = GraphModel::build(g, 1);
  REQUIRE(m.is_ok());
  CHECK((*m)->forward(x).sizes().vec() == std::vector<int64_t>{3, 6, 40});
}

TEST_CASE("the tied table is one parameter in a whole model and an equal copy on a worker without the embedding") {
  LayerGraph g = tiny_gpt2();
  auto whole = GraphModel::build(g, 5);
  REQUIRE(whole.is_ok());
  int64_t n = 0;
  for (const auto& p : (*whole)->parameters()) n += p.numel();
  CHECK(n == g.total_params());
  const int head = static_cast<int>(g.layers.size()) - 1;
  std::vector<bool> keep(g.layers.size(), false);
  keep[head] = true;
  auto part = GraphModel::build(g, 5, keep);
  REQUIRE(part.is_ok());
  CHECK((*part)->layer_parameters(head).empty());
  REQUIRE((*part)->parameters().size() == 1);
  CHECK(torch::equal((*part)->tied_table(head), (*whole)->layer_parameters(0).at(0)));
}

TEST_CASE("tiny gpt2 over 2 devices, its tied table on both, GPipe, trains like one device") {
  LayerGraph g = tiny_gpt2();
  check_two_devices_train_like_one(g, split_at(g, static_cast<int>(g.layers.size()) / 2), Schedule::gpipe);
}

TEST_CASE("tiny gpt2 with the embedding and the head on one device, the blocks on the other, 1F1B, trains like one device") {
  LayerGraph g = tiny_gpt2();
  std::vector<int> d(g.layers.size(), 1);
  d.front() = d[1] = d.back() = d[d.size() - 2] = 0;
  check_two_devices_train_like_one(g, d, Schedule::one_f_one_b);
}

TEST_CASE("tiny bert_base with a classifier over 2 devices trains like one device") {
  LayerGraph g = tiny("bert_base", 6, 40, 5);
  check_two_devices_train_like_one(g, split_at(g, g.index_of("encoder.layer.1.attention.self")), Schedule::one_f_one_b);
}

TEST_CASE("tiny vit_b_16 over 2 devices, split inside a block, trains like one device") {
  LayerGraph g = tiny("vit_b_16", 32, 0, 5);
  check_two_devices_train_like_one(g, split_at(g, g.index_of("encoder.layers.encoder_layer_0.mlp.0")), Schedule::gpipe);
}

TEST_CASE("the text classifiers, LSTM and Transformer encoder, over 2 devices train like one device") {
  ModelOptions o;
  o.input_size = 6;
  o.vocabulary = 40;
  o.num_classes = 3;
  o.layers = 2;
  o.width = 16;
  auto lstm = zoo_model("text_lstm", o);
  REQUIRE_MESSAGE(lstm.is_ok(), lstm.error_message());
  check_two_devices_train_like_one(*lstm, split_at(*lstm, lstm->index_of("lstm.1")), Schedule::one_f_one_b);
  o.heads = 2;
  auto encoder = zoo_model("text_transformer", o);
  REQUIRE_MESSAGE(encoder.is_ok(), encoder.error_message());
  check_two_devices_train_like_one(*encoder, split_at(*encoder, encoder->index_of("encoder.1.ln_1")), Schedule::gpipe);
}

TEST_CASE("tiny gpt2 trains like one device with BSP data parallelism") {
  LayerGraph g = tiny_gpt2();
  RunOptions o = test_options();
  RunResult r = run_strategy(g, local_cluster(2), "bsp", o);
  INFO(r.report.message);
  REQUIRE(r.report.ok);
  check_same_parameters(r.layer_parameters, reference_parameters(g, o), g);
}
