// placer/evaluator_factory.h — the one place an EvaluatorKind becomes an Evaluator.
//
// Owns `make_evaluator`: simulate -> SimulatorEvaluator (the cost model),
// measure -> MeasureEvaluator (real workers, the run options), hybrid ->
// HybridEvaluator (simulate, measure the best with a MeasureEvaluator,
// recalibrate). The caller parses the kind once at its boundary
// (evaluator_kind_from_name, core/evaluator.h: `options.evaluator` in a
// request, `--evaluator` on the command line) and everything after it holds
// the enum. The result keeps typed handles on what callers need beyond
// evaluate(): the simulator (for a timeline), the hybrid (its measurements and
// calibrated costs) and, when every evaluation measures, how to run the
// data-parallel strategies (BSP, HOGWILD) on the workers too.
// Data flow: (kind, graph, cluster, costs, run options) -> JobEvaluator.
// Thread safety: the evaluators are used by one thread at a time; `graph` and
// `cluster` must outlive the JobEvaluator (the hybrid keeps references).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "core/evaluator.h"
#include "runtime/runtime.h"

namespace tapp {

struct LayerGraph;
struct Cluster;
class CostModel;
class SimulatorEvaluator;
class HybridEvaluator;

struct EvaluatorInputs {
  const LayerGraph* graph = nullptr;
  const Cluster* cluster = nullptr;
  const CostModel* cost = nullptr;  // simulate, hybrid
  int64_t batch_size = 32;
  RunOptions run;                   // measure, hybrid (batch_size is set from above)
};

struct JobEvaluator {
  EvaluatorKind kind = EvaluatorKind::simulate;
  std::unique_ptr<Evaluator> evaluator;
  SimulatorEvaluator* simulator = nullptr;  // simulate only
  HybridEvaluator* hybrid = nullptr;        // hybrid only
  // measure only: runs a data-parallel strategy ("bsp", "hogwild") on the
  // workers, so the baselines table measures them like every other row; empty
  // otherwise (the planners simulate them).
  std::function<StepReport(const std::string& strategy)> strategy_evaluator;

  bool measures() const { return kind != EvaluatorKind::simulate; }
};

// The evaluator of `kind`; an out-of-range kind is refused naming `field`, and
// measure or hybrid on a cluster with a device faster than this host (speed > 1)
// naming that device ("devices[2].speed: 4 cannot be emulated on this host ...").
Result<JobEvaluator> make_evaluator(EvaluatorKind kind, const EvaluatorInputs& inputs,
                                    const std::string& field = "options.evaluator");

}  // namespace tapp
