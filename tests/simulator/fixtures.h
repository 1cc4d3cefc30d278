// tests/simulator/fixtures.h — small hand-built graphs, clusters and placements
// shared by the task-graph and simulator tests.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/placement.h"
#include "model/layer_graph.h"
#include "core/cluster.h"

namespace tapp::test {

// n linear layers of width 8 (32 activation bytes per sample).
inline LayerGraph chain(int n) {
  LayerGraph g;
  g.name = "chain";
  g.input_shape = {8};
  for (int i = 0; i < n; ++i) {
    Layer l;
    l.name = "fc" + std::to_string(i);
    l.op = "linear";
    l.attrs.out = 8;
    if (i > 0) l.inputs = {i - 1};
    g.layers.push_back(l);
  }
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

// Appends a layer (width 8 where it has one) reading the given layers.
inline void add_layer(LayerGraph& g, const std::string& name, const std::string& op, std::vector<int> inputs) {
  Layer l;
  l.name = name;
  l.op = op;
  l.attrs.out = 8;
  l.inputs = std::move(inputs);
  g.layers.push_back(l);
}

// n devices "d0".."d{n-1}" joined by free links (no latency, unbounded bandwidth).
inline Cluster devices(int n) {
  Cluster c;
  for (int i = 0; i < n; ++i) c.devices.push_back(Device{"d" + std::to_string(i)});
  c.default_link.bandwidth_mbps = 1e12;
  c.default_link.latency_ms = 0;
  return c;
}

// Layer i in group layer_device[i], group d on device d.
inline Placement by_device(const std::vector<int>& layer_device, int micro_batches,
                           Schedule s = Schedule::gpipe) {
  Placement p;
  p.layer_group = layer_device;
  for (int d = 0; d <= *std::max_element(layer_device.begin(), layer_device.end()); ++d) p.group_device.push_back(d);
  p.micro_batches = micro_batches;
  p.schedule = s;
  return p;
}

}  // namespace tapp::test
