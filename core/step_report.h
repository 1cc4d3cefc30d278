// core/step_report.h — what one training step cost, predicted or measured.
//
// Owns `StepReport`, the common output of the simulator (predicted, µs
// resolution) and the runtime (measured: median of N steps after warm-up), so
// the two can be compared field by field and drawn by the same Gantt chart.
// A failed evaluation is data: ok = false with a kind (FailureKind, written to
// JSON by its name) and a message.
// Thread safety: plain values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tapp {

// Why an evaluation failed. The names are the strings the JSON has always carried.
enum class FailureKind {
  none,                // ok
  invalid_options,     // run options out of range
  invalid_placement,   // structurally wrong for the model or cluster, or unschedulable
  invalid_strategy,    // a data-parallel strategy the devices cannot run
  out_of_memory,       // over a device's memory_mb
  worker_failed,       // a worker crashed, exited or could not start
  worker_unreachable,  // a remote worker could not be reached or was lost
  timeout,             // a step took longer than allowed
  no_placement,        // a planner found nothing to evaluate
  skipped,             // a planner did not run (e.g. exhaustive over its limit); the message says why
};
std::string failure_kind_name(FailureKind kind);  // "invalid_placement", ...; "" for none

struct DeviceStats {
  std::string device;
  double busy_ms = 0;   // computing
  double comm_ms = 0;   // sending or waiting on the wire (not overlapped with own compute)
  double idle_ms = 0;   // step_ms - busy_ms - comm_ms
  int64_t peak_memory_bytes = 0;  // simulated: the memory rule's peak; measured: the worker's peak RSS
  // Measured only: the peak of the bytes held by tensors (parameters,
  // gradients, optimizer state, saved activations, buffers, temporaries) as
  // the worker's counting CPU allocator saw them; 0 when not measured.
  int64_t peak_tensor_bytes = 0;
};

struct TimelineEntry {
  int device = 0;
  std::string task;  // "F s2 m3", "B s2 m3", "X s1->s2 m3" (activation), "G s2->s1 m3" (gradient)
  double start_ms = 0, end_ms = 0;
};

struct StepReport {
  bool ok = false;
  FailureKind failure_kind = FailureKind::none;
  std::string message;
  std::string source;  // "simulate" | "measure"
  double step_ms = 0;  // one training batch (median over steps when measured)
  std::vector<double> step_samples_ms;  // measured: every timed step
  double comm_fraction = 0;  // sum comm_ms / sum (busy_ms + comm_ms): the paper's proportion
  std::vector<DeviceStats> devices;
  std::vector<TimelineEntry> timeline;  // of one representative step
  std::vector<std::string> warnings;  // e.g. emulation notes, an over-subscribed machine

  static StepReport failure(FailureKind kind, std::string message, std::string source) {
    StepReport r;
    r.failure_kind = kind;
    r.message = std::move(message);
    r.source = std::move(source);
    return r;
  }
};

// Whether `a` ran and ran faster than `b` (a run beats a failure; a tie is not faster):
// the one rule by which a plan replaces another (the measurer's schedules and rings,
// the baselines' 1F1B rows, the AL row's micro-batch counts).
inline bool runs_faster(const StepReport& a, const StepReport& b) {
  return a.ok && (!b.ok || a.step_ms < b.step_ms);
}

nlohmann::json step_report_to_json(const StepReport& r, bool with_timeline = true);

}  // namespace tapp
