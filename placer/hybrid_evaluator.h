// placer/hybrid_evaluator.h — simulate everything, measure the best, recalibrate the simulator.
//
// Owns `HybridEvaluator`: evaluate() answers from the simulator (source
// "simulate"); it remembers the best predicted placements since the last
// verification, and every `verify_every` evaluations measures the top
// `top_k` of them with the measuring evaluator (the runtime), adds the
// (placement, measured step) pairs to its calibration set and refits the
// simulator's corrections (simulator/calibration.h), so later predictions
// follow what the workers really do. `measure_now` measures one placement on
// demand (the final best). Measurements are capped by `max_measurements`.
// Data-parallel placements are simulated as BSP (simulate_data_parallel) and
// never verified during the search; measured on demand, they stay out of the
// calibration set, whose fit models pipelined task graphs.
// Data flow: Placement -> Simulator -> StepReport (predicted)
//            best predicted -> measure Evaluator -> calibrate -> Simulator costs.
// Thread safety: one thread at a time, like every Evaluator.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/evaluator.h"
#include "simulator/calibration.h"
#include "simulator/simulator.h"

namespace tapp {

struct HybridOptions {
  int verify_every = 200;    // evaluations between verifications
  int top_k = 2;             // candidates measured per verification
  int max_measurements = 8;  // over the whole job
};

struct HybridMeasurement {
  Placement placement;
  double predicted_ms = 0;  // with the calibration in force when it was measured
  StepReport measured;
};

class HybridEvaluator : public Evaluator {
 public:
  // `graph` and `cluster` must outlive the evaluator. `measure` is the runtime
  // (MeasureEvaluator) or a test fake.
  HybridEvaluator(const LayerGraph& graph, const Cluster& cluster, CostModel base, int64_t batch_size,
                  std::unique_ptr<Evaluator> measure, HybridOptions options = {});
  ~HybridEvaluator() override;

  StepReport evaluate(const Placement& placement) override;
  EvaluatorKind kind() const override { return EvaluatorKind::hybrid; }

  // Measures `placement` now (counts towards max_measurements only when
  // `count` is true); recalibrates when the measurement is ok (pipelines only).
  StepReport measure_now(const Placement& placement, bool count = false);
  // Verifies the pending candidates now (also called every verify_every).
  void verify();

  const std::vector<HybridMeasurement>& measurements() const { return measurements_; }
  // The measured report of a placement measured before, or nullptr.
  const StepReport* measured(const Placement& placement) const;
  // Accuracy of the last fit (n = 0 before any).
  const AccuracyStats& accuracy_before() const { return before_; }
  const AccuracyStats& accuracy_after() const { return after_; }
  const Simulator& simulator() const { return sim_; }

 private:
  // The simulator's step for a placement under the current costs (replicas as BSP).
  StepReport predict(const Placement& placement);
  void recalibrate();

  const LayerGraph& graph_;
  const Cluster& cluster_;
  CostModel base_;
  Simulator sim_;
  int64_t batch_size_;
  std::unique_ptr<Evaluator> measure_;
  HybridOptions options_;
  std::vector<std::pair<double, Placement>> pending_;  // best predicted since the last verify
  std::vector<HybridMeasurement> measurements_;
  std::map<std::string, size_t> measured_index_;
  int counted_measurements_ = 0;
  AccuracyStats before_, after_;
};

}  // namespace tapp
