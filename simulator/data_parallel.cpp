#include "simulator/data_parallel.h"

#include <algorithm>

namespace tapp {

StepReport simulate_data_parallel(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch_size,
                                  const std::vector<int>& devices, bool exchange_gradients) {
  const int L = static_cast<int>(g.layers.size());
  const int R = static_cast<int>(devices.size());
  if (R == 0) return StepReport::failure(FailureKind::invalid_placement, "bsp: no replicas", "simulate");
  const int64_t share = (batch_size + R - 1) / R;
  const Placement replicas = Placement::replicas(L, devices);
  if (Status s = check_memory(replicas, g, c, batch_size); !s)
    return StepReport::failure(FailureKind::out_of_memory, "bsp: " + s.message(), "simulate");
  const std::vector<int64_t> memory = estimate_device_memory_bytes(replicas, g, c, batch_size);
  int64_t params = 0;
  for (const Layer& l : g.layers) params += l.param_bytes();
  StepReport r;
  r.ok = true;
  r.source = "simulate";
  r.devices.resize(c.num_devices());
  for (int d = 0; d < c.num_devices(); ++d) r.devices[d].device = c.devices[d].name;
  double compute = 0;
  std::vector<double> f(R), b(R);
  for (int k = 0; k < R; ++k) {
    int d = devices[k];
    f[k] = cost.forward_ms(d, 0, L - 1, share);
    b[k] = cost.backward_ms(d, 0, L - 1, share);
    compute = std::max(compute, f[k] + b[k]);
  }
  // Ring allreduce of every parameter (the same cost as a replicated stage's allreduce task).
  const double allreduce = exchange_gradients ? cost.ring_allreduce_ms(devices, params) : 0.0;
  double update = 0;
  for (int d : devices) update = std::max(update, cost.update_ms(d, params));
  r.step_ms = compute + allreduce + update + cost.step_overhead_ms();
  double busy = 0, comm = 0;
  for (int k = 0; k < R; ++k) {
    DeviceStats& st = r.devices[devices[k]];
    st.busy_ms = f[k] + b[k] + update;
    st.comm_ms = allreduce;
    st.idle_ms = std::max(0.0, r.step_ms - st.busy_ms - st.comm_ms);
    st.peak_memory_bytes = memory[devices[k]];
    busy += st.busy_ms;
    comm += st.comm_ms;
    r.timeline.push_back({devices[k], "F s0 m0", 0, f[k]});
    r.timeline.push_back({devices[k], "B s0 m0", f[k], f[k] + b[k]});
    if (allreduce > 0) r.timeline.push_back({devices[k], "allreduce", compute, compute + allreduce});
  }
  r.comm_fraction = busy + comm > 0 ? comm / (busy + comm) : 0;
  return r;
}

StepReport simulate_data_parallel(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch_size,
                                  const Placement& marker) {
  return simulate_data_parallel(g, c, cost, batch_size, marker.group_device,
                                marker.data_parallel != DataParallelMode::hogwild);
}

}  // namespace tapp
