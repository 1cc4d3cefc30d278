#include "runtime/cost_model.h"

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "profiler/layer_graph.h"
#include "profiler/layer_library.h"
#include "runtime/cluster.h"

namespace tapp {
using nlohmann::json;

json calibration_to_json(const Calibration& c) {
  return {{"device_factor", c.device_factor},         {"task_overhead_ms", c.task_overhead_ms},
          {"layer_overhead_ms", c.layer_overhead_ms}, {"message_overhead_ms", c.message_overhead_ms},
          {"wire_factor", c.wire_factor},             {"step_overhead_ms", c.step_overhead_ms},
          {"update_ms_per_param_mb", c.update_ms_per_param_mb}};
}

Result<Calibration> calibration_from_json(const json& j) {
  if (!j.is_object()) return Status::error("calibration: expected an object");
  Calibration c;
  try {
    if (j.contains("device_factor")) c.device_factor = j.at("device_factor").get<std::vector<double>>();
    auto num = [&](const char* key, double& out) -> Status {
      if (!j.contains(key)) return Status::ok();
      if (!j.at(key).is_number()) return Status::error(std::string("calibration.") + key + ": expected a number");
      out = j.at(key).get<double>();
      if (!std::isfinite(out) || out < 0)
        return Status::error(std::string("calibration.") + key + ": must be a finite number >= 0");
      return Status::ok();
    };
    for (auto [key, ptr] : {std::pair<const char*, double*>{"task_overhead_ms", &c.task_overhead_ms},
                            {"layer_overhead_ms", &c.layer_overhead_ms},
                            {"message_overhead_ms", &c.message_overhead_ms},
                            {"wire_factor", &c.wire_factor},
                            {"step_overhead_ms", &c.step_overhead_ms},
                            {"update_ms_per_param_mb", &c.update_ms_per_param_mb}})
      if (Status s = num(key, *ptr); !s) return s;
  } catch (const json::exception& e) {
    return Status::error(std::string("calibration.device_factor: expected an array of numbers (") + e.what() + ")");
  }
  for (size_t i = 0; i < c.device_factor.size(); ++i)
    if (!(c.device_factor[i] > 0))
      return Status::error("calibration.device_factor[" + std::to_string(i) + "]: must be > 0");
  return c;
}

namespace {

const LayerLibrary* pick_library(const Device& d, const std::vector<LayerLibrary>& libs) {
  const LayerLibrary* best = nullptr;
  for (const LayerLibrary& lib : libs) {
    if (lib.device_kind != d.kind) continue;
    if (!best || std::abs(lib.threads - d.threads) < std::abs(best->threads - d.threads)) best = &lib;
  }
  if (best) return best;
  // No library of this kind: fall back to the first one (scaled by speed and threads).
  return libs.empty() ? nullptr : &libs.front();
}

}  // namespace

Result<CostModel> CostModel::build(const LayerGraph& g, const Cluster& c, const LayerLibrary& library,
                                   const Calibration& calibration) {
  return build(g, c, std::vector<LayerLibrary>{library}, calibration);
}

Result<CostModel> CostModel::build(const LayerGraph& g, const Cluster& c, const std::vector<LayerLibrary>& libs,
                                   const Calibration& calibration) {
  if (libs.empty()) return Status::error("cost model: no layer library");
  if (c.devices.empty()) return Status::error("cluster.devices: must not be empty");
  if (g.layers.empty()) return Status::error("cost model: the model has no layers");
  for (size_t i = 0; i < libs.size(); ++i) {
    if (libs[i].rows.size() != g.layers.size())
      return Status::error("layer library " + std::to_string(i) + " ('" + libs[i].model + "') has " +
                           std::to_string(libs[i].rows.size()) + " rows, the model '" + g.name + "' has " +
                           std::to_string(g.layers.size()) + " layers");
    if (libs[i].batch_size < 1)
      return Status::error("layer library " + std::to_string(i) + ": batch_size must be at least 1");
  }
  CostModel m;
  m.num_devices_ = c.num_devices();
  m.num_layers_ = static_cast<int>(g.layers.size());
  m.calibration_ = calibration;
  const size_t L = g.layers.size(), D = c.devices.size();
  m.fwd_per_sample_.assign(D * L, 0);
  m.bwd_per_sample_.assign(D * L, 0);
  for (size_t d = 0; d < D; ++d) {
    const Device& dev = c.devices[d];
    if (!(dev.speed > 0 && dev.speed <= 1))
      return Status::error("devices[" + std::to_string(d) + "].speed: must be in (0, 1]");
    const LayerLibrary* lib = pick_library(dev, libs);
    double threads_ratio = static_cast<double>(std::max(1, lib->threads)) / std::max(1, dev.threads);
    double scale = threads_ratio / dev.speed / static_cast<double>(lib->batch_size);
    for (size_t l = 0; l < L; ++l) {
      m.fwd_per_sample_[d * L + l] = lib->rows[l].forward_ms * scale;
      m.bwd_per_sample_[d * L + l] = lib->rows[l].backward_ms * scale;
    }
  }
  m.latency_ms_.assign(D * D, 0);
  m.ms_per_byte_.assign(D * D, 0);
  for (size_t a = 0; a < D; ++a)
    for (size_t b = 0; b < D; ++b) {
      if (a == b) continue;
      const Link& link = c.link(static_cast<int>(a), static_cast<int>(b));
      if (!(link.bandwidth_mbps > 0))
        return Status::error("link " + c.devices[a].name + " -> " + c.devices[b].name +
                             ": bandwidth_mbps must be > 0");
      m.latency_ms_[a * D + b] = link.latency_ms;
      m.ms_per_byte_[a * D + b] = 8.0 / (link.bandwidth_mbps * 1e6) * 1e3;
    }
  m.act_prefix_.assign(L + 1, 0);
  for (size_t l = 0; l < L; ++l) m.act_prefix_[l + 1] = m.act_prefix_[l] + g.layers[l].activation_bytes();
  for (const Device& d : c.devices) {
    m.device_names_.push_back(d.name);
    m.inv_speed_.push_back(1.0 / d.speed);
  }
  m.rebuild_prefix();
  return m;
}

void CostModel::rebuild_prefix() {
  const size_t L = num_layers_, D = num_devices_;
  fwd_prefix_.assign(D * (L + 1), 0);
  bwd_prefix_.assign(D * (L + 1), 0);
  for (size_t d = 0; d < D; ++d) {
    double f = calibration_.factor(static_cast<int>(d));
    for (size_t l = 0; l < L; ++l) {
      fwd_prefix_[d * (L + 1) + l + 1] = fwd_prefix_[d * (L + 1) + l] + fwd_per_sample_[d * L + l] * f;
      bwd_prefix_[d * (L + 1) + l + 1] = bwd_prefix_[d * (L + 1) + l] + bwd_per_sample_[d * L + l] * f;
    }
  }
}

double CostModel::raw_compute_ms(int device, int first, int last, int64_t samples, bool backward) const {
  const std::vector<double>& v = backward ? bwd_per_sample_ : fwd_per_sample_;
  double sum = 0;
  for (int l = first; l <= last; ++l) sum += v[static_cast<size_t>(device) * num_layers_ + l];
  return sum * static_cast<double>(samples);
}

double CostModel::layer_forward_ms_per_sample(int device, int layer) const {
  return fwd_per_sample_[static_cast<size_t>(device) * num_layers_ + layer] * calibration_.factor(device);
}
double CostModel::layer_backward_ms_per_sample(int device, int layer) const {
  return bwd_per_sample_[static_cast<size_t>(device) * num_layers_ + layer] * calibration_.factor(device);
}

CostModel CostModel::with_calibration(const Calibration& calibration) const {
  CostModel m = *this;
  m.calibration_ = calibration;
  m.rebuild_prefix();
  return m;
}

}  // namespace tapp
