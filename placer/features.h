// placer/features.h — the TAPP paper's feature encoding of layers and groups (section 4.1, 4.2),
// and what the networks see of a cluster, so one network serves any model and cluster.
//
// Owns `OpDictionary` (op class -> 16-wide code, the same for every model)
// and the encoders:
//   layer row  = [op code (16) | params MB (4) | GFLOPs (4) | activation MB (4) | next ids (2)]
//   group row  = [mean of its layers' rows (30) | position, share of groups fed, feeds the
//                 next, non-empty (4) | its GFLOPs, params MB, MB sent out (4 each) |
//                 share of the model's FLOPs and params (2)]  — 48, whatever G
//   device row = [compute share, log compute, memory against the model's state,
//                 threads, GPU, log mean bandwidth, log mean latency, position
//                 k/(D-1) in the cluster's order (tells identical devices apart)]  — 8
// (the allocation network's per-(group, device) inputs are built in policy.cpp
// from these and the devices already chosen: placer/policy.h).
// Scalars are encoded as a 4-wide log-scale thermometer (see encode_metric).
// Next-layer ids are 1-based layer numbers divided by the number of layers,
// -0.1 where a layer has fewer than two consumers.
// kPolicyFeatureVersion names this encoding; a saved policy of another is refused.
// Data flow: LayerGraph -> encode_layers -> policy (partition network);
//            layer rows + sampled partition -> encode_groups -> allocation network;
//            Cluster -> device_traits -> encode_devices -> allocation network.
// No LibTorch here: rows are plain float vectors (row-major).
// Thread safety: OpDictionary is mutable state owned by one search; the
// encoders are pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tapp {

struct LayerGraph;
struct Cluster;

constexpr int kOpCodeWidth = 16;
constexpr int kMetricWidth = 4;
constexpr int kNextLayers = 2;
constexpr int kLayerFeatureWidth = kOpCodeWidth + 3 * kMetricWidth + kNextLayers;  // 30
constexpr float kNoNextLayer = -0.1f;
constexpr int kGroupFeatureWidth = kLayerFeatureWidth + 4 + 3 * kMetricWidth + 2;  // 48
constexpr int kDeviceFeatureWidth = 8;
// Version of everything a trained policy's weights depend on: these widths and
// meanings, the op codes and the networks' shapes (placer/policy.cpp).
// 7: the stage-count head; 8: the replica balance (placer/policy.h); 9 was a
// stage-count prior tried and reverted (docs/transfer.md); 10: link pair
// features count each direction of an asymmetric link once; 11: the
// stage-count prior sizes stages by the devices the allocation gives them;
// 12: and by their replicas.
constexpr int kPolicyFeatureVersion = 12;

// Op name -> code vector. Starts with the paper's five (Convolution, Relu,
// Pooling, Fully-Connected, Padding) and Unknown, then every other op class of
// model/layer_graph.h in a fixed order, so a class has the same code in every
// model (a trained policy depends on it); an unseen name gets the next free code.
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

// Per layer, per sample: what the group and pair features sum.
struct LayerTotals {
  std::vector<double> gflops, params_mb, output_mb;
  // Per layer its forward + backward time on the cluster's devices (the cost
  // model's, summed over them; empty = unknown): where the compute positions
  // of placer/policy.h are measured, since FLOPs misjudge memory-bound layers.
  std::vector<double> time_ms;
  double total_gflops() const;
  double total_params_mb() const;
};
LayerTotals layer_totals(const LayerGraph& graph);
// Per layer: the share of the model's compute done before its middle, in
// [0, 1] (layer order): by the cost model's time where known, else by FLOPs;
// the relative depth where both are unknown or zero.
std::vector<double> compute_positions(const LayerTotals& totals, int L);

// What the allocation network sees of a cluster (index = device index).
struct DeviceTraits {
  std::vector<double> compute;    // speed x threads
  std::vector<double> memory_mb;
  std::vector<bool> gpu;
  std::vector<int> threads;
  std::vector<double> link_mbps, link_latency_ms;  // D x D, [from * D + to]
  int size() const { return static_cast<int>(compute.size()); }
};
DeviceTraits device_traits(const Cluster& cluster);
// D identical devices (speed 1, one thread, 4 GB, 10 Gbit/s links): a policy built without a cluster.
DeviceTraits uniform_devices(int num_devices);

// One row per device (kDeviceFeatureWidth); model_state_mb scales the memory column.
FeatureMatrix encode_devices(const DeviceTraits& devices, double model_state_mb);

// What the layers of each group of one partition add up to; `totals` may be
// empty (the sums read as zero; `feeds` is always filled).
struct GroupTotals {
  int groups = 0;
  std::vector<double> gflops, params_mb;
  std::vector<double> sent_mb;      // outputs another group reads, each once
  std::vector<double> received_mb;  // G x G, [from * G + to]: outputs `to` reads from `from`, each once
  std::vector<char> feeds;          // G x G: a layer of `from` feeds a layer of `to`
};
GroupTotals group_totals(const LayerTotals& totals, const std::vector<int>& layer_group, int num_groups,
                         const std::vector<std::vector<int>>& consumers);

// One row per group 0..num_groups-1 (kGroupFeatureWidth): the mean of its
// layers' rows (zeros when the group is empty), then its summaries; `totals`
// may be empty (its sums read as zero).
FeatureMatrix encode_groups(const FeatureMatrix& layer_rows, const std::vector<int>& layer_group,
                            int num_groups, const std::vector<std::vector<int>>& consumers,
                            const LayerTotals& totals = {});
// The same from the partition's group totals (computed once for the policy's other uses).
FeatureMatrix encode_groups(const FeatureMatrix& layer_rows, const std::vector<int>& layer_group,
                            const GroupTotals& groups);

}  // namespace tapp
