// Schedule al on the runtime's workers: each block learns from its local loss with an update
// after each of its micro-batches, and the workers reach the parameters of AlModel trained in
// one process (profiler/al_model.h) block by block, micro-batch by micro-batch.
#include "tests/torch_doctest.h"  // LibTorch + doctest (glog's CHECK macros removed)

#include "core/al_placement.h"
#include "model/zoo.h"
#include "profiler/al_model.h"
#include "profiler/torch_model.h"
#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_support.h"

using namespace tapp;
using namespace tapp::test;

namespace {

// AlModel in this process: per block the run's SGD with momentum, updated after each micro-batch.
std::vector<std::vector<float>> al_reference(const LayerGraph& al, const RunOptions& o, int micro_batches) {
  auto model = AlModel::build(al, o.seed);
  REQUIRE_MESSAGE(model.is_ok(), model.error_message());
  AlModel& m = **model;
  m.set_training(true);
  std::vector<std::unique_ptr<torch::optim::SGD>> opt;
  for (int b = 0; b < m.blocks(); ++b)
    opt.push_back(std::make_unique<torch::optim::SGD>(m.block_parameters(b),
                                                      torch::optim::SGDOptions(o.learning_rate).momentum(o.momentum)));
  for (int k = 0; k < o.warmup_steps + o.steps; ++k) {
    auto [x, y] = synthetic_batch(al, o.batch_size, o.seed + k);
    m.train_step(x, y, micro_batches, [&](int b) {
      opt[b]->step();
      opt[b]->zero_grad();
    });
  }
  std::vector<std::vector<float>> out(al.layers.size());
  for (size_t l = 0; l < al.layers.size(); ++l)
    for (auto& p : m.layer_parameters(static_cast<int>(l))) {
      torch::Tensor t = p.detach().contiguous();
      out[l].insert(out[l].end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
  return out;
}

void check_al_run(const LayerGraph& source, const Placement& pipeline, int devices) {
  auto plan = al_plan_from_pipeline(source, pipeline, 8);
  REQUIRE_MESSAGE(plan.is_ok(), plan.error_message());
  RunOptions o = test_options();
  RunResult r = run_placement(plan->graph, local_cluster(devices), plan->placement, o);
  INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
  REQUIRE(r.report.ok);
  check_same_parameters(r.layer_parameters, al_reference(plan->graph, o, pipeline.micro_batches), plan->graph);
  // Training moved every block's weights (so equality is not vacuous): its first layer with any.
  auto initial = GraphModel::build(plan->graph, o.seed);
  REQUIRE(initial.is_ok());
  for (const AlBlock& b : plan->graph.al_blocks) {
    int l = b.first;
    while ((*initial)->layer_parameters(l).empty()) ++l;
    torch::Tensor w0 = (*initial)->layer_parameters(l).at(0).contiguous();
    double moved = 0;
    for (int64_t i = 0; i < w0.numel(); ++i)
      moved = std::max<double>(moved, std::fabs(r.layer_parameters[l][i] - w0.data_ptr<float>()[i]));
    CHECK_MESSAGE(moved > 1e-5, "layer " << plan->graph.layers[l].name);
  }
  // Only activations and target encodings crossed: the timeline has no gradient sends.
  REQUIRE_FALSE(r.report.timeline.empty());
  for (const TimelineEntry& e : r.report.timeline) CHECK(e.task.rfind("G ", 0) != 0);
  check_no_orphans(r);
}

}  // namespace

TEST_CASE("al over 2 workers (a block each, 3 micro-batches) trains like AlModel in one process") {
  check_al_run(chain_model(), by_device({0, 0, 0, 0, 1, 1, 1}, 3, Schedule::gpipe), 2);
}

TEST_CASE("al with two consecutive blocks on one worker keeps their losses apart and trains like AlModel") {
  // Blocks {fc0 relu0} {fc1 relu1} on d0 (one segment), {fc2 relu2 fc3} on d1.
  Placement p = by_device({0, 0, 1, 1, 2, 2, 2}, 2, Schedule::gpipe);
  p.group_device = {0, 0, 1};
  check_al_run(chain_model(), p, 2);
}

TEST_CASE("al on a conv model with branches inside a block, 3 blocks on 3 workers") {
  // Valid cuts only where one tensor crosses: after the stem, and before the classifier.
  LayerGraph g = branch_model();
  check_al_run(g, by_device({0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2}, 2, Schedule::gpipe), 3);
}

TEST_CASE("al on the LSTM text classifier: token ids in, embedding and first LSTM on one worker, the rest on another") {
  ModelOptions o;
  o.input_size = 6;
  o.vocabulary = 20;
  o.layers = 2;
  o.width = 8;
  o.num_classes = 3;
  auto g = zoo_model("text_lstm", o);
  REQUIRE_MESSAGE(g.is_ok(), g.error_message());
  // embedding, lstm.0 | lstm.1, last_token, classifier
  check_al_run(*g, by_device({0, 0, 1, 1, 1}, 2, Schedule::gpipe), 2);
}

TEST_CASE("an AL plan from a placement whose groups are not runs of layers, or that replicates, names the field") {
  auto bad = al_plan_from_pipeline(chain_model(), by_device({0, 1, 0, 1, 1, 1, 1}, 2, Schedule::gpipe));
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().field() == "placement.layers[2]");
  Placement replicated = by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe);
  replicated.group_replicas = {{}, {2}};
  auto rep = al_plan_from_pipeline(chain_model(), replicated);
  REQUIRE_FALSE(rep.is_ok());
  CHECK(rep.status().field() == "placement.groups");
  auto crossing = al_plan_from_pipeline(branch_model(), by_device({0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, 2, Schedule::gpipe));
  REQUIRE_FALSE(crossing.is_ok());
  CHECK(crossing.status().field() == "al.cuts[0]");
}
