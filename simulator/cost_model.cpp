#include "simulator/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/json_fields.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "core/cluster.h"
#include "core/placement.h"

namespace tapp {

Calibration default_calibration() {
  Calibration c;
  c.task_overhead_ms = 0.2;
  c.layer_overhead_ms = 0.05;
  c.message_overhead_ms = 0.2;
  // SGD with momentum over 30 and 120 MB of parameters on one thread of this machine:
  // 0.165 ms per MB (torch.optim.SGD(momentum=0.9).step(), 10 steps after 3 warm-up).
  c.update_ms_per_param_mb = 0.165;
  return c;
}

using nlohmann::json;

// Every number of a Calibration by its JSON key, beside "device_factor": the one list that
// writing, reading and the unknown-field check go by.
constexpr std::pair<const char*, double Calibration::*> kCalibrationNumbers[] = {
    {"task_overhead_ms", &Calibration::task_overhead_ms},
    {"layer_overhead_ms", &Calibration::layer_overhead_ms},
    {"message_overhead_ms", &Calibration::message_overhead_ms},
    {"wire_factor", &Calibration::wire_factor},
    {"step_overhead_ms", &Calibration::step_overhead_ms},
    {"update_ms_per_param_mb", &Calibration::update_ms_per_param_mb},
    {"message_ms_per_mb", &Calibration::message_ms_per_mb},
    {"concurrency_slowdown", &Calibration::concurrency_slowdown},
    {"backward_extra", &Calibration::backward_extra},
    {"first_task_overhead_ms", &Calibration::first_task_overhead_ms}};

json calibration_to_json(const Calibration& c) {
  json j = {{"device_factor", c.device_factor}};
  for (const auto& [key, member] : kCalibrationNumbers) j[key] = c.*member;
  return j;
}

Result<Calibration> calibration_from_json(const json& j) {
  if (!j.is_object()) return Status::error("calibration: expected an object");
  // Another kind of file (a model, a cluster) given as a calibration is refused, not read as the defaults.
  std::vector<const char*> known = {"device_factor"};
  for (const auto& number : kCalibrationNumbers) known.push_back(number.first);
  if (Status s = json_fields::known_fields(j, "calibration", known); !s) return s;
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
    for (const auto& [key, member] : kCalibrationNumbers)
      if (Status s = num(key, c.*member); !s) return s;
  } catch (const json::exception& e) {
    return Status::error(std::string("calibration.device_factor: expected an array of numbers (") + e.what() + ")");
  }
  for (size_t i = 0; i < c.device_factor.size(); ++i)
    if (!(c.device_factor[i] > 0))
      return Status::error("calibration.device_factor[" + std::to_string(i) + "]: must be > 0");
  return c;
}

namespace {

// The libraries of the device's kind with the nearest thread count (any kind
// when none matches), one per batch size (the last given wins), ascending.
std::vector<const LayerLibrary*> pick_libraries(const Device& d, const std::vector<LayerLibrary>& libs) {
  bool kind_known = false;
  for (const LayerLibrary& lib : libs) kind_known = kind_known || lib.device_kind == d.kind;
  const std::string& kind = kind_known ? d.kind : libs.front().device_kind;
  int threads = -1;
  for (const LayerLibrary& lib : libs)
    if (lib.device_kind == kind && (threads < 0 || std::abs(lib.threads - d.threads) < std::abs(threads - d.threads)))
      threads = lib.threads;
  std::vector<const LayerLibrary*> out;
  for (const LayerLibrary& lib : libs) {
    if (lib.device_kind != kind || lib.threads != threads) continue;
    auto same = std::find_if(out.begin(), out.end(), [&](const LayerLibrary* o) { return o->batch_size == lib.batch_size; });
    if (same != out.end())
      *same = &lib;
    else
      out.push_back(&lib);
  }
  std::sort(out.begin(), out.end(), [](const LayerLibrary* a, const LayerLibrary* b) { return a->batch_size < b->batch_size; });
  return out;
}

}  // namespace

Result<CostModel> CostModel::build(const LayerGraph& g, const Cluster& c, const LayerLibrary& library,
                                   const Calibration& calibration) {
  return build(g, c, std::vector<LayerLibrary>{library}, calibration);
}

Result<CostModel> CostModel::build(const LayerGraph& g, const Cluster& c, const std::vector<LayerLibrary>& libs,
                                   const Calibration& calibration) {
  return build(g, c, libs, {}, calibration);
}

namespace {

Status check_libraries(const LayerGraph& g, const std::vector<LayerLibrary>& libs, const std::string& whose) {
  for (size_t i = 0; i < libs.size(); ++i) {
    if (libs[i].rows.size() != g.layers.size())
      return Status::error(whose + "layer library " + std::to_string(i) + " ('" + libs[i].model + "') has " +
                           std::to_string(libs[i].rows.size()) + " rows, the model '" + g.name + "' has " +
                           std::to_string(g.layers.size()) + " layers");
    if (libs[i].batch_size < 1)
      return Status::error(whose + "layer library " + std::to_string(i) + ": batch_size must be at least 1");
  }
  return Status::ok();
}

}  // namespace

Result<CostModel> CostModel::build(const LayerGraph& g, const Cluster& c, const std::vector<LayerLibrary>& libs,
                                   const std::vector<std::vector<LayerLibrary>>& own, const Calibration& calibration) {
  auto has_own = [&](size_t d) { return d < own.size() && !own[d].empty(); };
  bool every_device_has_own = !c.devices.empty();
  for (size_t d = 0; d < c.devices.size(); ++d) every_device_has_own = every_device_has_own && has_own(d);
  if (libs.empty() && !every_device_has_own) return Status::error("cost model: no layer library");
  if (c.devices.empty()) return Status::error("cluster.devices: must not be empty");
  if (g.layers.empty()) return Status::error("cost model: the model has no layers");
  if (Status s = check_libraries(g, libs, ""); !s) return s;
  for (size_t d = 0; d < c.devices.size() && d < own.size(); ++d)
    if (Status s = check_libraries(g, own[d], "devices[" + std::to_string(d) + "] (" + c.devices[d].name + "): "); !s)
      return s;
  CostModel m;
  m.num_devices_ = c.num_devices();
  m.num_layers_ = static_cast<int>(g.layers.size());
  m.calibration_ = calibration;
  const size_t L = g.layers.size(), D = c.devices.size();
  m.devices_.resize(D);
  for (size_t d = 0; d < D; ++d) {
    const Device& dev = c.devices[d];
    if (!(dev.speed > 0) || !std::isfinite(dev.speed))
      return Status::error("devices[" + std::to_string(d) + "].speed: must be a positive number");
    DeviceCosts& dc = m.devices_[d];
    // A layer never gets cheaper with more samples: a noisy profile at a larger
    // batch that measured less than a smaller one is raised to it (running max).
    std::vector<double> last_f(L, 0), last_b(L, 0);
    for (const LayerLibrary* lib : pick_libraries(dev, has_own(d) ? own[d] : libs)) {
      double scale = static_cast<double>(std::max(1, lib->threads)) / std::max(1, dev.threads) / dev.speed;
      std::vector<double> f(L + 1, 0), b(L + 1, 0);
      for (size_t l = 0; l < L; ++l) {
        last_f[l] = std::max(last_f[l], lib->rows[l].forward_ms * scale);
        last_b[l] = std::max(last_b[l], lib->rows[l].backward_ms * scale);
        f[l + 1] = f[l] + last_f[l];
        b[l + 1] = b[l] + last_b[l];
      }
      dc.batch.push_back(lib->batch_size);
      dc.fwd.push_back(std::move(f));
      dc.bwd.push_back(std::move(b));
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
  m.price_links();
  m.act_prefix_.assign(L + 1, 0);
  for (size_t l = 0; l < L; ++l) m.act_prefix_[l + 1] = m.act_prefix_[l] + kept_bytes_per_sample(g.layers[l]);
  for (const Device& d : c.devices) {
    m.device_names_.push_back(d.name);
    m.inv_speed_.push_back(1.0 / d.speed);
    m.is_local_.push_back(d.is_local());
  }
  return m;
}

double CostModel::raw_ms(int device, int first, int last, int64_t samples, bool backward) const {
  const DeviceCosts& dc = devices_[device];
  const auto& P = backward ? dc.bwd : dc.fwd;
  auto at = [&](size_t k) { return P[k][last + 1] - P[k][first]; };
  const size_t n = dc.batch.size();
  const double b = static_cast<double>(samples);
  if (n == 1 || samples <= dc.batch[0]) return at(0) * b / static_cast<double>(dc.batch[0]);
  size_t k = 1;
  while (k + 1 < n && dc.batch[k] < samples) ++k;
  // Between (or, above the largest, on the line through) points k-1 and k.
  double b0 = static_cast<double>(dc.batch[k - 1]), b1 = static_cast<double>(dc.batch[k]);
  double t0 = at(k - 1), t1 = at(k);
  double slope = (t1 - t0) / (b1 - b0);
  if (b > b1) {
    // Extrapolating: the marginal cost per sample is at least its average over
    // all profiled sizes, so one noisy point near the top cannot flatten it.
    double bf = static_cast<double>(dc.batch.front());
    slope = std::max(slope, (t1 - at(0)) / (b1 - bf));
    return std::max(0.0, t1 + slope * (b - b1));
  }
  return std::max(0.0, t0 + slope * (b - b0));
}

double CostModel::ring_allreduce_ms(const std::vector<int>& devices, int64_t bytes) const {
  const int r = static_cast<int>(devices.size());
  if (r < 2) return 0;
  const int64_t chunk = (bytes + r - 1) / r;
  double slowest = 0;
  for (int k = 0; k < r; ++k) slowest = std::max(slowest, transfer_ms(devices[k], devices[(k + 1) % r], chunk));
  return 2.0 * (r - 1) * slowest;
}

// (latency + bytes / bandwidth) x wire_factor + message overhead + bytes x its
// per-MB price, as one affine function of the bytes per link: the simulator
// prices every transfer task with it.
void CostModel::price_links() {
  const Calibration& c = calibration_;
  transfer_fixed_ms_.resize(latency_ms_.size());
  transfer_ms_per_byte_.resize(ms_per_byte_.size());
  for (size_t k = 0; k < latency_ms_.size(); ++k) {
    transfer_fixed_ms_[k] = latency_ms_[k] * c.wire_factor + c.message_overhead_ms;
    transfer_ms_per_byte_[k] = ms_per_byte_[k] * c.wire_factor + c.message_ms_per_mb / 1e6;
  }
}

CostModel CostModel::with_calibration(const Calibration& calibration) const {
  CostModel m = *this;
  m.calibration_ = calibration;
  m.price_links();
  return m;
}

}  // namespace tapp
