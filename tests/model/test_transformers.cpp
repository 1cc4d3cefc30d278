// Transformers in the zoo: parameter counts against the published numbers and
// against PyTorch modules built by python3-torch, multiply-adds and saved bytes
// per layer against formulas written out here, and the ops' errors.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/model_json.h"
#include "model/zoo.h"
#include "tests/model/tiny_transformer.h"

using namespace tapp;

namespace {

LayerGraph must(const std::string& name, ModelOptions o = {}) {
  auto g = zoo_model(name, o);
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  return *g;
}

const Layer& layer(const LayerGraph& g, const std::string& name) {
  int i = g.index_of(name);
  REQUIRE_MESSAGE(i >= 0, name);
  return g.layers[i];
}

ModelOptions tiny(int64_t input_size, int64_t vocabulary = 0, int64_t classes = 0) {
  return test::tiny_transformer(input_size, vocabulary, 2, 32, 4, classes);
}

// One count per spec "model:vocabulary:positions:layers:width:heads:image:classes".
std::vector<int64_t> torch_counts(const std::vector<std::string>& specs) {
  std::string cmd = std::string(TAPP_PYTHON) + " " + TAPP_SOURCE_DIR + "/tests/model/reference_params.py";
  for (const auto& s : specs) cmd += " " + s;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(pipe);
  std::string out;
  std::array<char, 256> buf{};
  while (fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  std::istringstream in(out);
  std::vector<int64_t> counts;
  for (int64_t n; in >> n;) counts.push_back(n);
  REQUIRE_MESSAGE(counts.size() == specs.size(), "python3 said: " << out);
  return counts;
}

}  // namespace

TEST_CASE("gpt2 has GPT-2 small's 124,439,808 parameters, its tied output embedding counted once") {
  LayerGraph g = must("gpt2");
  CHECK(g.total_params() == 124439808);
  CHECK(g.input_shape == Shape{1024});
  CHECK(g.input_kind == InputKind::tokens);
  CHECK(g.input_vocabulary == 50257);
  CHECK(g.num_classes == 50257);
  CHECK(g.per_token_labels());
  CHECK(g.layers.back().op == "lm_head");
  CHECK(g.layers.back().params == 0);
  CHECK(g.layers.back().output_shape == Shape{1024, 50257});
  CHECK(layer(g, "wte").params == 50257 * 768);
  CHECK(layer(g, "h.0.attn").attrs.causal);
}

TEST_CASE("bert_base has BertModel's 109,482,240 parameters with its pooler and two token types") {
  LayerGraph g = must("bert_base");
  CHECK(g.total_params() == 109482240);
  CHECK(g.input_shape == Shape{512});
  CHECK(layer(g, "embeddings.token_type_embeddings").params == 2 * 768);
  CHECK(!layer(g, "encoder.layer.0.attention.self").attrs.causal);
  CHECK(g.layers.back().output_shape == Shape{768});
  CHECK(!g.per_token_labels());
  // A classifier on the pooler when classes are asked for.
  CHECK(must("bert_base", {128, 3}).total_params() == 109482240 + 768 * 3 + 3);
}

TEST_CASE("vit_b_16 has torchvision's 86,567,656 parameters at 224 with 1000 classes") {
  LayerGraph g = must("vit_b_16");
  CHECK(g.total_params() == 86567656);
  CHECK(g.input_kind == InputKind::dense);
  CHECK(layer(g, "patches").output_shape == Shape{196, 768});
  CHECK(layer(g, "class_token").output_shape == Shape{197, 768});
  CHECK(layer(g, "encoder.pos_embedding").params == 197 * 768);
  CHECK(g.num_classes == 1000);
}

TEST_CASE("gpt2_medium has gpt2-medium's shape: 24 blocks of width 1024 with 16 heads, about 355M parameters") {
  LayerGraph g = must("gpt2_medium");
  CHECK(g.total_params() == 354823168);
  CHECK(layer(g, "h.23.attn").attrs.heads == 16);
  CHECK(layer(g, "h.23.attn").output_shape == Shape{1024, 1024});
}

TEST_CASE("parameter counts equal PyTorch modules built by python3-torch, at full size and tiny") {
  // GPT-2 and BERT from torch.nn parts, ViT torchvision's own class (tests/model/reference_params.py).
  struct Case {
    std::string name;
    ModelOptions options;
    std::string spec;
  };
  const std::vector<Case> cases = {
      {"gpt2", {}, "gpt2:50257:1024:12:768:12:0:0"},
      {"bert_base", {}, "bert_base:30522:512:12:768:12:0:0"},
      {"vit_b_16", {}, "vit_b_16:0:0:12:768:12:224:1000"},
      {"gpt2_medium", {}, "gpt2_medium:50257:1024:24:1024:16:0:0"},
      {"gpt2", tiny(8, 50), "gpt2:50:1024:2:32:4:0:0"},
      {"bert_base", tiny(8, 50, 5), "bert_base:50:512:2:32:4:0:5"},
      {"vit_b_16", tiny(32, 0, 5), "vit_b_16:0:0:2:32:4:32:5"},
      {"text_lstm", {}, "text_lstm:1000:32:4:64:0:0:4"},
      {"text_transformer", {}, "text_transformer:1000:32:4:64:4:0:4"},
      {"text_lstm", test::tiny_transformer(12, 30, 3, 20, 0, 6), "text_lstm:30:12:3:20:0:0:6"},
      {"text_transformer", tiny(40, 30, 6), "text_transformer:30:40:2:32:4:0:6"},
  };
  std::vector<std::string> specs;
  for (const auto& c : cases) specs.push_back(c.spec);
  std::vector<int64_t> want = torch_counts(specs);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].spec);
    CHECK(must(cases[i].name, cases[i].options).total_params() == want[i]);
  }
}

TEST_CASE("text classifiers: an LSTM's shapes, parameters and multiply-adds; the class from the last or first token") {
  const int64_t T = 32, D = 64, H = 4 * D;
  LayerGraph g = must("text_lstm");
  CHECK(g.input_kind == InputKind::tokens);
  CHECK(g.input_shape == Shape{T});
  CHECK(g.num_classes == 4);
  const Layer& lstm = layer(g, "lstm.3");
  CHECK(op_class(lstm.op) == "Recurrent");
  CHECK(lstm.output_shape == Shape{T, D});
  CHECK(lstm.params == H * (D + D) + 2 * H);  // weight_ih, weight_hh, two biases
  CHECK(lstm.macs == T * H * (D + D));
  CHECK(lstm.saved_bytes == 4 * T * 6 * D);
  CHECK(layer(g, "last_token").attrs.index == T - 1);
  // The embedding starts as nn.Embedding's (N(0, 1)), GPT-2's as its own (0.02); the JSON keeps it.
  CHECK(layer(g, "embedding").attrs.init_std == 1.0);
  CHECK(layer(must("gpt2", tiny(8, 50)), "wte").attrs.init_std == 0.02);
  auto round_trip = model_from_json(model_to_json(g));
  REQUIRE(round_trip.is_ok());
  CHECK(round_trip->layers[0].attrs.init_std == 1.0);
  nlohmann::json bad_std = model_to_json(g);
  bad_std["layers"][0]["attrs"]["init_std"] = 0;
  auto refused = model_from_json(bad_std);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.error_message().find("layers[0].attrs.init_std") != std::string::npos);
  LayerGraph t = must("text_transformer", tiny(40, 30, 6));
  CHECK(t.input_shape == Shape{40});
  CHECK(!layer(t, "encoder.1.attention").attrs.causal);
  CHECK(layer(t, "class_token_out").attrs.index == 0);
  CHECK(t.layers.back().output_shape == Shape{6});
  // The LSTM reads a sequence; heads are not its option.
  CHECK(!zoo_model("text_lstm", test::tiny_transformer(8, 30, 1, 8, 2, 2)));
  nlohmann::json j = {{"name", "bad"}, {"input_shape", {8, 4}}, {"layers", {{{"name", "r"}, {"op", "lstm"}, {"attrs", {{"out", 0}}}}}}};
  auto bad = model_from_json(j);
  REQUIRE(!bad);
  CHECK(bad.error_message().find("attrs.out") != std::string::npos);
  j["input_shape"] = {3, 8, 8};
  j["layers"][0]["attrs"]["out"] = 4;
  CHECK(!model_from_json(j));  // not a sequence
  j["input_shape"] = {8, 4};
  j["layers"].push_back({{"name", "m"}, {"op", "mean_tokens"}, {"inputs", {"r"}}});
  auto ok = model_from_json(j);
  REQUIRE_MESSAGE(ok, ok.error_message());
  CHECK(ok->layers.back().output_shape == Shape{4});
  CHECK(model_from_json(model_to_json(*ok))->layers[0].attrs.out == 4);
}

TEST_CASE("multiply-adds per layer follow the formulas: projections, QK^T and AV, MLP, tied head") {
  const int64_t T = 16, D = 32, V = 50, F = 4 * D;
  LayerGraph g = must("gpt2", tiny(T, V));
  CHECK(layer(g, "wte").macs == 0);
  CHECK(layer(g, "wpe").macs == 0);
  CHECK(layer(g, "h.0.ln_1").macs == 0);
  // q, k, v and output projections: 4 T D^2; scores Q K^T and A V: T^2 D each (all heads together).
  CHECK(layer(g, "h.0.attn").macs == 4 * T * D * D + 2 * T * T * D);
  CHECK(layer(g, "h.0.mlp.c_fc").macs == T * D * F);
  CHECK(layer(g, "h.0.mlp.c_proj").macs == T * F * D);
  CHECK(layer(g, "lm_head").macs == T * D * V);
  CHECK(g.total_macs() == 2 * (4 * T * D * D + 2 * T * T * D + 2 * T * D * F) + T * D * V);

  LayerGraph b = must("bert_base", tiny(T, V));
  CHECK(layer(b, "encoder.layer.1.attention.self").macs == 4 * T * D * D + 2 * T * T * D);
  CHECK(layer(b, "pooler.dense").macs == D * D);  // the first token only

  const int64_t side = 64, P = (side / 16) * (side / 16);
  LayerGraph v = must("vit_b_16", tiny(side, 0, 10));
  CHECK(layer(v, "conv_proj").macs == P * D * 3 * 16 * 16);
  CHECK(layer(v, "encoder.layers.encoder_layer_0.self_attention").macs ==
        4 * (P + 1) * D * D + 2 * (P + 1) * (P + 1) * D);
  CHECK(layer(v, "heads.head").macs == D * 10);
}

TEST_CASE("saved bytes: the output for most layers, the per-head score matrices for attention") {
  const int64_t T = 16, D = 32, H = 4;
  LayerGraph g = must("gpt2", tiny(T, 50));
  // q, k, v, context and output (5 T D) plus the probabilities (H T^2), float32.
  CHECK(layer(g, "h.0.attn").saved_bytes == 4 * (5 * T * D + H * T * T));
  CHECK(layer(g, "h.0.mlp.c_fc").saved_bytes == 4 * T * 4 * D);
  CHECK(layer(g, "lm_head").saved_bytes == 4 * T * 50);
  for (const Layer& l : must("resnet50").layers) CHECK(l.saved_bytes == l.activation_bytes());
}

TEST_CASE("sequence length, vocabulary, blocks and width are options; bad ones are refused with the reason") {
  LayerGraph g = must("gpt2", tiny(8, 50));
  CHECK(g.input_shape == Shape{8});
  CHECK(g.num_classes == 50);
  CHECK(g.index_of("h.1.add_2") >= 0);
  CHECK(g.index_of("h.2.ln_1") < 0);
  CHECK(must("vit_b_16", {32, 10}).layers[1].output_shape == Shape{4, 768});
  ModelOptions bad_heads = tiny(8, 50);
  bad_heads.heads = 5;
  CHECK(zoo_model("gpt2", bad_heads).error_message() == "gpt2: 5 heads do not divide the width 32");
  CHECK(zoo_model("vit_b_16", {40}).error_message() == "vit_b_16: the image side 40 is not a multiple of 16");
  CHECK(zoo_model("gpt2", {8, 10}).error_message().find("vocabulary, not classes") != std::string::npos);
  ModelOptions cnn;
  cnn.layers = 3;
  CHECK(zoo_model("resnet50", cnn).error_message().find("transformers only") != std::string::npos);
  // A sequence longer than GPT-2's 1024 positions grows the position table.
  CHECK(layer(must("gpt2", tiny(2048, 50)), "wpe").params == 2048 * 32);
}

TEST_CASE("a transformer's JSON layer graph round-trips with its attributes") {
  LayerGraph g = must("gpt2", tiny(8, 50));
  auto back = model_from_json(model_to_json(g));
  REQUIRE_MESSAGE(back.is_ok(), back.error_message());
  CHECK(back->total_params() == g.total_params());
  CHECK(back->total_macs() == g.total_macs());
  CHECK(back->input_kind == InputKind::tokens);
  for (size_t i = 0; i < g.layers.size(); ++i) CHECK(back->layers[i].attrs == g.layers[i].attrs);
  CHECK(graph_fingerprint(*back) == graph_fingerprint(g));
}

TEST_CASE("transformer ops name what is wrong: an untied head, heads that do not divide, a long sequence") {
  auto parse = [](const nlohmann::json& layers, const nlohmann::json& shape) {
    return parse_model_json(nlohmann::json{{"name", "m"}, {"input_shape", shape}, {"layers", layers}}.dump())
        .error_message();
  };
  using J = nlohmann::json;
  J emb = {{"name", "emb"}, {"op", "token_embedding"}, {"attrs", {{"entries", 10}, {"out", 8}}}};
  CHECK(parse(J::array({emb, {{"name", "head"}, {"op", "lm_head"}, {"inputs", {"emb"}}, {"attrs", {{"tie", "nope"}}}}}),
              {4}) == "layer 'head' (lm_head): attrs.tie 'nope' must name an earlier token_embedding layer");
  CHECK(parse(J::array({emb, {{"name", "att"}, {"op", "self_attention"}, {"inputs", {"emb"}}, {"attrs", {{"heads", 3}}}}}),
              {4}) == "layer 'att' (self_attention): attrs.heads 3 must divide the width 8");
  CHECK(parse(J::array({emb, {{"name", "pos"}, {"op", "position_embedding"}, {"inputs", {"emb"}},
                              {"attrs", {{"entries", 2}}}}}),
              {4}) == "layer 'pos' (position_embedding): sequence of 4 tokens is longer than its 2 positions");
  CHECK(parse(J::array({emb, {{"name", "fc"}, {"op", "linear"}, {"attrs", {{"out", 2}}}}}), {4}) ==
        "layer 'fc' (linear): reads the model input, which holds token ids (a token_embedding reads it)");
  CHECK(parse(J::array({{{"name", "att"}, {"op", "self_attention"}, {"attrs", {{"heads", 0}}}}}), {4, 8}) ==
        "layers[0].attrs.heads: must be positive");
}

TEST_CASE("a torchscript slice with attrs.entries reads token ids, as a token_embedding does") {
  using J = nlohmann::json;
  auto slice = [](const std::string& name, const J& inputs, const J& out, int64_t entries) {
    J attrs = {{"file", "/m.pt"}, {"hash", "0123456789abcdef"}, {"nodes", {0, 1}}, {"output_shape", out}};
    if (entries != 0) attrs["entries"] = entries;
    return J{{"name", name}, {"op", "torchscript"}, {"inputs", inputs}, {"attrs", attrs}};
  };
  auto parse = [](const J& layers) {
    return parse_model_json(J{{"name", "lm"}, {"input_shape", {6}}, {"layers", layers}}.dump());
  };
  auto lm = parse(J::array({slice("embed", J::array(), {6, 16}, 40), slice("head", {"embed"}, {6, 40}, 0)}));
  REQUIRE_MESSAGE(lm.is_ok(), lm.error_message());
  CHECK(lm->input_kind == InputKind::tokens);
  CHECK(lm->input_vocabulary == 40);
  CHECK(lm->per_token_labels());
  auto back = model_from_json(model_to_json(*lm));
  REQUIRE_MESSAGE(back.is_ok(), back.error_message());
  CHECK(back->input_vocabulary == 40);
  auto dense = parse(J::array({slice("embed", J::array(), {6, 16}, 0), slice("head", {"embed"}, {3}, 0)}));
  REQUIRE_MESSAGE(dense.is_ok(), dense.error_message());
  CHECK(dense->input_kind == InputKind::dense);
  CHECK(parse(J::array({slice("embed", J::array(), {6, 16}, 0), slice("head", {"embed"}, {6, 40}, 40)}))
            .error_message() == "layer 'head' (torchscript): reads token ids: the model input, not another layer");
  CHECK(parse(J::array({slice("embed", J::array(), {6, 16}, -3)})).error_message() ==
        "layers[0].attrs.entries: must be positive (the token vocabulary)");
}
