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
  std::vector<int> resource_prev, crit;
  std::vector<int> last_on_link, send_tail;  // [device][queue]: the queue's last task; its last send
  std::vector<int> extra_begin, extra;       // per allreduce: its predecessors on the participants' send queues
  std::vector<char> state;
  std::vector<int> stack;
  std::vector<int> compute_cost_at;  // per segment: where its cached compute costs start in compute_cost
  std::vector<double> compute_cost;  // [segment][replica][micro-batch size class][forward, backward]; NaN = not yet
  std::vector<int64_t> params;
  std::vector<int> end_task;
  std::vector<double> averaging;
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
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
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  if (D != cost.num_devices())
    return StepReport::failure(FailureKind::invalid_placement,
                               "task graph has " + std::to_string(D) + " devices, the cost model " +
                                   std::to_string(cost.num_devices()),
                               "simulate");
  Workspace& ws = workspace();
  ws.start.resize(T);
  ws.end.resize(T);
  ws.crit.resize(T);
  ws.resource_prev.assign(T, -1);
  ws.state.assign(T, 0);  // 0 unvisited, 1 open (waiting for predecessors), 2 finished

  // Resource chains: device orders, and per queue the FIFO order of the
  // sender's order. A compute task's sends directly follow it in `tasks` (the builder's layout).
  const int Q = options.send_queue_per_device ? 1 : D;
  ws.last_on_link.assign(static_cast<size_t>(D) * Q, -1);
  size_t ordered = 0;
  bool malformed = false;
  for (int d = 0; d < D; ++d) {
    int prev = -1;
    for (int t : tg.device_order[d]) {
      ws.resource_prev[t] = prev;
      prev = t;
      ++ordered;
      for (int x = t + 1; x < T && is_transfer(tg.tasks[x].kind); ++x) {
        const Task& send = tg.tasks[x];
        malformed = malformed || send.deps[0] != t;
        int& last = ws.last_on_link[static_cast<size_t>(d) * Q + (Q == 1 ? 0 : send.to_device)];
        ws.resource_prev[x] = last;
        last = x;
      }
    }
  }
  if (malformed)
    return StepReport::failure(FailureKind::invalid_placement,
                               "task graph: a transfer does not follow the task that produces it", "simulate");
  ws.send_tail = ws.last_on_link;
  // Allreduces (the last tasks, ascending id): each joins the end of every
  // participant's send queue (per directed link: its link to its ring successor).
  const int first_allreduce = T - static_cast<int>(std::count_if(
                                      tg.replicated_groups.begin(), tg.replicated_groups.end(),
                                      [](const ReplicatedGroup& rg) { return rg.allreduce_task >= 0; }));
  ws.extra_begin.assign(T - first_allreduce + 1, 0);
  ws.extra.clear();
  for (int t = first_allreduce; t < T; ++t) {
    const Task& task = tg.tasks[t];
    if (task.kind != TaskKind::allreduce)
      return StepReport::failure(FailureKind::invalid_placement, "task graph: allreduces must come last", "simulate");
    const std::vector<int>& ring = tg.replicated_groups[task.replicated_group].devices;
    const size_t first = ws.extra.size();
    for (size_t k = 0; k < ring.size(); ++k) {
      const int d = ring[k];
      const int queue = Q == 1 ? 0 : ring[(k + 1) % ring.size()];
      int& last = ws.last_on_link[static_cast<size_t>(d) * Q + queue];
      if (last >= 0 && std::find(ws.extra.begin() + first, ws.extra.end(), last) == ws.extra.end())
        ws.extra.push_back(last);
      last = t;
    }
    ws.extra_begin[t - first_allreduce + 1] = static_cast<int>(ws.extra.size());
  }
  // Local devices the placement uses (they share the machine's cores).
  int local_used = 0;
  for (int d = 0; d < D; ++d) local_used += !tg.device_order[d].empty() && cost.is_local(d);
  // Compute costs depend on (segment, replica, micro-batch size, direction)
  // only, and micro-batch sizes take at most two values: cached per replay.
  ws.compute_cost_at.resize(S + 1);
  ws.compute_cost_at[0] = 0;
  for (int s = 0; s < S; ++s) ws.compute_cost_at[s + 1] = ws.compute_cost_at[s] + 4 * tg.segments[s].replica_count();
  ws.compute_cost.assign(ws.compute_cost_at[S], -1.0);
  const int64_t first_size = M > 0 ? tg.micro_batch_sizes[0] : 0;
  auto duration = [&](const Task& t) {
    if (is_transfer(t.kind)) return cost.transfer_ms(t.device, t.to_device, t.bytes);
    if (t.kind == TaskKind::allreduce)
      return cost.ring_allreduce_ms(tg.replicated_groups[t.replicated_group].devices, t.bytes);
    const Segment& seg = tg.segments[t.segment];
    const int64_t samples = tg.micro_batch_sizes[t.micro_batch];
    const bool backward = t.kind == TaskKind::backward;
    double& cached = ws.compute_cost[ws.compute_cost_at[t.segment] +
                                     ((t.micro_batch % seg.replica_count()) * 2 + (samples != first_size)) * 2 + backward];
    if (cached < 0) {
      const int others = cost.is_local(t.device) ? std::max(0, local_used - 1) : 0;
      cached = backward ? cost.backward_ms(t.device, seg.layers.front(), seg.layers.back(), samples, others)
                        : cost.forward_ms(t.device, seg.layers.front(), seg.layers.back(), samples, others);
    }
    return cached;
  };
  // Start and end times over deps + resource chains, depth first: a task
  // finishes once its predecessors have. Tasks come nearly in a topological
  // order, so most finish on their first visit. A predecessor still open on
  // the path is a cycle (an order the graph cannot run).
  auto predecessors = [&](int t, auto&& visit) {
    if (ws.resource_prev[t] >= 0) visit(ws.resource_prev[t]);
    for (int d : tg.tasks[t].deps) visit(d);
    if (t >= first_allreduce)
      for (int k = ws.extra_begin[t - first_allreduce]; k < ws.extra_begin[t - first_allreduce + 1]; ++k)
        visit(ws.extra[k]);
  };
  bool cycle = false;
  // Finishes t when its predecessors have (true), else stacks the unfinished ones.
  auto try_finish = [&](int t) {
    double start = 0;
    int crit = -1;
    bool waiting = false;
    predecessors(t, [&](int x) {
      if (ws.state[x] != 2) {
        cycle = cycle || ws.state[x] == 1;
        waiting = true;
        ws.stack.push_back(x);
      } else if (crit < 0 || ws.end[x] > start) {
        start = ws.end[x];
        crit = x;
      }
    });
    if (waiting) {
      ws.state[t] = 1;
      return false;
    }
    const Task& task = tg.tasks[t];
    ws.start[t] = start;
    ws.end[t] = start + duration(task) +
                (is_compute(task.kind) && ws.resource_prev[t] < 0 ? cost.first_task_ms(task.device) : 0.0);
    ws.crit[t] = crit;
    ws.state[t] = 2;
    return true;
  };
  for (int root = 0; root < T && !cycle; ++root) {
    if (ws.state[root] == 2) continue;
    ws.stack.clear();
    if (try_finish(root)) continue;
    while (!ws.stack.empty() && !cycle) {
      const int t = ws.stack.back();
      if (ws.state[t] == 2) {
        ws.stack.pop_back();
        continue;
      }
      if (try_finish(t)) ws.stack.pop_back();
    }
    if (!cycle && !try_finish(root)) cycle = true;
  }
  const size_t compute_tasks = static_cast<size_t>(2) * S * M;  // a forward and a backward per (segment, micro-batch)
  if (cycle || ordered != compute_tasks)
    return StepReport::failure(FailureKind::invalid_placement,
                               "the schedule cannot run this task graph (a cycle)", "simulate");

  StepReport r;
  r.ok = true;
  r.source = "simulate";
  r.devices.resize(D);
  std::vector<int64_t>& params = ws.params;
  params.assign(D, 0);
  for (const Segment& seg : tg.segments)
    for (int d : seg.devices) params[d] += seg.param_bytes;  // every replica holds the segment's parameters
  // A device ends when its last compute task, its last send and the
  // allreduces it takes part in are done (the runtime drains its sender),
  // then runs the optimizer update. A queue's last send ends last (FIFO).
  std::vector<int>& end_task = ws.end_task;
  end_task.assign(D, -1);
  for (int d = 0; d < D; ++d) {
    if (!tg.device_order[d].empty()) end_task[d] = tg.device_order[d].back();
    int last_send = -1;
    for (int q = 0; q < Q; ++q) {
      const int x = ws.send_tail[static_cast<size_t>(d) * Q + q];
      if (x >= 0 && (last_send < 0 || ws.end[x] > ws.end[last_send] || (ws.end[x] == ws.end[last_send] && x < last_send)))
        last_send = x;
    }
    if (last_send >= 0 && (end_task[d] < 0 || ws.end[last_send] > ws.end[end_task[d]])) end_task[d] = last_send;
  }
  for (int t = first_allreduce; t < T; ++t)
    for (int d : tg.replicated_groups[tg.tasks[t].replicated_group].devices)
      if (end_task[d] < 0 || ws.end[t] > ws.end[end_task[d]]) end_task[d] = t;
  // aggregation_every = K > 1: the replicas' parameters are averaged (one ring
  // allreduce of the group's parameters) once every K steps, charged 1/K per step.
  std::vector<double>& averaging = ws.averaging;
  averaging.assign(D, 0);
  if (tg.aggregation_every > 1)
    for (const ReplicatedGroup& rg : tg.replicated_groups) {
      const double share = cost.ring_allreduce_ms(rg.devices, rg.param_bytes) / tg.aggregation_every;
      for (int d : rg.devices) averaging[d] += share;
    }
  double step = 0;
  int last_task = -1, last_device = -1;
  double busy_sum = 0, comm_sum = 0;
  for (int d = 0; d < D; ++d) {
    DeviceStats& st = r.devices[d];
    st.device = cost.device_name(d);
    if (tg.device_order[d].empty()) continue;
    // Communication as the runtime counts it: time blocked waiting for a
    // compute task's remote inputs, plus draining the sends after the last
    // task. Peak memory along the order: a forward keeps its activations and
    // received inputs until its backward; a backward's received gradient is
    // live while it runs.
    double prev_end = 0;
    int64_t live = 0, peak = 0;
    for (int t : tg.device_order[d]) {
      const Task& task = tg.tasks[t];
      st.busy_ms += ws.end[t] - ws.start[t];
      bool remote = false;
      int64_t received = 0;
      for (int dep : task.deps)
        if (is_transfer(tg.tasks[dep].kind)) {
          remote = true;
          received += tg.tasks[dep].bytes;
        }
      if (remote) st.comm_ms += std::max(0.0, ws.start[t] - prev_end);
      prev_end = ws.end[t];
      const Segment& seg = tg.segments[task.segment];
      const int64_t kept = cost.activation_bytes_per_sample(seg.layers.front(), seg.layers.back()) *
                           tg.micro_batch_sizes[task.micro_batch];
      if (task.kind == TaskKind::forward) {
        live += kept + received;
        peak = std::max(peak, live);
      } else {
        peak = std::max(peak, live + received);
        live -= kept;
      }
    }
    st.peak_memory_bytes = 3 * params[d] + peak;
    double drained = ws.end[end_task[d]];
    st.comm_ms += std::max(0.0, drained - prev_end) + averaging[d];
    double update = cost.update_ms(d, params[d]);
    st.busy_ms += update;
    const double device_end = drained + averaging[d] + update;
    if (device_end > step) {
      step = device_end;
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
