// core/cluster_fingerprint.h — one key for "the same cluster".
//
// Owns `cluster_fingerprint`: a stable hash of everything that changes how a
// cluster runs a step — each device (name, kind, threads, memory, speed, where
// it lives, where its costs come from, in order) and each link (endpoints, bandwidth, latency; the order
// links are listed in does not matter) plus the default link. The cluster's
// display name is not part of it. Calibrations fitted on a cluster are stored
// and found under this key (simulator/calibration_store.h).
// Thread safety: a pure function.
#pragma once

#include <string>

#include "core/cluster.h"

namespace tapp {

// 16 lowercase hex digits (64-bit FNV-1a of a canonical text form).
std::string cluster_fingerprint(const Cluster& cluster);

}  // namespace tapp
