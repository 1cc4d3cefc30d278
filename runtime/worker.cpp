#include "runtime/worker.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <functional>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "model/al_form.h"
#include "profiler/al_model.h"
#include "profiler/compute_threads.h"
#include "profiler/torch_model.h"
#include "runtime/compute_gate.h"
#include "runtime/control_channel.h"
#include "runtime/job.h"
#include "runtime/replica_group.h"
#include "runtime/tensor_memory.h"
#include "runtime/worker_profile.h"
#include "simulator/task_graph.h"

namespace tapp {
namespace {
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void sleep_s(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// CPU time of the calling thread (ms): what a one-thread device's compute cost
// it, however many other workers shared the host's cores meanwhile.
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// Posts sends on its own thread: sleeps the emulated link time, then sends
// with Gloo and waits for completion, so the compute thread never blocks on a send.
class Sender {
 public:
  explicit Sender(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg) : pg_(std::move(pg)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Sender() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start_step(Clock::time_point t0) {
    std::lock_guard<std::mutex> lock(mu_);
    t0_ = t0;
    entries_.clear();
  }
  void post(std::vector<std::pair<torch::Tensor, int>> tensors, int dst, double delay_s, std::string label) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      (holding_ ? held_ : queue_).push_back(Item{std::move(tensors), dst, delay_s, std::move(label)});
      ++pending_;
    }
    cv_.notify_all();
  }
  // While a Hold lives, posted sends wait: a task's outputs leave only when
  // its emulated compute (real compute + speed sleep) has ended, as on a
  // device that is really that slow.
  struct Hold {
    explicit Hold(Sender& s) : sender(s) { sender.hold(); }
    ~Hold() { sender.release(); }
    Sender& sender;
  };
  // Blocks until every posted send completed; rethrows a send's error.
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    if (!error_.empty()) throw std::runtime_error(error_);
  }
  std::vector<TaskSpan> entries() {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

 private:
  struct Item {
    std::vector<std::pair<torch::Tensor, int>> tensors;
    int dst;
    double delay_s;
    std::string label;
  };
  void hold() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      holding_ = false;
      for (auto& item : held_) queue_.push_back(std::move(item));
      held_.clear();
    }
    cv_.notify_all();
  }
  void loop() {
    for (;;) {
      Item item;
      Clock::time_point t0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        t0 = t0_;
      }
      auto start = Clock::now();
      std::string err;
      try {
        sleep_s(item.delay_s);
        std::vector<c10::intrusive_ptr<c10d::Work>> works;
        for (auto& [t, tag] : item.tensors) {
          std::vector<at::Tensor> v{t};
          works.push_back(pg_->send(v, item.dst, tag));
        }
        for (auto& w : works) w->wait();
      } catch (const std::exception& e) {
        err = std::string("send failed: ") + e.what();
      }
      auto end = Clock::now();
      {
        std::lock_guard<std::mutex> lock(mu_);
        entries_.push_back(TaskSpan{item.label, ms_between(t0, start), ms_between(t0, end)});
        if (!err.empty()) error_ = err;
        --pending_;
      }
      done_cv_.notify_all();
    }
  }
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Item> queue_, held_;
  bool holding_ = false;
  int pending_ = 0;
  bool stop_ = false;
  std::string error_;
  Clock::time_point t0_ = Clock::now();
  std::vector<TaskSpan> entries_;
  std::thread thread_;
};

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Fault points: "exit" and "hang" at the start of the step, "exit_at_allreduce"
// where the worker would start its first all-reduce of a replicated group.
enum class FaultPoint { step_start, allreduce };

void maybe_fault(const Job& job, int rank, int step, FaultPoint at = FaultPoint::step_start) {
  if (job.options.fault_rank != rank || job.options.fault_step != step) return;
  const bool at_allreduce = job.options.fault_mode == "exit_at_allreduce";
  if (at_allreduce != (at == FaultPoint::allreduce)) return;
  std::cerr << "tapp-worker rank " << rank << ": injected fault (" << job.options.fault_mode << ") at step "
            << step << "\n";
  if (job.options.fault_mode == "hang")
    for (;;) pause();
  _exit(3);
}

// Shared state of one worker job.
struct Ctx {
  Job job;
  int rank = 0, world = 1;
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<ControlChannel> channel;  // over `store`
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::shared_ptr<GraphModel> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // Pipeline: the replicated groups this worker is a replica of, ascending group.
  std::vector<std::unique_ptr<ReplicaGroup>> replica_groups;
  std::chrono::milliseconds gloo_timeout{60000};
  ComputeGate gate;  // this rank's turn on the host's cores (emulated devices)
  const Device& device() const { return job.cluster.devices[rank]; }
  void progress() { channel->step_finished(rank); }
  // Sleeps so that the task looks like one on a device of this speed
  // (emulated_sleep_ms); returns the sleep (ms).
  double emulate_speed(double wall_ms, double cpu_ms, double waited_ms) const {
    const double extra_ms = emulated_sleep_ms(wall_ms, cpu_ms, device().speed, device().threads, waited_ms);
    sleep_s(extra_ms / 1e3);
    return extra_ms;
  }
};

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& labels, int64_t full_batch) {
  // Summed over the micro-batch (and its tokens) and divided by the full
  // batch's: the accumulated gradient equals that of the full-batch mean loss.
  return training_loss(logits, labels, full_batch);
}

}  // namespace

double emulated_sleep_ms(double wall_ms, double cpu_ms, double speed, int threads, double waited_ms) {
  if (speed >= 1.0 || !(speed > 0)) return 0;
  const double cost_ms = threads == 1 ? cpu_ms : std::max(0.0, wall_ms - waited_ms);
  return std::max(0.0, cost_ms / speed - wall_ms);
}

namespace {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params, Optimizer which,
                                                        const RunOptions& o);

// ---------------------------------------------------------------- pipeline

// Schedule al (Associated Learning, a model in AL form): each segment's blocks
// learn from their local losses, no gradient is sent, and each segment's own
// optimizer updates it right after each of its backwards.
class PipelineWorker {
 public:
  PipelineWorker(Ctx& ctx, TaskGraph tg) : c_(ctx), g_(ctx.job.graph), tg_(std::move(tg)) {
    L_ = static_cast<int>(g_.layers.size());
    M_ = tg_.micro_batches();
    seg_of_layer_.assign(L_, -1);
    for (size_t s = 0; s < tg_.segments.size(); ++s)
      for (int l : tg_.segments[s].layers) seg_of_layer_[l] = static_cast<int>(s);
    for (size_t t = 0; t < tg_.tasks.size(); ++t) {
      const Task& k = tg_.tasks[t];
      if (k.kind == TaskKind::transfer_activation) act_task_[{k.segment, k.peer_segment, k.micro_batch}] = t;
      if (k.kind == TaskKind::transfer_gradient) grad_task_[{k.segment, k.peer_segment, k.micro_batch}] = t;
    }
    // Per replicated group of this worker: how many of its backward tasks run
    // here (the all-reduce starts after the last), and how many samples its
    // micro-batches here hold (a local step's share).
    for (auto& rg : c_.replica_groups) {
      Replica r;
      r.sync = rg.get();
      for (int tid : tg_.device_order[c_.rank]) {
        const Task& task = tg_.tasks[tid];
        if (task.kind == TaskKind::backward && group_of_segment(task.segment) == rg->group()) ++r.local_backwards;
      }
      const Segment& first = tg_.segments[tg_.replicated_groups[rg->index()].segments.front()];
      for (int m = 0; m < M_; ++m)
        if (first.device_of(m) == c_.rank) r.local_samples += tg_.micro_batch_sizes[m];
      replicas_.push_back(r);
    }
    find_ties_across_workers();
    if (al_) {
      for (size_t s = 0; s < tg_.segments.size(); ++s) {
        if (tg_.segments[s].devices[0] != c_.rank) continue;  // al has no replicas
        std::vector<torch::Tensor> params;
        for (int l : tg_.segments[s].layers)
          for (auto& p : c_.model->layer_parameters(l)) params.push_back(p);
        if (!params.empty()) segment_optimizer_[s] = make_optimizer(params, tg_.optimizer, c_.job.options);
      }
      for (int l = 0; l < L_; ++l) block_of_.push_back(al_block_of(g_, l));
    }
  }

  // Before the step's barrier, untimed: draws the batch and posts the step's
  // receives, as a data loader hands a ready batch to a training step (the
  // peers in bench/ draw theirs outside the timed step too).
  void prepare(int step_index) {
    step_ = step_index;
    parity_ = step_index & 1;
    xs_.clear();  // (before drawing the next batch: the last one's storage goes first)
    ys_.clear();
    auto [x, y] = synthetic_batch(g_, c_.job.options.batch_size, c_.job.options.seed + step_index);
    int64_t off = 0;
    for (int m = 0; m < M_; ++m) {
      xs_.push_back(x.narrow(0, off, tg_.micro_batch_sizes[m]));
      ys_.push_back(y.narrow(0, off, tg_.micro_batch_sizes[m]));
      off += tg_.micro_batch_sizes[m];
    }
    outs_.assign(M_, std::vector<torch::Tensor>(L_));
    leaves_.clear();
    loss_.assign(M_, torch::Tensor());
    for (Replica& r : replicas_) r.backwards_left = r.local_backwards;
    post_receives();
  }

  WorkerStep step(Clock::time_point t0, Sender& sender) {
    WorkerStep st;
    for (int tid : tg_.device_order[c_.rank]) {
      const Task& task = tg_.tasks[tid];
      if (task.kind != TaskKind::forward && task.kind != TaskKind::backward) continue;
      auto w0 = Clock::now();
      wait_inputs(task);
      auto c0 = Clock::now();
      const double cpu0 = thread_cpu_ms();
      st.comm_ms += ms_between(w0, c0);
      double compute_ms = 0;
      {
        Sender::Hold held(sender);
        double waited_ms = 0;
        {
          ComputeGate::Turn turn(c_.gate);
          waited_ms = turn.waited_ms();
          if (task.kind == TaskKind::forward)
            forward(task.segment, task.micro_batch, sender);
          else
            backward(task.segment, task.micro_batch, sender);
        }
        compute_ms = ms_between(c0, Clock::now());
        compute_ms += c_.emulate_speed(compute_ms, thread_cpu_ms() - cpu0, waited_ms);
      }
      st.busy_ms += compute_ms;
      std::string name = std::string(task.kind == TaskKind::forward ? "F" : "B") + " s" +
                         std::to_string(task.segment) + " m" + std::to_string(task.micro_batch);
      st.timeline.push_back(TaskSpan{name, ms_between(t0, c0), ms_between(t0, c0) + compute_ms});
      if (task.kind == TaskKind::backward) after_backward(task.segment, t0);
    }
    auto d0 = Clock::now();
    sender.drain();
    st.comm_ms += ms_between(d0, Clock::now());
    finish_replica_exchanges(st);
    sum_tied_gradients(t0, st);
    if (!al_) {  // al updated each segment after each of its backwards
      auto o0 = Clock::now();
      {
        ComputeGate::Turn turn(c_.gate);
        c_.optimizer->step();
        c_.optimizer->zero_grad();
      }
      double opt_ms = ms_between(o0, Clock::now());
      st.busy_ms += opt_ms;
      st.timeline.push_back(TaskSpan{"optimizer", ms_between(t0, o0), ms_between(t0, o0) + opt_ms});
    }
    average_replicas_if_due(t0, st);
    // The next step's receives reuse these tags and are posted before its
    // barrier: every message of this step must have landed first.
    for (auto& [key, r] : recv_)
      if (!r.waited) r.work->wait();
    recv_.clear();
    outs_.clear();
    leaves_.clear();
    rng_state_.clear();
    return st;
  }

 private:
  struct Recv {
    torch::Tensor buf;
    c10::intrusive_ptr<c10d::Work> work;
    bool waited = false;
  };
  // This worker's view of one replicated group it is a replica of.
  struct Replica {
    ReplicaGroup* sync = nullptr;
    int local_backwards = 0, backwards_left = 0;
    int64_t local_samples = 0;
  };
  int tag(int task, int layer) const { return (task * L_ + layer) * 2 + parity_; }
  bool synchronous() const { return tg_.aggregation_every == 1; }
  int group_of_segment(int s) const { return tg_.segments[s].group; }
  // The worker that runs segment s for micro-batch m.
  int device_of(int s, int m) const { return tg_.segments[s].device_of(m); }

  // The last local backward of a replicated group starts its gradient
  // all-reduce (synchronous aggregation), overlapping what remains of the step.
  void after_backward(int s, Clock::time_point t0) {
    const int group = group_of_segment(s);
    for (Replica& r : replicas_) {
      if (r.sync->group() != group || --r.backwards_left > 0 || !synchronous()) continue;
      maybe_fault(c_.job, c_.rank, step_, FaultPoint::allreduce);
      r.sync->start_gradient_allreduce(t0);
    }
  }

  // Before the update: the summed gradients (synchronous), or this replica's
  // gradients rescaled to the mean over its own share (a local step).
  void finish_replica_exchanges(WorkerStep& st) {
    for (Replica& r : replicas_) {
      if (!synchronous()) {
        if (r.local_samples > 0)
          r.sync->scale_gradients(static_cast<double>(c_.job.options.batch_size) / static_cast<double>(r.local_samples));
        continue;
      }
      if (!r.sync->gradient_allreduce_started()) {  // no backward of the group ran here
        maybe_fault(c_.job, c_.rank, step_, FaultPoint::allreduce);
        r.sync->start_gradient_allreduce(Clock::now());
      }
      auto a0 = Clock::now();
      TaskSpan span = r.sync->finish_gradient_allreduce();
      st.comm_ms += ms_between(a0, Clock::now());  // the part not overlapped with compute
      st.timeline.push_back(std::move(span));
    }
  }

  // A shared parameter (a tied lm_head's table, a weight a TorchScript layer
  // borrows from an earlier one) whose owner and readers run on different
  // workers exists as a copy on each (GraphModel); every copy must take the
  // gradient single-device training would, the sum of all uses.
  void find_ties_across_workers() {
    const Placement& p = c_.job.placement;
    for (const SharedParameter& s : c_.model->shared_parameters()) {
      std::set<int> groups{p.layer_group[s.owner]}, holders;
      for (int r : s.readers) groups.insert(p.layer_group[r]);
      if (groups.size() == 1) continue;  // one group: one tensor per replica
      bool replicated = false;
      for (int grp : groups) {
        const std::vector<int> devices = p.devices_of_group(grp);
        holders.insert(devices.begin(), devices.end());
        replicated = replicated || devices.size() > 1;
      }
      if (holders.size() <= 1) continue;
      const std::string& reader = g_.layers[s.readers.front()].name;
      if (replicated)
        throw std::runtime_error("layer '" + reader + "' and layer '" + s.name + "', whose weight it shares, " +
                                 "run on different devices and one is in a replicated stage: not supported "
                                 "(place them in one group, or replicate neither)");
      ties_.push_back(Tie{s.tensor, s.shape, s.name});
    }
  }

  // Every worker joins (zeros where it holds no copy): the process group spans all of them.
  void sum_tied_gradients(Clock::time_point t0, WorkerStep& st) {
    for (const Tie& t : ties_) {
      auto a0 = Clock::now();
      torch::Tensor copy = t.copy;
      const bool has_grad = copy.defined() && copy.grad().defined();
      std::vector<at::Tensor> grad{has_grad ? copy.grad().contiguous().clone() : torch::zeros(t.shape)};
      c_.pg->allreduce(grad)->wait();
      if (copy.defined()) copy.mutable_grad() = grad[0];
      const double comm_ms = ms_between(a0, Clock::now());
      st.comm_ms += comm_ms;
      st.timeline.push_back(TaskSpan{"tied weight " + t.name, ms_between(t0, a0), ms_between(t0, a0) + comm_ms});
    }
  }

  // aggregation_every = K > 1: after every K-th update the replicas' parameters are averaged.
  void average_replicas_if_due(Clock::time_point t0, WorkerStep& st) {
    if (synchronous() || (step_ + 1) % tg_.aggregation_every != 0) return;
    for (Replica& r : replicas_) {
      maybe_fault(c_.job, c_.rank, step_, FaultPoint::allreduce);
      auto a0 = Clock::now();
      st.timeline.push_back(r.sync->average_parameters(t0));
      st.comm_ms += ms_between(a0, Clock::now());
    }
  }

  void post_receives() {
    for (size_t t = 0; t < tg_.tasks.size(); ++t) {
      const Task& k = tg_.tasks[t];
      if (k.to_device != c_.rank) continue;
      if (k.kind != TaskKind::transfer_activation && k.kind != TaskKind::transfer_gradient) continue;
      for (int l : boundary_layers(g_, tg_, k.segment, k.peer_segment)) {
        std::vector<int64_t> shape{tg_.micro_batch_sizes[k.micro_batch]};
        shape.insert(shape.end(), g_.layers[l].output_shape.begin(), g_.layers[l].output_shape.end());
        Recv r;
        r.buf = torch::empty(shape);
        std::vector<at::Tensor> v{r.buf};
        r.work = c_.pg->recv(v, k.device, tag(static_cast<int>(t), l));
        recv_[{static_cast<int>(t), l}] = std::move(r);
      }
    }
  }

  torch::Tensor& received(int task, int layer) {
    Recv& r = recv_.at({task, layer});
    if (!r.waited) {
      r.work->wait();
      r.waited = true;
    }
    return r.buf;
  }

  // After segment s's backward for micro-batch m: its leaves over remote
  // inputs (their gradients were sent) and the receive buffers it consumed.
  void release_received(int s, int m) {
    const Segment& seg = tg_.segments[s];
    for (int p : seg.preds) {
      if (device_of(p, m) == c_.rank) continue;
      const int tid = act_task_.at({p, s, m});
      for (int l : boundary_layers(g_, tg_, p, s)) {
        leaves_.erase(std::make_tuple(s, m, l));
        recv_.erase({tid, l});
      }
    }
    for (int t : seg.succs) {
      if (device_of(t, m) == c_.rank || al_) continue;  // al: no gradient comes back
      const int tid = grad_task_.at({s, t, m});
      for (int l : boundary_layers(g_, tg_, s, t)) recv_.erase({tid, l});
    }
  }

  // Waits for every remote input of a compute task before its compute starts.
  void wait_inputs(const Task& task) {
    const Segment& seg = tg_.segments[task.segment];
    int m = task.micro_batch;
    if (task.kind == TaskKind::forward) {
      for (int p : seg.preds)
        if (device_of(p, m) != c_.rank)
          for (int l : boundary_layers(g_, tg_, p, task.segment)) received(act_task_.at({p, task.segment, m}), l);
    } else if (!al_) {
      for (int t : seg.succs)
        if (device_of(t, m) != c_.rank)
          for (int l : boundary_layers(g_, tg_, task.segment, t)) received(grad_task_.at({task.segment, t, m}), l);
    }
  }

  // The input of segment s for micro-batch m read from layer p of another segment:
  // a leaf that collects the gradient for p's segment.
  torch::Tensor leaf(int s, int m, int p) {
    auto key = std::make_tuple(s, m, p);
    auto it = leaves_.find(key);
    if (it != leaves_.end()) return it->second;
    int ps = seg_of_layer_[p];
    torch::Tensor src = device_of(ps, m) == c_.rank ? outs_[m][p].detach() : received(act_task_.at({ps, s, m}), p);
    torch::Tensor l = al_ ? src : src.requires_grad_(true);  // al sends no gradient back
    leaves_[key] = l;
    return l;
  }

  // The segment's layers for micro-batch m (its inputs: the model's, or
  // leaves over other segments' outputs), and its loss when it has the output layer.
  void run_layers(int s, int m) {
    const Segment& seg = tg_.segments[s];
    if (al_) c_.model->set_labels(ys_[m]);  // the al_labels layer's one-hot
    for (int l : seg.layers) {
      std::vector<torch::Tensor> ins;
      const Layer& layer = g_.layers[l];
      if (layer.inputs.empty()) ins.push_back(xs_[m]);
      for (int p : layer.inputs) {
        if (seg_of_layer_[p] != s)
          ins.push_back(leaf(s, m, p));
        else  // al: no gradient crosses blocks, even inside one segment
          ins.push_back(al_ && block_of_[p] != block_of_[l] ? outs_[m][p].detach() : outs_[m][p]);
      }
      outs_[m][l] = c_.model->forward_layer(l, ins);
    }
    if (al_)
      loss_[m] = al_losses(s, m);
    else if (seg.computes_loss)
      loss_[m] = loss_of(outs_[m][L_ - 1], ys_[m], c_.job.options.batch_size);
  }

  // The local losses of the AL blocks in segment s (a segment holds whole blocks).
  torch::Tensor al_losses(int s, int m) {
    torch::Tensor total;
    for (const AlBlock& b : g_.al_blocks) {
      if (seg_of_layer_[b.first] != s) continue;
      const torch::Tensor t_prev = seg_of_layer_[b.target_input] == s ? outs_[m][b.target_input] : leaf(s, m, b.target_input);
      torch::Tensor loss = al_local_loss(outs_[m][b.bridge], outs_[m][b.target], outs_[m][b.decoder], t_prev,
                                         c_.job.options.batch_size);
      total = total.defined() ? total + loss : loss;
    }
    return total;
  }

  // A recomputing segment's forward keeps no autograd graph: only its inputs
  // (the leaves) and the outputs other segments on this worker read; its
  // backward runs the forward again from the same inputs and random state
  // (dropout draws the same masks), as torch.utils.checkpoint does.
  void forward_without_graph(int s, int m) {
    const Segment& seg = tg_.segments[s];
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng_state_[{s, m}] = gen.get_state();
    }
    {
      torch::NoGradGuard no_grad;
      run_layers(s, m);
    }
    loss_[m] = torch::Tensor();
    std::vector<char> read_here(L_, 0);
    for (int t : seg.succs)
      if (device_of(t, m) == c_.rank)
        for (int l : boundary_layers(g_, tg_, s, t)) read_here[l] = 1;
    // What other devices read leaves with the sends below (they hold their tensors).
    pending_drop_ = {};
    for (int l : seg.layers)
      if (!read_here[l]) pending_drop_.push_back(l);
  }

  void recompute_forward(int s, int m) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor now;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      now = gen.get_state();
      gen.set_state(rng_state_.at({s, m}));
    }
    run_layers(s, m);
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(now);
    }
    rng_state_.erase({s, m});
  }

  void forward(int s, int m, Sender& sender) {
    const Segment& seg = tg_.segments[s];
    pending_drop_.clear();
    if (seg.recompute)
      forward_without_graph(s, m);
    else
      run_layers(s, m);
    for (int t : seg.succs) {
      int dst = device_of(t, m);
      if (dst == c_.rank) continue;
      int tid = act_task_.at({s, t, m});
      std::vector<std::pair<torch::Tensor, int>> tensors;
      for (int l : boundary_layers(g_, tg_, s, t)) tensors.push_back({outs_[m][l].detach(), tag(tid, l)});
      double delay = c_.job.cluster.link(c_.rank, dst).transfer_s(tg_.tasks[tid].bytes);
      sender.post(std::move(tensors), dst, delay,
                  "X s" + std::to_string(s) + "->s" + std::to_string(t) + " m" + std::to_string(m));
    }
    for (int l : pending_drop_) outs_[m][l] = torch::Tensor();
  }

  void backward(int s, int m, Sender& sender) {
    const Segment& seg = tg_.segments[s];
    if (seg.recompute) recompute_forward(s, m);
    std::vector<torch::Tensor> roots, grads;
    if ((seg.computes_loss || al_) && loss_[m].defined() && loss_[m].requires_grad()) {
      roots.push_back(loss_[m]);
      grads.push_back(torch::ones_like(loss_[m]));
    }
    if (!al_) add_output_gradients(s, m, roots, grads);  // al: no gradient comes back
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    if (al_)
      update_segment(s);  // its local losses only: nothing to send
    else
      send_input_gradients(s, m, sender);
    // This segment's activations, its received inputs and gradients are no
    // longer needed (a send holds its own reference until it has left): free
    // them now, so 1F1B keeps only the micro-batches in flight.
    for (int l : seg.layers) outs_[m][l] = torch::Tensor();
    loss_[m] = torch::Tensor();
    release_received(s, m);
  }

  // The gradient of each of segment s's outputs read elsewhere, summed over
  // its consumers, as backward roots.
  void add_output_gradients(int s, int m, std::vector<torch::Tensor>& roots, std::vector<torch::Tensor>& grads) {
    std::map<int, torch::Tensor> out_grad;
    auto accumulate = [&](int l, const torch::Tensor& g) {
      if (!g.defined()) return;
      auto it = out_grad.find(l);
      if (it == out_grad.end())
        out_grad[l] = g;
      else
        it->second = it->second + g;
    };
    for (int t : tg_.segments[s].succs)
      for (int l : boundary_layers(g_, tg_, s, t)) {
        if (device_of(t, m) == c_.rank) {
          auto it = leaves_.find(std::make_tuple(t, m, l));
          if (it != leaves_.end()) {
            accumulate(l, it->second.grad());
            leaves_.erase(it);  // its consumer's backward is done and its gradient read
          }
        } else {
          accumulate(l, received(grad_task_.at({s, t, m}), l));
        }
      }
    for (auto& [l, g] : out_grad)
      if (outs_[m][l].requires_grad()) {
        roots.push_back(outs_[m][l]);
        grads.push_back(g);
      }
  }

  // The gradients of segment s's remote inputs, back to their producers.
  void send_input_gradients(int s, int m, Sender& sender) {
    for (int p : tg_.segments[s].preds) {
      int dst = device_of(p, m);
      if (dst == c_.rank) continue;
      int tid = grad_task_.at({p, s, m});
      std::vector<std::pair<torch::Tensor, int>> tensors;
      for (int l : boundary_layers(g_, tg_, p, s)) {
        torch::Tensor lf = leaves_.at(std::make_tuple(s, m, l));
        torch::Tensor g = lf.grad().defined() ? lf.grad() : torch::zeros_like(lf);
        tensors.push_back({g, tag(tid, l)});
      }
      double delay = c_.job.cluster.link(c_.rank, dst).transfer_s(tg_.tasks[tid].bytes);
      sender.post(std::move(tensors), dst, delay,
                  "G s" + std::to_string(s) + "->s" + std::to_string(p) + " m" + std::to_string(m));
    }
  }

  // al: segment s's own optimizer, right after each of its backwards.
  void update_segment(int s) {
    auto it = segment_optimizer_.find(s);
    if (it == segment_optimizer_.end()) return;  // no parameters
    ComputeGate::Turn turn(c_.gate);
    it->second->step();
    it->second->zero_grad();
  }

  Ctx& c_;
  const LayerGraph& g_;
  TaskGraph tg_;
  const bool al_ = tg_.schedule == Schedule::al;
  std::vector<int> block_of_;  // al: each layer's AL block
  std::map<int, std::unique_ptr<torch::optim::Optimizer>> segment_optimizer_;  // al: per segment here
  int L_ = 0, M_ = 0, parity_ = 0, step_ = 0;
  std::vector<int> seg_of_layer_;
  std::vector<Replica> replicas_;
  struct Tie {
    torch::Tensor copy;          // this worker's copy; undefined where it builds neither owner nor reader
    std::vector<int64_t> shape;  // the parameter's
    std::string name;            // the owner's
  };
  std::vector<Tie> ties_;  // shared parameters whose owner and readers run on different workers
  std::map<std::tuple<int, int, int>, int> act_task_, grad_task_;  // (producer, consumer, m) -> task
  std::map<std::pair<int, int>, Recv> recv_;                       // (task, layer)
  std::map<std::tuple<int, int, int>, torch::Tensor> leaves_;      // (consumer segment, m, layer)
  std::vector<torch::Tensor> xs_, ys_, loss_;
  std::vector<std::vector<torch::Tensor>> outs_;
  std::map<std::pair<int, int>, torch::Tensor> rng_state_;  // recomputing segments: (segment, m) -> CPU RNG state
  std::vector<int> pending_drop_;  // a recomputing forward's outputs to drop once sent
};

// ---------------------------------------------------------------- data parallel

std::pair<int64_t, int64_t> share_of(int64_t batch, int rank, int world) {
  int64_t base = batch / world, extra = batch % world;
  int64_t size = base + (rank < extra ? 1 : 0);
  int64_t off = rank * base + std::min<int64_t>(rank, extra);
  return {off, size};
}

WorkerStep data_parallel_step(Ctx& c, const std::pair<torch::Tensor, torch::Tensor>& batch, Clock::time_point t0,
                              bool allreduce) {
  WorkerStep st;
  const RunOptions& o = c.job.options;
  const auto& [x, y] = batch;
  auto [off, size] = share_of(o.batch_size, c.rank, c.world);
  auto c0 = Clock::now();
  const double cpu0 = thread_cpu_ms();
  double waited_ms = 0;
  {
    ComputeGate::Turn turn(c.gate);
    waited_ms = turn.waited_ms();
    torch::Tensor out = c.model->forward(x.narrow(0, off, size));
    // BSP: sum / full batch, so the all-reduced gradient is the full-batch mean.
    // HOGWILD: each worker is an independent SGD on its own share (mean over it).
    torch::Tensor loss = loss_of(out, y.narrow(0, off, size), allreduce ? o.batch_size : size);
    loss.backward();
  }
  double compute_ms = ms_between(c0, Clock::now());
  compute_ms += c.emulate_speed(compute_ms, thread_cpu_ms() - cpu0, waited_ms);
  st.busy_ms += compute_ms;
  st.timeline.push_back(TaskSpan{"F+B r" + std::to_string(c.rank), ms_between(t0, c0), ms_between(t0, c0) + compute_ms});
  if (allreduce && c.world > 1) {
    auto a0 = Clock::now();
    std::vector<torch::Tensor> grads;
    for (auto& p : c.model->parameters()) grads.push_back(p.grad().reshape({-1}));
    std::vector<at::Tensor> flat{torch::cat(grads)};
    // Ring all-reduce over the emulated link to the next rank: it takes the
    // emulated time, of which the real exchange (the gradients are used only
    // after both) is a part, not an addition.
    const Link& link = c.job.cluster.link(c.rank, (c.rank + 1) % c.world);
    int64_t bytes = flat[0].numel() * 4;
    double ring = 2.0 * (c.world - 1) / c.world;
    const double emulated_s =
        2.0 * (c.world - 1) * link.latency_ms / 1e3 + ring * bytes * 8.0 / (link.bandwidth_mbps * 1e6);
    c.pg->allreduce(flat)->wait();
    sleep_s(emulated_s - ms_between(a0, Clock::now()) / 1e3);
    int64_t pos = 0;
    for (auto& p : c.model->parameters()) {
      int64_t n = p.numel();
      p.grad().copy_(flat[0].narrow(0, pos, n).view_as(p));
      pos += n;
    }
    double comm_ms = ms_between(a0, Clock::now());
    st.comm_ms += comm_ms;
    st.timeline.push_back(TaskSpan{"allreduce", ms_between(t0, a0), ms_between(t0, a0) + comm_ms});
  }
  auto o0 = Clock::now();
  {
    ComputeGate::Turn turn(c.gate);
    c.optimizer->step();
    c.optimizer->zero_grad();
  }
  double opt_ms = ms_between(o0, Clock::now());
  st.busy_ms += opt_ms;
  st.timeline.push_back(TaskSpan{"optimizer", ms_between(t0, o0), ms_between(t0, o0) + opt_ms});
  return st;
}

// HOGWILD: every parameter of the local replica is re-pointed into one
// POSIX shared-memory segment that all workers map; rank 0 initialises it.
struct SharedParams {
  void* base = nullptr;
  size_t bytes = 0;
  ~SharedParams() {
    if (base) munmap(base, bytes);
  }
};

Status share_parameters(Ctx& c, SharedParams& shm) {
  int64_t total = 0;
  for (auto& p : c.model->parameters()) total += p.numel();
  shm.bytes = static_cast<size_t>(std::max<int64_t>(total, 1)) * sizeof(float);
  int fd = shm_open(c.job.shm_name.c_str(), O_RDWR, 0600);
  if (fd < 0) return Status::error("shm_open " + c.job.shm_name + ": " + strerror(errno));
  void* base = mmap(nullptr, shm.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Status::error(std::string("mmap: ") + strerror(errno));
  shm.base = base;
  float* f = static_cast<float*>(base);
  torch::NoGradGuard no_grad;
  if (c.rank == 0) {
    int64_t pos = 0;
    for (auto& p : c.model->parameters()) {
      std::memcpy(f + pos, p.contiguous().data_ptr<float>(), p.numel() * sizeof(float));
      pos += p.numel();
    }
  }
  c.pg->barrier()->wait();
  int64_t pos = 0;
  for (auto& p : c.model->parameters()) {
    p.set_data(torch::from_blob(f + pos, p.sizes(), torch::kFloat));
    pos += p.numel();
  }
  return Status::ok();
}

// This worker's index among the devices of `group` (-1: not one of them).
int replica_index(const Placement& p, int group, int rank) {
  const std::vector<int> devices = p.devices_of_group(group);
  auto it = std::find(devices.begin(), devices.end(), rank);
  return it == devices.end() ? -1 : static_cast<int>(it - devices.begin());
}

// Pipeline: the layers of every group this worker runs (a replica holds its group's layers).
std::vector<bool> layers_on_rank(const Placement& p, int num_layers, int rank) {
  std::vector<bool> keep(num_layers, false);
  for (int l = 0; l < num_layers; ++l) keep[l] = replica_index(p, p.layer_group[l], rank) >= 0;
  return keep;
}

// all_layers (data parallel, rank 0): the whole model; pipeline: the layers
// this worker holds, each under its replica index in its group.
void publish_parameters(Ctx& c, bool all_layers) {
  const LayerGraph& g = c.job.graph;
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    if (!c.model->has_layer(layer)) continue;
    const int replica = all_layers ? 0 : replica_index(c.job.placement, c.job.placement.layer_group[l], c.rank);
    if (replica < 0) continue;
    std::vector<float> flat;
    for (auto& p : c.model->layer_parameters(layer)) {
      torch::Tensor t = p.detach().contiguous().to(torch::kFloat);
      flat.insert(flat.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
    c.channel->publish_parameters(layer, flat, replica);
  }
}

// Joins the process group of every replicated group this worker is a replica
// of, in ascending group order (the task graph's; the same on every member, so
// no two wait on each other), and hands each its group's parameters.
void join_replica_groups(Ctx& c, const TaskGraph& tg) {
  const Placement& p = c.job.placement;
  for (size_t k = 0; k < tg.replicated_groups.size(); ++k) {
    const ReplicatedGroup& rg = tg.replicated_groups[k];
    if (std::find(rg.devices.begin(), rg.devices.end(), c.rank) == rg.devices.end()) continue;
    std::vector<torch::Tensor> params;
    for (size_t l = 0; l < p.layer_group.size(); ++l)
      if (p.layer_group[l] == rg.group)
        for (auto& t : c.model->layer_parameters(static_cast<int>(l))) params.push_back(t);
    c.replica_groups.push_back(std::make_unique<ReplicaGroup>(static_cast<int>(k), rg.group, rg.devices, c.rank,
                                                              c.store, c.job.gloo_hosts.at(c.rank), c.gloo_timeout,
                                                              c.job.cluster, std::move(params)));
  }
}

// The placement's optimizer over this worker's parameters.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params, Optimizer which,
                                                        const RunOptions& o) {
  if (which == Optimizer::adam)
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.learning_rate));
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.learning_rate).momentum(o.momentum));
}

int run_job(Ctx& c) {
  const RunOptions& o = c.job.options;
  const std::string& mode = c.job.mode;
  set_compute_threads(c.device().threads);
  std::vector<bool> keep;
  std::unique_ptr<PipelineWorker> pipeline;
  if (mode == "pipeline") {
    auto tg = build_task_graph(c.job.graph, c.job.placement, c.job.cluster, o.batch_size);
    if (!tg) throw std::runtime_error("task graph: " + tg.error_message());
    keep = layers_on_rank(c.job.placement, static_cast<int>(c.job.graph.layers.size()), c.rank);
    auto m = GraphModel::build(c.job.graph, o.seed, keep);
    if (!m) throw std::runtime_error(m.error_message());
    c.model = *m;
    join_replica_groups(c, *tg);
    pipeline = std::make_unique<PipelineWorker>(c, std::move(*tg));
  } else {
    auto m = GraphModel::build(c.job.graph, o.seed);
    if (!m) throw std::runtime_error(m.error_message());
    c.model = *m;
  }
  c.model->set_training(true);
  SharedParams shm;
  if (mode == "hogwild")
    if (Status s = share_parameters(c, shm); !s) throw std::runtime_error(s.message());
  std::vector<torch::Tensor> params = c.model->parameters();
  if (params.empty()) params.push_back(torch::zeros({1}, torch::requires_grad()));  // SGD needs one
  c.optimizer = make_optimizer(params, c.job.placement.optimizer, o);
  Sender sender(c.pg);
  WorkerReport report;
  report.rank = c.rank;
  for (int k = 0; k < o.warmup_steps + o.steps; ++k) {
    maybe_fault(c.job, c.rank, k);
    std::pair<torch::Tensor, torch::Tensor> batch;  // data parallel's; a pipeline prepares its own
    if (pipeline)
      pipeline->prepare(k);
    else
      batch = synthetic_batch(c.job.graph, o.batch_size, o.seed + k);
    if (mode != "hogwild") c.pg->barrier()->wait();  // aligns the step's clocks
    auto t0 = Clock::now();
    sender.start_step(t0);
    WorkerStep st = pipeline ? pipeline->step(t0, sender) : data_parallel_step(c, batch, t0, mode == "bsp");
    st.step_ms = ms_between(t0, Clock::now());
    for (const TaskSpan& e : sender.entries()) st.timeline.push_back(e);
    if (k >= o.warmup_steps) report.steps.push_back(std::move(st));
    c.progress();
  }
  c.pg->barrier()->wait();  // hogwild: every worker finished its updates
  if (o.collect_parameters && (mode == "pipeline" || c.rank == 0)) publish_parameters(c, mode != "pipeline");
  report.peak_rss_bytes = peak_rss_bytes();
  report.peak_tensor_bytes = tensor_bytes_peak();
  c.channel->publish_report(report);
  c.channel->mark_done(c.rank);
  return 0;
}

}  // namespace

int run_worker(const WorkerArgs& args) {
  install_tensor_memory_counter();  // before any tensor exists
  Ctx c;
  c.rank = args.rank;
  c.world = args.world;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(args.store_port);
    so.isServer = false;
    so.timeout = std::chrono::milliseconds(60000);
    auto store = c10::make_intrusive<c10d::TCPStore>(args.store_host, so);
    c.store = store;
    c.channel = std::make_unique<ControlChannel>(*store);
    auto job = c.channel->read_job();
    if (!job) throw std::runtime_error(job.error_message());
    c.job = std::move(*job);
    const int slot = c.job.compute_gate_slot.empty() ? -1 : c.job.compute_gate_slot.at(c.rank);
    auto gate = ComputeGate::open(c.job.compute_gate_dir, slot);
    if (!gate) throw std::runtime_error(gate.error_message());
    c.gate = std::move(*gate);
    // Longer than the coordinator's no-progress timeout, so a hang is reported
    // by the coordinator (which names the stuck worker) before Gloo gives up.
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>((c.job.options.timeout_s * 2 + 5) * 1000));
    store->setTimeout(timeout);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(c.job.gloo_hosts.at(c.rank)));
    opts->threads = 2;
    c.gloo_timeout = timeout;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("pg", store);
    c.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, c.rank, c.world, opts);
    int rc = run_job(c);
    std::cout.flush();
    std::cerr.flush();
    _exit(rc);  // skip Gloo teardown: peers may already be gone
  } catch (const std::exception& e) {
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    if (c.channel) c.channel->publish_error(args.rank, msg);
    std::cerr << "tapp-worker rank " << args.rank << ": " << msg << "\n";
    std::cerr.flush();
    _exit(1);
  }
}

// ---------------------------------------------------------------- listener

namespace {

bool read_line(int fd, std::string& line) {
  line.clear();
  char ch;
  while (true) {
    ssize_t n = read(fd, &ch, 1);
    if (n <= 0) return false;
    if (ch == '\n') return true;
    line.push_back(ch);
    if (line.size() > 1024) return false;
  }
}

void write_line(int fd, const std::string& line) {
  const std::string s = line + "\n";
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string peer_host(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "127.0.0.1";
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0)
    return "127.0.0.1";
  return host;
}

// Waits for `pid`; if the coordinator's connection drops first, gives the
// child `grace_ms` to end by itself (a profile child that has just written
// its reply, which the coordinator read and hung up on), then kills it and
// returns false.
bool wait_for_child(int fd, pid_t pid, int& status, int grace_ms = 0) {
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char buf[64];
      ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {  // coordinator gone: end the child
        for (int waited = 0; waited < grace_ms; waited += 50) {
          if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return false;
      }
    }
  }
}

// Runs one job in a child; kills it if the coordinator's connection drops.
void serve_job(int fd, int listen_fd, const WorkerArgs& args) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(listen_fd);
    close(fd);
    _exit(run_worker(args));
  }
  if (pid < 0) {
    write_line(fd, encode_exit(1));
    return;
  }
  int status = 0;
  if (!wait_for_child(fd, pid, status)) {
    std::cerr << "tapp-worker: coordinator disconnected; job of rank " << args.rank << " killed\n";
    return;
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  write_line(fd, encode_exit(code));
}

// Sends `make_reply()`'s answer from a child process.
void reply_from_child(int fd, int listen_fd, const std::function<std::string()>& make_reply) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(listen_fd);
    const std::string reply = make_reply();
    for (size_t off = 0; off < reply.size();) {
      ssize_t n = send(fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
      if (n <= 0) _exit(1);
      off += static_cast<size_t>(n);
    }
    _exit(0);
  }
  if (pid < 0) {
    write_line(fd, encode_error_reply("cannot start a process to profile in"));
    return;
  }
  int status = 0;
  if (!wait_for_child(fd, pid, status, 2000))
    std::cerr << "tapp-worker: coordinator disconnected before the reply was sent\n";
}

// Answers "device" and "profile" in a child: profiling sets LibTorch's thread
// pools, and describing a GPU starts CUDA, neither of which the listener may
// carry into the next job's fork (CUDA does not survive a fork).
void serve_profile(int fd, int listen_fd, const ListenerRequest& request) {
  if (request.kind == ListenerRequest::Kind::device) {
    reply_from_child(fd, listen_fd, [&request] { return answer_device_request(request) + "\n"; });
    return;
  }
  timeval receive_timeout{60, 0};  // the payload follows its header line at once
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive_timeout, sizeof(receive_timeout));
  std::string payload(static_cast<size_t>(request.payload_bytes), '\0');
  for (size_t got = 0; got < payload.size();) {
    ssize_t n = read(fd, payload.data() + got, payload.size() - got);
    if (n <= 0) {
      write_line(fd, encode_error_reply("the profile request ended before its " +
                                        std::to_string(request.payload_bytes) + " bytes"));
      return;
    }
    got += static_cast<size_t>(n);
  }
  reply_from_child(fd, listen_fd, [&payload] { return answer_profile_request(payload); });
}

}  // namespace

int serve_worker(const std::string& host, int port, int max_jobs) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    std::cerr << "tapp-worker: cannot resolve " << host << "\n";
    return 2;
  }
  int lfd = socket(res->ai_family, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (lfd < 0 || bind(lfd, res->ai_addr, res->ai_addrlen) != 0 || listen(lfd, 8) != 0) {
    std::cerr << "tapp-worker: cannot listen on " << host << ":" << port << ": " << strerror(errno) << "\n";
    freeaddrinfo(res);
    return 2;
  }
  freeaddrinfo(res);
  std::cerr << "tapp-worker: listening on " << host << ":" << port << "\n";
  signal(SIGPIPE, SIG_IGN);
  for (int jobs = 0; max_jobs < 0 || jobs < max_jobs;) {
    int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0) continue;
    std::string line;
    if (read_line(fd, line)) {
      auto request = decode_listener_request(line);
      if (!request) {
        write_line(fd, encode_bad_request());
      } else if (request->kind == ListenerRequest::Kind::ping) {
        write_line(fd, encode_pong());
      } else if (request->kind == ListenerRequest::Kind::device || request->kind == ListenerRequest::Kind::profile) {
        serve_profile(fd, lfd, *request);
      } else {
        WorkerArgs args{peer_host(fd), request->store_port, request->rank, request->world};
        serve_job(fd, lfd, args);
        ++jobs;
      }
    }
    close(fd);
  }
  close(lfd);
  return 0;
}

}  // namespace tapp
