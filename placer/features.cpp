// placer/features.cpp — see features.h.
#include "placer/features.h"

#include <algorithm>
#include <cmath>

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
  for (const char* name : {"Convolution", "Relu", "Pooling", "Fully-Connected", "Padding", "Unknown"}) code(name);
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

FeatureMatrix encode_groups(const FeatureMatrix& layer_rows, const std::vector<int>& layer_group, int num_groups,
                            const std::vector<std::vector<int>>& consumers) {
  FeatureMatrix m;
  m.rows = num_groups;
  m.cols = layer_rows.cols + num_groups;
  m.data.assign(static_cast<size_t>(m.rows) * m.cols, 0.f);
  std::vector<int> count(num_groups, 0);
  for (int i = 0; i < layer_rows.rows; ++i) {
    int g = layer_group[i];
    ++count[g];
    float* row = &m.data[static_cast<size_t>(g) * m.cols];
    for (int c = 0; c < layer_rows.cols; ++c) row[c] += layer_rows.at(i, c);
    if (i < static_cast<int>(consumers.size()))
      for (int j : consumers[i]) {
        int h = layer_group[j];
        if (h != g) row[layer_rows.cols + h] = 1.f;
      }
  }
  for (int g = 0; g < num_groups; ++g)
    if (count[g] > 0)
      for (int c = 0; c < layer_rows.cols; ++c) m.data[static_cast<size_t>(g) * m.cols + c] /= count[g];
  return m;
}

}  // namespace tapp
