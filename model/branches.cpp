#include "model/branches.h"

#include <algorithm>
#include <vector>

#include "model/layer_graph.h"

namespace tapp {
namespace {

constexpr int kOutside = -1;  // does not depend on the fork
constexpr int kFork = -2;     // reads the fork itself

// The branches of fork f, or none when fewer than two are non-empty.
ParallelBranches branches_of(const LayerGraph& g, int f, std::vector<int>& label) {
  const int L = static_cast<int>(g.layers.size());
  ParallelBranches out;
  out.fork = f;
  std::fill(label.begin() + f + 1, label.end(), kOutside);
  for (int x = f + 1; x < L && out.join < 0; ++x) {
    int seen = kOutside;  // the one side x depends on so far
    bool join = false;
    for (int q : g.layers[x].inputs) {
      const int side = q == f ? kFork : q > f ? label[q] : kOutside;
      if (side == kOutside || side == seen) continue;
      join = join || seen != kOutside;
      seen = side;
    }
    if (join) {
      out.join = x;
    } else if (seen == kFork) {  // a reader of the fork starts a branch
      label[x] = static_cast<int>(out.branches.size());
      out.branches.push_back({x});
    } else if (seen >= 0) {
      label[x] = seen;
      out.branches[seen].push_back(x);
    }
  }
  return out;
}

}  // namespace

std::vector<ParallelBranches> parallel_branches(const LayerGraph& g) {
  const int L = static_cast<int>(g.layers.size());
  std::vector<int> label(L, kOutside);
  const std::vector<std::vector<int>> readers = g.consumers();  // a layer reading an input twice is one reader
  std::vector<ParallelBranches> out;
  for (int f = 0; f < L; ++f) {
    if (readers[f].size() < 2) continue;
    ParallelBranches b = branches_of(g, f, label);
    if (b.branches.size() >= 2) out.push_back(std::move(b));
  }
  return out;
}

int group_holding(const ParallelBranches& fork, const std::vector<int>& layer_group) {
  const int g = layer_group[fork.fork];
  for (const std::vector<int>& branch : fork.branches)
    for (int l : branch)
      if (layer_group[l] != g) return -1;
  return g;
}

}  // namespace tapp
