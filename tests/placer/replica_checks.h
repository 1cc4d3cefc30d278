// tests/placer/replica_checks.h — what the policy tests ask of a placement's replicas.
#pragma once

#include <algorithm>
#include <vector>

#include "core/placement.h"

namespace tapp::testing {

// Whether a replica of some group (a copy beside its primary) runs on a
// device that runs another group too.
inline bool replica_beside_another_group(const Placement& p) {
  for (int g = 0; g < p.num_groups(); ++g) {
    if (p.replica_count(g) < 2) continue;
    for (int d : p.devices_of_group(g))
      for (int h = 0; h < p.num_groups() && d != p.group_device[g]; ++h) {
        const std::vector<int> of_h = p.devices_of_group(h);
        if (h != g && std::find(of_h.begin(), of_h.end(), d) != of_h.end()) return true;
      }
  }
  return false;
}

}  // namespace tapp::testing
