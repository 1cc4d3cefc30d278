// planners/single_and_replicas.cpp — the planners that do not split the model:
// the fastest single device that holds it, and data parallelism (BSP, HOGWILD)
// with a full replica on every device.
#include <string>
#include <vector>

#include "core/cluster.h"
#include "planners/planner_support.h"
#include "planners/planners.h"

namespace tapp {
using namespace planner_support;

Result<Placement> plan_single_device(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  Status last = Status::ok();
  for (int d : devices_fastest_first(ctx)) {
    Placement p = Placement::single_device(num_layers(ctx), d, 1);
    p.schedule = ctx.schedule;
    p.optimizer = ctx.optimizer;
    if (ctx.micro_batches > 0) p.micro_batches = ctx.micro_batches;
    if (Status s = fit_with_recompute(ctx, p); !s) {
      last = s;
      continue;
    }
    return p;
  }
  return Status::error("single: no device can hold the whole model (" + last.message() + ")");
}

bool is_data_parallel(const Placement& p) { return p.is_data_parallel(); }

Result<Placement> plan_hogwild(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  for (const Device& d : ctx.cluster->devices)
    if (!d.is_local())
      return Status::error("hogwild: device '" + d.name +
                           "' is remote; HOGWILD shares parameters in local memory");
  auto p = plan_data_parallel(ctx);
  if (!p) return Status::error("hogwild" + p.error_message().substr(3));
  p->data_parallel = DataParallelMode::hogwild;
  p->source = "hogwild";
  return p;
}

Result<Placement> plan_data_parallel(const PlannerContext& ctx) {
  if (Status s = check_context(ctx); !s) return s;
  const int D = num_devices(ctx), L = num_layers(ctx);
  std::vector<int> devices;
  for (int d = 0; d < D; ++d) devices.push_back(d);
  Placement p = Placement::replicas(L, devices, DataParallelMode::bsp);
  p.optimizer = ctx.optimizer;
  if (Status s = check_memory(p, *ctx.graph, *ctx.cluster, ctx.batch_size); !s)
    return Status::error("bsp: every device holds a full replica, and " + s.message());
  return p;
}

}  // namespace tapp
