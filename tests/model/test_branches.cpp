// Parallel branches of layer graphs (model/branches.h): hand-built DAGs, the
// zoo's Inception and ResNet, and properties on random DAGs.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "model/branches.h"
#include "model/layer_graph.h"
#include "model/zoo.h"

using namespace tapp;

namespace {

// A graph of named layers; only the inputs matter here.
LayerGraph dag(const std::vector<std::vector<int>>& inputs) {
  LayerGraph g;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Layer l;
    l.name = "l" + std::to_string(i);
    l.inputs = inputs[i];
    g.layers.push_back(l);
  }
  return g;
}

const ParallelBranches* fork_at(const std::vector<ParallelBranches>& all, int fork) {
  for (const ParallelBranches& b : all)
    if (b.fork == fork) return &b;
  return nullptr;
}

}  // namespace

TEST_CASE("an Inception-like block: three towers (one with a nested fork) meet at the concat") {
  // 0 input, 1 fork; towers: [2, 3], [4], [5 -> (6, 7) -> 8]; 9 concat; 10 output.
  LayerGraph g = dag({{}, {0}, {1}, {2}, {1}, {1}, {5}, {5}, {6, 7}, {3, 4, 8}, {9}});
  auto all = parallel_branches(g);
  REQUIRE(all.size() == 2);
  const ParallelBranches* outer = fork_at(all, 1);
  REQUIRE(outer);
  CHECK(outer->join == 9);
  CHECK(outer->branches == std::vector<std::vector<int>>{{2, 3}, {4}, {5, 6, 7, 8}});
  const ParallelBranches* inner = fork_at(all, 5);
  REQUIRE(inner);
  CHECK(inner->join == 8);
  CHECK(inner->branches == std::vector<std::vector<int>>{{6}, {7}});
}

TEST_CASE("a chain has no branches; a residual block only when its shortcut has layers") {
  CHECK(parallel_branches(dag({{}, {0}, {1}, {2}})).empty());
  // 1 fork; body 2 -> 3; 4 = add(3, 1): the shortcut is the fork itself.
  CHECK(parallel_branches(dag({{}, {0}, {1}, {2}, {3, 1}, {4}})).empty());
  // The same with a downsampling shortcut 4: two branches meeting at 5.
  auto all = parallel_branches(dag({{}, {0}, {1}, {2}, {1}, {3, 4}, {5}}));
  REQUIRE(all.size() == 1);
  CHECK(all[0].fork == 1);
  CHECK(all[0].join == 5);
  CHECK(all[0].branches == std::vector<std::vector<int>>{{2, 3}, {4}});
}

TEST_CASE("a layer reading one input twice is not a fork") {
  CHECK(parallel_branches(dag({{}, {0}, {1, 1}, {2}})).empty());
}

TEST_CASE("inception_v3: every block's towers are found, joined at the block's concat") {
  LayerGraph g = *zoo_model("inception_v3");
  auto all = parallel_branches(g);
  int blocks = 0;
  for (size_t c = 0; c < g.layers.size(); ++c) {
    const Layer& l = g.layers[c];
    if (l.op != "concat" || l.name.find(".branch") != std::string::npos) continue;  // block-level concats
    ++blocks;
    auto it = std::find_if(all.begin(), all.end(), [&](const ParallelBranches& b) { return b.join == static_cast<int>(c); });
    REQUIRE_MESSAGE(it != all.end(), l.name);
    CHECK(it->branches.size() >= 3);  // Inception blocks have 3 or 4 towers
  }
  CHECK(blocks == 11);
}

TEST_CASE("on random DAGs branches are disjoint, lie between fork and join, and never read each other") {
  std::mt19937 rng(17);
  int forks = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int L = 3 + static_cast<int>(rng() % 30);
    std::vector<std::vector<int>> inputs(L);
    for (int i = 1; i < L; ++i) {
      const int k = 1 + static_cast<int>(rng() % 2);
      for (int j = 0; j < k; ++j) inputs[i].push_back(static_cast<int>(rng() % i));
    }
    LayerGraph g = dag(inputs);
    for (const ParallelBranches& b : parallel_branches(g)) {
      ++forks;
      REQUIRE(b.branches.size() >= 2);
      std::vector<int> owner(L, -1);
      for (size_t k = 0; k < b.branches.size(); ++k)
        for (int x : b.branches[k]) {
          CHECK(owner[x] == -1);
          owner[x] = static_cast<int>(k);
          CHECK(x > b.fork);
          if (b.join >= 0) CHECK(x < b.join);
        }
      for (size_t k = 0; k < b.branches.size(); ++k) {
        CHECK(std::is_sorted(b.branches[k].begin(), b.branches[k].end()));
        // Its first layer reads the fork; every other layer reads its own branch.
        const std::vector<int>& first_inputs = g.layers[b.branches[k][0]].inputs;
        CHECK(std::find(first_inputs.begin(), first_inputs.end(), b.fork) != first_inputs.end());
        for (int x : b.branches[k])
          for (int q : g.layers[x].inputs) CHECK((owner[q] == -1 || owner[q] == static_cast<int>(k)));
      }
    }
  }
  CHECK(forks > 100);
}
