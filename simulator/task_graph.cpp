#include "simulator/task_graph.h"

#include <algorithm>
#include <set>
#include <cstdint>
#include <limits>

#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "core/cluster.h"

namespace tapp {
namespace {

// A compute task ready to run on its device, with its rank in 1F1B's list
// schedule (priority_of: smaller runs first; read on every step, so one number).
struct ReadyTask {
  uint64_t priority;
  int segment, micro_batch;
  bool forward() const { return priority >> 63; }
};

// Scratch of one build, reused across builds on the same thread.
struct Scratch {
  std::vector<int> seg_of_layer;
  std::vector<int> key;  // per layer: the segment key (device and recompute, or the replicated group)
  std::vector<int> run;  // per layer: its run of one key
  std::vector<char> split_after;           // per layer: it ends its segment
  std::vector<int> last_read, runs_read;  // per run: the last of its layers the current run reads
  std::vector<int> fill;         // per segment: its next slot in pred_edges
  std::vector<int> xfwd, xbwd;  // per (edge, micro-batch): transfer task id, -1 when same device
  std::vector<int> sends;       // per task: how many transfers follow it (its sends)
  std::vector<int> forward_id, backward_id;  // per (segment, micro-batch): its task
  std::vector<int> stage_begin;  // per stage: its first segment (then the segment count)
  // 1F1B's list schedule.
  std::vector<int> waiting;        // per compute task (order_1f1b's index): the compute tasks it still waits for
  std::vector<int> virtual_stage;  // interleaved 1F1B: per (segment, micro-batch)
  std::vector<std::vector<ReadyTask>> ready;  // per device: compute tasks ready to run
  std::vector<ComputeStep> released;    // ready from the next step on
  std::vector<int> left;                // per (device, micro-batch): compute tasks not yet run
  std::vector<char> started;            // per (device, micro-batch): one of them ran
  std::vector<int> in_flight;           // per device: micro-batches started and not finished
  std::vector<int> limit;               // per device: how many it may start (in_flight_limits, widened)
  // Timed 1F1B (estimated ms).
  std::vector<double> ready_at;    // per compute task: when its last input arrives
  std::vector<double> free_at;     // per device: when its last task ends
  std::vector<double> segment_ms;  // per segment: forward, then backward, ms per sample at speed 1
  // Segments a smaller graph did not need, kept with their vectors' capacity
  // for the next larger one (so a search loop stops allocating).
  std::vector<Segment> spare_segments;
};

// Grows `v` by one, taking an element from `spare` when there is one.
template <typename T>
void grow(std::vector<T>& v, std::vector<T>& spare) {
  if (spare.empty()) {
    v.emplace_back();
    return;
  }
  v.push_back(std::move(spare.back()));
  spare.pop_back();
}

// Shrinks `v` to n elements, keeping the rest in `spare`.
template <typename T>
void shrink(std::vector<T>& v, size_t n, std::vector<T>& spare) {
  while (v.size() > n) {
    spare.push_back(std::move(v.back()));
    v.pop_back();
  }
}

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Appends tasks and their deps (a task's deps go in before the next task
// starts, so each task's deps are one run of TaskGraph::dep_ids). Overwrites
// the previous build's entries in place: a search loop builds thousands of
// graphs a second, and growing the vectors anew cost 10% of an evaluation.
struct TaskSink {
  TaskGraph& tg;
  size_t used = 0, deps_used = 0;
  Task& next(int& id) {
    if (used == tg.tasks.size()) tg.tasks.emplace_back();
    Task& t = tg.tasks[used];
    t.peer_segment = -1;
    t.replicated_group = -1;
    t.to_device = -1;
    t.bytes = 0;
    t.remote_input = false;
    t.first_dep = static_cast<int>(deps_used);
    t.dep_count = 0;
    id = static_cast<int>(used++);
    return t;
  }
  void add_dep(Task& t, int dep) {
    if (deps_used == tg.dep_ids.size())
      tg.dep_ids.push_back(dep);
    else
      tg.dep_ids[deps_used] = dep;
    ++deps_used;
    ++t.dep_count;
  }
  // An input of compute task t: its producer when that ran on t's device, else
  // the transfer that brings `bytes` from it (t then has a remote input).
  void add_input(Task& t, bool remote, int producer, int transfer, int64_t bytes) {
    if (!remote) {
      add_dep(t, producer);
      return;
    }
    add_dep(t, transfer);
    t.remote_input = true;
    t.bytes += bytes;
  }
  void close() {
    tg.tasks.resize(used);
    tg.dep_ids.resize(deps_used);
  }
};

void reset_segment(Segment& seg) {
  seg.layers.clear();
  seg.preds.clear();
  seg.succs.clear();
  seg.reads_model_input = false;
  seg.computes_loss = false;
  seg.recompute = false;
  seg.param_bytes = 0;
  seg.replica_of_micro_batch.clear();
}

// Segments: a new one starts where the layer's devices change, and after a
// layer that is the last one another run reads of its own run (outside AL
// form): that run can start there, not after the rest of this one. A
// replicated group's layers are keyed by the group (its segments hold only its
// layers, one allreduce each); other layers by their device, so consecutive
// unreplicated groups on one device share a segment.
void split_segments(const LayerGraph& g, const Placement& p, SegmentGraph& tg, Scratch& sc) {
  const int L = static_cast<int>(g.layers.size());
  sc.seg_of_layer.assign(L, -1);
  // Per layer: its key (what a segment shares) and its run (maximal stretch of one key).
  // A run that reads another run only up to layer q (not its later layers)
  // can start once q is done: q ends its segment (outside AL form, whose
  // blocks on one device share a segment for their local losses). One pass.
  sc.key.resize(L);
  sc.run.resize(L);
  sc.split_after.assign(L, 0);
  sc.last_read.assign(L, -1);  // per run (at most L)
  sc.runs_read.clear();
  auto flush = [&]() {  // the run just read: mark the last layer it needs of each other run
    for (int r : sc.runs_read) {
      sc.split_after[sc.last_read[r]] = 1;
      sc.last_read[r] = -1;
    }
    sc.runs_read.clear();
  };
  const bool al = g.is_al_form();
  for (int i = 0; i < L; ++i) {
    const int grp = p.layer_group[i];
    sc.key[i] = p.replica_count(grp) > 1 ? -1 - grp : p.group_device[grp] * 2 + (p.recomputes(grp) ? 1 : 0);
    const bool new_run = i > 0 && sc.key[i] != sc.key[i - 1];
    sc.run[i] = i == 0 ? 0 : sc.run[i - 1] + new_run;
    if (al) continue;
    if (new_run) flush();
    for (int q : g.layers[i].inputs) {
      const int r = sc.run[q];
      if (r == sc.run[i]) continue;
      if (sc.last_read[r] < 0) sc.runs_read.push_back(r);
      sc.last_read[r] = std::max(sc.last_read[r], q);
    }
  }
  flush();
  // Segments, and (from, to, producer layer) for every cross-segment input.
  struct Cross {
    int from, to, layer;
  };
  thread_local std::vector<Cross> cross;
  cross.clear();
  size_t S = 0;
  int prev_key = 0, stage = -1;
  for (int i = 0; i < L; ++i) {
    const int grp = p.layer_group[i];
    const bool replicated = p.replica_count(grp) > 1;
    const int key = sc.key[i];
    if (S == 0 || key != prev_key || sc.split_after[i - 1]) {
      if (S == tg.segments.size()) grow(tg.segments, sc.spare_segments);
      Segment& seg = tg.segments[S++];
      reset_segment(seg);
      if (S == 1 || key != prev_key) ++stage;
      seg.stage = stage;
      seg.group = grp;
      seg.recompute = p.recomputes(grp);
      seg.devices.assign(1, p.group_device[grp]);
      if (replicated) seg.devices.insert(seg.devices.end(), p.group_replicas[grp].begin(), p.group_replicas[grp].end());
      if (replicated && p.has_replica_weights(grp)) seg.replica_of_micro_batch = p.replica_order(grp);
      prev_key = key;
    }
    const int s = static_cast<int>(S) - 1;
    Segment& seg = tg.segments[s];
    seg.layers.push_back(i);
    seg.param_bytes += g.layers[i].param_bytes();
    sc.seg_of_layer[i] = s;
    if (g.layers[i].inputs.empty()) seg.reads_model_input = true;
    for (int q : g.layers[i].inputs)
      if (sc.seg_of_layer[q] != s) cross.push_back({sc.seg_of_layer[q], s, q});
  }
  shrink(tg.segments, S, sc.spare_segments);
  // Segment edges sorted by (from, to, layer); an edge's payload is each boundary layer's output once.
  tg.edges.clear();
  std::sort(cross.begin(), cross.end(), [](const Cross& a, const Cross& b) {
    return a.from != b.from ? a.from < b.from : a.to != b.to ? a.to < b.to : a.layer < b.layer;
  });
  tg.succ_begin.assign(S + 1, 0);
  for (size_t k = 0; k < cross.size(); ++k) {
    const Cross& x = cross[k];
    bool new_edge = k == 0 || x.from != cross[k - 1].from || x.to != cross[k - 1].to;
    if (new_edge) {
      tg.edges.push_back({x.from, x.to, 0});
      ++tg.succ_begin[x.from + 1];
      tg.segments[x.from].succs.push_back(x.to);
    }
    // A boundary layer read by several layers of `to` travels once.
    if (new_edge || x.layer != cross[k - 1].layer) tg.edges.back().bytes_per_sample += g.layers[x.layer].activation_bytes();
  }
  for (size_t s = 0; s < S; ++s) tg.succ_begin[s + 1] += tg.succ_begin[s];
  const int E = static_cast<int>(tg.edges.size());
  tg.pred_begin.assign(S + 1, 0);
  for (const SegmentEdge& e : tg.edges) ++tg.pred_begin[e.to + 1];
  for (size_t s = 0; s < S; ++s) tg.pred_begin[s + 1] += tg.pred_begin[s];
  tg.pred_edges.assign(E, 0);
  sc.fill.assign(tg.pred_begin.begin(), tg.pred_begin.end() - 1);
  for (int e = 0; e < E; ++e) {  // ascending `from`, so each segment's preds ascend
    tg.pred_edges[sc.fill[tg.edges[e].to]++] = e;
    tg.segments[tg.edges[e].to].preds.push_back(tg.edges[e].from);
  }
  tg.segments[sc.seg_of_layer[L - 1]].computes_loss = true;
}

// One entry per replicated group that holds layers, ascending group.
void collect_replicated_groups(SegmentGraph& tg) {
  size_t R = 0;
  for (int s = 0; s < static_cast<int>(tg.segments.size()); ++s) {
    const Segment& seg = tg.segments[s];
    if (!seg.replicated()) continue;
    size_t k = 0;
    while (k < R && tg.replicated_groups[k].group != seg.group) ++k;
    if (k == R) {
      if (R == tg.replicated_groups.size()) tg.replicated_groups.emplace_back();
      ReplicatedGroup& rg = tg.replicated_groups[R++];
      rg.group = seg.group;
      rg.devices = seg.devices;
      rg.param_bytes = 0;
      rg.segments.clear();
      rg.allreduce_task = -1;
    }
    tg.replicated_groups[k].param_bytes += seg.param_bytes;
    tg.replicated_groups[k].segments.push_back(s);
  }
  tg.replicated_groups.resize(R);
  std::sort(tg.replicated_groups.begin(), tg.replicated_groups.end(),
            [](const ReplicatedGroup& a, const ReplicatedGroup& b) { return a.group < b.group; });
}

void add_tasks(TaskGraph& tg, Scratch& sc) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  const int E = static_cast<int>(tg.edges.size());
  const size_t SM = static_cast<size_t>(S) * M;
  // Flat [segment x micro-batch] tables, read through local pointers: the
  // compiler cannot keep a vector's data in a register across the task writes.
  // Not cleared: each entry is written before it is read (a forward reads
  // earlier segments' ids, a backward later ones', a dep on a transfer the
  // transfer made for that edge and micro-batch).
  sc.forward_id.resize(SM);
  sc.backward_id.resize(SM);
  sc.xfwd.resize(static_cast<size_t>(E) * M);
  sc.xbwd.resize(static_cast<size_t>(E) * M);
  int* forward_id = sc.forward_id.data();
  int* backward_id = sc.backward_id.data();
  int* xfwd = sc.xfwd.data();
  int* xbwd = sc.xbwd.data();
  const SegmentEdge* edges = tg.edges.data();
  const int64_t* sizes = tg.micro_batch_sizes.data();
  auto at = [M](int s, int m) { return static_cast<size_t>(s) * M + m; };
  TaskSink sink{tg};
  // At most: a forward and a backward per (segment, micro-batch), a transfer
  // each way per (edge, micro-batch), an allreduce per replicated group.
  sc.sends.resize(2 * SM + static_cast<size_t>(2) * E * M + tg.replicated_groups.size());
  int* sends = sc.sends.data();
  // The transfers created since compute task `id` are its sends.
  auto count_sends = [&](int id) { sends[id] = static_cast<int>(sink.used) - id - 1; };
  // A transfer of edge e's payload for micro-batch m after compute task `producer`.
  auto add_transfer = [&](TaskKind kind, int producer, int e, int m, int from_device, int to_device) {
    int xid;
    Task& x = sink.next(xid);
    x.kind = kind;
    x.segment = edges[e].from;
    x.peer_segment = edges[e].to;
    x.micro_batch = m;
    x.device = from_device;
    x.to_device = to_device;
    x.bytes = edges[e].bytes_per_sample * sizes[m];
    sink.add_dep(x, producer);
    return xid;
  };
  // Forward: F(s, m), then its activation transfers (for_each_input, for_each_send).
  for (int s = 0; s < S; ++s) {
    for (int m = 0; m < M; ++m) {
      const ComputeStep step{s, m, false};
      const int here = tg.device(s, m);
      int fid;
      Task& f = sink.next(fid);  // (valid until the next task: its transfers may move the tasks)
      f.kind = TaskKind::forward;
      f.segment = s;
      f.micro_batch = m;
      f.device = here;
      for_each_input(tg, step, [&](int e, int from, bool remote) {
        sink.add_input(f, remote, forward_id[at(from, m)], xfwd[at(e, m)], edges[e].bytes_per_sample * sizes[m]);
      });
      forward_id[at(s, m)] = fid;
      for_each_send(tg, step, [&](int e, int there) {
        xfwd[at(e, m)] = add_transfer(TaskKind::transfer_activation, fid, e, m, here, there);
      });
      count_sends(fid);
    }
  }
  // Backward, last segment first: B(s, m) waits for its consumers' gradients
  // and its own forward, then sends gradients back.
  for (int s = S - 1; s >= 0; --s) {
    for (int m = 0; m < M; ++m) {
      const ComputeStep step{s, m, true};
      const int here = tg.device(s, m);
      int bid;
      Task& b = sink.next(bid);  // (valid until the next task)
      b.kind = TaskKind::backward;
      b.segment = s;
      b.micro_batch = m;
      b.device = here;
      for_each_input(tg, step, [&](int e, int to, bool remote) {
        sink.add_input(b, remote, backward_id[at(to, m)], xbwd[at(e, m)], edges[e].bytes_per_sample * sizes[m]);
      });
      sink.add_dep(b, forward_id[at(s, m)]);
      backward_id[at(s, m)] = bid;
      for_each_send(tg, step, [&](int e, int there) {
        xbwd[at(e, m)] = add_transfer(TaskKind::transfer_gradient, bid, e, m, here, there);
      });
      count_sends(bid);
    }
  }
  // Synchronous replicas: one allreduce per replicated group after all its backwards.
  if (tg.aggregation_every == 1)
    for (size_t k = 0; k < tg.replicated_groups.size(); ++k) {
      ReplicatedGroup& rg = tg.replicated_groups[k];
      int aid;
      Task& a = sink.next(aid);
      a.kind = TaskKind::allreduce;
      a.segment = -1;
      a.micro_batch = -1;
      a.device = rg.devices[0];
      a.bytes = rg.param_bytes;
      a.replicated_group = static_cast<int>(k);
      for (int s : rg.segments)
        for (int m = 0; m < M; ++m) sink.add_dep(a, backward_id[at(s, m)]);
      rg.allreduce_task = aid;
    }
  sink.close();
  // The public tables: forward_task[s][m], backward_task[s][m].
  tg.forward_task.resize(S);
  tg.backward_task.resize(S);
  for (int s = 0; s < S; ++s) {
    tg.forward_task[s].assign(forward_id + at(s, 0), forward_id + at(s + 1, 0));
    tg.backward_task[s].assign(backward_id + at(s, 0), backward_id + at(s + 1, 0));
  }
}

// GPipe fill-drain: every forward, then every backward, in wavefront order
// over stages (forwards by (m + r, r), backwards by (m + R-1-r, R-1-r); a
// stage's segments in layer order, backwards reversed), each on the device
// that runs its micro-batch. The global order is topological, so filtering it
// per device cannot deadlock.
void order_gpipe(SegmentGraph& tg, Scratch& sc) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  tg.run_order.resize(static_cast<size_t>(2) * S * M);  // every compute task once
  ComputeStep* next = tg.run_order.data();
  // Stage r's segments: [stage_begin[r], stage_begin[r + 1]).
  sc.stage_begin.clear();
  for (int s = 0; s < S; ++s)
    if (s == 0 || tg.segments[s].stage != tg.segments[s - 1].stage) sc.stage_begin.push_back(s);
  const int R = static_cast<int>(sc.stage_begin.size());
  sc.stage_begin.push_back(S);
  for (int w = 0; w <= M + R - 2; ++w)
    for (int r = std::max(0, w - M + 1); r <= std::min(R - 1, w); ++r)
      for (int s = sc.stage_begin[r]; s < sc.stage_begin[r + 1]; ++s) *next++ = {s, w - r, false};
  for (int w = 0; w <= M + R - 2; ++w)
    for (int q = std::max(0, w - M + 1); q <= std::min(R - 1, w); ++q)
      for (int s = sc.stage_begin[R - q] - 1; s >= sc.stage_begin[R - 1 - q]; --s)
        *next++ = {s, w - q, true};
}

// Interleaved 1F1B: per (segment, micro-batch) the rank of its segment's stage
// among the stages its device runs (its virtual stage); returns the devices
// in use (the chunk size) and the most stages one device runs.
struct VirtualStages {
  int chunk = 1, most = 1;
};
VirtualStages virtual_stages(const SegmentGraph& tg, std::vector<int>& virtual_stage) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  std::vector<std::vector<int>> stages(tg.num_devices);  // per device: its stages (a split stage's segments share one)
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < M; ++m) stages[tg.device(s, m)].push_back(tg.segments[s].stage);
  int used = 0, most = 1;
  for (auto& st : stages) {
    used += !st.empty();
    std::sort(st.begin(), st.end());
    st.erase(std::unique(st.begin(), st.end()), st.end());
    most = std::max(most, static_cast<int>(st.size()));
  }
  virtual_stage.assign(static_cast<size_t>(S) * M, 0);
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < M; ++m) {
      const auto& st = stages[tg.device(s, m)];
      virtual_stage[static_cast<size_t>(s) * M + m] =
          static_cast<int>(std::lower_bound(st.begin(), st.end(), tg.segments[s].stage) - st.begin());
    }
  return {std::max(1, used), most};
}

// Priority among a device's ready tasks (smaller first; no two tie): any
// backward before any forward; 1F1B: then the lowest micro-batch, then the
// earliest (forward) or latest (backward) segment; interleaved: the chunk of
// micro-batches, the virtual stage (backwards from the last), the
// micro-batch, the segment. Packed into one number, the forward flag in the
// top bit: one comparison per insertion step instead of five. Exact while the
// interleaved rank, below (M + devices) x S^2, stays under 2^63: far beyond
// any graph whose 2 x S x M task indices fit an int.
uint64_t priority_of(const SegmentGraph& tg, const Scratch& sc, bool interleaved, VirtualStages v, ComputeStep t) {
  const uint64_t forward = uint64_t{!t.backward} << 63;
  const uint64_t S = tg.segments.size(), m = static_cast<uint64_t>(t.micro_batch);
  const uint64_t segment = t.backward ? S - 1 - t.segment : t.segment;
  if (!interleaved) return forward | m << 32 | segment;
  const size_t at = static_cast<size_t>(t.segment) * tg.micro_batches() + t.micro_batch;
  const uint64_t vs = static_cast<uint64_t>(sc.virtual_stage[at]);
  const uint64_t stage = t.backward ? v.most - 1 - vs : vs, chunk = v.chunk;
  return forward | (((m / chunk * v.most + stage) * chunk + m % chunk) * S + segment);
}

// The compute tasks that wait for compute task t (directly or through a
// transfer it sends): for_each_input read the other way round. A forward's
// are the next segments' forwards and its own backward; a backward's the
// previous segments' backwards (none in AL form, whose backwards start from a
// local loss). compute_waits counts what each waits for (its inputs and a
// backward's own forward); the two must agree (a task never counted down to
// zero makes order_1f1b fail).
template <typename Visit>
void for_each_waiter(const SegmentGraph& tg, ComputeStep t, Visit&& visit) {
  const SegmentEdge* edges = tg.edges.data();
  const int s = t.segment, m = t.micro_batch;
  if (!t.backward) {
    for (int e = tg.succ_begin[s], end = tg.succ_begin[s + 1]; e < end; ++e) visit(ComputeStep{edges[e].to, m, false});
    visit(ComputeStep{s, m, true});
  } else if (tg.schedule != Schedule::al) {
    const int* pred = tg.pred_edges.data();
    for (int k = tg.pred_begin[s], end = tg.pred_begin[s + 1]; k < end; ++k)
      visit(ComputeStep{edges[pred[k]].from, m, true});
  }
}
// The same for every micro-batch (the edges are the segments').
int compute_waits(const SegmentGraph& tg, int segment, bool backward) {
  int inputs = 0;
  for_each_input(tg, ComputeStep{segment, 0, backward}, [&](int, int, bool) { ++inputs; });
  return inputs + (backward ? 1 : 0);  // a backward also waits for its own forward
}

// Per segment its forward and backward ms per sample on a device of speed 1,
// by model/layer_library.h's estimate (estimated_layer_ms; a recomputing
// backward runs its forward again): what timed 1F1B's list schedule orders by.
void estimate_segment_ms(const LayerGraph& g, const SegmentGraph& tg, Scratch& sc) {
  sc.segment_ms.assign(2 * tg.segments.size(), 0.0);
  for (size_t s = 0; s < tg.segments.size(); ++s) {
    double fwd = 0, bwd = 0;
    for (int l : tg.segments[s].layers) {
      const EstimatedMs ms = estimated_layer_ms(g.layers[l].macs, g.layers[l].activation_bytes(), 1);
      fwd += ms.forward;
      bwd += ms.backward;
    }
    sc.segment_ms[2 * s] = fwd;
    sc.segment_ms[2 * s + 1] = bwd + (tg.segments[s].recompute ? fwd : 0.0);
  }
}

// The edge from segment `from` to segment `to` (there is one).
int edge_between(const SegmentGraph& tg, int from, int to) {
  int e = tg.succ_begin[from];
  while (tg.edges[e].to != to) ++e;
  return e;
}

// Puts t in its device's ready list, which is kept sorted, the first by priority last.
void add_ready(const SegmentGraph& tg, Scratch& sc, uint64_t priority, ComputeStep t) {
  std::vector<ReadyTask>& r = sc.ready[tg.device(t.segment, t.micro_batch)];
  r.push_back({priority, t.segment, t.micro_batch});
  for (size_t k = r.size() - 1; k > 0 && r[k - 1].priority < r[k].priority; --k) std::swap(r[k - 1], r[k]);
}

// A list schedule's start (order_1f1b, order_timed_1f1b): per device no
// ready task and no micro-batch in flight; per (device, micro-batch) its
// compute tasks left, none started; per compute task (forward (s, m) at
// s * M + m, backward at (S + s) * M + m) the tasks it waits for; those that
// wait for none ready (make_ready).
template <typename MakeReady>
void start_list_schedule(const SegmentGraph& tg, Scratch& sc, MakeReady&& make_ready) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  const int D = tg.num_devices;
  sc.ready.resize(D);
  for (auto& r : sc.ready) r.clear();
  sc.left.assign(static_cast<size_t>(D) * M, 0);
  sc.started.assign(static_cast<size_t>(D) * M, 0);
  sc.in_flight.assign(D, 0);
  sc.waiting.resize(2 * S * M);
  int* waiting = sc.waiting.data();
  int* left = sc.left.data();
  const int* device_at = tg.device_at.data();
  for (bool backward : {false, true})
    for (int s = 0; s < S; ++s) {
      const int waits = compute_waits(tg, s, backward);
      std::fill_n(waiting + ((backward ? S : 0) + s) * M, M, waits);
      for (int m = 0; m < M; ++m) {
        ++left[static_cast<size_t>(device_at[s * M + m]) * M + m];
        if (waits == 0) make_ready(ComputeStep{s, m, backward});
      }
    }
}

// 1F1B (PipeDream-flush) and interleaved 1F1B (Megatron's virtual stages): a
// unit-time list schedule where each device runs its first ready task by
// priority_of (a backward before any forward) and admits a new micro-batch
// only while fewer than its limit are in flight on it. Interleaved:
// micro-batches go in chunks of P (the devices in use); within a chunk a
// device runs its first segment for the whole chunk before its next segment
// (backwards: its last segment first), and it may keep one more micro-batch
// in flight (the memory rule's stages + 1). The recorded order comes from a
// feasible execution, so it never deadlocks. A task joins its device's ready
// list the step after the last task it waits for ran (for_each_waiter counts
// its waits down), so a step looks at ready tasks only (scanning every pending
// task and its deps made 1F1B 13x slower than GPipe on branch-parallel
// inception_v3 placements). False where some task would never become ready.
bool order_1f1b(SegmentGraph& tg, Scratch& sc, bool interleaved) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  const int D = tg.num_devices;
  const int C = 2 * S * M;
  // An index per compute task: forward (s, m) at s * M + m, backward (s, m) at (S + s) * M + m.
  auto id_of = [S, M](ComputeStep t) { return ((t.backward ? S : 0) + t.segment) * M + t.micro_batch; };
  std::vector<int>& limit = sc.limit;  // core's in_flight_limits, filled by the build
  if (interleaved)
    for (int& l : limit) l += l > 0;
  // AL: one micro-batch at a time per device, its backward (and update) right after its forward.
  if (tg.schedule == Schedule::al)
    for (int& l : limit) l = std::min(l, 1);
  const VirtualStages v = interleaved ? virtual_stages(tg, sc.virtual_stage) : VirtualStages{};
  auto make_ready = [&](ComputeStep t) { add_ready(tg, sc, priority_of(tg, sc, interleaved, v, t), t); };
  start_list_schedule(tg, sc, make_ready);
  int* waiting = sc.waiting.data();
  int* left = sc.left.data();
  char* started = sc.started.data();
  int* in_flight = sc.in_flight.data();
  // Steps are written field by field: one copied whole from a temporary (its
  // bool stored as a byte, loaded back as a word) stalled on store forwarding.
  tg.run_order.resize(C);
  ComputeStep* out = tg.run_order.data();
  sc.released.resize(C);  // at most every task
  ComputeStep* const released = sc.released.data();
  ComputeStep* released_end = released;
  auto put = [](ComputeStep*& at, int segment, int micro_batch, bool backward) {
    at->segment = segment;
    at->micro_batch = micro_batch;
    at->backward = backward;
    ++at;
  };
  size_t remaining = C;
  while (remaining > 0) {
    bool progressed = false;
    for (int d = 0; d < D; ++d) {
      std::vector<ReadyTask>& r = sc.ready[d];
      // The first ready task by priority that may run: a forward of a micro-batch the
      // device has not started waits while its limit is reached.
      if (r.empty()) continue;
      const char* started_here = started + static_cast<size_t>(d) * M;
      int at = static_cast<int>(r.size()) - 1;
      if (in_flight[d] >= limit[d])
        while (at >= 0 && r[at].forward() && !started_here[r[at].micro_batch]) --at;
      if (at < 0) continue;
      const ComputeStep pick{r[at].segment, r[at].micro_batch, !r[at].forward()};
      r.erase(r.begin() + at);
      put(out, pick.segment, pick.micro_batch, pick.backward);
      for_each_waiter(tg, pick, [&](ComputeStep w) {
        if (--waiting[id_of(w)] == 0) put(released_end, w.segment, w.micro_batch, w.backward);
      });
      --remaining;
      progressed = true;
      const size_t dm = static_cast<size_t>(d) * M + pick.micro_batch;
      if (!started[dm]) {
        started[dm] = 1;
        ++in_flight[d];
      }
      if (--left[dm] == 0) --in_flight[d];
    }
    for (const ComputeStep* t = released; t != released_end; ++t)
      make_ready({t->segment, t->micro_batch, t->backward});  // field by field, as written
    released_end = released;
    // Nothing ran although tasks remain: every ready forward is held back by
    // its limit, and the next step would see the same state. Widen the limits.
    // With nothing ready at all the rest waits on tasks that never run: false.
    if (!progressed) {
      if (std::all_of(sc.ready.begin(), sc.ready.end(), [](const auto& r) { return r.empty(); })) return false;
      for (int& l : limit) ++l;
    }
  }
  return true;
}

// Timed 1F1B: 1F1B's list schedule (order_1f1b) over estimated times instead
// of unit steps: a task takes the estimate_segment_ms of its segment / its
// device's speed, a transfer its link's time, and the device that can start
// a task first runs the first by priority_of of its tasks whose inputs are
// there by then. In unit steps a device that holds two stages waits for a
// backward whose gradient a slow device is still computing while a forward's
// input is there (resnet50 at batch 4 on lan445, a plan of two replicated
// stages: 2,353.7 ms in 1F1B, 1,596.7 ms timed); but by the estimates a
// stage's device runs backwards back to back where 1F1B alternates, and
// starves the next stages when the estimates miss (dp's plan of alexnet at
// batch 8 on lan444: 343.8 ms in 1F1B, 425.4 timed), so neither replaces the
// other. Its own loop: 1F1B's unit steps are a search's hot path.
bool order_timed_1f1b(SegmentGraph& tg, Scratch& sc, const Cluster& c) {
  const int S = static_cast<int>(tg.segments.size());
  const int M = tg.micro_batches();
  const int D = tg.num_devices;
  const int C = 2 * S * M;
  // An index per compute task: forward (s, m) at s * M + m, backward (s, m) at (S + s) * M + m.
  auto id_of = [S, M](ComputeStep t) { return ((t.backward ? S : 0) + t.segment) * M + t.micro_batch; };
  std::vector<int>& limit = sc.limit;  // core's in_flight_limits, filled by the build
  const int64_t* sizes = tg.micro_batch_sizes.data();
  auto task_ms = [&](ComputeStep t) {
    const int d = tg.device(t.segment, t.micro_batch);
    return sc.segment_ms[2 * t.segment + t.backward] * static_cast<double>(sizes[t.micro_batch]) /
           c.devices[d].speed;
  };
  auto make_ready = [&](ComputeStep t) {
    add_ready(tg, sc, priority_of(tg, sc, false, VirtualStages{}, t), t);
  };
  start_list_schedule(tg, sc, make_ready);
  sc.ready_at.assign(C, 0.0);
  sc.free_at.assign(D, 0.0);
  int* waiting = sc.waiting.data();
  int* left = sc.left.data();
  char* started = sc.started.data();
  int* in_flight = sc.in_flight.data();
  tg.run_order.resize(C);
  ComputeStep* out = tg.run_order.data();
  // A task a device may start: not a forward of a micro-batch it has not
  // started while its limit is reached.
  auto ready_at = [&](const ReadyTask& t) {
    return sc.ready_at[id_of({t.segment, t.micro_batch, !t.forward()})];
  };
  auto may_start = [&](int d, const ReadyTask& t) {
    return in_flight[d] < limit[d] || !t.forward() || started[static_cast<size_t>(d) * M + t.micro_batch];
  };
  // When device d can start its next task (infinity: none it may start is ready).
  constexpr double kNever = std::numeric_limits<double>::infinity();
  auto next_start = [&](int d) {
    double earliest = kNever;
    for (const ReadyTask& t : sc.ready[d])
      if (ready_at(t) < earliest && may_start(d, t)) earliest = ready_at(t);
    return std::max(sc.free_at[d], earliest);
  };
  size_t remaining = C;
  while (remaining > 0) {
    // The device that can start a task first (ties: the lower index).
    int pick_device = -1;
    double start = kNever;
    for (int d = 0; d < D; ++d) {
      const double d_start = next_start(d);
      if (d_start < start) start = d_start, pick_device = d;
    }
    if (pick_device < 0) {
      // Every ready forward is held back by its limit: widen the limits.
      // With nothing ready at all the rest waits on tasks that never run: false.
      if (std::all_of(sc.ready.begin(), sc.ready.end(), [](const auto& r) { return r.empty(); }))
        return false;
      for (int& l : limit) ++l;
      continue;
    }
    // On it, the first by priority of the tasks ready by then.
    std::vector<ReadyTask>& r = sc.ready[pick_device];
    int at = static_cast<int>(r.size()) - 1;
    while (!(ready_at(r[at]) <= start && may_start(pick_device, r[at]))) --at;
    const ComputeStep pick{r[at].segment, r[at].micro_batch, !r[at].forward()};
    r.erase(r.begin() + at);
    // Written field by field: a step copied whole from a temporary (its bool
    // stored as a byte, loaded back as a word) stalled on store forwarding.
    out->segment = pick.segment;
    out->micro_batch = pick.micro_batch;
    out->backward = pick.backward;
    ++out;
    const double end = start + task_ms(pick);
    sc.free_at[pick_device] = end;
    for_each_waiter(tg, pick, [&](ComputeStep w) {
      const int id = id_of(w), there = tg.device(w.segment, w.micro_batch);
      double arrives = end;
      if (there != pick_device) {  // another segment's step: a transfer brings what it reads
        const int e = pick.backward ? edge_between(tg, w.segment, pick.segment)
                                    : edge_between(tg, pick.segment, w.segment);
        const int64_t bytes = tg.edges[e].bytes_per_sample * sizes[pick.micro_batch];
        arrives += 1e3 * c.link(pick_device, there).transfer_s(bytes);
      }
      sc.ready_at[id] = std::max(sc.ready_at[id], arrives);
      if (--waiting[id] == 0) make_ready(w);
    });
    --remaining;
    const size_t dm = static_cast<size_t>(pick_device) * M + pick.micro_batch;
    if (!started[dm]) {
      started[dm] = 1;
      ++in_flight[pick_device];
    }
    if (--left[dm] == 0) --in_flight[pick_device];
  }
  return true;
}

// The task graph's orders, read off the run order: per device its compute
// tasks; the replay order each compute task followed by its sends (the
// transfers right after it in `tasks`), then the allreduces (they come last).
void record_orders(TaskGraph& tg, const Scratch& sc) {
  tg.device_order.resize(tg.num_devices);
  for (auto& o : tg.device_order) o.clear();
  tg.replay_order.resize(tg.tasks.size());
  int* out = tg.replay_order.data();
  for (const ComputeStep& step : tg.run_order) {
    const auto& ids = step.backward ? tg.backward_task : tg.forward_task;
    const int t = ids[step.segment][step.micro_batch];
    tg.device_order[tg.tasks[t].device].push_back(t);
    for (int x = t; x <= t + sc.sends[t]; ++x) *out++ = x;
  }
  for (const ReplicatedGroup& rg : tg.replicated_groups)
    if (rg.allreduce_task >= 0) *out++ = rg.allreduce_task;
}
}  // namespace

std::vector<int> boundary_layers(const LayerGraph& g, const TaskGraph& tg, int from, int to) {
  std::set<int> in_from(tg.segments[from].layers.begin(), tg.segments[from].layers.end());
  std::set<int> out;
  for (int l : tg.segments[to].layers)
    for (int p : g.layers[l].inputs)
      if (in_from.count(p)) out.insert(p);
  return {out.begin(), out.end()};
}

Status build_segment_graph_into(const LayerGraph& g, const Placement& p, const Cluster& c, int64_t batch_size,
                                SegmentGraph& tg) {
  if (p.is_data_parallel())
    return Status::error("placement.data_parallel: replicas are not a pipeline and have no task graph "
                         "(the simulator costs them as BSP, the runtime runs them as bsp)");
  if (Status s = validate_placement(p, g, c, batch_size); !s) return s;
  Scratch& sc = scratch();
  tg.num_devices = c.num_devices();
  tg.schedule = p.schedule;
  tg.aggregation_every = p.aggregation_every;
  tg.optimizer = p.optimizer;
  split_segments(g, p, tg, sc);
  collect_replicated_groups(tg);
  const int M = p.micro_batches;
  tg.micro_batch_sizes.resize(M);
  for (int m = 0; m < M; ++m) tg.micro_batch_sizes[m] = batch_size / M + (m < batch_size % M ? 1 : 0);
  const int S = static_cast<int>(tg.segments.size());
  tg.device_at.resize(static_cast<size_t>(S) * M);
  for (int s = 0; s < S; ++s)
    for (int m = 0; m < M; ++m) tg.device_at[static_cast<size_t>(s) * M + m] = tg.segments[s].device_of(m);
  if (p.schedule == Schedule::gpipe) {
    order_gpipe(tg, sc);
    return Status::ok();
  }
  in_flight_limits(p, g, tg.num_devices, sc.limit);
  bool ordered;
  if (p.schedule == Schedule::timed_1f1b) {
    estimate_segment_ms(g, tg, sc);
    ordered = order_timed_1f1b(tg, sc, c);
  } else {
    ordered = order_1f1b(tg, sc, p.schedule == Schedule::interleaved_1f1b);  // 1f1b, interleaved, al
  }
  if (!ordered) return Status::error("task graph: the schedule leaves tasks waiting on tasks that never run");
  return Status::ok();
}

Status build_task_graph_into(const LayerGraph& g, const Placement& p, const Cluster& c, int64_t batch_size,
                             TaskGraph& tg) {
  if (Status s = build_segment_graph_into(g, p, c, batch_size, tg); !s) return s;
  Scratch& sc = scratch();
  add_tasks(tg, sc);
  record_orders(tg, sc);
  return Status::ok();
}

Result<TaskGraph> build_task_graph(const LayerGraph& g, const Placement& p, const Cluster& c,
                                   int64_t batch_size) {
  TaskGraph tg;
  if (Status s = build_task_graph_into(g, p, c, batch_size, tg); !s) return s;
  return tg;
}

}  // namespace tapp
