#include "simulator/calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/layer_graph.h"
#include "core/cluster.h"
#include "simulator/simulator.h"
#include "simulator/task_graph.h"

namespace tapp {
namespace {

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (i + j) / 2.0 + 1;
    i = j + 1;
  }
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Parameter layout: [factor_0 .. factor_{D-1}, task, layer, message, wire, step, update].
enum Param { kTask = 0, kLayer, kMessage, kWire, kStep, kUpdate, kMessageMb, kConcurrency, kBackward, kFirst, kCount };

// Devices share a factor when they are the same hardware (group_of[d] = factor index).
std::vector<double> to_vector(const Calibration& c, const std::vector<int>& group_of, int D) {
  std::vector<double> x(D + kCount);
  for (int d = static_cast<int>(group_of.size()) - 1; d >= 0; --d) x[group_of[d]] = c.factor(d);
  x[D + kTask] = c.task_overhead_ms;
  x[D + kLayer] = c.layer_overhead_ms;
  x[D + kMessage] = c.message_overhead_ms;
  x[D + kWire] = c.wire_factor;
  x[D + kStep] = c.step_overhead_ms;
  x[D + kUpdate] = c.update_ms_per_param_mb;
  x[D + kMessageMb] = c.message_ms_per_mb;
  x[D + kConcurrency] = c.concurrency_slowdown;
  x[D + kBackward] = c.backward_extra;
  x[D + kFirst] = c.first_task_overhead_ms;
  return x;
}

Calibration from_vector(const std::vector<double>& x, const std::vector<int>& group_of, int D) {
  Calibration c;
  for (int g : group_of) c.device_factor.push_back(x[g]);
  c.task_overhead_ms = x[D + kTask];
  c.layer_overhead_ms = x[D + kLayer];
  c.message_overhead_ms = x[D + kMessage];
  c.wire_factor = x[D + kWire];
  c.step_overhead_ms = x[D + kStep];
  c.update_ms_per_param_mb = x[D + kUpdate];
  c.message_ms_per_mb = x[D + kMessageMb];
  c.concurrency_slowdown = x[D + kConcurrency];
  c.backward_extra = x[D + kBackward];
  c.first_task_overhead_ms = x[D + kFirst];
  return c;
}

// Solves (A^T W A + R) x = A^T W b + R prior with some parameters fixed; small dense Gauss-Jordan.
std::vector<double> solve(const std::vector<std::vector<double>>& rows, const std::vector<double>& rhs,
                          const std::vector<double>& weight, const std::vector<double>& prior,
                          const std::vector<double>& ridge,
                          const std::vector<bool>& fixed, const std::vector<double>& fixed_value) {
  const size_t K = prior.size();
  std::vector<std::vector<double>> M(K, std::vector<double>(K + 1, 0));
  for (size_t r = 0; r < rows.size(); ++r) {
    double b = rhs[r];
    for (size_t k = 0; k < K; ++k)
      if (fixed[k]) b -= rows[r][k] * fixed_value[k];
    double w = weight[r] * weight[r];
    for (size_t i = 0; i < K; ++i) {
      if (fixed[i] || rows[r][i] == 0) continue;
      for (size_t j = 0; j < K; ++j)
        if (!fixed[j]) M[i][j] += w * rows[r][i] * rows[r][j];
      M[i][K] += w * rows[r][i] * b;
    }
  }
  for (size_t k = 0; k < K; ++k) {
    if (fixed[k]) {
      M[k].assign(K + 1, 0);
      M[k][k] = 1;
      M[k][K] = fixed_value[k];
    } else {
      M[k][k] += ridge[k];
      M[k][K] += ridge[k] * prior[k];
    }
  }
  for (size_t c = 0; c < K; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < K; ++r)
      if (std::abs(M[r][c]) > std::abs(M[piv][c])) piv = r;
    std::swap(M[c], M[piv]);
    if (std::abs(M[c][c]) < 1e-15) continue;
    for (size_t r = 0; r < K; ++r) {
      if (r == c) continue;
      double f = M[r][c] / M[c][c];
      if (f == 0) continue;
      for (size_t j = c; j <= K; ++j) M[r][j] -= f * M[c][j];
    }
  }
  std::vector<double> x(K);
  for (size_t k = 0; k < K; ++k) x[k] = std::abs(M[k][k]) < 1e-15 ? prior[k] : M[k][K] / M[k][k];
  return x;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return 0;
  std::vector<double> ra = ranks(std::vector<double>(a.begin(), a.begin() + n));
  std::vector<double> rb = ranks(std::vector<double>(b.begin(), b.begin() + n));
  double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0;
}

AccuracyStats accuracy(const std::vector<double>& predicted, const std::vector<double>& measured) {
  AccuracyStats s;
  std::vector<double> err;
  for (size_t i = 0; i < std::min(predicted.size(), measured.size()); ++i)
    if (measured[i] > 0) err.push_back(std::abs(predicted[i] - measured[i]) / measured[i]);
  s.n = static_cast<int>(err.size());
  if (err.empty()) return s;
  s.median_abs_rel_error = median(err);
  s.mean_abs_rel_error = std::accumulate(err.begin(), err.end(), 0.0) / err.size();
  s.max_abs_rel_error = *std::max_element(err.begin(), err.end());
  s.spearman = spearman(predicted, measured);
  return s;
}

std::vector<double> predict_steps(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch_size,
                                  const std::vector<Placement>& placements) {
  std::vector<double> out;
  Simulator sim(g, c, cost, batch_size);
  for (const Placement& p : placements) {
    StepReport r = sim.evaluate(p, {false});
    out.push_back(r.ok ? r.step_ms : 0);
  }
  return out;
}

Result<CalibrationResult> calibrate(const LayerGraph& g, const Cluster& c, const CostModel& base, int64_t batch_size,
                                    const std::vector<CalibrationSample>& samples, const CalibrationOptions& options) {
  return calibrate(c, {CalibrationWorkload{&g, &base, batch_size, samples}}, options);
}

Result<CalibrationResult> calibrate(const Cluster& c, const std::vector<CalibrationWorkload>& workloads,
                                    const CalibrationOptions& options) {
  if (workloads.empty()) return Status::error("calibration: no workload");
  const CostModel& base = *workloads.front().base;
  const bool tie_identical_devices = options.tie_identical_devices;
  // One compute factor per distinct hardware (kind, threads, host) when tied.
  std::vector<int> group_of(c.num_devices());
  int D = 0;
  for (int d = 0; d < c.num_devices(); ++d) {
    group_of[d] = D;
    if (tie_identical_devices)
      for (int e = 0; e < d; ++e)
        if (c.devices[e].kind == c.devices[d].kind && c.devices[e].threads == c.devices[d].threads &&
            c.devices[e].where == c.devices[d].where) {
          group_of[d] = group_of[e];
          break;
        }
    if (group_of[d] == D) ++D;
  }
  const int K = D + kCount;
  // Every ok sample of every workload, with its task graph and the workload it belongs to.
  std::vector<const CalibrationSample*> used;
  std::vector<TaskGraph> graphs;
  std::vector<size_t> workload_of;
  for (size_t w = 0; w < workloads.size(); ++w) {
    const CalibrationWorkload& wl = workloads[w];
    for (const CalibrationSample& s : wl.samples) {
      if (!s.measured.ok || !(s.measured.step_ms > 0)) continue;
      auto tg = build_task_graph(*wl.graph, s.placement, c, wl.batch_size);
      if (!tg) return tg.status().with_context("calibration sample " + std::to_string(used.size()));
      used.push_back(&s);
      graphs.push_back(std::move(*tg));
      workload_of.push_back(w);
    }
  }
  if (used.empty()) return Status::error("calibration: no successful measured sample");
  CalibrationResult result;
  for (const auto* s : used) result.measured.push_back(s->measured.step_ms);
  std::vector<double> prior = to_vector(base.calibration(), group_of, D);
  std::vector<double> x = prior;
  // Each workload's costs under one calibration (the parameters are shared, the layer costs are not).
  auto costs_under = [&](const Calibration& cal) {
    std::vector<CostModel> costs;
    for (const CalibrationWorkload& wl : workloads) costs.push_back(wl.base->with_calibration(cal));
    return costs;
  };
  auto predict_all = [&](const Calibration& cal) {
    const std::vector<CostModel> costs = costs_under(cal);
    std::vector<double> p;
    for (size_t i = 0; i < graphs.size(); ++i) p.push_back(simulate(graphs[i], costs[workload_of[i]], {false}).step_ms);
    return p;
  };
  result.predicted_before = predict_all(base.calibration());
  result.before = accuracy(result.predicted_before, result.measured);

  // The iterate kept is the one with the lowest median relative error on the
  // samples (robust to a disturbed measurement, like the reported metric).
  double best_err = result.before.median_abs_rel_error;
  Calibration best = base.calibration();
  for (int iter = 0; iter < 8; ++iter) {
    const std::vector<CostModel> costs = costs_under(from_vector(x, group_of, D));
    std::vector<std::vector<double>> rows;
    std::vector<double> rhs, weight;
    for (size_t i = 0; i < graphs.size(); ++i) {
      const TaskGraph& tg = graphs[i];
      const CostModel& cost = costs[workload_of[i]];
      TaskTimes times;
      simulate(tg, cost, {false}, &times);
      std::vector<int64_t> params(c.num_devices(), 0);
      for (const Segment& s : tg.segments)
        for (int d : s.devices) params[d] += s.param_bytes;
      int local_used = 0;
      for (int d = 0; d < c.num_devices(); ++d) local_used += !tg.device_order[d].empty() && cost.is_local(d);
      // Features of one compute task / transfer.
      auto add_task = [&](std::vector<double>& row, int task_id) {
        const Task& t = tg.tasks[task_id];
        if (t.kind == TaskKind::allreduce) {  // 2 (r - 1) ring steps over the slowest ring link
          const std::vector<int>& ring = tg.replicated_groups[t.replicated_group].devices;
          const int r = static_cast<int>(ring.size());
          const int64_t chunk = (t.bytes + r - 1) / r;
          double slowest = 0;
          for (int k = 0; k < r; ++k) slowest = std::max(slowest, cost.wire_ms(ring[k], ring[(k + 1) % r], chunk));
          row[D + kWire] += 2.0 * (r - 1) * slowest;
          row[D + kMessage] += 2.0 * (r - 1);
          row[D + kMessageMb] += 2.0 * (r - 1) * static_cast<double>(chunk) / 1e6;
          return;
        }
        if (t.kind == TaskKind::transfer_activation || t.kind == TaskKind::transfer_gradient) {
          row[D + kWire] += cost.wire_ms(t.device, t.to_device, t.bytes);
          row[D + kMessage] += 1;
          row[D + kMessageMb] += static_cast<double>(t.bytes) / 1e6;
          return;
        }
        const Segment& s = tg.segments[t.segment];
        double raw = cost.raw_compute_ms(t.device, s.layers.front(), s.layers.back(),
                                         tg.micro_batch_sizes[t.micro_batch], t.kind == TaskKind::backward);
        row[group_of[t.device]] += raw;
        if (cost.is_local(t.device)) row[D + kConcurrency] += raw * std::max(0, local_used - 1);
        if (t.kind == TaskKind::backward) row[D + kBackward] += raw;
        if (!tg.device_order[t.device].empty() && tg.device_order[t.device].front() == task_id)
          row[D + kFirst] += cost.inverse_speed(t.device);
        row[D + kTask] += cost.inverse_speed(t.device);
        row[D + kLayer] += static_cast<double>(s.layers.size()) * cost.inverse_speed(t.device);
      };
      // Step time along the critical path.
      std::vector<double> row(K, 0);
      for (int t = times.last_task; t >= 0; t = times.critical_pred[t]) add_task(row, t);
      if (times.last_device >= 0)
        row[D + kUpdate] += params[times.last_device] / 1e6;
      row[D + kStep] = 1;
      rows.push_back(row);
      rhs.push_back(used[i]->measured.step_ms);
      weight.push_back(1.0 / used[i]->measured.step_ms);
      // Busy time of each device over its tasks.
      for (const DeviceStats& ds : used[i]->measured.devices) {
        int d = c.index_of(ds.device);
        if (d < 0 || !(ds.busy_ms > 0) || tg.device_order[d].empty()) continue;
        std::vector<double> brow(K, 0);
        for (int t : tg.device_order[d]) add_task(brow, t);
        brow[D + kUpdate] += params[d] / 1e6;
        rows.push_back(brow);
        rhs.push_back(ds.busy_ms);
        weight.push_back(0.5 / ds.busy_ms);
      }
    }
    // Ridge towards the starting values: factors are dimensionless (a 10% change
    // costs like a 0.5% error on 2 samples), overheads are in ms (weak pull).
    std::vector<double> ridge(K, 1e-5);
    for (int d = 0; d < D; ++d) ridge[d] = 3e-3;
    // Emulated links sleep exactly latency + bytes / bandwidth: the wire factor
    // stays 1 and the real copy cost goes to the per-message and per-MB terms.
    ridge[D + kWire] = 1e3;
    ridge[D + kBackward] = options.fit_backward_extra ? 3e-3 : 1e6;
    if (!options.fit_concurrency) ridge[D + kConcurrency] = 1e6;
    if (!options.fit_first_task) ridge[D + kFirst] = 1e6;
    // Bounded least squares by an active set (parameters below their bound are
    // fixed there), made robust by iteratively reweighting: a row whose relative
    // residual exceeds 10% counts as if it were 10% (Huber), so one disturbed
    // measurement cannot drag the whole fit.
    std::vector<double> lower(K, 0.0);
    for (int d = 0; d < D; ++d) lower[d] = 0.05;
    lower[D + kWire] = 0.05;
    lower[D + kBackward] = -0.5;  // backward may be cheaper than profiled, within reason
    std::vector<double> robust = weight;
    std::vector<double> nx;
    // Parameters not fitted stay exactly at their starting values (a ridge
    // alone lets them drift by rounding, e.g. to -1e-12, which a stored
    // calibration may not hold).
    std::vector<bool> not_fitted(K, false);
    not_fitted[D + kBackward] = !options.fit_backward_extra;
    not_fitted[D + kConcurrency] = !options.fit_concurrency;
    not_fitted[D + kFirst] = !options.fit_first_task;
    for (int irls = 0; irls < 5; ++irls) {
      std::vector<bool> fixed = not_fitted;
      std::vector<double> fixed_value(K, 0.0);
      for (int k = 0; k < K; ++k)
        if (fixed[k]) fixed_value[k] = prior[k];
      for (int round = 0; round <= K; ++round) {
        nx = solve(rows, rhs, robust, prior, ridge, fixed, fixed_value);
        bool changed = false;
        for (int k = 0; k < K; ++k)
          if (!fixed[k] && nx[k] < lower[k]) {
            fixed[k] = true;
            fixed_value[k] = lower[k];
            changed = true;
          }
        if (!changed) break;
      }
      const double delta = 0.10;
      for (size_t r = 0; r < rows.size(); ++r) {
        double fit = 0;
        for (int k = 0; k < K; ++k) fit += rows[r][k] * nx[k];
        double rel = std::abs(fit - rhs[r]) * weight[r] / (weight[r] > 0 && rhs[r] > 0 ? weight[r] * rhs[r] : 1.0);
        robust[r] = weight[r] * (rel <= delta ? 1.0 : std::sqrt(delta / rel));
      }
    }
    bool same = true;
    for (int k = 0; k < K; ++k) same = same && std::abs(nx[k] - x[k]) <= 1e-6 * (1 + std::abs(x[k]));
    x = nx;
    result.iterations = iter + 1;
    AccuracyStats st = accuracy(predict_all(from_vector(x, group_of, D)), result.measured);
    if (st.median_abs_rel_error < best_err) {
      best_err = st.median_abs_rel_error;
      best = from_vector(x, group_of, D);
    }
    if (same) break;
  }
  result.calibration = best;
  result.predicted_after = predict_all(best);
  result.after = accuracy(result.predicted_after, result.measured);
  return result;
}

}  // namespace tapp
