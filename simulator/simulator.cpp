#include "simulator/simulator.h"

#include <algorithm>
#include <optional>
#include <string>

#include "model/layer_graph.h"
#include "core/cluster.h"

namespace tapp {
namespace {

// A device's statistics, accumulated over its compute tasks in device order.
struct DeviceTally {
  double busy_ms = 0, comm_ms = 0;
  double prev_end = 0;        // end of its previous compute task
  int64_t live = 0, peak = 0;  // activation and received bytes held
  int last_compute = -1;      // its latest compute task (the segment replay: its segment); -1 before the first
  size_t next = 0;            // in-order replay: position in its device_order
};

// Reused buffers of one thread's replays.
struct Workspace {
  std::vector<double> start, end;
  std::vector<int> resource_prev, crit;
  std::vector<int> last_on_link, send_tail;  // [device][queue]: the queue's last task; its last send
  std::vector<int> extra_begin, extra;       // per allreduce: its predecessors on the participants' send queues
  std::vector<char> state;
  std::vector<int> stack;
  // Per segment, read once per replay: what every compute task asks of it (a
  // Segment's layers and replicas are a pointer further away).
  struct SegmentFacts {
    int64_t kept_per_sample = 0;  // activation bytes per sample its forward keeps
    bool recompute = false;
    bool one_replica = true;
  };
  std::vector<SegmentFacts> segment;
  std::vector<int> compute_cost_at;  // per segment: where its cached compute costs start in compute_cost
  std::vector<double> compute_cost;  // [segment][replica][micro-batch size class][forward, backward]; -1 = not yet
  std::vector<int64_t> params;
  std::vector<int> end_task;
  std::vector<double> averaging, drained;
  std::vector<char> used;  // per device: it runs a compute task
  std::vector<DeviceTally> tally;
  // The segment replay's ends: [segment x micro-batch] forward and backward,
  // [edge x micro-batch] activation and gradient transfers, per send queue.
  std::vector<double> forward_end, backward_end, activation_end, gradient_end, queue_end;
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

namespace {

// A compute task's cost (its layers' time, recomputation, AL's update),
// cached per (segment, replica, micro-batch size class, direction): micro-batch
// sizes take at most two values. Fills ws.segment, which the tally reads.
class ComputeCosts {
 public:
  ComputeCosts(const SegmentGraph& sg, const CostModel& cost, Workspace& ws, const std::vector<char>& used)
      : sg_(sg), cost_(cost), ws_(ws) {
    for (int d = 0; d < sg.num_devices; ++d) local_used_ += used[d] && cost.is_local(d);
    const int S = static_cast<int>(sg.segments.size());
    ws.compute_cost_at.resize(S + 1);
    ws.compute_cost_at[0] = 0;
    ws.segment.resize(S);
    for (int s = 0; s < S; ++s) {
      const Segment& seg = sg.segments[s];
      ws.compute_cost_at[s + 1] = ws.compute_cost_at[s] + 4 * seg.replica_count();
      ws.segment[s] = {cost.activation_bytes_per_sample(seg.layers.front(), seg.layers.back()), seg.recompute,
                       seg.replica_count() == 1};
    }
    ws.compute_cost.assign(ws.compute_cost_at[S], -1.0);
    first_size_ = sg.micro_batches() > 0 ? sg.micro_batch_sizes[0] : 0;
  }

  __attribute__((always_inline)) double of(int segment, int micro_batch, bool backward, int device) {
    const int64_t samples = sg_.micro_batch_sizes[micro_batch];
    const int replica = ws_.segment[segment].one_replica ? 0 : sg_.segments[segment].replica_of(micro_batch);
    double& cached =
        ws_.compute_cost[ws_.compute_cost_at[segment] + (replica * 2 + (samples != first_size_)) * 2 + backward];
    if (cached < 0) cached = compute(sg_.segments[segment], samples, backward, device);
    return cached;
  }

 private:
  double compute(const Segment& seg, int64_t samples, bool backward, int device) const {
    const int others = cost_.is_local(device) ? std::max(0, local_used_ - 1) : 0;
    const int first = seg.layers.front(), last = seg.layers.back();
    double ms = backward ? cost_.backward_ms(device, first, last, samples, others)
                         : cost_.forward_ms(device, first, last, samples, others);
    // Recomputation: the backward runs the segment's forward again first.
    if (backward && seg.recompute) ms += cost_.forward_ms(device, first, last, samples, others);
    // AL: the block's update follows every backward, inside the task, so a slow device is
    // slow at it too (the runtime's emulation stretches the whole task); no final update.
    if (backward && sg_.schedule == Schedule::al) ms += cost_.host_update_ms(seg.param_bytes) * cost_.inverse_speed(device);
    return ms;
  }

  const SegmentGraph& sg_;
  const CostModel& cost_;
  Workspace& ws_;
  int local_used_ = 0;  // local devices the placement uses (they share the machine's cores)
  int64_t first_size_ = 0;
};

// A compute task's share of its device's statistics, counted as the runtime
// counts them: waiting for a remote input is communication; a forward keeps
// its activations and received inputs until its backward; a backward's
// received gradient is live while it runs.
__attribute__((always_inline)) inline void tally_compute(DeviceTally& d, const Workspace::SegmentFacts& seg,
                                                         bool forward, bool remote_input, int64_t received,
                                                         int64_t samples, double start, double end) {
  d.busy_ms += end - start;
  d.comm_ms += remote_input ? std::max(0.0, start - d.prev_end) : 0.0;
  d.prev_end = end;
  const int64_t kept = seg.kept_per_sample * samples;
  // A recomputing segment keeps only its received inputs until its
  // backward, which holds one micro-batch's activations while it runs.
  const int64_t held = seg.recompute ? 0 : kept;
  if (forward) {
    d.live += held + received;
    d.peak = std::max(d.peak, d.live + (seg.recompute ? kept : 0));
  } else {
    d.peak = std::max(d.peak, d.live + received + (seg.recompute ? kept : 0));
    d.live -= held;
  }
}

// Per device: whether it runs a compute task (filled into `used`, returned).
const std::vector<char>& devices_used(const SegmentGraph& sg, std::vector<char>& used) {
  used.assign(sg.num_devices, 0);
  for (int d : sg.device_at) used[d] = 1;
  return used;
}

// One replay: start and end of every task, then the step.
class Replay {
 public:
  // keep_times: record every task's start and critical predecessor (a
  // timeline or TaskTimes asks for them; a search's evaluations do not).
  Replay(const TaskGraph& tg, const CostModel& cost, const SimulateOptions& options, Workspace& ws, bool keep_times)
      : tg_(tg), cost_(cost), ws_(ws), costs_(tg, cost, ws, used_devices(tg, ws)), T_(static_cast<int>(tg.tasks.size())),
        D_(tg.num_devices), Q_(options.send_queue_per_device ? 1 : tg.num_devices), keep_times_(keep_times) {
    first_allreduce_ = T_ - static_cast<int>(std::count_if(tg.replicated_groups.begin(), tg.replicated_groups.end(),
                                                          [](const ReplicatedGroup& rg) { return rg.allreduce_task >= 0; }));
    ws.start.resize(T_);
    ws.end.resize(T_);
    ws.crit.resize(T_);
    ws.tally.assign(D_, DeviceTally{});
  }

  // Times every task. False when the device orders cannot run (a cycle) or the graph is malformed.
  bool run(std::string& why) {
    if (replay_in_order()) return true;
    return replay_depth_first(why);
  }

  int first_allreduce() const { return first_allreduce_; }
  int queues() const { return Q_; }

 private:
  // Whether each device runs a compute task (ComputeCosts counts the local ones in use).
  static const std::vector<char>& used_devices(const TaskGraph& tg, Workspace& ws) {
    ws.used.assign(tg.num_devices, 0);
    for (int d = 0; d < tg.num_devices; ++d) ws.used[d] = !tg.device_order[d].empty();
    return ws.used;
  }

  // (Inlined into the replay loop: a call per task cost the branch-parallel benchmark 10%.)
  __attribute__((always_inline)) double duration(const Task& t) {
    if (is_transfer(t.kind)) return cost_.transfer_ms(t.device, t.to_device, t.bytes);
    if (t.kind == TaskKind::allreduce)
      return cost_.ring_allreduce_ms(tg_.replicated_groups[t.replicated_group].devices, t.bytes);
    return costs_.of(t.segment, t.micro_batch, t.kind == TaskKind::backward, t.device);
  }

  // The latest-ending predecessor sets the start (the first such one is the critical predecessor).
  struct Latest {
    double start = 0;
    int crit = -1;
    void consider(int x, const std::vector<double>& end) {
      if (crit < 0 || end[x] > start) {
        start = end[x];
        crit = x;
      }
    }
  };

  // Its end (and, when kept, start and critical predecessor); returns the end.
  __attribute__((always_inline)) double finish(int t, const Latest& latest, bool first_on_device) {
    const Task& task = tg_.tasks[t];
    const double end = latest.start + duration(task) + (first_on_device ? cost_.first_task_ms(task.device) : 0.0);
    ws_.end[t] = end;
    if (keep_times_) {
      ws_.start[t] = latest.start;
      ws_.crit[t] = latest.crit;
    }
    return end;
  }

  // A compute task's share of its device's statistics (tally_compute).
  void tally(int t) { tally(tg_.tasks[t], ws_.start[t], ws_.end[t]); }
  __attribute__((always_inline)) void tally(const Task& task, double start, double end) {
    tally_compute(ws_.tally[task.device], ws_.segment[task.segment], task.kind == TaskKind::forward,
                  task.remote_input, task.bytes, tg_.micro_batch_sizes[task.micro_batch], start, end);
  }

  // An allreduce's predecessors on its participants' send queues (per directed
  // link: each participant's link to its ring successor); it becomes their tail.
  template <typename Visit>
  void allreduce_queues(int t, Visit&& visit) {
    const std::vector<int>& ring = tg_.replicated_groups[tg_.tasks[t].replicated_group].devices;
    for (size_t k = 0; k < ring.size(); ++k) {
      const int queue = Q_ == 1 ? 0 : ring[(k + 1) % ring.size()];
      int& last = ws_.last_on_link[static_cast<size_t>(ring[k]) * Q_ + queue];
      if (last >= 0) visit(last);
      last = t;
    }
  }

  // The fast path: one pass in the builder's replay order, which puts every
  // task after its deps, its device's previous task and its queue's previous
  // send. Checked as it goes; false (nothing kept) when the order does not hold.
  bool replay_in_order() {
    if (tg_.replay_order.size() != static_cast<size_t>(T_)) return false;
    ws_.end.assign(T_, -1.0);  // -1: not yet replayed (every end is >= 0)
    ws_.last_on_link.assign(static_cast<size_t>(D_) * Q_, -1);
    bool tails_kept = false;
    for (int t : tg_.replay_order) {
      const Task& task = tg_.tasks[t];
      if (ws_.end[t] >= 0) return false;  // twice in the order
      // Branch-free (the predecessors' order of ends is data, and mispredicted
      // branches were most of the replay): every end is >= 0, so the first
      // predecessor always beats -1 and a later one must end strictly later.
      Latest latest;
      latest.start = -1;
      double earliest = 0;  // < 0: a predecessor has not run yet
      auto consider = [&](int x) {
        const double end = ws_.end[x];
        earliest = std::min(earliest, end);
        const bool later = end > latest.start;
        latest.start = later ? end : latest.start;
        latest.crit = later ? x : latest.crit;
      };
      bool first_on_device = false;
      if (is_compute(task.kind)) {
        DeviceTally& d = ws_.tally[task.device];
        const auto& order = tg_.device_order[task.device];
        if (d.next >= order.size() || order[d.next] != t) return false;
        ++d.next;
        first_on_device = d.last_compute < 0;
        if (!first_on_device) consider(d.last_compute);
        for (int x : tg_.deps(task)) consider(x);
        d.last_compute = t;
      } else if (is_transfer(task.kind)) {
        const int producer = tg_.deps(task)[0];
        if (producer != ws_.tally[task.device].last_compute) return false;  // sent in posting order
        int& last = ws_.last_on_link[static_cast<size_t>(task.device) * Q_ + (Q_ == 1 ? 0 : task.to_device)];
        if (last >= 0) consider(last);
        consider(producer);
        last = t;
      } else {
        if (t < first_allreduce_) return false;  // allreduces come last
        if (!tails_kept) keep_send_tails(tails_kept);
        for (int x : tg_.deps(task)) consider(x);
        allreduce_queues(t, consider);
      }
      if (earliest < 0) return false;
      if (latest.crit < 0) latest.start = 0;
      const double end = finish(t, latest, first_on_device);
      if (is_compute(task.kind)) tally(task, latest.start, end);
    }
    if (!tails_kept) keep_send_tails(tails_kept);
    for (int d = 0; d < D_; ++d)
      if (ws_.tally[d].next != tg_.device_order[d].size()) return false;
    return true;
  }

  void keep_send_tails(bool& kept) {
    ws_.send_tail = ws_.last_on_link;
    kept = true;
  }

  // Any graph: resource chains, then depth first (a task finishes once its
  // predecessors have; a predecessor still open on the path is a cycle).
  bool replay_depth_first(std::string& why) {
    keep_times_ = true;  // its tally reads the starts back
    ws_.tally.assign(D_, DeviceTally{});
    ws_.resource_prev.assign(T_, -1);
    ws_.last_on_link.assign(static_cast<size_t>(D_) * Q_, -1);
    size_t ordered = 0;
    for (int d = 0; d < D_; ++d) {
      int prev = -1;
      for (int t : tg_.device_order[d]) {
        ws_.resource_prev[t] = prev;
        prev = t;
        ++ordered;
        // A compute task's sends directly follow it in `tasks` (the builder's layout).
        for (int x = t + 1; x < T_ && is_transfer(tg_.tasks[x].kind); ++x) {
          const Task& send = tg_.tasks[x];
          if (tg_.deps(send)[0] != t) {
            why = "task graph: a transfer does not follow the task that produces it";
            return false;
          }
          int& last = ws_.last_on_link[static_cast<size_t>(d) * Q_ + (Q_ == 1 ? 0 : send.to_device)];
          ws_.resource_prev[x] = last;
          last = x;
        }
      }
    }
    ws_.send_tail = ws_.last_on_link;
    ws_.extra_begin.assign(T_ - first_allreduce_ + 1, 0);
    ws_.extra.clear();
    for (int t = first_allreduce_; t < T_; ++t) {
      if (tg_.tasks[t].kind != TaskKind::allreduce) {
        why = "task graph: allreduces must come last";
        return false;
      }
      allreduce_queues(t, [&](int x) { ws_.extra.push_back(x); });
      ws_.extra_begin[t - first_allreduce_ + 1] = static_cast<int>(ws_.extra.size());
    }
    why = "the schedule cannot run this task graph (a cycle)";
    const size_t compute_tasks = static_cast<size_t>(2) * tg_.segments.size() * tg_.micro_batches();
    if (ordered != compute_tasks) return false;
    auto predecessors = [&](int t, auto&& visit) {
      if (ws_.resource_prev[t] >= 0) visit(ws_.resource_prev[t]);
      for (int d : tg_.deps(t)) visit(d);
      if (t >= first_allreduce_)
        for (int k = ws_.extra_begin[t - first_allreduce_]; k < ws_.extra_begin[t - first_allreduce_ + 1]; ++k)
          visit(ws_.extra[k]);
    };
    ws_.state.assign(T_, 0);  // 0 unvisited, 1 open (waiting for predecessors), 2 finished
    bool cycle = false;
    // Finishes t when its predecessors have (true), else stacks the unfinished ones.
    auto try_finish = [&](int t) {
      Latest latest;
      bool waiting = false;
      predecessors(t, [&](int x) {
        if (ws_.state[x] != 2) {
          cycle = cycle || ws_.state[x] == 1;
          waiting = true;
          ws_.stack.push_back(x);
        } else {
          latest.consider(x, ws_.end);
        }
      });
      if (waiting) {
        ws_.state[t] = 1;
        return false;
      }
      finish(t, latest, is_compute(tg_.tasks[t].kind) && ws_.resource_prev[t] < 0);
      ws_.state[t] = 2;
      return true;
    };
    for (int root = 0; root < T_ && !cycle; ++root) {
      if (ws_.state[root] == 2) continue;
      ws_.stack.clear();
      if (try_finish(root)) continue;
      while (!ws_.stack.empty() && !cycle) {
        const int t = ws_.stack.back();
        if (ws_.state[t] == 2)
          ws_.stack.pop_back();
        else if (try_finish(t))
          ws_.stack.pop_back();
      }
      if (!cycle && !try_finish(root)) cycle = true;
    }
    if (cycle) return false;
    for (int d = 0; d < D_; ++d)
      for (int t : tg_.device_order[d]) tally(t);
    return true;
  }

  const TaskGraph& tg_;
  const CostModel& cost_;
  Workspace& ws_;
  ComputeCosts costs_;
  const int T_, D_, Q_;
  bool keep_times_ = true;
  int first_allreduce_ = 0;
};

// The search's replay: the step that Replay gives for the task graph
// build_task_graph makes of `sg`, with no task built. A compute step's inputs
// and sends are those add_tasks makes tasks of (for_each_input,
// for_each_send): an input is there when its producer ends, or the transfer
// that brings it where the two run on different devices; the allreduces close
// each participant's send queue. No timeline, no per-task
// times. tests/simulator/test_simulator.cpp checks it against the task graph's
// replay on random placements.
class SegmentReplay {
 public:
  SegmentReplay(const SegmentGraph& sg, const CostModel& cost, const SimulateOptions& options, Workspace& ws)
      : sg_(sg), cost_(cost), ws_(ws), costs_(sg, cost, ws, devices_used(sg, ws.used)),
        M_(sg.micro_batches()), Q_(options.send_queue_per_device ? 1 : sg.num_devices) {}

  // Fills ws.tally and ws.drained. False when the run order puts a step before an input's producer.
  bool run() {
    const size_t SM = sg_.segments.size() * static_cast<size_t>(M_);
    const size_t EM = sg_.edges.size() * static_cast<size_t>(M_);
    ws_.forward_end.assign(SM, -1.0);  // -1: not yet run (every end is >= 0)
    ws_.backward_end.assign(SM, -1.0);
    ws_.activation_end.assign(EM, -1.0);
    ws_.gradient_end.assign(EM, -1.0);
    ws_.queue_end.assign(static_cast<size_t>(sg_.num_devices) * Q_, 0.0);  // 0: empty (a send starts >= 0)
    ws_.tally.assign(sg_.num_devices, DeviceTally{});
    for (const ComputeStep& step : sg_.run_order)
      if (!(step.backward ? run_step<true>(step.segment, step.micro_batch)
                          : run_step<false>(step.segment, step.micro_batch)))
        return false;
    drain();
    return true;
  }

 private:
  size_t at(int s, int m) const { return static_cast<size_t>(s) * M_ + m; }

  // What a compute step waits for: its device's previous task, then each input's arrival.
  struct Inputs {
    double start = 0;
    double earliest = 0;  // < 0: an input has not been produced yet
    int64_t received = 0;
    bool remote = false;
    void local(double end) {
      start = std::max(start, end);
      earliest = std::min(earliest, end);
    }
    void arrived(double end, int64_t bytes) {
      local(end);
      received += bytes;
      remote = true;
    }
  };

  // A compute step: it starts when its device is free and its inputs are
  // there (for_each_input, and a backward's own forward), then posts its sends.
  // (One instance per direction: the direction's tests fold away in the loop.)
  template <bool Backward>
  bool run_step(int s, int m) {
    const ComputeStep t{s, m, Backward};
    const size_t M = static_cast<size_t>(M_);
    const int d = sg_.device_at[s * M + m];
    const int64_t samples = sg_.micro_batch_sizes[m];
    const SegmentEdge* edges = sg_.edges.data();
    // A forward's inputs are activations (its producers' forwards), a backward's
    // gradients; [segment or edge x M] tables, at this micro-batch.
    const double* produced = (Backward ? ws_.backward_end : ws_.forward_end).data() + m;
    double* transferred = (Backward ? ws_.gradient_end : ws_.activation_end).data() + m;
    Inputs in{ws_.tally[d].prev_end};
    for_each_input(sg_, t, [&](int e, int peer, bool remote) {
      if (remote)
        in.arrived(transferred[e * M], edges[e].bytes_per_sample * samples);
      else
        in.local(produced[peer * M]);
    });
    if (Backward) in.local(ws_.forward_end[s * M + m]);
    if (in.earliest < 0) return false;
    const double end = finish(s, m, Backward, d, in);
    (Backward ? ws_.backward_end : ws_.forward_end)[s * M + m] = end;
    for_each_send(sg_, t, [&](int e, int there) {
      transferred[e * M] = send(d, there, end, edges[e].bytes_per_sample * samples);
    });
    return true;
  }

  // Runs the step on device d from its inputs' start: its end, tallied.
  double finish(int s, int m, bool backward, int d, const Inputs& in) {
    DeviceTally& tally = ws_.tally[d];
    const bool first_on_device = tally.last_compute < 0;
    tally.last_compute = s;
    const double end =
        in.start + costs_.of(s, m, backward, d) + (first_on_device ? cost_.first_task_ms(d) : 0.0);
    tally_compute(tally, ws_.segment[s], !backward, in.remote, in.received, sg_.micro_batch_sizes[m], in.start, end);
    return end;
  }

  // A send from d to `there`, posted when its producer ends at `ready`: it
  // waits for the queue's earlier sends; returns its end.
  double send(int d, int there, double ready, int64_t bytes) {
    double& queue = ws_.queue_end[static_cast<size_t>(d) * Q_ + (Q_ == 1 ? 0 : there)];
    queue = std::max(queue, ready) + cost_.transfer_ms(d, there, bytes);
    return queue;
  }

  // Each device's drained time: its last compute step, its queues' last
  // sends, then the allreduces (ascending group) it takes part in, each at
  // the end of its participants' queues (per directed link: the link to the
  // ring successor) once every backward of the group is done.
  void drain() {
    const int D = sg_.num_devices;
    ws_.drained.assign(D, 0.0);
    for (int d = 0; d < D; ++d) {
      double last = ws_.tally[d].prev_end;
      for (int q = 0; q < Q_; ++q) last = std::max(last, ws_.queue_end[static_cast<size_t>(d) * Q_ + q]);
      ws_.drained[d] = last;
    }
    if (sg_.aggregation_every != 1) return;
    for (const ReplicatedGroup& rg : sg_.replicated_groups) {
      const std::vector<int>& ring = rg.devices;
      double start = 0;
      for (int s : rg.segments)
        for (int m = 0; m < M_; ++m) start = std::max(start, ws_.backward_end[at(s, m)]);
      for (size_t k = 0; k < ring.size(); ++k) start = std::max(start, queue_of_ring(ring, k));
      const double end = start + cost_.ring_allreduce_ms(ring, rg.param_bytes);
      for (size_t k = 0; k < ring.size(); ++k) {
        queue_of_ring(ring, k) = end;
        ws_.drained[ring[k]] = std::max(ws_.drained[ring[k]], end);
      }
    }
  }
  double& queue_of_ring(const std::vector<int>& ring, size_t k) {
    const int queue = Q_ == 1 ? 0 : ring[(k + 1) % ring.size()];
    return ws_.queue_end[static_cast<size_t>(ring[k]) * Q_ + queue];
  }

  const SegmentGraph& sg_;
  const CostModel& cost_;
  Workspace& ws_;
  ComputeCosts costs_;
  const int M_, Q_;
};

// The step from each device's drained time (ws.drained: its last compute
// task, its last send and its allreduces done) and its tally: then it runs
// the optimizer update (over the parameters of every segment it holds a
// replica of); the step ends when every device has, plus a per-step
// overhead. Fills r's step and per-device statistics; returns the device
// that ends last (-1 when none runs anything).
int report_step(const SegmentGraph& sg, const CostModel& cost, Workspace& ws, StepReport& r) {
  const int D = sg.num_devices;
  r.ok = true;
  r.source = "simulate";
  r.devices.resize(D);
  std::vector<int64_t>& params = ws.params;
  params.assign(D, 0);
  for (const Segment& seg : sg.segments)
    for (int d : seg.devices) params[d] += seg.param_bytes;  // every replica holds the segment's parameters
  // aggregation_every = K > 1: the replicas' parameters are averaged (one ring
  // allreduce of the group's parameters) once every K steps, charged 1/K per step.
  std::vector<double>& averaging = ws.averaging;
  averaging.assign(D, 0);
  if (sg.aggregation_every > 1)
    for (const ReplicatedGroup& rg : sg.replicated_groups) {
      const double share = cost.ring_allreduce_ms(rg.devices, rg.param_bytes) / sg.aggregation_every;
      for (int d : rg.devices) averaging[d] += share;
    }
  double step = 0;
  int last_device = -1;
  double busy_sum = 0, comm_sum = 0;
  for (int d = 0; d < D; ++d) {
    DeviceStats& st = r.devices[d];
    st.device = cost.device_name(d);
    if (!ws.used[d]) continue;
    // Communication: waiting for remote inputs (tallied) plus draining the sends after the last task.
    const DeviceTally& tally = ws.tally[d];
    st.busy_ms = tally.busy_ms;
    st.peak_memory_bytes = training_state_bytes(params[d], sg.optimizer) + tally.peak;
    const double drained = ws.drained[d];
    st.comm_ms = tally.comm_ms + std::max(0.0, drained - tally.prev_end) + averaging[d];
    double update = sg.schedule == Schedule::al ? 0.0 : cost.update_ms(d, params[d]);
    st.busy_ms += update;
    const double device_end = drained + averaging[d] + update;
    if (device_end > step) {
      step = device_end;
      last_device = d;
    }
    busy_sum += st.busy_ms;
    comm_sum += st.comm_ms;
  }
  step += cost.step_overhead_ms();
  r.step_ms = step;
  for (int d = 0; d < D; ++d) {
    DeviceStats& st = r.devices[d];
    if (!ws.used[d]) continue;
    st.idle_ms = std::max(0.0, step - st.busy_ms - st.comm_ms);
  }
  r.comm_fraction = busy_sum + comm_sum > 0 ? comm_sum / (busy_sum + comm_sum) : 0;
  return last_device;
}

// A graph and a cost model of different clusters: the failure that says so (else nullopt).
std::optional<StepReport> cluster_mismatch(const SegmentGraph& sg, const CostModel& cost) {
  if (sg.num_devices == cost.num_devices()) return std::nullopt;
  return StepReport::failure(FailureKind::invalid_placement,
                             "task graph has " + std::to_string(sg.num_devices) + " devices, the cost model " +
                                 std::to_string(cost.num_devices()),
                             "simulate");
}

}  // namespace

StepReport simulate(const TaskGraph& tg, const CostModel& cost, const SimulateOptions& options, TaskTimes* times) {
  const int T = static_cast<int>(tg.tasks.size());
  const int D = tg.num_devices;
  if (auto mismatch = cluster_mismatch(tg, cost)) return *mismatch;
  Workspace& ws = workspace();
  Replay replay(tg, cost, options, ws, options.timeline || times != nullptr);
  std::string why;
  if (!replay.run(why)) return StepReport::failure(FailureKind::invalid_placement, why, "simulate");
  const int Q = replay.queues();
  const int first_allreduce = replay.first_allreduce();

  // A device ends when its last compute task, its last send and the
  // allreduces it takes part in are done (the runtime drains its sender).
  // A queue's last send ends last (FIFO).
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
  ws.drained.assign(D, 0.0);
  for (int d = 0; d < D; ++d)
    if (end_task[d] >= 0) ws.drained[d] = ws.end[end_task[d]];
  StepReport r;
  const int last_device = report_step(tg, cost, ws, r);
  const int last_task = last_device >= 0 ? end_task[last_device] : -1;

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

StepReport simulate_segments(const SegmentGraph& sg, const CostModel& cost, const SimulateOptions& options) {
  if (auto mismatch = cluster_mismatch(sg, cost)) return *mismatch;
  Workspace& ws = workspace();
  SegmentReplay replay(sg, cost, options, ws);
  if (!replay.run())
    return StepReport::failure(FailureKind::invalid_placement, "the run order puts a task before its inputs",
                               "simulate");
  StepReport r;
  report_step(sg, cost, ws, r);
  return r;
}

Simulator::Simulator(const LayerGraph& g, const Cluster& c, CostModel cost, int64_t batch_size)
    : graph_(&g), cluster_(&c), cost_(std::move(cost)), batch_size_(batch_size) {}
Simulator::~Simulator() = default;
Simulator::Simulator(Simulator&&) noexcept = default;

StepReport Simulator::evaluate(const Placement& p, const SimulateOptions& options) {
  // A timeline names tasks: only then are they built (the search's path replays the segments).
  const bool tasks = options.timeline;
  if (Status s = tasks ? build_task_graph_into(*graph_, p, *cluster_, batch_size_, tg_)
                       : build_segment_graph_into(*graph_, p, *cluster_, batch_size_, tg_);
      !s)
    return StepReport::failure(FailureKind::invalid_placement, s.message(), "simulate");
  if (Status s = check_memory(p, *graph_, *cluster_, batch_size_); !s)
    return StepReport::failure(FailureKind::out_of_memory, s.message(), "simulate");
  return tasks ? simulate(tg_, cost_, options) : simulate_segments(tg_, cost_, options);
}

}  // namespace tapp
