#include "runtime/replica_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace tapp {
namespace {

double ms_between(ReplicaGroup::Clock::time_point a, ReplicaGroup::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void sleep_until(ReplicaGroup::Clock::time_point t) {
  if (t > ReplicaGroup::Clock::now()) std::this_thread::sleep_until(t);
}

ReplicaGroup::Clock::time_point after_s(ReplicaGroup::Clock::time_point t, double s) {
  return t + std::chrono::duration_cast<ReplicaGroup::Clock::duration>(std::chrono::duration<double>(s));
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

ReplicaGroup::ReplicaGroup(int index, int group, std::vector<int> devices, int rank, const c10::intrusive_ptr<c10d::Store>& store,
                           const std::string& gloo_host, std::chrono::milliseconds timeout, const Cluster& cluster,
                           std::vector<torch::Tensor> parameters)
    : index_in_graph_(index), group_(group), devices_(std::move(devices)), cluster_(cluster), parameters_(std::move(parameters)) {
  auto it = std::find(devices_.begin(), devices_.end(), rank);
  if (it == devices_.end())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is not a replica of group " + std::to_string(group));
  index_ = static_cast<int>(it - devices_.begin());
  for (int d : devices_) device_names_.push_back(cluster_.devices.at(d).name);
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(gloo_host));
  opts->threads = 1;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group" + std::to_string(group) + "/", store);
  try {
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, index_, replicas(), opts);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot connect the replicas of " + describe() + ": " + first_line(e.what()));
  }
}

// A step that failed elsewhere may leave an all-reduce in flight: its detached
// helper ends when Gloo gives up (peers gone, or the timeout); the worker
// reports its own error meanwhile and exits with _exit.
ReplicaGroup::~ReplicaGroup() = default;

std::string ReplicaGroup::describe() const {
  std::string names;
  for (const std::string& n : device_names_) names += (names.empty() ? "'" : ", '") + n + "'";
  return "group " + std::to_string(group_) + " (devices " + names + ")";
}

double ReplicaGroup::emulated_s(int64_t bytes) const { return ring_allreduce_s(cluster_, devices_, bytes); }

torch::Tensor ReplicaGroup::flat_gradients() {
  std::vector<torch::Tensor> parts;
  for (auto& p : parameters_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    parts.push_back(p.grad().reshape({-1}));
  }
  return parts.empty() ? torch::zeros({1}) : torch::cat(parts);
}

void ReplicaGroup::unflatten_into_gradients(const torch::Tensor& flat) {
  int64_t pos = 0;
  for (auto& p : parameters_) {
    const int64_t n = p.numel();
    p.mutable_grad().copy_(flat.narrow(0, pos, n).view_as(p));
    pos += n;
  }
}

void ReplicaGroup::start_gradient_allreduce(Clock::time_point step_start) {
  if (pending_.valid()) throw std::logic_error("gradient all-reduce of " + describe() + " started twice in a step");
  in_flight_ = flat_gradients();
  const auto start = Clock::now();
  const auto emulated_end = after_s(start, emulated_s(in_flight_.numel() * 4));
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<at::Tensor> tensors{in_flight_};
  try {
    work = pg_->allreduce(tensors);
  } catch (const std::exception& e) {
    throw std::runtime_error("gradient all-reduce of " + describe() + " failed: " + first_line(e.what()));
  }
  const std::string label = "AR r" + std::to_string(index_in_graph_);
  auto promise = std::make_shared<std::promise<Done>>();
  pending_ = promise->get_future();
  std::thread([promise, work, step_start, start, emulated_end, label] {
    Done done;
    try {
      work->wait();
      sleep_until(emulated_end);
    } catch (const std::exception& e) {
      done.error = first_line(e.what());
    }
    done.span = TaskSpan{label, ms_between(step_start, start), ms_between(step_start, Clock::now())};
    promise->set_value(std::move(done));
  }).detach();
}

TaskSpan ReplicaGroup::finish_gradient_allreduce() {
  if (!pending_.valid()) throw std::logic_error("gradient all-reduce of " + describe() + " was never started");
  Done done = pending_.get();
  if (!done.error.empty())
    throw std::runtime_error("gradient all-reduce of " + describe() + " failed: " + done.error);
  unflatten_into_gradients(in_flight_);
  in_flight_ = torch::Tensor();
  return done.span;
}

void ReplicaGroup::scale_gradients(double factor) {
  torch::NoGradGuard no_grad;
  for (auto& p : parameters_)
    if (p.grad().defined()) p.mutable_grad().mul_(factor);
}

TaskSpan ReplicaGroup::average_parameters(Clock::time_point step_start) {
  torch::NoGradGuard no_grad;
  const auto start = Clock::now();
  std::vector<torch::Tensor> parts;
  for (auto& p : parameters_) parts.push_back(p.detach().reshape({-1}));
  std::vector<at::Tensor> tensors{parts.empty() ? torch::zeros({1}) : torch::cat(parts)};
  const auto emulated_end = after_s(start, emulated_s(tensors[0].numel() * 4));
  try {
    pg_->allreduce(tensors)->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error("parameter averaging of " + describe() + " failed: " + first_line(e.what()));
  }
  sleep_until(emulated_end);
  tensors[0].div_(static_cast<double>(replicas()));
  int64_t pos = 0;
  for (auto& p : parameters_) {
    const int64_t n = p.numel();
    p.detach().copy_(tensors[0].narrow(0, pos, n).view_as(p));
    pos += n;
  }
  return TaskSpan{"average r" + std::to_string(index_in_graph_), ms_between(step_start, start),
                  ms_between(step_start, Clock::now())};
}

}  // namespace tapp
