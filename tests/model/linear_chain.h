// tests/model/linear_chain.h — a chain of linear layers of given widths, shared by the
// core and planner tests (input width 16, shapes inferred).
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/layer_graph.h"

namespace tapp::test {

inline LayerGraph linear_chain(const std::vector<int64_t>& widths) {
  LayerGraph g;
  g.name = "chain";
  g.input_shape = {16};
  for (size_t i = 0; i < widths.size(); ++i) {
    Layer l;
    l.name = "fc" + std::to_string(i);
    l.op = "linear";
    l.attrs.out = widths[i];
    if (i > 0) l.inputs = {static_cast<int>(i) - 1};
    g.layers.push_back(l);
  }
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

}  // namespace tapp::test
