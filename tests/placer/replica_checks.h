// tests/placer/replica_checks.h — what the policy tests ask of a placement's replicas.
#pragma once

#include <algorithm>
#include <vector>

#include "core/placement.h"

namespace tapp::testing {

// Whether a replica of some group (a copy beside its primary,
// group_replicas) runs on a device that runs another group too.
inline bool replica_beside_another_group(const Placement& p) {
  for (int g = 0; g < static_cast<int>(p.group_replicas.size()); ++g)
    for (int d : p.group_replicas[g])
      for (int h = 0; h < p.num_groups(); ++h) {
        const std::vector<int> of_h = p.devices_of_group(h);
        if (h != g && std::find(of_h.begin(), of_h.end(), d) != of_h.end()) return true;
      }
  return false;
}

}  // namespace tapp::testing
