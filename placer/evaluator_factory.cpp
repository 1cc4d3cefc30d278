// placer/evaluator_factory.cpp — see evaluator_factory.h.
#include "placer/evaluator_factory.h"

#include <numeric>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "placer/hybrid_evaluator.h"
#include "runtime/measure_evaluator.h"
#include "simulator/simulator_evaluator.h"

namespace tapp {

namespace {

// The simulator's step of a placement, so that a measured run waits as long
// as that step needs (runtime/measure_evaluator.h); none without a cost model.
StepEstimate simulated_step(const EvaluatorInputs& in) {
  if (!in.cost) return {};
  auto sim = std::make_shared<SimulatorEvaluator>(*in.graph, *in.cluster, *in.cost, in.batch_size);
  return [sim](const Placement& p) {
    const StepReport r = sim->evaluate(p);
    return r.ok ? r.step_ms : 0.0;
  };
}

}  // namespace

Result<JobEvaluator> make_evaluator(EvaluatorKind kind, const EvaluatorInputs& in, const std::string& field) {
  if (!in.graph || !in.cluster) return Status::error(field + ": no model or cluster to evaluate on");
  RunOptions run = in.run;
  run.batch_size = in.batch_size;
  const bool needs_cost = kind == EvaluatorKind::simulate || kind == EvaluatorKind::hybrid;
  if (needs_cost && !in.cost) return Status::error(field + ": " + evaluator_kind_name(kind) + " needs the cost model");
  // Measuring stretches compute to emulate a slower device; it cannot make one faster.
  if (kind != EvaluatorKind::simulate)
    if (Status s = measurable_here(*in.cluster); !s) return s.with_hint("use --evaluator simulate");
  JobEvaluator out;
  out.kind = kind;
  switch (kind) {
    case EvaluatorKind::simulate: {
      auto sim = std::make_unique<SimulatorEvaluator>(*in.graph, *in.cluster, *in.cost, in.batch_size);
      out.simulator = sim.get();
      out.evaluator = std::move(sim);
      return out;
    }
    case EvaluatorKind::measure: {
      const StepEstimate estimate = simulated_step(in);
      out.evaluator = std::make_unique<MeasureEvaluator>(*in.graph, *in.cluster, run, estimate);
      out.strategy_evaluator = [graph = in.graph, cluster = in.cluster, run, estimate](const std::string& strategy) {
        RunOptions o = run;
        if (estimate) {  // bsp, hogwild: the whole model on every device
          std::vector<int> every(cluster->num_devices());
          std::iota(every.begin(), every.end(), 0);
          o.timeout_s = step_timeout_s(run.timeout_s,
                                       estimate(Placement::replicas(static_cast<int>(graph->layers.size()), every)));
        }
        return run_strategy(*graph, *cluster, strategy, o).report;
      };
      return out;
    }
    case EvaluatorKind::hybrid: {
      auto hybrid = std::make_unique<HybridEvaluator>(*in.graph, *in.cluster, *in.cost, in.batch_size,
                                                      std::make_unique<MeasureEvaluator>(*in.graph, *in.cluster, run, simulated_step(in)));
      out.hybrid = hybrid.get();
      out.evaluator = std::move(hybrid);
      return out;
    }
  }
  return Status::error(field + ": unknown evaluator kind " + std::to_string(static_cast<int>(kind)) +
                       " (expected simulate, measure or hybrid)");
}

}  // namespace tapp
