// tests/simulator/task_graph_reference.h — the first, straightforward task-graph
// builder (commit 377d32c), kept as the reference the optimized builder in
// simulator/task_graph.cpp must match task for task.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "core/cluster.h"
#include "simulator/task_graph.h"

namespace tapp::reference {
inline std::vector<int> boundary_layers(const LayerGraph& g, const TaskGraph& tg, int from, int to);
namespace {


std::vector<Segment> split_segments(const LayerGraph& g, const std::vector<int>& layer_device,
                                    std::vector<int>& seg_of_layer) {
  std::vector<Segment> segs;
  seg_of_layer.assign(g.layers.size(), -1);
  // Runs of one device; the last layer of run r that run c reads ends its segment (not in AL form).
  std::vector<int> run(g.layers.size(), 0);
  for (size_t i = 1; i < g.layers.size(); ++i) run[i] = run[i - 1] + (layer_device[i] != layer_device[i - 1]);
  std::map<std::pair<int, int>, int> last_read;  // (reading run, read run) -> last layer read
  for (size_t i = 0; i < g.layers.size(); ++i)
    for (int q : g.layers[i].inputs)
      if (run[q] != run[i]) {
        int& last = last_read.emplace(std::make_pair(run[i], run[q]), q).first->second;
        last = std::max(last, q);
      }
  std::vector<bool> leaves(g.layers.size(), false);
  if (!g.is_al_form())
    for (const auto& entry : last_read) leaves[entry.second] = true;
  for (size_t i = 0; i < g.layers.size(); ++i) {
    if (segs.empty() || segs.back().devices[0] != layer_device[i] || leaves[i - 1]) {  // unreplicated placements only
      const bool same_stage = !segs.empty() && segs.back().devices[0] == layer_device[i];
      const int stage = segs.empty() ? 0 : segs.back().stage + (same_stage ? 0 : 1);
      segs.emplace_back();
      segs.back().stage = stage;
      segs.back().group = -1;
      segs.back().devices = {layer_device[i]};
    }
    segs.back().layers.push_back(static_cast<int>(i));
    segs.back().param_bytes += g.layers[i].param_bytes();
    seg_of_layer[i] = static_cast<int>(segs.size()) - 1;
  }
  std::vector<std::set<int>> preds(segs.size()), succs(segs.size());
  for (size_t i = 0; i < g.layers.size(); ++i) {
    int s = seg_of_layer[i];
    if (g.layers[i].inputs.empty()) segs[s].reads_model_input = true;
    for (int p : g.layers[i].inputs)
      if (seg_of_layer[p] != s) {
        preds[s].insert(seg_of_layer[p]);
        succs[seg_of_layer[p]].insert(s);
      }
  }
  for (size_t s = 0; s < segs.size(); ++s) {
    segs[s].preds.assign(preds[s].begin(), preds[s].end());
    segs[s].succs.assign(succs[s].begin(), succs[s].end());
  }
  segs[seg_of_layer.back()].computes_loss = true;
  return segs;
}

int64_t edge_bytes_per_sample(const LayerGraph& g, const TaskGraph& tg, int from, int to) {
  int64_t bytes = 0;
  for (int l : reference::boundary_layers(g, tg, from, to)) bytes += g.layers[l].activation_bytes();
  return bytes;
}

void add_tasks(const LayerGraph& g, TaskGraph& tg) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  tg.forward_task.assign(S, std::vector<int>(M, -1));
  tg.backward_task.assign(S, std::vector<int>(M, -1));
  // fwd_input[s][m][k]: task that delivers pred k's activations to s.
  std::vector<std::vector<std::vector<int>>> fwd_in(S, std::vector<std::vector<int>>(M));
  std::vector<std::vector<std::vector<int>>> grad_in(S, std::vector<std::vector<int>>(M));
  auto push = [&](Task t, const std::vector<int>& deps) {
    t.first_dep = static_cast<int>(tg.dep_ids.size());
    t.dep_count = static_cast<int>(deps.size());
    tg.dep_ids.insert(tg.dep_ids.end(), deps.begin(), deps.end());
    tg.tasks.push_back(t);
    return static_cast<int>(tg.tasks.size()) - 1;
  };
  for (int s = 0; s < S; ++s) {
    const Segment& seg = tg.segments[s];
    for (int m = 0; m < M; ++m) {
      Task f;
      f.kind = TaskKind::forward;
      f.segment = s;
      f.micro_batch = m;
      f.device = seg.device_of(m);
      int fid = push(f, fwd_in[s][m]);
      tg.forward_task[s][m] = fid;
      for (int t : seg.succs) {
        if (tg.segments[t].device_of(m) == seg.device_of(m)) {
          fwd_in[t][m].push_back(fid);
          continue;
        }
        Task x;
        x.kind = TaskKind::transfer_activation;
        x.segment = s;
        x.peer_segment = t;
        x.micro_batch = m;
        x.device = seg.device_of(m);
        x.to_device = tg.segments[t].device_of(m);
        x.bytes = edge_bytes_per_sample(g, tg, s, t) * tg.micro_batch_sizes[m];
        fwd_in[t][m].push_back(push(x, {fid}));
      }
    }
  }
  for (int s = S - 1; s >= 0; --s) {
    const Segment& seg = tg.segments[s];
    for (int m = 0; m < M; ++m) {
      Task b;
      b.kind = TaskKind::backward;
      b.segment = s;
      b.micro_batch = m;
      b.device = seg.device_of(m);
      std::vector<int> deps = grad_in[s][m];
      deps.push_back(tg.forward_task[s][m]);
      int bid = push(b, deps);
      tg.backward_task[s][m] = bid;
      for (int p : seg.preds) {
        if (tg.segments[p].device_of(m) == seg.device_of(m)) {
          grad_in[p][m].push_back(bid);
          continue;
        }
        Task x;
        x.kind = TaskKind::transfer_gradient;
        x.segment = p;
        x.peer_segment = s;
        x.micro_batch = m;
        x.device = seg.device_of(m);
        x.to_device = tg.segments[p].device_of(m);
        x.bytes = edge_bytes_per_sample(g, tg, p, s) * tg.micro_batch_sizes[m];
        grad_in[p][m].push_back(push(x, {bid}));
      }
    }
  }
  // What a compute task receives: its transfer deps' payloads.
  for (Task& t : tg.tasks) {
    if (!is_compute(t.kind)) continue;
    for (int d : tg.deps(t))
      if (is_transfer(tg.tasks[d].kind)) {
        t.remote_input = true;
        t.bytes += tg.tasks[d].bytes;
      }
  }
}

// GPipe fill-drain: every forward, then every backward, in wavefront order
// over stages (a stage's segments in layer order, backwards reversed).
// The global order is topological, so filtering it per device cannot deadlock.
void order_gpipe(TaskGraph& tg) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  const int R = S == 0 ? 0 : tg.segments.back().stage + 1;
  std::vector<std::pair<std::tuple<int, int, int>, int>> fwd, bwd;
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < M; ++m) {
      const int r = tg.segments[s].stage;
      fwd.push_back({{m + r, r, s}, tg.forward_task[s][m]});
      bwd.push_back({{m + (R - 1 - r), R - 1 - r, S - 1 - s}, tg.backward_task[s][m]});
    }
  std::sort(fwd.begin(), fwd.end());
  std::sort(bwd.begin(), bwd.end());
  tg.device_order.assign(tg.num_devices, {});
  for (const auto& f : fwd) tg.device_order[tg.tasks[f.second].device].push_back(f.second);
  for (const auto& b : bwd) tg.device_order[tg.tasks[b.second].device].push_back(b.second);
}

// A 1F1B list schedule's bookkeeping: per device the micro-batches it may
// have in flight (limit = devices from its first segment to the end), its
// compute tasks not yet ordered, and per micro-batch how many of them remain
// and whether one was.
struct ListState {
  std::vector<int> limit, in_flight;
  std::vector<std::vector<int>> pending, left;
  std::vector<std::vector<bool>> started;
  explicit ListState(const TaskGraph& tg) {
    const int S = static_cast<int>(tg.segments.size());
    const int M = tg.micro_batches();
    const int D = tg.num_devices;
    limit.assign(D, 0);
    for (int d = 0; d < D; ++d) {
      int first = -1;
      for (int s = 0; s < S && first < 0; ++s)
        if (std::count(tg.segments[s].devices.begin(), tg.segments[s].devices.end(), d) > 0) first = s;
      if (first < 0) continue;
      std::set<int> downstream;
      for (int s = first; s < S; ++s)
        downstream.insert(tg.segments[s].devices.begin(), tg.segments[s].devices.end());
      limit[d] = static_cast<int>(downstream.size());
    }
    pending.assign(D, {});
    for (int t = 0; t < static_cast<int>(tg.tasks.size()); ++t)
      if (tg.tasks[t].kind == TaskKind::forward || tg.tasks[t].kind == TaskKind::backward)
        pending[tg.tasks[t].device].push_back(t);
    left.assign(D, std::vector<int>(M, 0));
    started.assign(D, std::vector<bool>(M, false));
    in_flight.assign(D, 0);
    for (int d = 0; d < D; ++d)
      for (int t : pending[d]) ++left[d][tg.tasks[t].micro_batch];
  }
};

// 1F1B (PipeDream-flush): a unit-time list schedule where each device prefers a
// ready backward and admits a new micro-batch only while fewer than `limit` are
// in flight on it (limit = devices from its first segment to the end). The
// recorded order comes from a feasible execution, so it never deadlocks.
void order_1f1b(TaskGraph& tg) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  const int D = tg.num_devices;
  const int T = static_cast<int>(tg.tasks.size());
  ListState st(tg);
  std::vector<int>& limit = st.limit;
  std::vector<std::vector<int>>& pending = st.pending;
  std::vector<std::vector<int>>& left = st.left;
  std::vector<std::vector<bool>>& started = st.started;
  std::vector<int>& in_flight = st.in_flight;
  std::vector<int> done_step(T, -1);
  auto done_before = [&](int t, int step) {
    const Task& task = tg.tasks[t];
    if (task.kind == TaskKind::transfer_activation || task.kind == TaskKind::transfer_gradient)
      return done_step[tg.deps(task)[0]] >= 0 && done_step[tg.deps(task)[0]] < step;
    return done_step[t] >= 0 && done_step[t] < step;
  };
  tg.device_order.assign(D, {});
  size_t remaining = 0;
  for (auto& p : pending) remaining += p.size();
  for (int step = 0; remaining > 0; ++step) {
    bool progressed = false;
    for (int d = 0; d < D; ++d) {
      int pick = -1;
      bool pick_bwd = false;
      for (int t : pending[d]) {
        const Task& task = tg.tasks[t];
        const DepSpan deps = tg.deps(task);
        bool ready = std::all_of(deps.begin(), deps.end(), [&](int x) { return done_before(x, step); });
        if (!ready) continue;
        bool bwd = task.kind == TaskKind::backward;
        if (!bwd && !started[d][task.micro_batch] && in_flight[d] >= limit[d]) continue;
        auto key = [&](int id) { return std::make_pair(tg.tasks[id].micro_batch, tg.tasks[id].segment * (bwd ? -1 : 1)); };
        if (pick < 0 || (bwd && !pick_bwd) || (bwd == pick_bwd && key(t) < key(pick))) {
          pick = t;
          pick_bwd = bwd;
        }
      }
      if (pick < 0) continue;
      const Task& task = tg.tasks[pick];
      done_step[pick] = step;
      tg.device_order[d].push_back(pick);
      pending[d].erase(std::find(pending[d].begin(), pending[d].end(), pick));
      --remaining;
      progressed = true;
      if (!started[d][task.micro_batch]) {
        started[d][task.micro_batch] = true;
        ++in_flight[d];
      }
      if (--left[d][task.micro_batch] == 0) --in_flight[d];
    }
    // Nothing ran although tasks remain: every ready forward is held back by
    // its limit, and the next step would see the same state. Widen the limits.
    if (!progressed)
      for (int& l : limit) ++l;
  }
}

// timed 1F1B: a list schedule over estimated times where each
// device, when it is free, runs its first ready task by priority (a backward
// before a forward, then the lowest micro-batch) and admits a new micro-batch
// only while fewer than `limit` are in flight on it (limit = devices from its
// first segment to the end); the device that can start first goes first. A
// task takes its layers' estimated_layer_ms (model/layer_library.h) per
// sample / its device's speed; a transfer its link's time. The recorded order comes from a feasible
// execution, so it never deadlocks.
void order_timed_1f1b(TaskGraph& tg, const LayerGraph& g, const Cluster& c) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  const int D = tg.num_devices;
  const int T = static_cast<int>(tg.tasks.size());
  auto duration = [&](const Task& task) {
    double per_sample = 0;
    for (int l : tg.segments[task.segment].layers) {
      const EstimatedMs ms = estimated_layer_ms(g.layers[l].macs, g.layers[l].activation_bytes(), 1);
      per_sample += task.kind == TaskKind::forward ? ms.forward : ms.backward;
    }
    return per_sample * static_cast<double>(tg.micro_batch_sizes[task.micro_batch]) / c.devices[task.device].speed;
  };
  ListState st(tg);
  std::vector<int>& limit = st.limit;
  std::vector<std::vector<int>>& pending = st.pending;
  std::vector<std::vector<int>>& left = st.left;
  std::vector<std::vector<bool>>& started = st.started;
  std::vector<int>& in_flight = st.in_flight;
  std::vector<double> end(T, -1.0);  // compute tasks scheduled so far: when they end
  std::vector<double> free_at(D, 0.0);
  // When task t's inputs are all there, or -1 while one is not scheduled yet.
  auto ready_at = [&](int t) {
    double at = 0;
    for (int x : tg.deps(tg.tasks[t])) {
      const Task& dep = tg.tasks[x];
      const bool transfer =
          dep.kind == TaskKind::transfer_activation || dep.kind == TaskKind::transfer_gradient;
      const int producer = transfer ? tg.deps(dep)[0] : x;
      if (end[producer] < 0) return -1.0;
      double arrives = end[producer];
      if (transfer) arrives += 1e3 * c.link(dep.device, dep.to_device).transfer_s(dep.bytes);
      at = std::max(at, arrives);
    }
    return at;
  };
  auto may_start = [&](int d, int t) {
    const Task& task = tg.tasks[t];
    return task.kind == TaskKind::backward || started[d][task.micro_batch] || in_flight[d] < limit[d];
  };
  tg.device_order.assign(D, {});
  size_t remaining = 0;
  for (auto& p : pending) remaining += p.size();
  while (remaining > 0) {
    int device = -1;
    double start = 0;
    bool any_ready = false;
    for (int d = 0; d < D; ++d)
      for (int t : pending[d]) {
        const double at = ready_at(t);
        if (at < 0) continue;
        any_ready = true;
        if (!may_start(d, t)) continue;
        const double s = std::max(free_at[d], at);
        if (device < 0 || s < start || (s == start && d < device)) device = d, start = s;
      }
    if (device < 0) {
      // Every ready forward is held back by its limit: widen the limits.
      if (!any_ready) return;  // tasks wait on tasks that never run: the orders then differ
      for (int& l : limit) ++l;
      continue;
    }
    int pick = -1;
    bool pick_bwd = false;
    for (int t : pending[device]) {
      const double at = ready_at(t);
      if (at < 0 || at > start || !may_start(device, t)) continue;
      const bool bwd = tg.tasks[t].kind == TaskKind::backward;
      auto key = [&](int id) {
        return std::make_pair(tg.tasks[id].micro_batch, tg.tasks[id].segment * (bwd ? -1 : 1));
      };
      if (pick < 0 || (bwd && !pick_bwd) || (bwd == pick_bwd && key(t) < key(pick))) {
        pick = t;
        pick_bwd = bwd;
      }
    }
    const Task& task = tg.tasks[pick];
    end[pick] = start + duration(task);
    free_at[device] = end[pick];
    tg.device_order[device].push_back(pick);
    pending[device].erase(std::find(pending[device].begin(), pending[device].end(), pick));
    --remaining;
    if (!started[device][task.micro_batch]) {
      started[device][task.micro_batch] = true;
      ++in_flight[device];
    }
    if (--left[device][task.micro_batch] == 0) --in_flight[device];
  }
}

}  // namespace

inline std::vector<int> boundary_layers(const LayerGraph& g, const TaskGraph& tg, int from, int to) {
  std::set<int> in_from(tg.segments[from].layers.begin(), tg.segments[from].layers.end());
  std::set<int> out;
  for (int l : tg.segments[to].layers)
    for (int p : g.layers[l].inputs)
      if (in_from.count(p)) out.insert(p);
  return {out.begin(), out.end()};
}

inline Result<TaskGraph> build_task_graph(const LayerGraph& g, const Placement& p, const Cluster& c,
                                   int64_t batch_size) {
  if (Status s = validate_placement(p, g, c, batch_size); !s) return s;
  TaskGraph tg;
  tg.num_devices = c.num_devices();
  tg.schedule = p.schedule;
  std::vector<int> seg_of_layer;
  tg.segments = split_segments(g, p.layer_devices(), seg_of_layer);
  for (int m = 0; m < p.micro_batches; ++m)
    tg.micro_batch_sizes.push_back(batch_size / p.micro_batches + (m < batch_size % p.micro_batches ? 1 : 0));
  add_tasks(g, tg);
  if (p.schedule == Schedule::gpipe)
    order_gpipe(tg);
  else if (p.schedule == Schedule::timed_1f1b)
    order_timed_1f1b(tg, g, c);
  else
    order_1f1b(tg);
  return tg;
}

}  // namespace tapp::reference
