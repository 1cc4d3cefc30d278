// runtime/compute_gate.h — keeps a job's emulated devices from slowing each other.
//
// An emulated device (local, speed < 1) really computes for part of each task
// and sleeps the rest (worker.cpp). Devices of a real cluster share no cores
// and no memory bandwidth, but emulated ones on one host do: on the 2-core VM a
// neighbour streaming memory on the other core made a one-device alexnet step
// 1.7x longer, and a stage's backward that overlapped another stage's
// optimizer ran 1.6x its profiled time, which a simulator fed with profiles
// taken one device at a time cannot foresee. So the job's emulated devices
// take turns: each is given one of `slots` = ceil(sum of their speed x
// threads) slots (round-robin, at most the host's cores) and computes only
// while it holds its slot. A turn's wait is part of the task's wall time,
// which the speed sleep then shortens, so it costs nothing while a slot's
// devices ask for at most one core in all.
// A slot is an flock on a file in a directory the coordinator creates for the
// job: the kernel releases it when a worker dies, so a crash blocks no one.
// Data flow: runtime.cpp (compute_gate_slots, the directory) -> Job ->
// worker.cpp (ComputeGate around forward, backward and optimizer steps).
// Thread safety: a ComputeGate is used by one worker's compute thread. No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "core/cluster.h"

namespace tapp {

// Per device of `c`: its slot, or -1 where it is not gated (remote devices and
// local ones at full speed, whose contention is real and calibrated).
std::vector<int> compute_gate_slots(const Cluster& c, int host_cores);
// How many slots compute_gate_slots uses (0 when no device is gated).
int compute_gate_slot_count(const std::vector<int>& slots);
// The file that stands for `slot` in the job's gate directory.
std::string compute_gate_file(const std::string& dir, int slot);

class ComputeGate {
 public:
  ComputeGate() = default;  // not gated: turns return at once
  ComputeGate(ComputeGate&& o) noexcept;
  ComputeGate& operator=(ComputeGate&& o) noexcept;
  ComputeGate(const ComputeGate&) = delete;
  ComputeGate& operator=(const ComputeGate&) = delete;
  ~ComputeGate();

  // The gate of `slot` in `dir`; slot < 0 gives an ungated one.
  static Result<ComputeGate> open(const std::string& dir, int slot);
  bool gated() const { return fd_ >= 0; }

  // Holds the slot while alive; waited_ms is how long taking it took.
  class Turn {
   public:
    explicit Turn(ComputeGate& gate);
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    double waited_ms() const { return waited_ms_; }

   private:
    ComputeGate& gate_;
    double waited_ms_ = 0;
  };

 private:
  int fd_ = -1;
};

}  // namespace tapp
