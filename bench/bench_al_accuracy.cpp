// bench/bench_al_accuracy.cpp — test accuracy of Associated Learning against end-to-end
// backpropagation for the same model, data, optimizer and step budget (issue 20, item 4). Not a test.
//
// Reads a CSV of samples (features..., label; scikit-learn's digits: 64 pixels of an 8 x 8
// image in 0..16, then the digit) for a small CNN, or with --text MODEL (text_lstm,
// text_transformer) generates sentences (bench/text_corpus.h) for that zoo classifier;
// shuffles the samples by the seed, holds out --test-share for testing,
// and trains one model twice from the same initial weights: BP (GraphModel, cross-entropy) and
// AL (its AL form in --blocks blocks cut by multiply-adds, local losses, an update per block).
// Both use Adam at --lr, batches of --batch, --epochs passes. Prints one JSON line per seed.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/al_form.h"
#include "bench/text_corpus.h"
#include "model/model_json.h"
#include "model/zoo.h"
#include "profiler/al_model.h"
#include "profiler/torch_model.h"

using namespace tapp;

namespace {

struct Data {
  torch::Tensor x, y;
};

Result<Data> read_csv(const std::string& path, int64_t side) {
  std::ifstream in(path);
  if (!in) return Status::error(path + ": cannot read");
  std::vector<float> values;
  std::vector<int64_t> labels;
  std::string line;
  int64_t width = -1;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::vector<float> row;
    for (std::string cell; std::getline(ss, cell, ',');) row.push_back(std::stof(cell));
    if (width < 0) width = static_cast<int64_t>(row.size()) - 1;
    if (static_cast<int64_t>(row.size()) != width + 1) return Status::error(path + ": rows differ in width");
    labels.push_back(static_cast<int64_t>(row.back()));
    values.insert(values.end(), row.begin(), row.end() - 1);
  }
  if (width != side * side) return Status::error(path + ": expected " + std::to_string(side * side) + " features a row");
  const int64_t n = static_cast<int64_t>(labels.size());
  torch::Tensor x = torch::from_blob(values.data(), {n, 1, side, side}, torch::kFloat).clone() / 16.0;
  return Data{x, torch::tensor(labels, torch::kLong)};
}

// A VGG-like CNN for 8 x 8 images: 3 conv blocks and a classifier (5 BP layers with weights).
LayerGraph digits_cnn(int64_t side, int64_t classes) {
  nlohmann::json j = {{"name", "digits_cnn"}, {"input_shape", {1, side, side}}, {"layers", nlohmann::json::array()}};
  std::string previous;
  auto add = [&](const std::string& name, const std::string& op, nlohmann::json attrs = nlohmann::json::object()) {
    nlohmann::json layer = {{"name", name}, {"op", op}, {"attrs", attrs}};
    if (!previous.empty()) layer["inputs"] = {previous};
    j["layers"].push_back(layer);
    previous = name;
  };
  add("conv1", "conv2d", {{"out", 32}, {"kernel", 3}, {"padding", 1}});
  add("relu1", "relu");
  add("conv2", "conv2d", {{"out", 64}, {"kernel", 3}, {"padding", 1}});
  add("relu2", "relu");
  add("pool2", "maxpool2d", {{"kernel", 2}, {"stride", 2}});
  add("conv3", "conv2d", {{"out", 128}, {"kernel", 3}, {"padding", 1}});
  add("relu3", "relu");
  add("flatten", "flatten");
  add("fc1", "linear", {{"out", 128}});
  add("relu4", "relu");
  add("fc2", "linear", {{"out", classes}});
  auto g = model_from_json(j);
  if (!g) {
    std::cerr << g.error_message() << "\n";
    std::exit(2);
  }
  return *g;
}

double accuracy(const torch::Tensor& scores, const torch::Tensor& y) {
  return scores.argmax(1).eq(y).to(torch::kFloat).mean().item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"AL against BP: test accuracy on a CSV of 8x8 images or generated sentences (issue 20)"};
  std::string csv;
  std::vector<int> seeds{1, 2, 3};
  int blocks = 4, epochs = 20, batch = 32;
  double lr = 3e-3, test_share = 0.25;
  int64_t target_width = kDefaultAlTargetWidth;
  std::string text_model;
  int64_t text_samples = 5000, text_tokens = 32;
  uint64_t text_seed = 20;
  auto* data_opt = app.add_option("--data", csv, "CSV: 64 features then the label per row (scikit-learn's digits)");
  auto* text_opt = app.add_option("--text", text_model, "text_lstm | text_transformer on generated sentences instead");
  data_opt->excludes(text_opt);
  app.add_option("--text-samples", text_samples, "generated sentences (--text)")->capture_default_str();
  app.add_option("--text-tokens", text_tokens, "tokens per sentence (--text)")->capture_default_str();
  app.add_option("--text-seed", text_seed, "the generator's seed (--text; the same set for every --seeds)")
      ->capture_default_str();
  app.add_option("--seeds", seeds, "seeds (split, weights, batches)")->capture_default_str();
  app.add_option("--blocks", blocks, "AL blocks")->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the training set (both)")->capture_default_str();
  app.add_option("--batch", batch, "batch size (both)")->capture_default_str();
  app.add_option("--lr", lr, "Adam's learning rate (both)")->capture_default_str();
  app.add_option("--target-width", target_width, "AL's target width d")->capture_default_str();
  app.add_option("--test-share", test_share, "held-out share")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  if (csv.empty() == text_model.empty()) {
    std::cerr << "give --data CSV or --text MODEL\n";
    return 2;
  }
  Result<Data> data = Status::error("no data");
  LayerGraph bp_graph;
  if (!text_model.empty()) {
    bench::TextSet set = bench::generate_text_set(text_samples, text_tokens, text_seed);
    const int64_t n = static_cast<int64_t>(set.labels.size());
    data = Data{torch::tensor(set.ids, torch::kLong).view({n, text_tokens}), torch::tensor(set.labels, torch::kLong)};
    ModelOptions o;
    o.input_size = text_tokens;
    o.vocabulary = set.vocabulary;
    o.num_classes = set.classes;
    auto g = zoo_model(text_model, o);
    if (!g) {
      std::cerr << "--text: " << g.error_message() << "\n";
      return 2;
    }
    bp_graph = *g;
  } else {
    data = read_csv(csv, 8);
    if (!data) {
      std::cerr << data.error_message() << "\n";
      return 2;
    }
    bp_graph = digits_cnn(8, data->y.max().item<int64_t>() + 1);
  }
  auto cuts = balanced_al_cuts(bp_graph, blocks);
  if (!cuts) {
    std::cerr << cuts.error_message() << "\n";
    return 2;
  }
  auto al_graph = make_al_form(bp_graph, *cuts, target_width);
  if (!al_graph) {
    std::cerr << al_graph.error_message() << "\n";
    return 2;
  }
  for (int seed : seeds) {
    torch::manual_seed(seed);
    const int64_t n = data->x.size(0);
    torch::Tensor order = torch::randperm(n);
    const int64_t n_test = static_cast<int64_t>(test_share * static_cast<double>(n));
    torch::Tensor test_idx = order.slice(0, 0, n_test), train_idx = order.slice(0, n_test);
    torch::Tensor xtr = data->x.index_select(0, train_idx), ytr = data->y.index_select(0, train_idx);
    torch::Tensor xte = data->x.index_select(0, test_idx), yte = data->y.index_select(0, test_idx);
    auto bp = GraphModel::build(bp_graph, seed);
    auto al = AlModel::build(*al_graph, seed);
    if (!bp || !al) {
      std::cerr << (bp ? al.error_message() : bp.error_message()) << "\n";
      return 1;
    }
    torch::optim::Adam bp_opt((*bp)->parameters(), torch::optim::AdamOptions(lr));
    std::vector<std::unique_ptr<torch::optim::Adam>> al_opt;
    for (int b = 0; b < (*al)->blocks(); ++b)
      al_opt.push_back(std::make_unique<torch::optim::Adam>((*al)->block_parameters(b), torch::optim::AdamOptions(lr)));
    int steps = 0;
    auto t0 = std::chrono::steady_clock::now();
    double bp_s = 0, al_s = 0;
    for (int e = 0; e < epochs; ++e) {
      torch::Tensor perm = torch::randperm(xtr.size(0));
      for (int64_t i = 0; i + batch <= xtr.size(0); i += batch, ++steps) {
        torch::Tensor idx = perm.slice(0, i, i + batch);
        torch::Tensor x = xtr.index_select(0, idx), y = ytr.index_select(0, idx);
        auto a = std::chrono::steady_clock::now();
        bp_opt.zero_grad();
        training_loss((*bp)->forward(x), y, batch).backward();
        bp_opt.step();
        auto b = std::chrono::steady_clock::now();
        (*al)->train_step(x, y, 1, [&](int blk) {
          al_opt[blk]->step();
          al_opt[blk]->zero_grad();
        });
        auto c = std::chrono::steady_clock::now();
        bp_s += std::chrono::duration<double>(b - a).count();
        al_s += std::chrono::duration<double>(c - b).count();
      }
    }
    torch::NoGradGuard no_grad;
    (*bp)->set_training(false);
    (*al)->set_training(false);
    nlohmann::json out = {{"seed", seed},
                          {"train_samples", xtr.size(0)},
                          {"test_samples", xte.size(0)},
                          {"steps", steps},
                          {"model", bp_graph.name},
                          {"blocks", blocks},
                          {"cuts", *cuts},
                          {"bp_test_accuracy", accuracy((*bp)->forward(xte), yte)},
                          {"al_test_accuracy", accuracy((*al)->predict(xte), yte)},
                          {"bp_train_accuracy", accuracy((*bp)->forward(xtr), ytr)},
                          {"al_train_accuracy", accuracy((*al)->predict(xtr), ytr)},
                          {"bp_train_s", bp_s},
                          {"al_train_s", al_s},
                          {"wall_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}
