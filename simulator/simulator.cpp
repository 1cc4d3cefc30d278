#include "simulator/simulator.h"

#include <algorithm>
#include <string>

#include "model/layer_graph.h"
#include "core/cluster.h"

namespace tapp {
namespace {

// Reused buffers of one thread's replays.
struct Workspace {
  std::vector<double> start, end;
  std::vector<int> resource_prev, indegree, succ_begin, succ, fill, ready, crit;
  std::vector<int> last_on_link, out_begin, out_tasks;
  std::vector<int> extra_begin, extra;  // per allreduce: its predecessors on the participants' send queues
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

double task_duration(const TaskGraph& tg, const Task& t, const CostModel& cost, int local_used) {
  if (is_transfer(t.kind)) return cost.transfer_ms(t.device, t.to_device, t.bytes);
  if (t.kind == TaskKind::allreduce) return cost.ring_allreduce_ms(tg.replicated_groups[t.replicated_group].devices, t.bytes);
  const Segment& s = tg.segments[t.segment];
  const int64_t samples = tg.micro_batch_sizes[t.micro_batch];
  const int others = cost.is_local(t.device) ? std::max(0, local_used - 1) : 0;
  return t.kind == TaskKind::forward
             ? cost.forward_ms(t.device, s.layers.front(), s.layers.back(), samples, others)
             : cost.backward_ms(t.device, s.layers.front(), s.layers.back(), samples, others);
}

}  // namespace

std::string task_name(const Task& t) {
  const std::string m = " m" + std::to_string(t.micro_batch);
  switch (t.kind) {
    case TaskKind::forward: return "F s" + std::to_string(t.segment) + m;
    case TaskKind::backward: return "B s" + std::to_string(t.segment) + m;
    case TaskKind::transfer_activation:
      return "X s" + std::to_string(t.segment) + "->s" + std::to_string(t.peer_segment) + m;
    case TaskKind::transfer_gradient:
      return "G s" + std::to_string(t.peer_segment) + "->s" + std::to_string(t.segment) + m;
    case TaskKind::allreduce:
      return "AR r" + std::to_string(t.replicated_group);
  }
  return "?";
}

StepReport simulate(const TaskGraph& tg, const CostModel& cost, const SimulateOptions& options, TaskTimes* times) {
  const int T = static_cast<int>(tg.tasks.size());
  const int D = tg.num_devices;
  if (D != cost.num_devices())
    return StepReport::failure(FailureKind::invalid_placement,
                               "task graph has " + std::to_string(D) + " devices, the cost model " +
                                   std::to_string(cost.num_devices()),
                               "simulate");
  Workspace& ws = workspace();
  ws.start.assign(T, 0);
  ws.end.assign(T, 0);
  ws.resource_prev.assign(T, -1);
  ws.crit.assign(T, -1);

  // Resource chains: device orders, and per link the FIFO order of the sender's order.
  ws.out_begin.assign(T + 1, 0);
  for (int t = 0; t < T; ++t)
    if (is_transfer(tg.tasks[t].kind)) ++ws.out_begin[tg.tasks[t].deps[0] + 1];
  for (int t = 0; t < T; ++t) ws.out_begin[t + 1] += ws.out_begin[t];
  ws.out_tasks.assign(ws.out_begin[T], 0);
  ws.fill.assign(ws.out_begin.begin(), ws.out_begin.end() - 1);
  for (int t = 0; t < T; ++t)
    if (is_transfer(tg.tasks[t].kind)) ws.out_tasks[ws.fill[tg.tasks[t].deps[0]]++] = t;
  ws.last_on_link.assign(static_cast<size_t>(D) * D, -1);
  size_t ordered = 0;
  for (int d = 0; d < D; ++d) {
    int prev = -1;
    for (int t : tg.device_order[d]) {
      ws.resource_prev[t] = prev;
      prev = t;
      ++ordered;
      for (int k = ws.out_begin[t]; k < ws.out_begin[t + 1]; ++k) {
        int x = ws.out_tasks[k];
        int queue = options.send_queue_per_device ? 0 : tg.tasks[x].to_device;
        int& last = ws.last_on_link[static_cast<size_t>(d) * D + queue];
        ws.resource_prev[x] = last;
        last = x;
      }
    }
  }
  // Allreduces, ascending id: each joins the end of every participant's send
  // queue (per directed link: the participant's link to its ring successor).
  ws.extra_begin.assign(T + 1, 0);
  ws.extra.clear();
  for (int t = 0; t < T; ++t) {
    const Task& task = tg.tasks[t];
    if (task.kind == TaskKind::allreduce) {
      const std::vector<int>& ring = tg.replicated_groups[task.replicated_group].devices;
      const size_t first = ws.extra.size();
      for (size_t k = 0; k < ring.size(); ++k) {
        const int d = ring[k];
        const int queue = options.send_queue_per_device ? 0 : ring[(k + 1) % ring.size()];
        int& last = ws.last_on_link[static_cast<size_t>(d) * D + queue];
        if (last >= 0 && std::find(ws.extra.begin() + first, ws.extra.end(), last) == ws.extra.end())
          ws.extra.push_back(last);
        last = t;
      }
    }
    ws.extra_begin[t + 1] = static_cast<int>(ws.extra.size());
  }
  // Local devices the placement uses (they share the machine's cores).
  int local_used = 0;
  for (int d = 0; d < D; ++d) local_used += !tg.device_order[d].empty() && cost.is_local(d);
  // Kahn's algorithm over deps + resource chains.
  ws.indegree.assign(T, 0);
  ws.succ_begin.assign(T + 1, 0);
  for (int t = 0; t < T; ++t) {
    const Task& task = tg.tasks[t];
    ws.indegree[t] = static_cast<int>(task.deps.size()) + (ws.resource_prev[t] >= 0) +
                     (ws.extra_begin[t + 1] - ws.extra_begin[t]);
    for (int d : task.deps) ++ws.succ_begin[d + 1];
    if (ws.resource_prev[t] >= 0) ++ws.succ_begin[ws.resource_prev[t] + 1];
    for (int k = ws.extra_begin[t]; k < ws.extra_begin[t + 1]; ++k) ++ws.succ_begin[ws.extra[k] + 1];
  }
  for (int t = 0; t < T; ++t) ws.succ_begin[t + 1] += ws.succ_begin[t];
  ws.succ.assign(ws.succ_begin[T], 0);
  ws.fill.assign(ws.succ_begin.begin(), ws.succ_begin.end() - 1);
  for (int t = 0; t < T; ++t) {
    for (int d : tg.tasks[t].deps) ws.succ[ws.fill[d]++] = t;
    if (ws.resource_prev[t] >= 0) ws.succ[ws.fill[ws.resource_prev[t]]++] = t;
    for (int k = ws.extra_begin[t]; k < ws.extra_begin[t + 1]; ++k) ws.succ[ws.fill[ws.extra[k]]++] = t;
  }
  ws.ready.clear();
  for (int t = 0; t < T; ++t)
    if (ws.indegree[t] == 0) ws.ready.push_back(t);
  int processed = 0;
  while (!ws.ready.empty()) {
    int t = ws.ready.back();
    ws.ready.pop_back();
    ++processed;
    const Task& task = tg.tasks[t];
    double s = 0;
    int crit = -1;
    auto consider = [&](int x) {
      if (crit < 0 || ws.end[x] > s) {
        s = ws.end[x];
        crit = x;
      }
    };
    if (ws.resource_prev[t] >= 0) consider(ws.resource_prev[t]);
    for (int d : task.deps) consider(d);
    for (int k = ws.extra_begin[t]; k < ws.extra_begin[t + 1]; ++k) consider(ws.extra[k]);
    ws.start[t] = s;
    ws.end[t] = s + task_duration(tg, task, cost, local_used) +
                (is_compute(task.kind) && ws.resource_prev[t] < 0 ? cost.first_task_ms(task.device) : 0.0);
    ws.crit[t] = crit;
    for (int k = ws.succ_begin[t]; k < ws.succ_begin[t + 1]; ++k)
      if (--ws.indegree[ws.succ[k]] == 0) ws.ready.push_back(ws.succ[k]);
  }
  size_t compute_tasks = 0;
  for (const Task& task : tg.tasks) compute_tasks += is_compute(task.kind);
  if (processed != T || ordered != compute_tasks)
    return StepReport::failure(FailureKind::invalid_placement,
                               "the schedule cannot run this task graph (a cycle)", "simulate");

  StepReport r;
  r.ok = true;
  r.source = "simulate";
  r.devices.resize(D);
  std::vector<int64_t> params(D, 0);
  for (const Segment& s : tg.segments)
    for (int d : s.devices) params[d] += s.param_bytes;  // every replica holds the segment's parameters
  // A device ends when its last compute task, its last send and the
  // allreduces it takes part in are done (the runtime drains its sender),
  // then runs the optimizer update.
  std::vector<int> end_task(D, -1);
  for (int d = 0; d < D; ++d)
    if (!tg.device_order[d].empty()) end_task[d] = tg.device_order[d].back();
  auto ends_later = [&](int t, int d) { return end_task[d] < 0 || ws.end[t] > ws.end[end_task[d]]; };
  for (int t = 0; t < T; ++t) {
    const Task& task = tg.tasks[t];
    if (is_transfer(task.kind) && ends_later(t, task.device)) end_task[task.device] = t;
    if (task.kind == TaskKind::allreduce)
      for (int d : tg.replicated_groups[task.replicated_group].devices)
        if (ends_later(t, d)) end_task[d] = t;
  }
  // aggregation_every = K > 1: the replicas' parameters are averaged (one ring
  // allreduce of the group's parameters) once every K steps, charged 1/K per step.
  std::vector<double> averaging(D, 0);
  if (tg.aggregation_every > 1)
    for (const ReplicatedGroup& rg : tg.replicated_groups) {
      const double share = cost.ring_allreduce_ms(rg.devices, rg.param_bytes) / tg.aggregation_every;
      for (int d : rg.devices) averaging[d] += share;
    }
  double step = 0;
  int last_task = -1, last_device = -1;
  double busy_sum = 0, comm_sum = 0;
  std::vector<double> device_end(D, 0);
  for (int d = 0; d < D; ++d) {
    DeviceStats& st = r.devices[d];
    st.device = cost.device_name(d);
    if (tg.device_order[d].empty()) continue;
    // Communication as the runtime counts it: time blocked waiting for a
    // compute task's remote inputs, plus draining the sends after the last task.
    double prev_end = 0;
    for (int t : tg.device_order[d]) {
      st.busy_ms += ws.end[t] - ws.start[t];
      bool remote = false;
      for (int dep : tg.tasks[t].deps) remote = remote || is_transfer(tg.tasks[dep].kind);
      if (remote) st.comm_ms += std::max(0.0, ws.start[t] - prev_end);
      prev_end = ws.end[t];
    }
    double drained = ws.end[end_task[d]];
    st.comm_ms += std::max(0.0, drained - prev_end) + averaging[d];
    double update = cost.update_ms(d, params[d]);
    st.busy_ms += update;
    device_end[d] = drained + averaging[d] + update;
    if (device_end[d] > step) {
      step = device_end[d];
      last_task = end_task[d];
      last_device = d;
    }
    busy_sum += st.busy_ms;
    comm_sum += st.comm_ms;
  }
  step += cost.step_overhead_ms();
  r.step_ms = step;
  for (int d = 0; d < D; ++d) {
    DeviceStats& st = r.devices[d];
    if (tg.device_order[d].empty()) continue;
    st.idle_ms = std::max(0.0, step - st.busy_ms - st.comm_ms);
  }
  r.comm_fraction = busy_sum + comm_sum > 0 ? comm_sum / (busy_sum + comm_sum) : 0;

  // Peak memory along each device's order.
  for (int d = 0; d < D; ++d) {
    int64_t live = 0, peak = 0;
    for (int t : tg.device_order[d]) {
      const Task& task = tg.tasks[t];
      const Segment& s = tg.segments[task.segment];
      int64_t bytes = cost.activation_bytes_per_sample(s.layers.front(), s.layers.back()) *
                      tg.micro_batch_sizes[task.micro_batch];
      if (task.kind == TaskKind::forward)
        for (int dep : task.deps)
          if (is_transfer(tg.tasks[dep].kind)) bytes += tg.tasks[dep].bytes;
      if (task.kind == TaskKind::forward) {
        live += bytes;
        peak = std::max(peak, live);
      } else {
        // the backward's received gradient is live while it runs
        int64_t grad = 0;
        for (int dep : task.deps)
          if (is_transfer(tg.tasks[dep].kind)) grad += tg.tasks[dep].bytes;
        peak = std::max(peak, live + grad);
        live -= bytes;
      }
    }
    r.devices[d].peak_memory_bytes = 3 * params[d] + peak;
  }

  if (options.timeline) {
    r.timeline.reserve(T);
    for (int t = 0; t < T; ++t) {
      const Task& task = tg.tasks[t];
      if (task.kind != TaskKind::allreduce) {
        r.timeline.push_back({task.device, task_name(task), ws.start[t], ws.end[t]});
        continue;
      }
      for (int d : tg.replicated_groups[task.replicated_group].devices)  // one line per participant
        r.timeline.push_back({d, task_name(task), ws.start[t], ws.end[t]});
    }
    std::stable_sort(r.timeline.begin(), r.timeline.end(),
                     [](const TimelineEntry& a, const TimelineEntry& b) { return a.start_ms < b.start_ms; });
  }
  if (times) {
    times->start_ms = ws.start;
    times->end_ms = ws.end;
    times->critical_pred = ws.crit;
    times->last_task = last_task;
    times->last_device = last_device;
  }
  return r;
}

Simulator::Simulator(const LayerGraph& g, const Cluster& c, CostModel cost, int64_t batch_size)
    : graph_(&g), cluster_(&c), cost_(std::move(cost)), batch_size_(batch_size) {}
Simulator::~Simulator() = default;
Simulator::Simulator(Simulator&&) noexcept = default;

StepReport Simulator::evaluate(const Placement& p, const SimulateOptions& options) {
  if (Status s = build_task_graph_into(*graph_, p, *cluster_, batch_size_, tg_); !s)
    return StepReport::failure(FailureKind::invalid_placement, s.message(), "simulate");
  if (Status s = check_memory(p, *graph_, *cluster_, batch_size_); !s)
    return StepReport::failure(FailureKind::out_of_memory, s.message(), "simulate");
  return simulate(tg_, cost_, options);
}

}  // namespace tapp
