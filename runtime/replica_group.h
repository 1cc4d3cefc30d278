// runtime/replica_group.h — one replicated group (stage) as seen by one of its replicas.
//
// Owns what the replicas of a group exchange, over a c10d::ProcessGroupGloo of
// exactly the group's devices (ranks renumbered 0..r-1 in devices_of_group
// order, rendezvous under the prefix "group<g>/" of the job's TCPStore,
// created by the group's members only; a worker in several groups creates
// them in ascending group order, so no two workers wait on each other):
//  * aggregation_every == 1: the sum of the group's parameter gradients over
//    its replicas. Started (asynchronously: Gloo runs it on its own threads,
//    a helper thread waits for it) as soon as this replica's last backward of
//    the group is done, so it overlaps the rest of the backward pass; waited
//    for before the optimizer step. The loss is scaled by the full batch, so
//    the sum is the single-device gradient.
//  * aggregation_every == K > 1: no gradient exchange; each replica updates on
//    its own share (gradients rescaled to the mean over that share), and every
//    K steps, after the update, the replicas' parameters are averaged
//    (all-reduce / r, FedAvg-style as PipeLearn's aggregation_frequency),
//    counting steps from the first (warm-up included). Momentum buffers and
//    BatchNorm statistics stay local.
// Emulated links: an exchange lasts at least a ring all-reduce of its bytes
// over the group's slowest ring link (ring_allreduce_s); the real exchange is
// part of that time, not added to it.
// Data flow: worker.cpp (PipelineWorker) -> ReplicaGroup -> Gloo -> the other replicas.
// Thread safety: used by one worker's compute thread; the in-flight all-reduce
// is waited on by a detached helper thread whose result finish_gradient_allreduce takes.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/allreduce_ring.h"
#include "core/cluster.h"
#include "runtime/control_channel.h"

namespace tapp {

class ReplicaGroup {
 public:
  using Clock = std::chrono::steady_clock;

  // Joins the group's process group (blocks until every replica joined, or
  // the timeout). `index`: the group's in TaskGraph::replicated_groups (its
  // spans are named "AR r<index>" as the simulator names the allreduce task,
  // and "average r<index>"); `group`: the placement group; `devices`: the
  // group's devices as ranks of the job (their order is the replica order);
  // `rank`: this worker's, one of them.
  ReplicaGroup(int index, int group, std::vector<int> devices, int rank, const c10::intrusive_ptr<c10d::Store>& store,
               const std::string& gloo_host, std::chrono::milliseconds timeout, const Cluster& cluster,
               std::vector<torch::Tensor> parameters);
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  int index() const { return index_in_graph_; }
  int group() const { return group_; }
  int replica_index() const { return index_; }
  int replicas() const { return static_cast<int>(devices_.size()); }
  // "group 1 (devices 'a', 'b')": for error messages.
  std::string describe() const;

  // Starts summing the group's gradients over the replicas (undefined
  // gradients count as zero); returns at once.
  void start_gradient_allreduce(Clock::time_point step_start);
  bool gradient_allreduce_started() const { return pending_.valid(); }
  // Waits for it and writes the sums into the gradients; its span (for the
  // timeline). Throws std::runtime_error naming the group when it failed.
  TaskSpan finish_gradient_allreduce();

  // Multiplies the group's gradients by `factor` (a local step's rescaling).
  void scale_gradients(double factor);
  // Averages the group's parameters over the replicas (blocking); its span.
  TaskSpan average_parameters(Clock::time_point step_start);

 private:
  torch::Tensor flat_gradients();
  void unflatten_into_gradients(const torch::Tensor& flat);
  double emulated_s(int64_t bytes) const;

  int index_in_graph_ = 0, group_ = 0, index_ = 0;
  std::vector<int> devices_;
  const Cluster& cluster_;
  std::vector<torch::Tensor> parameters_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::vector<std::string> device_names_;
  // The in-flight gradient all-reduce: its buffer, and the helper's result
  // (the span, or an error message).
  torch::Tensor in_flight_;
  struct Done {
    TaskSpan span;
    std::string error;
  };
  std::future<Done> pending_;
};

}  // namespace tapp
