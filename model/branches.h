// model/branches.h — the parallel branches of a layer graph.
//
// Owns `parallel_branches`: for every fork (a layer read by two or more
// layers), the branches that start at its readers and run side by side until
// they meet (the join: the first layer that reads two of them, or one of them
// and the fork itself). A branch is the layers after the fork that depend, up
// to the join, on one reader's side only: an Inception block's towers, a
// residual block's body and its downsampling shortcut, a transformer's
// q / k / v projections. Nested forks stay inside their branch. Only forks
// with two or more non-empty branches are listed: a branch-parallel placement
// puts them on different devices, which planners over the layer chain cannot.
// Data flow: LayerGraph (topological order) -> forks -> branches, O(L) per fork.
// Thread safety: a pure function.
#pragma once

#include <vector>

namespace tapp {

struct LayerGraph;

struct ParallelBranches {
  int fork = -1;  // the layer the branches read
  int join = -1;  // the first layer reading two of them (-1: they never meet)
  std::vector<std::vector<int>> branches;  // each branch's layers, ascending; branches by first layer
};

std::vector<ParallelBranches> parallel_branches(const LayerGraph& g);

// The group (per layer in `layer_group`) holding the fork and every layer of
// its branches, or -1 where they are not all in one.
int group_holding(const ParallelBranches& fork, const std::vector<int>& layer_group);

}  // namespace tapp
