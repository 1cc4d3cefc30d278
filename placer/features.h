// placer/features.h — the TAPP paper's feature encoding of layers and groups (section 4.1, 4.2).
//
// Owns `OpDictionary` (op name -> 16-wide code, growing as new names appear)
// and the encoders:
//   layer row = [op code (16) | params MB (4) | GFLOPs (4) | activation MB (4) | next ids (2)]
//   group row = [mean of its layers' rows (30) | one-hot of the groups it feeds (G)]
// Scalars are encoded as a 4-wide log-scale thermometer (see encode_metric).
// Next-layer ids are 1-based layer numbers divided by the number of layers,
// -0.1 where a layer has fewer than two consumers.
// Data flow: LayerGraph -> encode_layers -> policy (partition network);
//            layer rows + sampled partition -> encode_groups -> allocation network.
// No LibTorch here: rows are plain float vectors (row-major).
// Thread safety: OpDictionary is mutable state owned by one search; the
// encoders are pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tapp {

struct LayerGraph;

constexpr int kOpCodeWidth = 16;
constexpr int kMetricWidth = 4;
constexpr int kNextLayers = 2;
constexpr int kLayerFeatureWidth = kOpCodeWidth + 3 * kMetricWidth + kNextLayers;  // 30
constexpr float kNoNextLayer = -0.1f;

// Op name -> code vector. Starts with the paper's five (Convolution, Relu,
// Pooling, Fully-Connected, Padding) and Unknown; any other op class gets the
// next free code the first time it is seen.
class OpDictionary {
 public:
  OpDictionary();
  // The code of `op_class_name`, adding it when new.
  const std::vector<float>& code(const std::string& op_class_name);
  int size() const { return static_cast<int>(codes_.size()); }
  bool contains(const std::string& name) const { return codes_.count(name) > 0; }

 private:
  std::map<std::string, std::vector<float>> codes_;
};

// 4-wide log-scale thermometer of a non-negative scalar: unit k is
// clamp(log10(value) - (k - 2) + 1, 0, 1) for k = 0..3, i.e. it fills between
// 0.01 and 100 (of MB or GFLOPs).
std::vector<float> encode_metric(double value);

struct FeatureMatrix {
  int rows = 0, cols = 0;
  std::vector<float> data;  // rows * cols, row-major
  float at(int r, int c) const { return data[static_cast<size_t>(r) * cols + c]; }
};

// One row per layer of an inferred graph (per-sample params, FLOPs, activations).
FeatureMatrix encode_layers(const LayerGraph& graph, OpDictionary& dictionary);

// One row per group 0..num_groups-1: mean of its layers' rows (zeros when the
// group is empty) then a one-hot (width num_groups) of the other groups its
// layers feed.
FeatureMatrix encode_groups(const FeatureMatrix& layer_rows, const std::vector<int>& layer_group,
                            int num_groups, const std::vector<std::vector<int>>& consumers);

}  // namespace tapp
