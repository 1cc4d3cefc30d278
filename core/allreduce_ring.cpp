// core/allreduce_ring.cpp — see allreduce_ring.h.
#include "core/allreduce_ring.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/cluster.h"

namespace tapp {

double ring_allreduce_s(const Cluster& cluster, const std::vector<int>& devices, int64_t bytes) {
  const int r = static_cast<int>(devices.size());
  if (r < 2) return 0;
  const int64_t chunk = (bytes + r - 1) / r;
  double slowest_s = 0;
  for (int k = 0; k < r; ++k)
    slowest_s = std::max(slowest_s, cluster.link(devices[k], devices[(k + 1) % r]).transfer_s(chunk));
  return 2.0 * (r - 1) * slowest_s;
}

namespace {

// Seconds of each hop between the ring's devices (by position in `devices`), one chunk each.
class HopTimes {
 public:
  HopTimes(const Cluster& cluster, const std::vector<int>& devices, int64_t bytes)
      : r_(static_cast<int>(devices.size())), s_(static_cast<size_t>(r_) * r_) {
    const int64_t chunk = (bytes + r_ - 1) / r_;
    for (int i = 0; i < r_; ++i)
      for (int j = 0; j < r_; ++j)
        if (i != j) s_[i * r_ + j] = cluster.link(devices[i], devices[j]).transfer_s(chunk);
  }
  double operator()(int from, int to) const { return s_[from * r_ + to]; }
  // A ring's cost (positions in order): its slowest hop, then its hops' total.
  std::pair<double, double> ring_cost(const std::vector<int>& ring) const {
    double slowest = 0, total = 0;
    for (int k = 0; k < r_; ++k) {
      const double h = (*this)(ring[k], ring[(k + 1) % r_]);
      slowest = std::max(slowest, h);
      total += h;
    }
    return {slowest, total};
  }

 private:
  int r_;
  std::vector<double> s_;
};

// From `start`, always the fastest hop to a device not yet in the ring.
std::vector<int> greedy_ring(const HopTimes& hop, int r, int start) {
  std::vector<int> ring{start};
  std::vector<bool> used(r, false);
  used[start] = true;
  while (static_cast<int>(ring.size()) < r) {
    int next = -1;
    for (int j = 0; j < r; ++j)
      if (!used[j] && (next < 0 || hop(ring.back(), j) < hop(ring.back(), next))) next = j;
    used[next] = true;
    ring.push_back(next);
  }
  return ring;
}

}  // namespace

std::vector<int> cheapest_ring(const Cluster& cluster, const std::vector<int>& devices, int64_t bytes) {
  const int r = static_cast<int>(devices.size());
  if (r < 3) return devices;  // two devices form one ring either way
  const HopTimes hop(cluster, devices, bytes);
  std::vector<int> best(r);
  std::iota(best.begin(), best.end(), 0);
  std::pair<double, double> best_cost = hop.ring_cost(best);
  auto consider = [&](const std::vector<int>& ring) {
    const auto c = hop.ring_cost(ring);
    if (c < best_cost) best = ring, best_cost = c;
  };
  if (r <= kExhaustiveRingDevices) {
    // A ring's rotations cost the same: the first device stays first.
    std::vector<int> ring = best;
    while (std::next_permutation(ring.begin() + 1, ring.end())) consider(ring);
  } else {
    for (int start = 0; start < r; ++start) consider(greedy_ring(hop, r, start));
  }
  std::vector<int> out(r);
  for (int k = 0; k < r; ++k) out[k] = devices[best[k]];
  return out;
}

}  // namespace tapp
