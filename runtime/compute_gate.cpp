#include "runtime/compute_gate.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace tapp {

std::vector<int> compute_gate_slots(const Cluster& c, int host_cores) {
  double demand = 0;
  for (const Device& d : c.devices)
    if (d.is_local() && d.speed < 1.0) demand += d.speed * d.threads;
  std::vector<int> slot(c.devices.size(), -1);
  if (demand <= 0) return slot;
  const int slots = std::max(1, std::min(std::max(1, host_cores), static_cast<int>(std::ceil(demand - 1e-9))));
  int next = 0;
  for (size_t i = 0; i < c.devices.size(); ++i)
    if (c.devices[i].is_local() && c.devices[i].speed < 1.0) slot[i] = next++ % slots;
  return slot;
}

int compute_gate_slot_count(const std::vector<int>& slots) {
  int n = 0;
  for (int s : slots) n = std::max(n, s + 1);
  return n;
}

std::string compute_gate_file(const std::string& dir, int slot) { return dir + "/slot-" + std::to_string(slot); }

ComputeGate::ComputeGate(ComputeGate&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }

ComputeGate& ComputeGate::operator=(ComputeGate&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

ComputeGate::~ComputeGate() {
  if (fd_ >= 0) ::close(fd_);
}

Result<ComputeGate> ComputeGate::open(const std::string& dir, int slot) {
  ComputeGate gate;
  if (slot < 0) return gate;
  const std::string path = compute_gate_file(dir, slot);
  gate.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (gate.fd_ < 0) return Status::error("compute gate: cannot open " + path + ": " + std::strerror(errno));
  return gate;
}

ComputeGate::Turn::Turn(ComputeGate& gate) : gate_(gate) {
  if (gate_.fd_ < 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  while (::flock(gate_.fd_, LOCK_EX) != 0)
    if (errno != EINTR) throw std::runtime_error(std::string("compute gate: flock: ") + std::strerror(errno));
  waited_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

ComputeGate::Turn::~Turn() {
  if (gate_.fd_ >= 0) ::flock(gate_.fd_, LOCK_UN);
}

}  // namespace tapp
