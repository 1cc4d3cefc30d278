// The policy's replicated stages and branch-parallel partitions: every
// proposal executable (validate_placement + check_memory) on random DAGs and
// clusters, finite log-probabilities, REINFORCE towards replication where it
// clearly pays, and non-contiguous groups that follow the DAG.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/zoo.h"
#include "placer/features.h"
#include "placer/policy.h"
#include "placer/reinforce.h"
#include "placer/search.h"
#include "planners/moves.h"
#include "tests/core/fake_evaluator.h"
#include "tests/placer/replica_checks.h"

using namespace tapp;
using tapp::testing::chain_graph;
using tapp::testing::equal_cluster;
using tapp::testing::replica_beside_another_group;

namespace {

// Blocks of 1-3 parallel branches (each 1-3 linear/relu layers) joined by an
// add, `width` wide: a random small DAG whose every layer feeds the output.
LayerGraph random_branchy_graph(std::mt19937_64& rng, int blocks, int64_t width) {
  LayerGraph g;
  g.name = "random_branchy";
  g.input_shape = {width};
  auto add = [&](const std::string& op, std::vector<int> inputs) {
    Layer l;
    l.name = op + std::to_string(g.layers.size());
    l.op = op;
    l.inputs = std::move(inputs);
    if (op == "linear") l.attrs.out = width;
    g.layers.push_back(l);
    return static_cast<int>(g.layers.size()) - 1;
  };
  int x = add("linear", {});
  std::uniform_int_distribution<int> branches(1, 3), length(1, 3);
  for (int b = 0; b < blocks; ++b) {
    std::vector<int> ends;
    const int n = branches(rng);
    for (int k = 0; k < n; ++k) {
      int y = x;
      const int len = length(rng);
      for (int s = 0; s < len; ++s) y = add(s % 2 == 0 ? "linear" : "relu", {y});
      ends.push_back(y);
    }
    x = ends.size() == 1 ? ends[0] : add("add", ends);
  }
  add("linear", {x});
  Status s = infer_shapes(g);
  REQUIRE_MESSAGE(s.is_ok(), s.message());
  g.num_classes = width;
  return g;
}

// What core counts for the whole model on one device, in bytes.
int64_t whole_model_bytes(const LayerGraph& g, int64_t batch, Optimizer optimizer, int micro_batches = 1,
                          bool recompute = false) {
  Placement whole = Placement::single_device(static_cast<int>(g.layers.size()), 0);
  whole.optimizer = optimizer;
  whole.micro_batches = micro_batches;
  if (recompute) whole.group_recompute = {1};
  return estimate_device_memory_bytes(whole, g, equal_cluster(1), batch)[0];
}

// One device that holds the whole model at the whole batch (so a fitting
// device always exists for any group), the others of random size and speed:
// many of them hold only a few layers.
Cluster random_cluster(std::mt19937_64& rng, const LayerGraph& g, int64_t batch, Optimizer optimizer) {
  Cluster c;
  c.name = "random";
  const int64_t whole_mb = whole_model_bytes(g, batch, optimizer) / (1024 * 1024) + 1;
  const int n = std::uniform_int_distribution<int>(2, 5)(rng);
  for (int d = 0; d < n; ++d) {
    Device dev;
    dev.name = "d" + std::to_string(d);
    dev.speed = std::uniform_real_distribution<double>(0.1, 1.0)(rng);
    dev.memory_mb = d == 0 ? whole_mb : std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(2, whole_mb / 2))(rng);
    c.devices.push_back(dev);
  }
  std::shuffle(c.devices.begin(), c.devices.end(), rng);
  return c;
}

PolicyConfig replica_config(const LayerGraph& g, const Cluster& c, int64_t batch, PartitionMode mode, uint64_t seed,
                            Optimizer optimizer = Optimizer::sgd) {
  PolicyConfig pc;
  pc.num_groups = c.num_devices();
  pc.num_devices = c.num_devices();
  pc.micro_batch_choices = micro_batch_choices(batch, 8);
  pc.partition = mode;
  pc.max_replicas = c.num_devices() - 1;
  pc.memory = policy_memory(g, c, batch, Schedule::gpipe, optimizer);
  pc.hidden = 16;
  pc.seed = seed;
  return pc;
}

bool has_replicas(const Decision& d) {
  return std::any_of(d.group_replicas.begin(), d.group_replicas.end(), [](const auto& r) { return !r.empty(); });
}

// Every group's replicas run it: step = max over devices of (the cost of the
// groups it runs, each divided by its replica count) / speed, + 1 ms a cut
// (replication is clearly better on equal devices).
class ReplicaAwareEvaluator : public Evaluator {
 public:
  ReplicaAwareEvaluator(std::vector<double> cost, Cluster c) : cost_(std::move(cost)), cluster_(std::move(c)) {}
  StepReport evaluate(const Placement& p) override {
    ++evaluations_;
    std::vector<double> load(cluster_.num_devices(), 0.0);
    double cuts = 0;
    for (size_t i = 0; i < cost_.size(); ++i) {
      const int g = p.layer_group[i];
      for (int d : p.devices_of_group(g)) load[d] += cost_[i] / p.replica_count(g) / cluster_.devices[d].speed;
      if (i > 0 && p.layer_group[i - 1] != g) cuts += 1.0;
    }
    StepReport r;
    r.ok = true;
    r.source = "fake";
    r.step_ms = *std::max_element(load.begin(), load.end()) + cuts;
    return r;
  }
  EvaluatorKind kind() const override { return EvaluatorKind::simulate; }

 private:
  std::vector<double> cost_;
  Cluster cluster_;
};

// Per trial a random branchy DAG and cluster (batch 16, sgd and Adam in
// turn), a policy of `config_of`'s config, 40 proposals sampled from `rng`,
// each checked as the measurer runs it: validate_placement, then the groups
// that fit their device only recomputing recompute (recompute_where_needed)
// and core's rule holds (check_memory). `each` sees every proposal after that.
void sample_executable_proposals(
    std::mt19937_64& rng, int trials,
    const std::function<PolicyConfig(const LayerGraph&, const Cluster&, int64_t, Optimizer, int)>& config_of,
    const std::function<void(Policy&, const Decision&, const Placement&)>& each) {
  const int64_t batch = 16;
  for (int trial = 0; trial < trials; ++trial) {
    LayerGraph g = random_branchy_graph(rng, 2 + trial % 3, 256);
    const Optimizer optimizer = trial % 2 == 0 ? Optimizer::sgd : Optimizer::adam;  // Adam: 4 copies, not 3
    Cluster c = random_cluster(rng, g, batch, optimizer);
    const PolicyConfig pc = config_of(g, c, batch, optimizer, trial);
    OpDictionary dict;
    Policy policy(encode_layers(g, dict), g.consumers(), pc);
    for (int n = 0; n < 40; ++n) {
      Decision d = policy.sample(rng);
      Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
      p.optimizer = optimizer;
      Status valid = validate_placement(p, g, c, batch);
      CHECK_MESSAGE(valid.is_ok(), "trial ", trial, ": ", valid.message());
      CHECK(recompute_where_needed(p, g, c, batch));
      Status fits = check_memory(p, g, c, batch);
      CHECK_MESSAGE(fits.is_ok(), "trial ", trial, ": ", fits.message());
      each(policy, d, p);
    }
  }
}

// `n` proposals of `policy` as placements (GPipe), each valid on (g, c) at
// `batch` and drawn with a finite log-probability.
std::vector<Placement> valid_samples(Policy& policy, const PolicyConfig& pc, const LayerGraph& g,
                                     const Cluster& c, int64_t batch, std::mt19937_64& rng, int n) {
  std::vector<Placement> out;
  for (int k = 0; k < n; ++k) {
    Decision d = policy.sample(rng);
    out.push_back(decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe));
    REQUIRE(validate_placement(out.back(), g, c, batch).is_ok());
    CHECK(std::isfinite(policy.log_prob(d)));
  }
  return out;
}

}  // namespace

TEST_CASE(
    "proposals with replicas are executable: validate_placement and, recomputing where needed, check_memory "
    "pass on random DAGs and clusters") {
  std::mt19937_64 rng(2026);
  int proposals = 0, replicated = 0, noncontiguous = 0, recomputing = 0;
  sample_executable_proposals(
      rng, 24,
      [](const LayerGraph& g, const Cluster& c, int64_t batch, Optimizer optimizer, int trial) {
        const PartitionMode mode = trial % 3 == 0   ? PartitionMode::contiguous
                                   : trial % 3 == 1 ? PartitionMode::follows_dag
                                                    : PartitionMode::free;
        return replica_config(g, c, batch, mode, 1 + trial, optimizer);
      },
      [&](Policy& policy, const Decision& d, const Placement& p) {
        ++proposals;
        replicated += p.has_replicated_groups();
        for (size_t i = 1; i < p.layer_group.size(); ++i)
          noncontiguous += p.layer_group[i] < p.layer_group[i - 1];
        recomputing += std::count(p.group_recompute.begin(), p.group_recompute.end(), 1) > 0;
        if (has_replicas(d)) CHECK(std::isfinite(policy.log_prob(d)));
      });
  CHECK(proposals == 24 * 40);
  CHECK(recomputing > 0);  // a device that holds a group only recomputing is offered
  // The masks leave room for replicas: at the replica head's initial odds
  // (0.12 an offer) 16-57 of 960 proposals had one over test seeds 1-6 and 2026.
  CHECK(replicated >= proposals / 100);
  CHECK(noncontiguous > 0);
}

TEST_CASE(
    "replicas on devices other groups hold: only where asked, never twice on one device, and executable") {
  // Two stages on two devices: every device holds a stage, so replicas need
  // a device another stage holds.
  LayerGraph chain = chain_graph(6);
  Cluster two = equal_cluster(2);
  PolicyConfig pc = replica_config(chain, two, 8, PartitionMode::contiguous, 5);
  pc.memory = PolicyMemory{};
  pc.replica_bias = 0.0;
  pc.micro_batch_choices = {4};
  auto beside = [&](bool on_held) {
    pc.replicas_on_held_devices = on_held;
    OpDictionary dict;
    Policy policy(encode_layers(chain, dict), chain.consumers(), pc);
    std::mt19937_64 rng(7);
    int n_beside = 0;
    for (const Placement& p : valid_samples(policy, pc, chain, two, 8, rng, 100))
      n_beside += replica_beside_another_group(p);
    return n_beside;
  };
  CHECK(beside(false) == 0);
  CHECK(beside(true) > 10);

  // Random DAGs and clusters, memory masks on: as the test above, with the offers widened.
  std::mt19937_64 rng(2027);
  int proposals = 0, shared = 0;
  sample_executable_proposals(
      rng, 18,
      [](const LayerGraph& g, const Cluster& c, int64_t batch, Optimizer optimizer, int trial) {
        PolicyConfig rc = replica_config(
            g, c, batch, trial % 2 == 0 ? PartitionMode::follows_dag : PartitionMode::contiguous, 1 + trial,
            optimizer);
        rc.replicas_on_held_devices = true;
        rc.replica_bias = 0.0;
        rc.distinct_devices = trial % 3 != 0;
        return rc;
      },
      [&](Policy& policy, const Decision& d, const Placement& p) {
        ++proposals;
        shared += replica_beside_another_group(p);
        CHECK(std::isfinite(policy.log_prob(d)));
      });
  CHECK(proposals == 18 * 40);
  CHECK(shared > proposals / 20);
}

namespace {
// A server that holds the whole model only recomputing, at the most
// micro-batches the policy offers (and half as much again), beside 1-4 edge
// devices that hold a sixteenth of that at most (edge_uplinks, drawn small).
Cluster server_and_edges(std::mt19937_64& rng, const LayerGraph& g, int64_t batch, int most_micro_batches,
                         Optimizer optimizer) {
  const int64_t need = whole_model_bytes(g, batch, optimizer, most_micro_batches, true);
  const int64_t server_mb = need * 3 / 2 / (1024 * 1024) + 1;
  Cluster c;
  c.name = "server and edges";
  const int edges = std::uniform_int_distribution<int>(1, 4)(rng);
  for (int d = 0; d <= edges; ++d) {
    Device dev;
    dev.name = d == 0 ? "server" : "edge" + std::to_string(d);
    dev.speed = d == 0 ? 1.0 : std::uniform_real_distribution<double>(0.1, 0.5)(rng);
    dev.memory_mb = d == 0 ? server_mb : std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, server_mb / 16))(rng);
    c.devices.push_back(dev);
  }
  std::shuffle(c.devices.begin(), c.devices.end(), rng);
  return c;
}
}  // namespace

TEST_CASE("where one server holds the model only recomputing and edge devices little, the masks' proposals fit as drawn") {
  // Transformers, whose attention keeps far more than a stage sends: the
  // groups of a partition rarely each find a device of their own there, but
  // they fit the server together at the most micro-batches, recomputing.
  // Before, the micro-batch mask asked for a device per group, masked every
  // count and gave way (any count drawn), and the allocation's mask kept a
  // first group whole on the server where later groups then fitted nowhere:
  // 64-103 of these 320 proposals fitted as drawn over rng seeds 31-35, the
  // rest only once the measurer moved layers; now 319-320. The masks work
  // from lower bounds and one group at a time, so not every draw is
  // guaranteed (the one of seed 31 that does not fit: four groups that
  // together need more than the server at the 16 micro-batches drawn).
  std::mt19937_64 rng(31);
  const int64_t batch = 32;
  int proposals = 0, fitting = 0, shared = 0;
  for (int trial = 0; trial < 8; ++trial) {
    auto g = zoo_model(trial % 2 == 0 ? "gpt2" : "bert_base");
    REQUIRE(g.is_ok());
    const Optimizer optimizer = trial % 4 < 2 ? Optimizer::sgd : Optimizer::adam;
    const std::vector<int> choices = micro_batch_choices(batch, 32);
    Cluster c = server_and_edges(rng, *g, batch, choices.back(), optimizer);
    PolicyConfig pc = replica_config(*g, c, batch, PartitionMode::contiguous, 1 + trial, optimizer);
    pc.micro_batch_choices = choices;
    OpDictionary dict;
    Policy policy(encode_layers(*g, dict), g->consumers(), pc);
    for (int n = 0; n < 40; ++n) {
      const Decision d = policy.sample(rng);
      Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
      p.optimizer = optimizer;
      ++proposals;
      REQUIRE(validate_placement(p, *g, c, batch).is_ok());
      std::vector<int> devices = p.group_device;
      std::sort(devices.begin(), devices.end());
      shared += std::adjacent_find(devices.begin(), devices.end()) != devices.end();
      const bool fits = recompute_where_needed(p, *g, c, batch);
      fitting += fits;
      if (!fits) MESSAGE("trial ", trial, " draw ", n, ": ", check_memory(p, *g, c, batch).message());
    }
  }
  MESSAGE(fitting, " of ", proposals, " proposals fit as drawn; ", shared, " share a device");
  CHECK(proposals == 320);
  CHECK(fitting >= proposals * 98 / 100);
  CHECK(shared > 0);  // groups go to the server together
}

TEST_CASE("data parallelism is proposed only where its replicas fit, on random DAGs and clusters") {
  // Devices sized so that a replica fits some of them at some shares of the
  // batch only: data parallelism over too few (or too small) devices must
  // never be drawn (check_memory passes on every such proposal), and where it
  // fits it is still drawn.
  std::mt19937_64 rng(23);
  const int64_t batch = 8192;  // activations, which the share divides, outweigh the parameters
  int data_parallel = 0, on_more_devices = 0;
  for (int trial = 0; trial < 16; ++trial) {
    LayerGraph g = random_branchy_graph(rng, 2 + trial % 3, 64);
    const int n = 3 + trial % 4;
    Cluster c = equal_cluster(n);
    auto need_mb = [&](int k) {
      std::vector<int> devices(k);
      std::iota(devices.begin(), devices.end(), 0);
      return estimate_device_memory_bytes(Placement::replicas(static_cast<int>(g.layers.size()), devices), g, c,
                                          batch)[0] / (1024.0 * 1024.0);
    };
    const double low = need_mb(n), high = need_mb(1);
    for (Device& d : c.devices) d.memory_mb = static_cast<int64_t>(std::uniform_real_distribution<double>(low, high)(rng)) + 1;
    SearchOptions o;
    o.batch_size = batch;
    o.seed = 1 + trial;
    PolicyConfig pc = search_policy_config(g, c, o);
    if (!pc.offer_data_parallel) continue;
    pc.prior_groups = 1 + trial % n;  // partitions of every size
    OpDictionary dict;
    Policy policy(encode_layers(g, dict), g.consumers(), pc);
    for (int k = 0; k < 60; ++k) {
      Decision d = policy.sample(rng);
      Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
      if (!p.is_data_parallel()) continue;
      ++data_parallel;
      on_more_devices += has_replicas(d);  // more whole replicas than non-empty groups
      Status fits = check_memory(p, g, c, batch);
      CHECK_MESSAGE(fits.is_ok(), "trial ", trial, ": ", fits.message());
      CHECK(std::isfinite(policy.log_prob(d)));
    }
  }
  CHECK(data_parallel > 20);
  CHECK(on_more_devices > 0);
}

TEST_CASE("data parallelism's extra replicas go only where a replica fits at its share") {
  // Four equal devices: 0 and 1 hold a whole replica at half the batch, 3 at a
  // third, 2 only at a quarter. A replica head at even odds must never put
  // one on device 2 while fewer than four run (check_memory), yet still add
  // replicas to the groups' devices.
  std::mt19937_64 graph_rng(5);
  LayerGraph g = random_branchy_graph(graph_rng, 8, 64);
  const int64_t batch = 8192;
  Cluster c = equal_cluster(4);
  SearchOptions o;
  o.batch_size = batch;
  auto need_mb = [&](int k) {
    std::vector<int> devices(k);
    std::iota(devices.begin(), devices.end(), 0);
    Placement p = Placement::replicas(static_cast<int>(g.layers.size()), devices);
    p.optimizer = o.optimizer;
    return estimate_device_memory_bytes(p, g, c, batch)[0] / (1024 * 1024) + 1;
  };
  REQUIRE(need_mb(4) < need_mb(3));
  c.devices[0].memory_mb = c.devices[1].memory_mb = need_mb(2);
  c.devices[2].memory_mb = need_mb(4);
  c.devices[3].memory_mb = need_mb(3);
  PolicyConfig pc = search_policy_config(g, c, o);
  REQUIRE(pc.offer_data_parallel);
  pc.replica_bias = 0.0;  // even odds: some draws stop at three replicas
  OpDictionary dict;
  std::mt19937_64 rng(9);
  int with_extra_replicas = 0;
  for (int groups = 2; groups <= 4; ++groups) {
    pc.prior_groups = groups;
    Policy policy(encode_layers(g, dict), g.consumers(), pc);
    for (int n = 0; n < 300; ++n) {
      Decision d = policy.sample(rng);
      Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
      if (!p.is_data_parallel()) continue;
      with_extra_replicas += has_replicas(d);
      Status fits = check_memory(p, g, c, batch);
      CHECK_MESSAGE(fits.is_ok(), p.num_groups(), " replicas: ", fits.message());
    }
  }
  CHECK(with_extra_replicas > 0);
}

TEST_CASE("a replica is offered only on a free device, under the micro-batch count; with data parallelism, as one more whole-model replica") {
  LayerGraph g = chain_graph(3);
  Cluster c = equal_cluster(4);
  PolicyConfig pc = replica_config(g, c, 8, PartitionMode::contiguous, 5);
  pc.num_groups = 1;  // one stage: three devices are free for replicas
  pc.micro_batch_choices = {1, 2};
  pc.offer_data_parallel = true;
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  std::mt19937_64 rng(3);
  int replicated = 0, data_parallel_on_more = 0;
  for (int n = 0; n < 300; ++n) {
    Decision d = policy.sample(rng);
    Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
    for (int k : d.group_replicas[0]) CHECK(k != d.group_device[0]);
    if (p.is_data_parallel()) {
      // The group's device and each of its replicas' train a whole replica.
      CHECK(p.num_groups() == 1 + static_cast<int>(d.group_replicas[0].size()));
      data_parallel_on_more += p.num_groups() > 1;
    } else {
      if (p.micro_batches == 1) CHECK_FALSE(has_replicas(d));
      CHECK(p.replica_count(0) <= p.micro_batches);
      replicated += p.has_replicated_groups();
    }
    CHECK(validate_placement(p, g, c, 8).is_ok());
    CHECK(std::isfinite(policy.log_prob(d)));
  }
  CHECK(replicated > 0);
  // One group: before extra replicas, data parallelism here ran on one device.
  CHECK(data_parallel_on_more > 0);
}

TEST_CASE("free devices are offered device by device to the group with the fewest copies") {
  // Two stages on eight equal devices, a replica head that wants every
  // replica (p ~ 1): drawn group by group, the first stage took all six free
  // devices; offered device by device, the copies differ by at most one.
  LayerGraph g = chain_graph(6);
  Cluster c = equal_cluster(8);
  PolicyConfig pc = replica_config(g, c, 8, PartitionMode::contiguous, 7);
  pc.num_groups = 2;
  pc.micro_batch_choices = {8};
  pc.memory = PolicyMemory{};
  pc.replica_bias = 8.0;
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  std::mt19937_64 rng(11);
  int two_stages = 0;
  for (const Placement& p : valid_samples(policy, pc, g, c, 8, rng, 60)) {
    const int first = p.replica_count(0), last = p.replica_count(p.layer_group.back());
    if (p.layer_group.back() == 0) continue;  // one stage: it takes every device
    ++two_stages;
    CHECK_MESSAGE(first + last == 8, "copies ", first, " + ", last);
    CHECK_MESSAGE(std::abs(first - last) <= 1, "copies ", first, " and ", last);
  }
  CHECK(two_stages > 10);
}

TEST_CASE("heaviest first: each free device goes to the group with the most FLOPs per unit of its compute") {
  // Two stages on devices of different speeds, a replica head that wants
  // every replica: each free device, in index order, goes to the group
  // slowest per copy at its offer (ties: fewer copies, then the lower id), so
  // the heavy group's copies are not held to the light one's count (fewest
  // copies first kept them within one of each other).
  LayerGraph g = chain_graph(6);
  Cluster c = equal_cluster(8);
  const std::vector<double> speeds = {1.0, 0.5, 0.25, 1.0, 0.75, 0.5, 0.25, 1.0};
  for (int d = 0; d < 8; ++d) c.devices[d].speed = speeds[d];
  PolicyConfig pc = replica_config(g, c, 8, PartitionMode::contiguous, 7);
  pc.num_groups = 2;
  pc.micro_batch_choices = {8};
  pc.memory = PolicyMemory{};
  pc.replica_bias = 8.0;
  pc.replica_offers = ReplicaOffers::heaviest_first;
  pc.totals = layer_totals(g);
  const int L = static_cast<int>(g.layers.size());
  for (int i = 0; i < L; ++i) pc.totals.gflops[i] = i % 2 == 0 ? 8.0 / (1 << (i / 2)) : 0.0;  // linear, relu: early heavy
  pc.devices = device_traits(c);
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  std::mt19937_64 rng(11);
  int two_stages = 0, apart = 0;
  for (const Placement& p : valid_samples(policy, pc, g, c, 8, rng, 60)) {
    if (p.layer_group.back() == 0) continue;  // one stage: it takes every device
    ++two_stages;
    std::vector<double> flops(2, 0.0), compute(2, 0.0);
    std::vector<int> copies(2, 1), holder(8, -1);
    for (int i = 0; i < L; ++i) flops[p.layer_group[i]] += pc.totals.gflops[i];
    for (int grp = 0; grp < 2; ++grp) {
      compute[grp] = pc.devices.compute[p.group_device[grp]];
      for (int dev : p.devices_of_group(grp)) holder[dev] = grp;
    }
    for (int dev = 0; dev < 8; ++dev) {
      REQUIRE(holder[dev] >= 0);  // every device taken
      if (dev == p.group_device[0] || dev == p.group_device[1]) continue;
      const double t0 = flops[0] / compute[0], t1 = flops[1] / compute[1];
      const int first = t0 != t1 ? (t0 > t1 ? 0 : 1) : copies[1] < copies[0] ? 1 : 0;
      CHECK_MESSAGE(holder[dev] == first, "device ", dev, ": group ", holder[dev], " took it, ", first, " was slower");
      compute[holder[dev]] += pc.devices.compute[dev];
      ++copies[holder[dev]];
    }
    apart += std::abs(p.replica_count(0) - p.replica_count(1)) > 1;
  }
  CHECK(two_stages > 10);
  CHECK(apart > 0);
  // A fresh search offers so; a trained policy's head learned fewest copies first.
  SearchOptions so;
  so.batch_size = 8;
  CHECK(search_policy_config(g, c, so).replica_offers == ReplicaOffers::heaviest_first);
  so.initial_policy = new_policy_networks(16, 0.005, 1, -2.0);
  CHECK(search_policy_config(g, c, so).replica_offers == ReplicaOffers::fewest_copies);
}

TEST_CASE("REINFORCE makes replication likelier where it clearly pays, and its log-probabilities stay finite") {
  LayerGraph g = chain_graph(3);
  Cluster c = equal_cluster(3);
  PolicyConfig pc = replica_config(g, c, 8, PartitionMode::contiguous, 9);
  pc.num_groups = 1;
  pc.micro_batch_choices = {4};  // room for two replicas beside the first device
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  ReplicaAwareEvaluator ev(std::vector<double>(g.layers.size(), 1.0), c);
  Reinforce rf(policy, ReinforceConfig{}, 6.0);
  std::mt19937_64 rng(4);

  auto replica_rate = [&](int n) {
    double count = 0;
    std::mt19937_64 r(77);
    for (int k = 0; k < n; ++k) {
      Decision d = policy.sample(r);
      for (const auto& rep : d.group_replicas) count += static_cast<double>(rep.size());
    }
    return count / n;
  };
  Decision all = policy.greedy();
  all.group_replicas.assign(1, {});
  for (int k = 0; k < 3; ++k)
    if (k != all.group_device[0]) all.group_replicas[0].push_back(k);
  Decision none = all;
  none.group_replicas[0].clear();
  const double before_rate = replica_rate(200);
  const double all_before = policy.log_prob(all), none_before = policy.log_prob(none);
  CHECK(std::isfinite(all_before));
  CHECK(std::isfinite(none_before));
  CHECK(all_before < none_before);  // replicas start rare

  for (int it = 0; it < 30; ++it) {
    std::vector<Decision> ds;
    std::vector<StepReport> rs;
    for (int s = 0; s < 16; ++s) {
      ds.push_back(policy.sample(rng));
      rs.push_back(ev.evaluate(decision_to_placement(ds.back(), pc.micro_batch_choices, Schedule::gpipe)));
    }
    rf.step(ds, rs, it / 30.0);
  }
  CHECK(policy.log_prob(all) > all_before);
  CHECK(policy.log_prob(none) < none_before);
  CHECK(std::isfinite(policy.log_prob(all)));
  CHECK(replica_rate(200) > before_rate + 0.5);
}

TEST_CASE("the DAG-following partition separates parallel branches; the contiguous one never does") {
  // in -> fc0 -> {a: fc, relu | b: fc, relu} -> add -> fc: branch b may take a
  // lower group than branch a's last layer, and every edge goes up in group id.
  LayerGraph g;
  g.input_shape = {64};
  auto add = [&](const std::string& op, std::vector<int> inputs) {
    Layer l;
    l.name = op + std::to_string(g.layers.size());
    l.op = op;
    l.inputs = std::move(inputs);
    if (op == "linear") l.attrs.out = 64;
    g.layers.push_back(l);
  };
  add("linear", {});
  add("linear", {0});
  add("relu", {1});
  add("linear", {0});
  add("relu", {3});
  add("add", {2, 4});
  add("linear", {5});
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = equal_cluster(4);
  for (PartitionMode mode : {PartitionMode::follows_dag, PartitionMode::contiguous}) {
    PolicyConfig pc = replica_config(g, c, 8, mode, 13);
    OpDictionary dict;
    Policy policy(encode_layers(g, dict), g.consumers(), pc);
    std::mt19937_64 rng(6);
    int split = 0;
    for (int n = 0; n < 300; ++n) {
      Decision d = policy.sample(rng);
      for (size_t i = 0; i < g.layers.size(); ++i)
        for (int in : g.layers[i].inputs) CHECK(d.layer_group[in] <= d.layer_group[i]);
      split += d.layer_group[3] < d.layer_group[2];  // branch b opens below branch a's end
      CHECK(validate_placement(decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe), g, c, 8).is_ok());
    }
    if (mode == PartitionMode::follows_dag)
      CHECK(split > 0);
    else
      CHECK(split == 0);
  }
}

TEST_CASE("the spread head draws only for groups that hold a whole fork, and REINFORCE moves it") {
  // in -> fc0 -> {a: fc, relu | b: fc, relu} -> add -> fc on three devices.
  LayerGraph g;
  g.input_shape = {64};
  for (const auto& [op, inputs] : std::vector<std::pair<std::string, std::vector<int>>>{{"linear", {}},
                                                                                        {"linear", {0}},
                                                                                        {"relu", {1}},
                                                                                        {"linear", {0}},
                                                                                        {"relu", {3}},
                                                                                        {"add", {2, 4}},
                                                                                        {"linear", {5}}}) {
    Layer l;
    l.name = op + std::to_string(g.layers.size());
    l.op = op;
    l.inputs = inputs;
    if (op == "linear") l.attrs.out = 64;
    g.layers.push_back(l);
  }
  REQUIRE(infer_shapes(g).is_ok());
  const std::vector<int> fork = {0, 1, 2, 3, 4};  // the fork (layer 0) and its branches
  Cluster c = equal_cluster(3);
  PolicyConfig pc = replica_config(g, c, 8, PartitionMode::follows_dag, 5);
  pc.forks = parallel_branches(g);
  REQUIRE(pc.forks.size() == 1);  // layer 0, branches {1, 2} and {3, 4}
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  std::mt19937_64 rng(9);
  auto holds_fork = [&](const Decision& d, int grp) {
    return std::all_of(fork.begin(), fork.end(), [&](int l) { return d.layer_group[l] == grp; });
  };
  auto spread_rate = [&](int n) {
    int offered = 0, spread = 0;
    for (int k = 0; k < n; ++k) {
      const Decision d = policy.sample(rng);
      for (int grp = 0; grp < pc.num_groups; ++grp) {
        const bool offer =
            holds_fork(d, grp) && d.micro_batch_index < static_cast<int>(pc.micro_batch_choices.size());
        if (d.spreads(grp)) CHECK(offer);
        offered += offer;
        spread += d.spreads(grp);
      }
    }
    REQUIRE(offered > 0);
    return static_cast<double>(spread) / offered;
  };
  const double before = spread_rate(600);
  CHECK(before > 0.0);
  CHECK(before < 0.2);  // spreads start rare
  // One decision with an offer, spread and not: rewarding the spread raises
  // its odds from about 1 : 19 past even, and the log probabilities stay finite.
  Decision yes;
  int offered_group = -1;
  for (int tries = 0; offered_group < 0 && tries < 2000; ++tries) {
    yes = policy.sample(rng);
    for (int grp = 0; grp < pc.num_groups && offered_group < 0; ++grp)
      if (holds_fork(yes, grp) && yes.micro_batch_index < static_cast<int>(pc.micro_batch_choices.size()))
        offered_group = grp;
  }
  REQUIRE(offered_group >= 0);
  yes.group_spread.assign(pc.num_groups, 0);
  Decision no = yes;
  yes.group_spread[offered_group] = 1;
  const double odds_before = policy.log_prob(yes) - policy.log_prob(no);
  CHECK(odds_before < std::log(0.2));
  for (int it = 0; it < 40; ++it) policy.update({yes, no}, {1.0, -1.0}, 0.0, 5.0);
  const double odds_after = policy.log_prob(yes) - policy.log_prob(no);
  INFO("log odds of the spread: " << odds_before << " -> " << odds_after);
  CHECK(odds_after > 0.0);
  CHECK(std::isfinite(policy.log_prob(yes)));
  // A spread where none is offered is no choice: it does not change the odds.
  Decision elsewhere = no;
  for (int grp = 0; grp < pc.num_groups; ++grp)
    if (!holds_fork(no, grp)) elsewhere.group_spread[grp] = 1;
  CHECK(policy.log_prob(elsewhere) == doctest::Approx(policy.log_prob(no)));
}

TEST_CASE("the search finds a replicated stage when replicas clearly pay") {
  LayerGraph g = chain_graph(4);
  Cluster c = equal_cluster(3);
  ReplicaAwareEvaluator ev(std::vector<double>(g.layers.size(), 1.0), c);
  SearchOptions o;
  o.iterations = 60;
  o.samples_per_iteration = 8;
  o.batch_size = 8;
  o.data_parallel = false;
  o.seed = 3;
  SearchResult r = search(g, c, ev, o, nullptr);
  REQUIRE(r.found);
  CHECK(r.best.has_replicated_groups());
  // Better than every plan without replicas: one device 8, two stages >= 4 + 1 cut, three >= 3 + 2 cuts.
  CHECK(r.best_report.step_ms < 5.0 - 1e-9);
  CHECK(validate_placement(r.best, g, c, 8).is_ok());
}

TEST_CASE("the search's imitation makes a drawn decision, replicas included, a fresh policy's mode") {
  // A warm start imitates its plan for kImitationSteps at kImitationRate, in up
  // to kImitationRounds rounds until the greedy decision is the plan (search.cpp's
  // imitate): that must get there on problems of any shape (60 steps at the
  // search's own rate 0.005 did not: the greedy plan differed from the target
  // in 6 of these 12 problems). One round is enough in 10 or more (11 or 12 seen): trial
  // 11 needs two on some CPUs (an Intel Xeon's kernels; one on an AMD EPYC's).
  std::mt19937_64 rng(17);
  int single_rounds = 0;
  for (int trial = 0; trial < 12; ++trial) {
    LayerGraph g = random_branchy_graph(rng, 2 + trial % 3, 16);
    // Devices the networks can tell apart (speeds a factor 2 apart; identical
    // devices are interchangeable to a network that sees only their features).
    Cluster c = equal_cluster(3 + trial % 3);
    for (size_t d = 0; d < c.devices.size(); ++d) c.devices[d].speed = 1.0 / (1 << d);
    OpDictionary dict;
    PolicyConfig drawn_from = replica_config(g, c, 8, PartitionMode::follows_dag, 100 + trial);
    drawn_from.replica_bias = 0.0;  // drawn plans with replicas as often as not
    drawn_from.devices = device_traits(c);  // what the search's networks see of the devices
    drawn_from.totals = layer_totals(g);
    Policy source(encode_layers(g, dict), g.consumers(), drawn_from);
    Decision target = source.sample(rng);
    PolicyConfig fresh = replica_config(g, c, 8, PartitionMode::follows_dag, 200 + trial);
    fresh.learning_rate = SearchOptions{}.learning_rate;  // the rate it goes on searching at
    fresh.devices = drawn_from.devices;
    fresh.totals = drawn_from.totals;
    Policy started(encode_layers(g, dict), g.consumers(), fresh);
    const Placement want = decision_to_placement(target, fresh.micro_batch_choices, Schedule::gpipe);
    const Placement before = decision_to_placement(started.greedy(), fresh.micro_batch_choices, Schedule::gpipe);
    Placement after;
    int rounds = 0;
    do {
      started.imitate(target, kImitationSteps, kImitationRate);
      after = decision_to_placement(started.greedy(), fresh.micro_batch_choices, Schedule::gpipe);
    } while (++rounds < kImitationRounds && placement_key(after) != placement_key(want));
    CAPTURE(trial);
    CHECK(placement_key(after) == placement_key(want));
    single_rounds += rounds == 1;
    if (placement_key(before) == placement_key(want)) MESSAGE("trial ", trial, ": the fresh policy already chose it");
  }
  CHECK(single_rounds >= 10);
}

TEST_CASE("a replicated placement keeps its replicas through the decision round trip and the memo key") {
  Placement p;
  p.layer_group = {0, 0, 1, 1};
  p.group_device = {2, 0};
  p.group_replicas = {{1, 3}, {}};
  p.micro_batches = 4;
  Decision d = placement_to_decision(p, {1, 2, 4}, 4);
  Placement back = decision_to_placement(d, {1, 2, 4}, Schedule::gpipe);
  CHECK(back.layer_group == p.layer_group);
  CHECK(back.group_device == p.group_device);
  CHECK(back.group_replicas == p.group_replicas);
  Placement plain = p;
  plain.group_replicas.clear();
  CHECK(placement_key(p) != placement_key(plain));
}

TEST_CASE("a stage that fits only on several replicas is reachable: the masks offer, then force, its replicas") {
  // A chain whose activations dominate its memory: on one device, or on two
  // replicas (each half the micro-batches), it does not fit a device; on four
  // it does (PipeDream's replicated stages on small devices, e.g. vgg16 on
  // 8 x 2 GB). Replicas are decided one device at a time, so the masks must
  // let the first ones through on the way to a count that fits.
  LayerGraph g = chain_graph(4, 256);
  const int64_t batch = 2048;
  Cluster c = equal_cluster(4);
  for (size_t d = 0; d < c.devices.size(); ++d) c.devices[d].speed = 1.0 / (1 << d);  // devices told apart
  auto replicated_on = [&](std::vector<int> devices) {
    Placement p = Placement::single_device(static_cast<int>(g.layers.size()), devices[0]);
    p.micro_batches = 8;
    p.group_replicas = {std::vector<int>(devices.begin() + 1, devices.end())};
    return p;
  };
  auto peak_mb = [&](const Placement& p) {
    const auto bytes = estimate_device_memory_bytes(p, g, c, batch);
    return *std::max_element(bytes.begin(), bytes.end()) / (1024.0 * 1024.0);
  };
  const Placement four = replicated_on({0, 1, 2, 3}), two = replicated_on({0, 1});
  REQUIRE(peak_mb(two) > peak_mb(four) + 2);
  for (auto& d : c.devices) d.memory_mb = static_cast<int64_t>((peak_mb(two) + peak_mb(four)) / 2);
  REQUIRE(check_memory(four, g, c, batch).is_ok());
  REQUIRE_FALSE(check_memory(two, g, c, batch).is_ok());
  REQUIRE_FALSE(check_memory(replicated_on({0}), g, c, batch).is_ok());

  OpDictionary dict;
  PolicyConfig pc = replica_config(g, c, batch, PartitionMode::contiguous, 5);
  pc.devices = device_traits(c);
  pc.totals = layer_totals(g);
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  const Decision target = placement_to_decision(four, pc.micro_batch_choices, pc.num_groups);
  policy.imitate(target, kImitationSteps, kImitationRate);
  const Placement greedy = decision_to_placement(policy.greedy(), pc.micro_batch_choices, Schedule::gpipe);
  CHECK(placement_key(greedy) == placement_key(decision_to_placement(target, pc.micro_batch_choices, Schedule::gpipe)));
  CHECK(check_memory(greedy, g, c, batch).is_ok());
  CHECK(std::isfinite(policy.log_prob(target)));

  // Drawn from the imitated policy: where the whole chain is one group on its
  // device with 8 micro-batches, its replicas complete a count that fits.
  std::mt19937_64 rng(9);
  int whole = 0;
  for (int n = 0; n < 200; ++n) {
    Decision d = policy.sample(rng);
    Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
    if (p.num_groups() != 1 || p.micro_batches != 8) continue;
    ++whole;
    CAPTURE(n);
    CHECK(p.replica_count(0) >= 3);
    CHECK(check_memory(p, g, c, batch).is_ok());
  }
  CHECK(whole > 20);
}

namespace {

// Every plan costs 100 ms but one (the "needle"), which costs 1 ms: a plan the
// search meets only if something points it there.
class NeedleEvaluator : public Evaluator {
 public:
  explicit NeedleEvaluator(Placement needle) : needle_(placement_key(needle)) {}
  StepReport evaluate(const Placement& p) override {
    ++evaluations_;
    StepReport r;
    r.ok = true;
    r.source = "fake";
    r.step_ms = placement_key(p) == needle_ ? 1.0 : 100.0;
    return r;
  }
  EvaluatorKind kind() const override { return EvaluatorKind::simulate; }

 private:
  std::string needle_;
};

// Six linear layers (12 with their ReLUs) on four devices of halving speed,
// and a needle far from a fresh policy's first draws: three uneven stages,
// the middle one replicated, 4 micro-batches; the search options of a
// policy that stalls at once (every plan but the needle costs the same).
struct NeedleProblem {
  LayerGraph g = chain_graph(6);
  Cluster c = equal_cluster(4);
  Placement needle;
  SearchOptions o;
  NeedleProblem() {
    for (size_t d = 0; d < c.devices.size(); ++d) c.devices[d].speed = 1.0 / (1 << d);
    needle.layer_group = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2};
    needle.group_device = {3, 0, 2};
    needle.group_replicas = {{}, {1}, {}};
    needle.micro_batches = 4;
    o.samples_per_iteration = 4;
    o.batch_size = 8;
    o.refine_budget = 0;
  }
};

}  // namespace

TEST_CASE("the first restart starts from the plan it is given (optimize: the best classical one) and searches on") {
  NeedleProblem problem;
  const LayerGraph& g = problem.g;
  const Cluster& c = problem.c;
  const Placement& needle = problem.needle;
  REQUIRE(validate_placement(needle, g, c, 8).is_ok());
  SearchOptions o = problem.o;
  o.iterations = 40;
  o.restart_after = 5;
  o.seed = 12;
  NeedleEvaluator cold_ev(needle);
  SearchResult cold = search(g, c, cold_ev, o, nullptr);
  REQUIRE(cold.policy_found);
  // The fresh policies alone do not draw it (they did by chance at 1 of seeds 1-30: 11).
  CHECK(cold.policy_best_report.step_ms == 100.0);
  CHECK(cold.evaluations_before_imitation == 0);     // nothing to imitate

  o.restart_from = needle;
  NeedleEvaluator ev(needle);
  SearchResult from = search(g, c, ev, o, nullptr);
  REQUIRE(from.policy_found);
  CHECK(from.restarts >= 1);
  CHECK(from.policy_best_report.step_ms == 1.0);
  CHECK(placement_key(from.policy_best) == placement_key(needle));
  // The trace says which evaluations were the policy's own: the needle came only after the imitation began.
  REQUIRE(from.evaluations_before_imitation > 0);
  CHECK(from.evaluations_before_imitation < from.policy_evaluations);
  for (const TracePoint& t : from.trace)
    if (t.best_step_ms == 1.0) CHECK(t.evaluations > from.evaluations_before_imitation);
}

TEST_CASE("the first restart imitates its plan until the greedy decision is that plan: deep chains, six uneven stages") {
  // Long models with many cuts to learn (resnet50's 175 layers in six stages
  // once kept one cut 10 layers off after kImitationSteps): the restart's
  // greedy plan, measured at once, must be the plan it was given.
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 4; ++trial) {
    LayerGraph g = chain_graph(40 + 25 * trial);
    const int L = static_cast<int>(g.layers.size());
    Cluster c = equal_cluster(6);
    for (size_t d = 0; d < c.devices.size(); ++d) c.devices[d].speed = 1.0 / (1 + static_cast<double>(d));
    StagePlan stages;
    stages.stage_begin = {0};
    std::uniform_int_distribution<int> at(1, L - 1);
    while (stages.stage_begin.size() < 6) {
      const int x = at(rng);
      if (std::find(stages.stage_begin.begin(), stages.stage_begin.end(), x) == stages.stage_begin.end())
        stages.stage_begin.push_back(x);
    }
    std::sort(stages.stage_begin.begin(), stages.stage_begin.end());
    stages.stage_device = {0, 1, 2, 3, 4, 5};
    std::shuffle(stages.stage_device.begin(), stages.stage_device.end(), rng);
    stages.micro_batches = 8;
    const Placement needle = to_placement(stages, L, Schedule::gpipe, "needle");
    REQUIRE(validate_placement(needle, g, c, 8).is_ok());
    SearchOptions o;
    o.iterations = 8;
    o.samples_per_iteration = 2;
    o.batch_size = 8;
    o.restart_after = 3;
    o.max_restarts = 1;
    o.refine_budget = 0;
    o.seed = 5 + trial;
    o.restart_from = needle;
    NeedleEvaluator ev(needle);
    SearchResult r = search(g, c, ev, o, nullptr);
    CAPTURE(trial);
    REQUIRE(r.restarts == 1);
    CHECK(r.policy_best_report.step_ms == 1.0);
  }
}

TEST_CASE("a plan the networks cannot be taught is still proposed by the first restart") {
  // Without replicated stages in its space (replicate_stages off) the policy
  // can never draw a plan with one, so imitating such a plan cannot end in
  // it. The restart proposes the plan itself then (in optimize: a classical
  // plan the memory masks rule out, gpt2_medium on edge_uplinks), and the
  // search goes on from it.
  NeedleProblem problem;
  const Placement& needle = problem.needle;
  REQUIRE(validate_placement(needle, problem.g, problem.c, 8).is_ok());
  SearchOptions o = problem.o;
  o.replicate_stages = false;
  o.iterations = 20;
  o.restart_after = 3;
  o.max_restarts = 1;
  o.seed = 3;
  o.restart_from = needle;
  NeedleEvaluator ev(needle);
  SearchResult r = search(problem.g, problem.c, ev, o, nullptr);
  REQUIRE(r.restarts == 1);
  REQUIRE(r.policy_found);
  CHECK(r.policy_best_report.step_ms == 1.0);
  CHECK(placement_key(r.policy_best) == placement_key(needle));
}

TEST_CASE("the partition's memory mask never refuses a grouping that fits: random DAGs and clusters, both ordered modes") {
  // Groupings drawn without memory masks (any size); every one that fits its
  // devices by core's rule (as drawn, or once recompute_where_needed marks
  // groups) must be one the memory-masked partition allows: its floor is a
  // lower bound under every micro-batch count, replica count and recomputation.
  std::mt19937_64 rng(77);
  int fitting = 0, refused = 0;
  for (int trial = 0; trial < 30; ++trial) {
    LayerGraph g = random_branchy_graph(rng, 2 + trial % 4, 64 << (trial % 3));
    const int64_t batch = int64_t{4} << (trial % 11);  // up to 4096: activations as well as weights count
    const Optimizer optimizer = trial % 2 == 0 ? Optimizer::sgd : Optimizer::adam;
    Cluster c = random_cluster(rng, g, batch, optimizer);
    // Every third cluster has no device that holds the whole model: there the mask cuts.
    if (trial % 3 == 1)
      for (Device& d : c.devices) d.memory_mb = std::max<int64_t>(1, d.memory_mb * 3 / 5);
    const PartitionMode mode = trial % 2 == 0 ? PartitionMode::contiguous : PartitionMode::follows_dag;
    PolicyConfig masked = replica_config(g, c, batch, mode, 1 + trial, optimizer);
    PolicyConfig unmasked = masked;
    unmasked.memory = PolicyMemory{};
    unmasked.prior_groups = 1 + trial % c.num_devices();  // large groups as well as small ones
    OpDictionary dict;
    const FeatureMatrix rows = encode_layers(g, dict);
    Policy with_mask(rows, g.consumers(), masked), without(rows, g.consumers(), unmasked);
    for (int k = 0; k < 40; ++k) {
      Decision d = without.sample(rng);
      Placement p = decision_to_placement(d, masked.micro_batch_choices, Schedule::gpipe);
      p.optimizer = optimizer;
      if (!validate_placement(p, g, c, batch).is_ok()) continue;
      if (!recompute_where_needed(p, g, c, batch)) {
        refused += with_mask.partition_allowed(d.layer_group) ? 0 : 1;
        continue;
      }
      ++fitting;
      CHECK_MESSAGE(with_mask.partition_allowed(d.layer_group), "trial ", trial, " draw ", k);
      CHECK_MESSAGE(with_mask.micro_batch_probs(d.layer_group)[d.micro_batch_index] > 0.f, "trial ", trial, " draw ", k);
    }
  }
  CHECK(fitting > 200);
  CHECK(refused > 0);  // the mask does refuse groupings (of those that fit no device)
}

TEST_CASE("a policy that would put a model too big for any device in one group cuts it where the memory runs out") {
  // 12 linear layers of 4 MiB weights (12 MiB with SGD's gradient and
  // momentum): 144 MiB in all, on devices of 64 MiB. A policy whose prior
  // puts every layer in group 0 keeps them there without the memory mask;
  // with it, every group it draws or picks holds at most what one device does.
  LayerGraph g = chain_graph(12, 1024);
  const int64_t batch = 8;
  Cluster c = equal_cluster(4, 64);
  PolicyConfig pc = replica_config(g, c, batch, PartitionMode::contiguous, 5);
  pc.max_replicas = 0;
  pc.prior_groups = 1;
  PolicyConfig no_memory = pc;
  no_memory.memory = PolicyMemory{};
  OpDictionary dict;
  const FeatureMatrix rows = encode_layers(g, dict);
  Policy plain(rows, g.consumers(), no_memory), masked(rows, g.consumers(), pc);
  auto groups_used = [](const Decision& d) {
    std::vector<int> u = d.layer_group;
    std::sort(u.begin(), u.end());
    return static_cast<int>(std::unique(u.begin(), u.end()) - u.begin());
  };
  REQUIRE(groups_used(plain.greedy()) == 1);
  CHECK_FALSE(masked.partition_allowed(plain.greedy().layer_group));
  std::mt19937_64 rng(3);
  for (int k = 0; k < 40; ++k) {
    const Decision d = k == 0 ? masked.greedy() : masked.sample(rng);
    CHECK(groups_used(d) >= 3);
    CHECK(masked.partition_allowed(d.layer_group));
    CHECK(std::isfinite(masked.log_prob(d)));
    Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
    Status fits = check_memory(p, g, c, batch);
    CHECK_MESSAGE(fits.is_ok(), "draw ", k, ": ", fits.message());
  }
}

TEST_CASE("with the stage-count head, counts below the fewest groups a model fits in are not offered, and every draw fits") {
  // The chain above: 12 layers of 12 MiB of training state on devices of 64
  // MiB, so at least 3 groups. The head never offers 1 or 2, and a layer
  // opens a group only where the layers after it still fit in those left.
  LayerGraph g = chain_graph(12, 1024);
  const int64_t batch = 8;
  Cluster c = equal_cluster(4, 64);
  PolicyConfig pc = replica_config(g, c, batch, PartitionMode::contiguous, 5);
  pc.choose_stage_count = true;
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  const std::vector<float> odds = policy.stage_count_probs();
  REQUIRE(odds.size() == 4);
  CHECK(odds[0] == 0.f);
  CHECK(odds[1] == 0.f);
  CHECK(odds[2] > 0.f);
  std::mt19937_64 rng(9);
  int three = 0;
  for (int k = 0; k < 60; ++k) {
    const Decision d = k == 0 ? policy.greedy() : k == 1 ? policy.typical() : policy.sample(rng);
    three += d.layer_group.back() == 2;
    CHECK(d.layer_group.back() >= 2);
    Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
    Status fits = check_memory(p, g, c, batch);
    CHECK_MESSAGE(fits.is_ok(), "draw ", k, ": ", fits.message());
  }
  CHECK(three > 0);  // 3 groups for 3 devices' worth of layers: each group nearly full, and still drawn
}

TEST_CASE("a batch of samples draws each as sampling it alone from its own stream would: random DAGs and clusters, every mode and head") {
  std::mt19937_64 rng(777);
  int compared = 0, replicated = 0, staged = 0;
  for (int trial = 0; trial < 12; ++trial) {
    LayerGraph g = random_branchy_graph(rng, 2 + trial % 3, 256);
    const int64_t batch = 16;
    Cluster c = random_cluster(rng, g, batch, Optimizer::sgd);
    const PartitionMode mode = trial % 3 == 0   ? PartitionMode::contiguous
                               : trial % 3 == 1 ? PartitionMode::follows_dag
                                                : PartitionMode::free;
    PolicyConfig pc = replica_config(g, c, batch, mode, 1 + trial);
    pc.choose_stage_count = mode != PartitionMode::free && trial % 2 == 0;
    pc.balance_replicas = trial % 4 < 2;
    pc.offer_data_parallel = trial % 5 == 0;
    pc.replica_bias = 0.0;  // replicas at even odds: the replica head's draws are exercised
    pc.devices = device_traits(c);
    pc.totals = layer_totals(g);
    pc.learning_rate = 0.05;
    OpDictionary dict;
    Policy policy(encode_layers(g, dict), g.consumers(), pc);
    // Random updates first: a fresh network's odds are nearly even, so a
    // batch that mixed up its samples' features would still draw alike.
    std::uniform_real_distribution<double> advantage(-1.0, 1.0);
    for (int step = 0; step < 20; ++step) {
      std::vector<Decision> ds;
      std::vector<double> adv;
      for (int k = 0; k < 8; ++k) ds.push_back(policy.sample(rng)), adv.push_back(advantage(rng));
      policy.update(ds, adv, 0.0, 10.0);
    }
    const uint64_t seed = rng();
    std::mt19937_64 batch_rng(seed), alone_rng(seed);
    const std::vector<Decision> drawn = policy.sample(40, batch_rng);
    REQUIRE(drawn.size() == 40);
    for (const Decision& d : drawn) {
      std::mt19937_64 stream(alone_rng());
      CHECK_MESSAGE(d == policy.sample(stream), "trial ", trial, " sample ", compared % 40);
      ++compared;
      replicated += has_replicas(d);
      staged += pc.choose_stage_count && d.layer_group.back() + 1 < pc.num_groups;
    }
    CHECK(batch_rng() == alone_rng());  // the caller's generator moved on by one draw a sample
  }
  CHECK(compared == 12 * 40);
  CHECK(replicated > 0);
  CHECK(staged > 0);  // the stage-count head drew fewer stages than groups
}

TEST_CASE("with the stage-count head, proposals stay executable on random DAGs and clusters, both ordered modes") {
  std::mt19937_64 rng(4242);
  int proposals = 0;
  std::vector<int> counts(6, 0);
  for (int trial = 0; trial < 20; ++trial) {
    LayerGraph g = random_branchy_graph(rng, 2 + trial % 3, 256);
    const int64_t batch = 16;
    Cluster c = random_cluster(rng, g, batch, Optimizer::sgd);
    if (trial % 4 == 1) {  // no device holds the whole model, each holds 3/5 of it: at least 2 stages
      int64_t whole_mb = 0;
      for (const Device& d : c.devices) whole_mb = std::max(whole_mb, d.memory_mb);
      for (Device& d : c.devices) d.memory_mb = std::max<int64_t>(1, whole_mb * 3 / 5);
    }
    const PartitionMode mode = trial % 2 == 0 ? PartitionMode::contiguous : PartitionMode::follows_dag;
    PolicyConfig pc = replica_config(g, c, batch, mode, 1 + trial);
    pc.choose_stage_count = true;
    OpDictionary dict;
    Policy policy(encode_layers(g, dict), g.consumers(), pc);
    const bool tight = trial % 4 == 1;
    if (tight) CHECK(policy.stage_count_probs()[0] == 0.f);  // one stage is not offered
    for (int n = 0; n < 30; ++n) {
      const Decision d = policy.sample(rng);
      ++proposals;
      ++counts[std::min(5, d.layer_group.back() + 1)];
      CHECK(*std::max_element(d.layer_group.begin(), d.layer_group.end()) == d.layer_group.back());
      CHECK(std::isfinite(policy.log_prob(d)));
      Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
      Status valid = validate_placement(p, g, c, batch);
      CHECK_MESSAGE(valid.is_ok(), "trial ", trial, ": ", valid.message());
      CHECK(policy.partition_allowed(d.layer_group));
      if (tight) {
        // Each group within the largest device by the floors; core's rule is
        // not asserted here: the floors are its lower bound, so a group at a
        // device's edge may pass it by a little (with or without the head).
        CHECK(d.layer_group.back() >= 1);
        continue;
      }
      CHECK(recompute_where_needed(p, g, c, batch));
      Status fits = check_memory(p, g, c, batch);
      CHECK_MESSAGE(fits.is_ok(), "trial ", trial, ": ", fits.message());
    }
  }
  CHECK(proposals == 20 * 30);
  CHECK(counts[1] > 0);  // one stage (where it fits) as well as several
  CHECK(counts[2] + counts[3] + counts[4] + counts[5] > proposals / 4);
}

TEST_CASE("a group that fits no device without recomputing is masked as recomputing: its replicas are offered") {
  // gpt2 at batch 32 on 4 GB devices in miniature: 8 layers keeping 8 KiB a
  // sample, batch 16384, 8 micro-batches. The whole chain in one group fits
  // no device without recomputing, even replicated 4 times (2 micro-batches
  // in flight each); recomputing (one kept), it fits replicated 4 times.
  // PipeDream's plan is that one. Imitated, the policy's greedy plan must be
  // it, and the measurer's recompute_where_needed must make every draw fit.
  // (Before, the mask counted the group without recomputing: it was lifted
  // onto one device and no replica was ever offered.)
  LayerGraph g = chain_graph(4, 256);
  const int64_t batch = 16384;
  Cluster c = equal_cluster(4);
  Placement four = Placement::single_device(static_cast<int>(g.layers.size()), 0);
  four.micro_batches = 8;
  four.group_replicas = {{1, 2, 3}};
  Placement recomputing = four;
  recomputing.group_recompute = {1};
  const int64_t plain_need = estimate_device_memory_bytes(four, g, c, batch)[0];
  const int64_t recompute_need = estimate_device_memory_bytes(recomputing, g, c, batch)[0];
  REQUIRE(plain_need > recompute_need + (4 << 20));
  for (Device& d : c.devices) d.memory_mb = (plain_need + recompute_need) / 2 >> 20;
  REQUIRE_FALSE(check_memory(four, g, c, batch).is_ok());
  REQUIRE(check_memory(recomputing, g, c, batch).is_ok());

  PolicyConfig pc = replica_config(g, c, batch, PartitionMode::contiguous, 5);
  REQUIRE(std::find(pc.micro_batch_choices.begin(), pc.micro_batch_choices.end(), 8) != pc.micro_batch_choices.end());
  pc.devices = device_traits(c);
  pc.totals = layer_totals(g);
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  const Decision target = placement_to_decision(four, pc.micro_batch_choices, pc.num_groups);
  REQUIRE(policy.allows(target));
  policy.imitate(target, kImitationSteps, kImitationRate);
  Placement greedy = decision_to_placement(policy.greedy(), pc.micro_batch_choices, Schedule::gpipe);
  REQUIRE(recompute_where_needed(greedy, g, c, batch));
  CHECK(placement_key(greedy) == placement_key(recomputing));

  std::mt19937_64 rng(6);
  int replicated = 0;
  for (int n = 0; n < 100; ++n) {
    const Decision d = policy.sample(rng);
    Placement p = decision_to_placement(d, pc.micro_batch_choices, Schedule::gpipe);
    replicated += p.has_replicated_groups();
    CHECK(std::isfinite(policy.log_prob(d)));
    Placement fitted = p;
    CHECK_MESSAGE(recompute_where_needed(fitted, g, c, batch), "draw ", n, ": ", check_memory(fitted, g, c, batch).message());
  }
  CHECK(replicated > 20);
}

TEST_CASE("a micro-batch count is offered only where each group has a device of its own that holds it") {
  // Two halves of a chain, each held (recomputing) by the one large device
  // at one micro-batch and by the three small ones only at 8: one device
  // cannot run both stages, so one micro-batch is not offered; each half
  // fitting the largest device alone was the rule until 2026-11-28 (a trained
  // policy's zero-shot plan for gpt2 on cluster_fast_behind_slow_link put two
  // stages on its 8 GB device: 30.5 GB).
  LayerGraph g = chain_graph(4, 256);  // 8 layers
  const int64_t batch = 16384;
  Cluster c = equal_cluster(4);
  Placement halves;
  halves.layer_group = {0, 0, 0, 0, 1, 1, 1, 1};
  halves.group_device = {0, 1};
  halves.group_recompute = {1, 1};
  halves.group_replicas = {{}, {}};
  auto need = [&](int micro_batches) {
    Placement p = halves;
    p.micro_batches = micro_batches;
    const std::vector<int64_t> bytes = estimate_device_memory_bytes(p, g, c, batch);
    return std::max(bytes[0], bytes[1]);
  };
  const int64_t one = need(1), eight = need(8);
  REQUIRE(one > eight + (64 << 20));
  c.devices[0].memory_mb = (one + one / 2) >> 20;  // one half at any count, never both
  for (int d = 1; d < 4; ++d) c.devices[d].memory_mb = (one + eight) / 2 >> 20;
  PolicyConfig pc = replica_config(g, c, batch, PartitionMode::contiguous, 5);
  const std::vector<int>& counts = pc.micro_batch_choices;
  REQUIRE(counts.front() == 1);
  REQUIRE(counts.back() == 8);
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  const std::vector<float> odds = policy.micro_batch_probs(halves.layer_group);
  CAPTURE(one);
  CAPTURE(eight);
  CHECK(odds.front() == 0.f);
  CHECK(odds[counts.size() - 1] > 0.f);
  // One stage on the large device keeps one micro-batch.
  CHECK(policy.micro_batch_probs(std::vector<int>(8, 0)).front() > 0.f);
}

TEST_CASE("a group that fits without recomputing only on more copies than the devices left is masked as recomputing") {
  // gpt2 at batch 32 on cluster_8x8gb's eight 8 GB devices in three stages
  // (17, 9 and 74 layers; a trained policy's zero-shot plan) at 8 micro-batches:
  // the last stage fits without recomputing on 8 copies, but the two other
  // stages leave it 6 devices, where it fits only recomputing and replicated.
  // Counted at 8 copies it was not marked: no device fitted it, its mask was
  // lifted, no replica was forced, and the plan stayed out of memory recomputed.
  auto g = zoo_model("gpt2");
  REQUIRE(g.is_ok());
  const int64_t batch = 32;
  const int L = static_cast<int>(g->layers.size());
  Cluster c = equal_cluster(8, 8192);
  Placement three;
  three.layer_group.assign(L, 2);
  for (int i = 0; i < 26; ++i) three.layer_group[i] = i < 17 ? 0 : 1;
  three.group_device = {0, 1, 2};
  three.micro_batches = 8;
  Placement recomputing = three;
  REQUIRE_FALSE(recompute_where_needed(recomputing, *g, c, batch));  // one copy each: out of memory

  SearchOptions so;
  so.batch_size = batch;
  PolicyConfig pc = search_policy_config(*g, c, so);
  OpDictionary dict;
  Policy policy(encode_layers(*g, dict), g->consumers(), pc);
  policy.imitate(placement_to_decision(three, pc.micro_batch_choices, pc.num_groups), kImitationSteps, kImitationRate);
  const Decision greedy = policy.greedy();
  REQUIRE(greedy.layer_group == placement_to_decision(three, pc.micro_batch_choices, pc.num_groups).layer_group);
  Placement fitted = decision_to_placement(greedy, pc.micro_batch_choices, Schedule::gpipe);
  REQUIRE(fitted.micro_batches == 8);
  CHECK(fitted.replica_count(2) > 1);  // the masks force the last stage's replicas
  CHECK_MESSAGE(recompute_where_needed(fitted, *g, c, batch), check_memory(fitted, *g, c, batch).message());
}

TEST_CASE("micro-batch counts at which a group fits no device even recomputing are not offered") {
  // 8 layers keeping 8 KiB a sample in all: at a batch of 16384 one group
  // keeps 128 MiB a micro-batch at 1 micro-batch, 64 at 2, 32 at 4; devices
  // hold 64 MiB. With one group holding every layer, 1 and 2 are masked; no
  // draw takes a count at which one of its groups' kept activations for one
  // micro-batch alone pass a device.
  LayerGraph g = chain_graph(4, 256);
  const int64_t batch = 16384;
  Cluster c = equal_cluster(2, 64);
  PolicyConfig pc = replica_config(g, c, batch, PartitionMode::contiguous, 9);
  pc.prior_groups = 1;
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  REQUIRE(pc.micro_batch_choices.size() >= 3);
  REQUIRE(pc.micro_batch_choices[0] == 1);
  REQUIRE(pc.micro_batch_choices[1] == 2);
  const std::vector<float> one_group = policy.micro_batch_probs(std::vector<int>(g.layers.size(), 0));
  CHECK(one_group[0] == 0.f);
  CHECK(one_group[1] == 0.f);
  CHECK(one_group[2] > 0.f);
  std::mt19937_64 rng(4);
  for (int k = 0; k < 40; ++k) {
    const Decision d = k == 0 ? policy.greedy() : policy.sample(rng);
    const int64_t count = pc.micro_batch_choices[d.micro_batch_index];
    std::vector<int64_t> kept(pc.num_groups, 0);
    for (size_t i = 0; i < g.layers.size(); ++i) kept[d.layer_group[i]] += kept_bytes_per_sample(g, static_cast<int>(i));
    for (int64_t bytes : kept) CHECK(bytes * ((batch + count - 1) / count) <= int64_t{64} << 20);
    CHECK(std::isfinite(policy.log_prob(d)));
  }
}

TEST_CASE("the partition's memory floor leaves out a tied head's copy: gpt2 in one group on a device that holds it") {
  // The least gpt2 needs on one device: Adam, one sample a micro-batch,
  // recomputation. On a device of exactly that, the whole model in one group
  // is allowed (counting the head's copy of the embedding table, 4 x 147 MiB
  // of training state, would refuse it); on one of half its training state, it is not.
  auto g = zoo_model("gpt2");
  REQUIRE(g.is_ok());
  const int64_t batch = 4;
  const int L = static_cast<int>(g->layers.size());
  Placement one = Placement::single_device(L, 0);
  one.optimizer = Optimizer::adam;
  one.micro_batches = static_cast<int>(batch);
  one.group_recompute = {1};
  const int64_t least = estimate_device_memory_bytes(one, *g, equal_cluster(1), batch)[0];
  Cluster c = equal_cluster(2, (least + (1 << 20) - 1) >> 20);
  REQUIRE(check_memory(one, *g, c, batch).is_ok());
  PolicyConfig pc = replica_config(*g, c, batch, PartitionMode::contiguous, 1, Optimizer::adam);
  OpDictionary dict;
  const FeatureMatrix rows = encode_layers(*g, dict);
  Policy policy(rows, g->consumers(), pc);
  CHECK(policy.partition_allowed(std::vector<int>(L, 0)));
  int64_t params = 0;
  for (const Layer& l : g->layers) params += l.param_bytes();
  Cluster small = equal_cluster(2, training_state_bytes(params, Optimizer::adam) / (2 << 20));
  Policy tight(rows, g->consumers(), replica_config(*g, small, batch, PartitionMode::contiguous, 1, Optimizer::adam));
  CHECK_FALSE(tight.partition_allowed(std::vector<int>(L, 0)));
}

namespace {

// Four equal devices; each directed pair in `slow` gets a 10 Mbit/s, 5 ms link.
Cluster equal_cluster_with_slow_links(const std::vector<std::pair<int, int>>& slow) {
  Cluster c = equal_cluster(4);
  for (auto [x, y] : slow) {
    Link l;
    l.from = c.devices[x].name;
    l.to = c.devices[y].name;
    l.bandwidth_mbps = 10;
    l.latency_ms = 5;
    c.links.push_back(l);
  }
  return c;
}

// The link tests' small policy: `groups` contiguous groups, `max_replicas`,
// batch 8 in 4 micro-batches, no memory masks, the cluster's traits.
PolicyConfig link_test_config(const LayerGraph& g, const Cluster& c, uint64_t seed, int groups, int max_replicas) {
  PolicyConfig pc = replica_config(g, c, 8, PartitionMode::contiguous, seed);
  pc.num_groups = groups;
  pc.max_replicas = max_replicas;
  pc.micro_batch_choices = {4};
  pc.memory = PolicyMemory{};
  pc.totals = layer_totals(g);
  pc.devices = device_traits(c);
  return pc;
}

// 400 rounds of REINFORCE on one set of networks, each on the cluster
// draw(rng) gives: 16 decisions, rewarded by step_ms(cluster, decision).
template <class Configure, class Draw, class Step>
std::shared_ptr<PolicyNetworks> train_on_drawn_clusters(const LayerGraph& g, const FeatureMatrix& rows,
                                                        Configure configure, Draw draw, Step step_ms,
                                                        std::mt19937_64& rng) {
  std::shared_ptr<PolicyNetworks> networks;
  for (int it = 0; it < 400; ++it) {
    const Cluster c = draw(rng);
    Policy policy(rows, g.consumers(), configure(c), networks);
    networks = policy.networks();
    Reinforce rf(policy, ReinforceConfig{}, 10.0);
    std::vector<Decision> ds;
    std::vector<StepReport> rs;
    for (int s = 0; s < 16; ++s) {
      ds.push_back(policy.sample(rng));
      StepReport r;
      r.ok = true;
      r.step_ms = step_ms(c, ds.back());
      rs.push_back(r);
    }
    rf.step(ds, rs, it / 400.0);
  }
  return networks;
}

}  // namespace

TEST_CASE("the replica head sees the link to the group's primary: it learns to keep replicas off slow links, and that carries to a cluster it never saw") {
  // 4 equal devices; trained on random clusters where each link is slow
  // (10 Mbit/s) or fast by a coin, so no device index is a safe rule, with a
  // reward that charges a replica behind a slow link from its primary
  // heavily; then placed on a pattern it never drew (d0-d1 and d2-d3 slow).
  LayerGraph g = chain_graph(3, 256);
  auto cluster_with_slow = [](const std::vector<std::pair<int, int>>& pairs) {
    std::vector<std::pair<int, int>> both_ways;
    for (auto [x, y] : pairs) both_ways.insert(both_ways.end(), {{x, y}, {y, x}});
    return equal_cluster_with_slow_links(both_ways);
  };
  const std::vector<std::pair<int, int>> unseen_pairs = {{0, 1}, {2, 3}};
  auto config = [&](const Cluster& c) {
    PolicyConfig pc = link_test_config(g, c, 11, 1, 1);
    pc.replica_bias = 0;
    return pc;
  };
  auto slow = [](const Cluster& c, int x, int y) { return c.link(x, y).bandwidth_mbps < 100; };
  auto draw = [&](std::mt19937_64& rng) {
    std::vector<std::pair<int, int>> pairs;
    do {
      pairs.clear();
      for (int x = 0; x < 4; ++x)
        for (int y = x + 1; y < 4; ++y)
          if (rng() % 2) pairs.emplace_back(x, y);
    } while (pairs == unseen_pairs);
    return cluster_with_slow(pairs);
  };
  auto step_ms = [&](const Cluster& c, const Decision& d) {
    double ms = 10;
    for (int k : d.group_replicas[0]) ms = slow(c, d.group_device[0], k) ? 40 : 6;
    return ms;
  };
  OpDictionary dict;
  const FeatureMatrix rows = encode_layers(g, dict);
  std::mt19937_64 rng(5);
  auto networks = train_on_drawn_clusters(g, rows, config, draw, step_ms, rng);
  const Cluster unseen = cluster_with_slow(unseen_pairs);
  Policy on_unseen(rows, g.consumers(), config(unseen), networks);
  int slow_replicas = 0, fast_replicas = 0;
  std::mt19937_64 r(9);
  for (int k = 0; k < 300; ++k) {
    const Decision d = on_unseen.sample(r);
    for (int x : d.group_replicas[0]) (slow(unseen, d.group_device[0], x) ? slow_replicas : fast_replicas)++;
  }
  // 2 of a primary's 3 links are fast: by chance about 2 fast replicas to 1 slow.
  CHECK(fast_replicas > 100);
  CHECK(fast_replicas > 6 * slow_replicas);
}

TEST_CASE("the device head sees both directions of a link to a producer's device: it learns to avoid a slow way back, and that carries to a cluster it never saw") {
  // 4 equal devices; trained on random clusters where each pair of devices is
  // fast both ways or slow (10 Mbit/s) in one direction drawn by a coin, with
  // a reward that charges a second stage whose link with the first's device
  // is slow either way; then placed on a ring of slow links it never drew
  // (d1 -> d0, d2 -> d1, d3 -> d2, d0 -> d3), where every device has one slow
  // link out and one in, so no device row tells them apart and from each
  // device one candidate is slow forward and one slow only on the way back.
  LayerGraph g = chain_graph(2, 256);
  using Directed = std::vector<std::pair<int, int>>;
  const Directed unseen_ring = {{1, 0}, {2, 1}, {3, 2}, {0, 3}};
  Directed unseen_sorted = unseen_ring;
  std::sort(unseen_sorted.begin(), unseen_sorted.end());
  auto config = [&](const Cluster& c) { return link_test_config(g, c, 13, 2, 0); };
  auto slow_pair = [](const Cluster& c, int x, int y) {
    return c.link(x, y).bandwidth_mbps < 100 || c.link(y, x).bandwidth_mbps < 100;
  };
  auto two_stages = [](const Decision& d) { return d.layer_group[0] != d.layer_group[1]; };
  auto draw = [&](std::mt19937_64& rng) {
    Directed slow;
    do {
      slow.clear();
      for (int x = 0; x < 4; ++x)
        for (int y = x + 1; y < 4; ++y)
          if (rng() % 2) slow.emplace_back(rng() % 2 ? std::make_pair(x, y) : std::make_pair(y, x));
      std::sort(slow.begin(), slow.end());
    } while (slow == unseen_sorted);
    return equal_cluster_with_slow_links(slow);
  };
  auto step_ms = [&](const Cluster& c, const Decision& d) {
    return two_stages(d) && !slow_pair(c, d.group_device[0], d.group_device[1]) ? 6.0 : 40.0;
  };
  OpDictionary dict;
  const FeatureMatrix rows = encode_layers(g, dict);
  std::mt19937_64 rng(7);
  auto networks = train_on_drawn_clusters(g, rows, config, draw, step_ms, rng);
  const Cluster unseen = equal_cluster_with_slow_links(unseen_ring);
  Policy on_unseen(rows, g.consumers(), config(unseen), networks);
  int slow_back = 0, fast = 0, split = 0;
  std::mt19937_64 r(9);
  for (int k = 0; k < 300; ++k) {
    const Decision d = on_unseen.sample(r);
    if (!two_stages(d)) continue;
    ++split;
    const int a = d.group_device[0], b = d.group_device[1];
    if (!slow_pair(unseen, a, b)) ++fast;
    if (unseen.link(b, a).bandwidth_mbps < 100) ++slow_back;
  }
  // Of a first stage's three candidates, one is fast both ways; a head that
  // sees only the forward link cannot tell the one slow on the way back from it.
  CHECK(split > 200);
  CHECK(fast > 3 * slow_back);
}

TEST_CASE("an expert's devices are renamed within classes of interchangeable devices, in the order the policy draws them") {
  // Three stages on eight equal devices, as a planner might number them:
  // stages on dev5, dev2, dev7; replicas {0, 6}, {1, 3} and {4}.
  LayerGraph g = chain_graph(6);
  Cluster c = equal_cluster(8, 1 << 14);
  PolicyConfig pc = replica_config(g, c, 32, PartitionMode::contiguous, 4);
  OpDictionary dict;
  Decision d;
  const int L = static_cast<int>(g.layers.size());
  for (int i = 0; i < L; ++i) d.layer_group.push_back(3 * i / L);
  d.group_device.assign(pc.num_groups, 0);
  d.group_device[0] = 5, d.group_device[1] = 2, d.group_device[2] = 7;
  d.micro_batch_index = static_cast<int>(pc.micro_batch_choices.size()) - 1;
  d.group_replicas.assign(pc.num_groups, {});
  d.group_replicas[0] = {0, 6}, d.group_replicas[1] = {1, 3}, d.group_replicas[2] = {4};
  {
    Policy policy(encode_layers(g, dict), g.consumers(), pc);
    REQUIRE(policy.allows(d));
    const Decision k = policy.canonical(d);
    CHECK(k.layer_group == d.layer_group);
    CHECK(k.micro_batch_index == d.micro_batch_index);
    // Stages on the lowest devices in stage order; each free device, in index
    // order, to the stage with the fewest copies that still runs one more.
    CHECK(std::vector<int>(k.group_device.begin(), k.group_device.begin() + 3) == std::vector<int>{0, 1, 2});
    CHECK(k.group_replicas[0] == std::vector<int>{3, 6});
    CHECK(k.group_replicas[1] == std::vector<int>{4, 7});
    CHECK(k.group_replicas[2] == std::vector<int>{5});
    CHECK(policy.allows(k));
    CHECK(policy.canonical(k).group_replicas == k.group_replicas);  // already canonical
    CHECK(policy.canonical(k).group_device == k.group_device);
  }
  // dev5 twice as fast and dev2 with a slow link to dev7: neither is renamed
  // (nothing else is like it), and dev7 only among the devices like it.
  c.devices[5].speed = 2.0;
  c.links.push_back(Link{c.devices[2].name, c.devices[7].name, 100, 1.0});
  c.links.push_back(Link{c.devices[7].name, c.devices[2].name, 100, 1.0});
  pc.devices = device_traits(c);
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  REQUIRE(policy.allows(d));
  const Decision k = policy.canonical(d);
  CHECK(k.group_device[0] == 5);
  CHECK(k.group_device[1] == 2);
  CHECK(k.group_device[2] == 7);
  CHECK(policy.allows(k));
  // Replicas keep their classes: the equal devices {0, 1, 3, 4, 6} hold five replicas as before.
  int on_equal = 0;
  for (const auto& r : k.group_replicas)
    for (int dev : r) on_equal += dev != 2 && dev != 5 && dev != 7;
  CHECK(on_equal == 5);
}

TEST_CASE("the typical decision takes the likeliest class of interchangeable devices at its lowest free member") {
  // A policy taught to put its second stage on dev3 of four equal devices:
  // its argmax does; its typical decision puts it on dev1, the same plan in
  // the form train-policy imitates (Policy::canonical).
  LayerGraph g = chain_graph(6);
  Cluster c = equal_cluster(4, 1 << 14);
  PolicyConfig pc = replica_config(g, c, 32, PartitionMode::contiguous, 6);
  pc.max_replicas = 0;
  OpDictionary dict;
  Policy policy(encode_layers(g, dict), g.consumers(), pc);
  Decision target;
  const int L = static_cast<int>(g.layers.size());
  for (int i = 0; i < L; ++i) target.layer_group.push_back(2 * i / L);
  target.group_device.assign(pc.num_groups, 0);
  target.group_device[1] = 3;
  target.micro_batch_index = 2;
  target.group_replicas.assign(pc.num_groups, {});
  REQUIRE(policy.allows(target));
  policy.imitate(target, 60, 0.05);
  const Decision greedy = policy.greedy(), typical = policy.typical();
  REQUIRE(greedy.layer_group == target.layer_group);
  CHECK(greedy.group_device[0] == 0);
  CHECK(greedy.group_device[1] == 3);
  REQUIRE(typical.layer_group == target.layer_group);
  CHECK(typical.group_device[0] == 0);
  CHECK(typical.group_device[1] == 1);
  CHECK(policy.canonical(greedy).group_device == typical.group_device);
}
