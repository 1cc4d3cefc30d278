// placer/features.cpp — see features.h.
#include "placer/features.h"

#include <algorithm>
#include <cmath>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"

namespace tapp {

namespace {
// Code number k (0-based): one-hot for the first 16, then a sparse binary
// pattern of k + 1 so that later names stay distinct.
std::vector<float> code_for_index(int k) {
  std::vector<float> v(kOpCodeWidth, 0.f);
  if (k < kOpCodeWidth) {
    v[k] = 1.f;
  } else {
    unsigned bits = static_cast<unsigned>(k + 1);
    for (int b = 0; b < kOpCodeWidth && bits; ++b, bits >>= 1) v[b] = (bits & 1u) ? 0.5f : 0.f;
  }
  return v;
}
}  // namespace

OpDictionary::OpDictionary() {
  // The paper's five and Unknown first, then model/layer_graph.h's other classes: fixed codes.
  for (const char* name : {"Convolution", "Relu", "Pooling", "Fully-Connected", "Padding", "Unknown", "Activation",
                           "Add", "Attention", "Concat", "Dropout", "Embedding", "Flatten", "Identity",
                           "Normalization", "Recurrent"})
    code(name);
}

const std::vector<float>& OpDictionary::code(const std::string& name) {
  auto it = codes_.find(name);
  if (it != codes_.end()) return it->second;
  int k = static_cast<int>(codes_.size());
  return codes_.emplace(name, code_for_index(k)).first->second;
}

std::vector<float> encode_metric(double value) {
  std::vector<float> v(kMetricWidth, 0.f);
  if (!(value > 0)) return v;
  double lg = std::log10(value);
  for (int k = 0; k < kMetricWidth; ++k)
    v[k] = static_cast<float>(std::clamp(lg - (k - 2) + 1.0, 0.0, 1.0));
  return v;
}

FeatureMatrix encode_layers(const LayerGraph& graph, OpDictionary& dictionary) {
  FeatureMatrix m;
  m.rows = static_cast<int>(graph.layers.size());
  m.cols = kLayerFeatureWidth;
  m.data.assign(static_cast<size_t>(m.rows) * m.cols, 0.f);
  auto consumers = graph.consumers();
  const double n = std::max(1, m.rows);
  for (int i = 0; i < m.rows; ++i) {
    const Layer& l = graph.layers[i];
    float* row = &m.data[static_cast<size_t>(i) * m.cols];
    const auto& code = dictionary.code(op_class(l.op));
    std::copy(code.begin(), code.end(), row);
    const double metrics[3] = {static_cast<double>(l.param_bytes()) / 1e6, 2.0 * static_cast<double>(l.macs) / 1e9,
                               static_cast<double>(l.activation_bytes()) / 1e6};
    for (int k = 0; k < 3; ++k) {
      auto enc = encode_metric(metrics[k]);
      std::copy(enc.begin(), enc.end(), row + kOpCodeWidth + k * kMetricWidth);
    }
    float* next = row + kOpCodeWidth + 3 * kMetricWidth;
    for (int k = 0; k < kNextLayers; ++k)
      next[k] = k < static_cast<int>(consumers[i].size()) ? static_cast<float>((consumers[i][k] + 1) / n)
                                                          : kNoNextLayer;
  }
  return m;
}

double LayerTotals::total_gflops() const {
  double t = 0;
  for (double v : gflops) t += v;
  return t;
}

double LayerTotals::total_params_mb() const {
  double t = 0;
  for (double v : params_mb) t += v;
  return t;
}

std::vector<double> compute_positions(const LayerTotals& totals, int L) {
  const bool timed = totals.time_ms.size() == static_cast<size_t>(L);
  const std::vector<double>& work = timed ? totals.time_ms : totals.gflops;
  double total = 0;
  if (work.size() == static_cast<size_t>(L))
    for (double w : work) total += std::max(0.0, w);
  std::vector<double> at(static_cast<size_t>(L));
  double before = 0;
  for (int i = 0; i < L; ++i) {
    if (!(total > 0)) {
      at[i] = L > 1 ? static_cast<double>(i) / (L - 1) : 0.0;
      continue;
    }
    const double w = std::max(0.0, work[i]);
    at[i] = std::clamp((before + 0.5 * w) / total, 0.0, 1.0);
    before += w;
  }
  return at;
}

LayerTotals layer_totals(const LayerGraph& graph) {
  LayerTotals t;
  for (const Layer& l : graph.layers) {
    t.gflops.push_back(2.0 * static_cast<double>(l.macs) / 1e9);
    t.params_mb.push_back(static_cast<double>(l.param_bytes()) / 1e6);
    t.output_mb.push_back(static_cast<double>(l.activation_bytes()) / 1e6);
  }
  return t;
}

DeviceTraits device_traits(const Cluster& cluster) {
  DeviceTraits t;
  const int D = cluster.num_devices();
  for (const Device& d : cluster.devices) {
    t.compute.push_back(d.speed * std::max(1, d.threads));
    t.memory_mb.push_back(static_cast<double>(device_memory_bytes(d)) / 1e6);
    t.gpu.push_back(cuda_index(d.kind).has_value());
    t.threads.push_back(d.threads);
  }
  t.link_mbps.assign(static_cast<size_t>(D) * D, 0.0);
  t.link_latency_ms.assign(static_cast<size_t>(D) * D, 0.0);
  for (int a = 0; a < D; ++a)
    for (int b = 0; b < D; ++b) {
      if (a == b) continue;
      const Link& l = cluster.link(a, b);
      t.link_mbps[static_cast<size_t>(a) * D + b] = l.bandwidth_mbps;
      t.link_latency_ms[static_cast<size_t>(a) * D + b] = l.latency_ms;
    }
  return t;
}

DeviceTraits uniform_devices(int num_devices) {
  Cluster c;
  for (int k = 0; k < std::max(1, num_devices); ++k) c.devices.push_back(Device{"d" + std::to_string(k)});
  return device_traits(c);
}

FeatureMatrix encode_devices(const DeviceTraits& devices, double model_state_mb) {
  FeatureMatrix m;
  const int D = devices.size();
  m.rows = D;
  m.cols = kDeviceFeatureWidth;
  m.data.assign(static_cast<size_t>(D) * m.cols, 0.f);
  double total = 0;
  for (double c : devices.compute) total += c;
  for (int k = 0; k < D; ++k) {
    double bw = 0, lat = 0;
    for (int j = 0; j < D; ++j)
      if (j != k) {
        bw += devices.link_mbps[static_cast<size_t>(k) * D + j];
        lat += devices.link_latency_ms[static_cast<size_t>(k) * D + j];
      }
    const double others = std::max(1, D - 1);
    float* row = &m.data[static_cast<size_t>(k) * m.cols];
    row[0] = static_cast<float>(total > 0 ? devices.compute[k] / total * D : 1.0);  // 1 = an average device
    row[1] = static_cast<float>(std::clamp(std::log10(std::max(1e-3, devices.compute[k])) / 2.0, -2.0, 2.0));
    row[2] = static_cast<float>(
        std::clamp(std::log10(std::max(1e-3, devices.memory_mb[k]) / std::max(1.0, model_state_mb)) / 2.0, -2.0, 2.0));
    row[3] = static_cast<float>(std::min(devices.threads[k], 64) / 16.0);
    row[4] = devices.gpu[k] ? 1.f : 0.f;
    row[5] = static_cast<float>(D > 1 ? std::log10(std::max(1.0, bw / others)) / 5.0 : 0.0);
    row[6] = static_cast<float>(D > 1 ? std::log10(1.0 + lat / others) : 0.0);
    row[7] = static_cast<float>(D > 1 ? static_cast<double>(k) / (D - 1) : 0.0);
  }
  return m;
}

GroupTotals group_totals(const LayerTotals& totals, const std::vector<int>& layer_group, int num_groups,
                         const std::vector<std::vector<int>>& consumers) {
  const int G = num_groups;
  GroupTotals t{G,
                std::vector<double>(G, 0.0),
                std::vector<double>(G, 0.0),
                std::vector<double>(G, 0.0),
                std::vector<double>(static_cast<size_t>(G) * G, 0.0),
                std::vector<char>(static_cast<size_t>(G) * G, 0)};
  const bool sums = totals.gflops.size() == layer_group.size();
  std::vector<int> read_by;  // the other groups reading layer i's output
  for (size_t i = 0; i < layer_group.size(); ++i) {
    const int g = layer_group[i];
    read_by.clear();
    if (i < consumers.size())
      for (int j : consumers[i]) {
        const int h = layer_group[j];
        if (h == g || std::find(read_by.begin(), read_by.end(), h) != read_by.end()) continue;
        read_by.push_back(h);
        t.feeds[static_cast<size_t>(g) * G + h] = 1;
        if (sums) t.received_mb[static_cast<size_t>(g) * G + h] += totals.output_mb[i];
      }
    if (!sums) continue;
    t.gflops[g] += totals.gflops[i];
    t.params_mb[g] += totals.params_mb[i];
    if (!read_by.empty()) t.sent_mb[g] += totals.output_mb[i];
  }
  return t;
}

FeatureMatrix encode_groups(const FeatureMatrix& layer_rows, const std::vector<int>& layer_group, int num_groups,
                            const std::vector<std::vector<int>>& consumers, const LayerTotals& totals) {
  return encode_groups(layer_rows, layer_group, group_totals(totals, layer_group, num_groups, consumers));
}

FeatureMatrix encode_groups(const FeatureMatrix& layer_rows, const std::vector<int>& layer_group,
                            const GroupTotals& groups) {
  const int G = groups.groups;
  FeatureMatrix m;
  m.rows = G;
  m.cols = kGroupFeatureWidth;
  m.data.assign(static_cast<size_t>(m.rows) * m.cols, 0.f);
  const int base = layer_rows.cols;
  std::vector<int> count(G, 0);
  for (int i = 0; i < layer_rows.rows; ++i) {
    const int g = layer_group[i];
    ++count[g];
    float* row = &m.data[static_cast<size_t>(g) * m.cols];
    for (int c = 0; c < base; ++c) row[c] += layer_rows.at(i, c);
  }
  double all_gflops = 0, all_params = 0;
  for (int g = 0; g < G; ++g) all_gflops += groups.gflops[g], all_params += groups.params_mb[g];
  for (int g = 0; g < G; ++g) {
    float* row = &m.data[static_cast<size_t>(g) * m.cols];
    if (count[g] > 0)
      for (int c = 0; c < base; ++c) row[c] /= count[g];
    int fed = 0;
    for (int h = 0; h < G; ++h) fed += groups.feeds[static_cast<size_t>(g) * G + h];
    float* s = row + base;
    s[0] = static_cast<float>(G > 1 ? static_cast<double>(g) / (G - 1) : 0.0);
    s[1] = static_cast<float>(G > 1 ? static_cast<double>(fed) / (G - 1) : 0.0);
    s[2] = g + 1 < G && groups.feeds[static_cast<size_t>(g) * G + g + 1] ? 1.f : 0.f;
    s[3] = count[g] > 0 ? 1.f : 0.f;
    const double metrics[3] = {groups.gflops[g], groups.params_mb[g], groups.sent_mb[g]};
    for (int k = 0; k < 3; ++k) {
      auto enc = encode_metric(metrics[k]);
      std::copy(enc.begin(), enc.end(), s + 4 + k * kMetricWidth);
    }
    s[4 + 3 * kMetricWidth] = static_cast<float>(all_gflops > 0 ? groups.gflops[g] / all_gflops : 0.0);
    s[5 + 3 * kMetricWidth] = static_cast<float>(all_params > 0 ? groups.params_mb[g] / all_params : 0.0);
  }
  return m;
}

}  // namespace tapp
