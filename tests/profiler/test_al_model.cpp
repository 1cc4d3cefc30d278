// AlModel (profiler/al_model.h): local losses and gradients of a 2-block model
// against the chain rule written out by hand, no gradient across blocks, and
// AL learning a separable task.
#include "profiler/al_model.h"
#include "tests/torch_doctest.h"

#include "model/al_form.h"
#include "model/zoo.h"
#include "tests/model/linear_chain.h"
#include "tests/model/tiny_transformer.h"

namespace tapp {
namespace {

using torch::Tensor;

// Block 1 of linear_chain({6, 3}) cut at fc1: f = fc0 (16 -> 6), bridge on s (6 -> d),
// target on the one-hot (3 -> d), decoder (d -> 3). Block 2: f = fc1 (6 -> 3),
// bridge (3 -> d), target (d -> d), decoder (d -> d).
LayerGraph two_blocks(int64_t d) {
  auto al = make_al_form(test::linear_chain({6, 3}), {1}, d);
  REQUIRE_MESSAGE(al.is_ok(), al.error_message());
  return *al;
}

struct Linear {
  Tensor w, b;
};

// The weight and bias of linear layer `layer` (GraphModel's parameters in layer order: weight, bias).
Linear linear_of(const AlModel& m, int block, int layer) {
  const AlBlock& blk = m.graph().al_blocks[block];
  auto params = m.block_parameters(block);
  size_t k = 0;
  for (int i = blk.first; i < layer; ++i)
    if (m.graph().layers[i].op == "linear") k += 2;
  return {params.at(k), params.at(k + 1)};
}

Tensor sigmoid_grad(const Tensor& y) { return y * (1 - y); }

// Expected gradients of block `blk`'s local loss, by hand: with e_b = 2 (b - t) / N and
// e_h = 2 (h - t_prev) / N, the bridge's pre-activation gets e_b * b (1 - b), the
// decoder's e_h * h (1 - h), the target's (decoder delta) W_h * t (1 - t) (t is fixed in
// the association term), and the block's own linear f gets (bridge delta) W_b.
struct Grads {
  Tensor f_w, bridge_w, target_w, decoder_w;
};
Grads by_hand(const AlModel& m, int block, const Tensor& s_in, const Tensor& t_in, int64_t n) {
  torch::NoGradGuard no_grad;
  const LayerGraph& g = m.graph();
  const AlBlock& blk = g.al_blocks[block];
  Linear f = linear_of(m, block, blk.output);
  Linear br = linear_of(m, block, blk.bridge - 1);
  Linear tg = linear_of(m, block, blk.target - 1);
  Linear de = linear_of(m, block, blk.decoder_input);
  Tensor s = torch::addmm(f.b, s_in, f.w.t());
  Tensor b = torch::sigmoid(torch::addmm(br.b, s, br.w.t()));
  Tensor t = torch::sigmoid(torch::addmm(tg.b, t_in, tg.w.t()));
  Tensor h = torch::sigmoid(torch::addmm(de.b, t, de.w.t()));
  Tensor e_b = 2 * (b - t) / static_cast<double>(n);
  Tensor e_h = 2 * (h - t_in) / static_cast<double>(n);
  Tensor d_b = e_b * sigmoid_grad(b);
  Tensor d_h = e_h * sigmoid_grad(h);
  Tensor d_t = torch::mm(d_h, de.w) * sigmoid_grad(t);
  Tensor d_s = torch::mm(d_b, br.w);
  return {torch::mm(d_s.t(), s_in), torch::mm(d_b.t(), s), torch::mm(d_t.t(), t_in), torch::mm(d_h.t(), t)};
}

}  // namespace

TEST_CASE("a 2-block AL model's local losses and gradients match the chain rule by hand, and none crosses blocks") {
  torch::manual_seed(3);
  auto m = AlModel::build(two_blocks(5), 11);
  REQUIRE_MESSAGE(m.is_ok(), m.error_message());
  AlModel& al = **m;
  const int64_t n = 4;
  Tensor x = torch::randn({n, 16});
  Tensor labels = torch::tensor({0, 2, 1, 2}, torch::kLong);
  Tensor y = al_one_hot(labels, 3);

  AlBlockOutput one = al.forward_block(0, x, y, n);
  // The loss by hand: sum of squares over features, over the batch, divided by n.
  {
    torch::NoGradGuard no_grad;
    const AlBlock& blk = al.graph().al_blocks[0];
    Linear f = linear_of(al, 0, blk.output), br = linear_of(al, 0, blk.bridge - 1);
    Linear tg = linear_of(al, 0, blk.target - 1), de = linear_of(al, 0, blk.decoder_input);
    Tensor s = torch::addmm(f.b, x, f.w.t());
    Tensor b = torch::sigmoid(torch::addmm(br.b, s, br.w.t()));
    Tensor t = torch::sigmoid(torch::addmm(tg.b, y, tg.w.t()));
    Tensor h = torch::sigmoid(torch::addmm(de.b, t, de.w.t()));
    const double expected = ((b - t).pow(2).sum() / n + (h - y).pow(2).sum() / n).item<double>();
    CHECK(one.loss.item<double>() == doctest::Approx(expected).epsilon(1e-6));
    CHECK(torch::allclose(one.s, s, 1e-6, 1e-6));
    CHECK(torch::allclose(one.t, t, 1e-6, 1e-6));
  }
  one.loss.backward();
  Grads want1 = by_hand(al, 0, x, y, n);
  const AlBlock& b1 = al.graph().al_blocks[0];
  CHECK(torch::allclose(linear_of(al, 0, b1.output).w.grad(), want1.f_w, 1e-5, 1e-6));
  CHECK(torch::allclose(linear_of(al, 0, b1.bridge - 1).w.grad(), want1.bridge_w, 1e-5, 1e-6));
  CHECK(torch::allclose(linear_of(al, 0, b1.target - 1).w.grad(), want1.target_w, 1e-5, 1e-6));
  CHECK(torch::allclose(linear_of(al, 0, b1.decoder_input).w.grad(), want1.decoder_w, 1e-5, 1e-6));

  // Block 2 on block 1's outputs: its gradients by hand, and block 1's untouched.
  std::vector<Tensor> block1_grads;
  for (auto& p : al.block_parameters(0)) block1_grads.push_back(p.grad().clone());
  for (auto& p : al.block_parameters(1)) CHECK_FALSE(p.grad().defined());
  AlBlockOutput two = al.forward_block(1, one.s, one.t, n);
  two.loss.backward();
  auto after = al.block_parameters(0);
  for (size_t k = 0; k < after.size(); ++k) CHECK(torch::equal(after[k].grad(), block1_grads[k]));
  Grads want2 = by_hand(al, 1, one.s.detach(), one.t.detach(), n);
  const AlBlock& b2 = al.graph().al_blocks[1];
  CHECK(torch::allclose(linear_of(al, 1, b2.output).w.grad(), want2.f_w, 1e-5, 1e-6));
  CHECK(torch::allclose(linear_of(al, 1, b2.bridge - 1).w.grad(), want2.bridge_w, 1e-5, 1e-6));
  CHECK(torch::allclose(linear_of(al, 1, b2.target - 1).w.grad(), want2.target_w, 1e-5, 1e-6));
  CHECK(torch::allclose(linear_of(al, 1, b2.decoder_input).w.grad(), want2.decoder_w, 1e-5, 1e-6));
}

TEST_CASE("AL's inference path runs f, the last bridge and every decoder, giving one score per class") {
  auto m = AlModel::build(two_blocks(7), 2);
  REQUIRE(m.is_ok());
  Tensor scores = (*m)->predict(torch::randn({5, 16}));
  CHECK(scores.sizes() == torch::IntArrayRef({5, 3}));
  CHECK(scores.min().item<double>() > 0);  // sigmoids
  CHECK(scores.max().item<double>() < 1);
  auto plain = AlModel::build(test::linear_chain({6, 3}), 2);
  REQUIRE_FALSE(plain.is_ok());
  CHECK(plain.status().field() == "model");
}

TEST_CASE("AL learns a separable task by local losses alone, with an update per block and micro-batch") {
  torch::manual_seed(7);
  auto m = AlModel::build(two_blocks(16), 5);
  REQUIRE(m.is_ok());
  AlModel& al = **m;
  std::vector<std::unique_ptr<torch::optim::Adam>> opt;
  for (int b = 0; b < al.blocks(); ++b)
    opt.push_back(std::make_unique<torch::optim::Adam>(al.block_parameters(b), torch::optim::AdamOptions(1e-2)));
  // Three classes by which of three directions the input leans to.
  Tensor centers = torch::randn({3, 16}) * 2;
  auto batch = [&](int64_t n) {
    Tensor labels = torch::randint(3, {n}, torch::kLong);
    return std::make_pair(centers.index_select(0, labels) + torch::randn({n, 16}) * 0.5, labels);
  };
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    auto [x, labels] = batch(32);
    double loss = al.train_step(x, labels, 2, [&](int b) {
      opt[b]->step();
      opt[b]->zero_grad();
    });
    if (step == 0) first = loss;
    last = loss;
  }
  CHECK(last < 0.5 * first);
  auto [x, labels] = batch(300);
  torch::NoGradGuard no_grad;
  const double accuracy = al.predict(x).argmax(1).eq(labels).to(torch::kFloat).mean().item<double>();
  CHECK(accuracy > 0.9);
}

TEST_CASE("an LSTM text classifier in AL form learns which marker token a sequence holds, block by block") {
  torch::manual_seed(11);
  auto text = zoo_model("text_lstm", test::tiny_transformer(8, 12, 2, 16, 0, 3));
  REQUIRE_MESSAGE(text.is_ok(), text.error_message());
  const int lstm1 = text->index_of("lstm.1");
  auto form = make_al_form(*text, {lstm1}, 16);
  REQUIRE_MESSAGE(form.is_ok(), form.error_message());
  CHECK(form->layers[form->al_blocks[0].bridge - 2].op == "mean_tokens");  // a sequence's bridge pools every token
  auto m = AlModel::build(*form, 4);
  REQUIRE(m.is_ok());
  AlModel& al = **m;
  std::vector<std::unique_ptr<torch::optim::Adam>> opt;
  for (int b = 0; b < al.blocks(); ++b)
    opt.push_back(std::make_unique<torch::optim::Adam>(al.block_parameters(b), torch::optim::AdamOptions(1e-2)));
  // Filler tokens 3..11; class c puts marker token c at a random position.
  auto batch = [&](int64_t n) {
    Tensor labels = torch::randint(3, {n}, torch::kLong);
    Tensor x = torch::randint(3, 12, {n, 8}, torch::kLong);
    Tensor where = torch::randint(8, {n, 1}, torch::kLong);
    x.scatter_(1, where, labels.unsqueeze(1));
    return std::make_pair(x, labels);
  };
  for (int step = 0; step < 250; ++step) {
    auto [x, labels] = batch(32);
    al.train_step(x, labels, 1, [&](int b) {
      opt[b]->step();
      opt[b]->zero_grad();
    });
  }
  auto [x, labels] = batch(300);
  torch::NoGradGuard no_grad;
  const double accuracy = al.predict(x).argmax(1).eq(labels).to(torch::kFloat).mean().item<double>();
  CHECK(accuracy > 0.9);
}

}  // namespace tapp
