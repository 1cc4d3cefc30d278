// tapp-cli run MODEL: execute a placement (or a baseline) on real workers and measure it.
//
//   tapp-cli run MODEL --devices cluster.json --placement placement.json [--steps N] [--warmup N] [--batch N] [--json]
//   tapp-cli run MODEL --devices cluster.json --strategy single|bsp|hogwild [...]
//   [--optimizer sgd|adam]  (default: the placement's; sgd for a strategy)
//   tapp-cli run MODEL --devices cluster.json --placement p.json --schedule al   (AL: a block per group)
//   tapp-cli run MODEL --devices cluster.json --schedule al --al-blocks N [--micro-batches M]
//   (Associated Learning changes the learning algorithm: only when asked for, model/al_form.h)
// Prints the median step time, per-device busy/comm/idle and peak memory
// (RSS, the tensors' peak as the worker's counting allocator saw it, and the
// memory rule's prediction: core's estimate_device_memory), the
// communication fraction, each replica's (client's) idle time per step for
// replicated groups, and any emulation warnings, or the StepReport JSON.
// Exit codes: 0 measured, 1 the run failed (worker died, timeout, ...), 2 bad input.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/al_placement.h"
#include "core/placement.h"
#include "core/cluster.h"
#include "runtime/runtime.h"
#include "core/pipeline_efficiency.h"
#include "service/cli/commands.h"
#include "service/cli/model_inputs.h"

namespace tapp::cli {
namespace {

struct RunArgs {
  std::string model, devices, placement, strategy, optimizer, schedule;
  int steps = 3, warmup = kWarmupSteps;
  int al_blocks = 0, micro_batches = 4;  // --al-blocks without a placement
  int64_t al_target_width = kDefaultAlTargetWidth;
  int64_t batch = 32, input_size = 0, classes = 0;
  std::string torchscript = "auto";  // --torchscript
  uint64_t seed = 1;
  double timeout_s = 60, lr = 0.01;
  bool json = false, timeline = false, no_compute_gate = false;
};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

void print_efficiency(const PipelineEfficiency& e, std::ostream& os) {
  os << "pipeline efficiency: " << fixed(e.efficiency, 3) << "  (ideal " << fixed(e.ideal_step_ms, 1)
     << " ms = largest stage's compute " << fixed(e.largest_stage_compute_ms, 1) << " ms x (" << e.micro_batches
     << " + " << e.stages << " - 1) / " << e.micro_batches << ", measured " << fixed(e.measured_step_ms, 1)
     << " ms)\n";
}

// Per device of the report: the memory rule's prediction for what ran.
struct Predicted {
  std::vector<MemoryBreakdown> by_report_device;  // aligned with StepReport::devices (empty parts when unknown)
};

Predicted predict_memory(const StepReport& r, const Placement& p, const LayerGraph& g, const Cluster& c,
                         int64_t batch) {
  Predicted out;
  const std::vector<MemoryBreakdown> parts = estimate_device_memory(p, g, c, batch);
  for (const DeviceStats& d : r.devices) {
    const int idx = c.index_of(d.device);
    out.by_report_device.push_back(idx >= 0 ? parts[idx] : MemoryBreakdown{});
  }
  return out;
}

nlohmann::json breakdown_json(const MemoryBreakdown& m) {
  return {{"params", m.params},   {"grads", m.grads},     {"optimizer_state", m.optimizer_state},
          {"activations", m.activations}, {"buffers", m.buffers}, {"total", m.total()}};
}

void print_summary(const StepReport& r, const std::string& what, const RunArgs& a, const Predicted& predicted,
                   std::ostream& os) {
  os << what << "  batch " << a.batch << "  warm-up " << a.warmup << "  timed steps " << a.steps << "\n";
  os << "step time (median): " << fixed(r.step_ms, 1) << " ms   samples:";
  for (double s : r.step_samples_ms) os << " " << fixed(s, 1);
  os << "\nthroughput: " << fixed(r.step_ms > 0 ? a.batch * 1000.0 / r.step_ms : 0, 1) << " samples/s\n";
  size_t w = 6;
  for (const auto& d : r.devices) w = std::max(w, d.device.size());
  os << std::left << std::setw(static_cast<int>(w)) << "device" << std::right << std::setw(10) << "busy ms"
     << std::setw(10) << "comm ms" << std::setw(10) << "idle ms" << std::setw(14) << "peak RSS MiB" << std::setw(17)
     << "tensor peak MiB" << std::setw(15) << "predicted MiB" << "\n";
  for (size_t k = 0; k < r.devices.size(); ++k) {
    const DeviceStats& d = r.devices[k];
    os << std::left << std::setw(static_cast<int>(w)) << d.device << std::right << std::setw(10) << fixed(d.busy_ms, 1)
       << std::setw(10) << fixed(d.comm_ms, 1) << std::setw(10) << fixed(d.idle_ms, 1) << std::setw(14)
       << fixed(d.peak_memory_bytes / 1048576.0, 1) << std::setw(17) << fixed(d.peak_tensor_bytes / 1048576.0, 1)
       << std::setw(15) << fixed(predicted.by_report_device.at(k).total() / 1048576.0, 1) << "\n";
  }
  os << "communication fraction: " << fixed(r.comm_fraction, 3)
     << "  (time blocked on receives and unfinished sends / (busy + that))\n";
  for (const auto& warning : r.warnings) os << "note: " << warning << "\n";
}

// PipeLearn's view of a replicated stage: each replica (client) is idle for
// every part of the step it does not compute (waiting for the server's
// gradients, for its sends, for the all-reduce or the slowest replica).
void print_replica_idle(const StepReport& r, const Placement& p, const Cluster& c, std::ostream& os) {
  for (int g = 0; g < p.num_groups(); ++g) {
    if (p.replica_count(g) < 2) continue;
    os << "replicated group " << g << " (" << p.replica_count(g) << " replicas, "
       << (p.aggregation_every == 1 ? std::string("gradients all-reduced every step")
                                    : "parameters averaged every " + std::to_string(p.aggregation_every) + " steps")
       << "): idle per step (step - busy, PipeLearn's idle time)\n";
    for (int d : p.devices_of_group(g))
      for (const auto& stats : r.devices)
        if (stats.device == c.devices[d].name) {
          const double idle = std::max(0.0, r.step_ms - stats.busy_ms);
          os << "  " << stats.device << ": " << fixed(idle, 1) << " ms  ("
             << fixed(r.step_ms > 0 ? 100.0 * idle / r.step_ms : 0, 1) << "% of the step)\n";
        }
  }
}

// The placement to run: the file's, with --schedule applied; for al, the
// model's AL form cut where the placement's groups change (or into
// --al-blocks blocks) replaces `graph`.
Result<Placement> placement_to_run(const RunArgs& a, LayerGraph& graph, const Cluster& cluster) {
  std::optional<Schedule> schedule;
  if (!a.schedule.empty()) {
    auto named = schedule_from_name(a.schedule);
    if (!named) return Status::field_error("--schedule", named.error_message());
    schedule = *named;
  }
  if (a.al_blocks > 0 && schedule != Schedule::al)
    return Status::field_error("--al-blocks", "needs --schedule al (it cuts the model into AL blocks)");
  if (schedule == Schedule::al && a.placement.empty()) {
    if (a.al_blocks < 1) return Status::field_error("--schedule", "al needs --placement FILE or --al-blocks N");
    auto plan = al_plan_by_blocks(graph, a.al_blocks, cluster.num_devices(), a.micro_batches, a.al_target_width);
    if (!plan) return plan.status();
    graph = std::move(plan->graph);
    return plan->placement;
  }
  auto placement = load_placement(a.placement, graph, cluster);
  if (!placement) return placement.status();
  if (schedule == Schedule::al) {
    auto plan = al_plan_from_pipeline(graph, *placement, a.al_target_width);
    if (!plan) return plan.status();
    graph = std::move(plan->graph);
    return plan->placement;
  }
  if (schedule) placement->schedule = *schedule;
  return placement;
}

int run(const RunArgs& a) {
  auto loaded = load_model_and_cluster("run", a.model, a.input_size, a.classes, a.torchscript, a.devices);
  if (!loaded) return 2;
  LayerGraph graph = loaded->graph;
  const Cluster& cluster = loaded->cluster;
  RunOptions o;
  o.steps = a.steps;
  o.warmup_steps = a.warmup;
  o.batch_size = a.batch;
  o.seed = a.seed;
  o.timeout_s = a.timeout_s;
  o.learning_rate = a.lr;
  o.gate_emulated_compute = !a.no_compute_gate;
  std::optional<Optimizer> optimizer;
  if (!a.optimizer.empty()) {
    auto named = optimizer_from_name(a.optimizer);
    if (!named) {
      std::cerr << "tapp-cli run: --optimizer: " << named.error_message() << "\n";
      return 2;
    }
    optimizer = *named;
    o.optimizer = *named;
  }
  RunResult result;
  std::string what;
  std::optional<Placement> ran;
  if (!a.strategy.empty()) {
    result = run_strategy(graph, cluster, a.strategy, o);
    std::vector<int> all(cluster.num_devices());
    for (int d = 0; d < cluster.num_devices(); ++d) all[d] = d;
    ran = a.strategy == "single" ? Placement::single_device(static_cast<int>(graph.layers.size()), 0)
                                 : Placement::replicas(static_cast<int>(graph.layers.size()), all);
    ran->optimizer = o.optimizer;
    what = "model " + graph.name + "  strategy " + a.strategy + "  on " + std::to_string(cluster.num_devices()) +
           " device(s)";
  } else {
    auto placement = placement_to_run(a, graph, cluster);
    if (!placement) {
      std::cerr << "tapp-cli run: " << placement.error_message() << "\n";
      return 2;
    }
    if (optimizer) placement->optimizer = *optimizer;
    result = run_placement(graph, cluster, *placement, o);
    ran = *placement;
    what = "model " + graph.name + "  placement " + (a.placement.empty() ? "by --al-blocks" : a.placement) + "  (" +
           (placement->is_data_parallel()
                ? "data parallel, " + std::to_string(placement->num_groups()) + " replicas"
                : std::to_string(placement->micro_batches) + " micro-batches, " +
                      schedule_name(placement->schedule) +
                      (placement->has_replicated_groups()
                           ? ", replicated stages, aggregation every " + std::to_string(placement->aggregation_every) +
                                 " step(s)"
                           : std::string())) +
           ")";
  }
  const StepReport& r = result.report;
  // The efficiency's ideal counts each device as one stage of a chain that
  // waits for gradients: it does not describe replicated stages or al, so it is left out for them.
  const bool pipeline = ran && a.strategy.empty();
  std::optional<PipelineEfficiency> efficiency =
      pipeline && !ran->has_replicated_groups() && ran->schedule != Schedule::al ? pipeline_efficiency(r, *ran)
                                                                                  : std::nullopt;
  const Predicted predicted = predict_memory(r, *ran, graph, cluster, a.batch);
  if (a.json) {
    nlohmann::json j = step_report_to_json(r, a.timeline);
    j["optimizer"] = optimizer_name(ran->optimizer);
    j["schedule"] = ran->is_data_parallel() ? nlohmann::json() : nlohmann::json(schedule_name(ran->schedule));
    if (graph.is_al_form()) j["al"] = al_form_to_json(graph);
    j["predicted_memory"] = nlohmann::json::array();
    for (size_t k = 0; k < r.devices.size(); ++k)
      j["predicted_memory"].push_back(
          {{"device", r.devices[k].device}, {"bytes", breakdown_json(predicted.by_report_device[k])}});
    if (efficiency)
      j["pipeline_efficiency"] = {{"efficiency", efficiency->efficiency},
                                  {"ideal_step_ms", efficiency->ideal_step_ms},
                                  {"largest_stage_compute_ms", efficiency->largest_stage_compute_ms},
                                  {"stages", efficiency->stages},
                                  {"micro_batches", efficiency->micro_batches}};
    std::cout << j.dump(2) << "\n";
  } else if (r.ok) {
    print_summary(r, what, a, predicted, std::cout);
    if (pipeline) print_replica_idle(r, *ran, cluster, std::cout);
    if (efficiency) print_efficiency(*efficiency, std::cout);
  }
  if (!r.ok) {
    std::string message = r.message;
    if (r.failure_kind == FailureKind::invalid_options && message.find("cannot be emulated on this host") != std::string::npos)
      message += "; run measures, so simulate the plan instead: tapp-cli plan MODEL --devices FILE --placement FILE";
    if (r.failure_kind == FailureKind::timeout)  // a step over slow links can outlast it (tapp-cli plan predicts one)
      message += "; a step can take longer on slow links or devices: raise --timeout";
    std::cerr << "tapp-cli run: " << failure_kind_name(r.failure_kind) << ": " << message << "\n";
    bool bad_input =
        r.failure_kind == FailureKind::invalid_placement || r.failure_kind == FailureKind::out_of_memory ||
        r.failure_kind == FailureKind::invalid_strategy || r.failure_kind == FailureKind::invalid_options;
    return bad_input ? 2 : 1;
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "execute a placement (or a baseline) on workers and measure it");
  sub->add_option("model", args->model, "zoo name, JSON layer graph or TorchScript file")->required();
  sub->add_option("--devices", args->devices, "cluster.json")->required();
  auto* pl = sub->add_option("--placement", args->placement, "placement.json");
  auto* st = sub->add_option("--strategy", args->strategy, "baseline instead of a placement")
                 ->check(CLI::IsMember({"single", "bsp", "hogwild"}));
  pl->excludes(st);
  sub->add_option("--steps", args->steps, "timed steps (median reported)")->check(CLI::Range(1, 100000));
  sub->add_option("--warmup", args->warmup, "warm-up steps (default " + std::to_string(kWarmupSteps) + ")")->check(CLI::Range(0, 100000));
  sub->add_option("--batch", args->batch, "batch size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--seed", args->seed, "weights and data seed")->check(seed_text());
  sub->add_option("--lr", args->lr, "learning rate (SGD: momentum 0.9)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {  // CLI::Range lets NaN through
            double v = 0;
            try {
              v = std::stod(s);
            } catch (const std::exception&) {
              return "expected a number, got " + s;
            }
            return v > 0 && v <= 1e3 ? "" : "must be in (0, 1000], got " + s;
          },
          "", "learning rate"));
  sub->add_option("--optimizer", args->optimizer, "sgd (with momentum) | adam; default: the placement's (sgd)")
      ->check(CLI::IsMember({"sgd", "adam"}));
  sub->add_option("--timeout", args->timeout_s, "seconds without worker progress before giving up");
  sub->add_option("--input-size", args->input_size, "image side, or a sequence length (0: the model's default)");
  sub->add_option("--classes", args->classes, "number of classes (0: the model's default)");
  add_torchscript_option(*sub, args->torchscript);
  auto* sched = sub->add_option(
      "--schedule", args->schedule,
      "gpipe | 1f1b | interleaved_1f1b | timed_1f1b | al (Associated Learning: local losses, a block per "
      "group); default: the placement's");
  auto* blocks = sub->add_option("--al-blocks", args->al_blocks, "with --schedule al and no placement: blocks of about "
                                                                "equal multiply-adds, block b on device b mod devices")
                     ->check(CLI::Range(1, 4096));
  blocks->excludes(pl);
  sched->excludes(st);
  sub->add_option("--micro-batches", args->micro_batches, "with --al-blocks: micro-batches (default 4)")
      ->check(CLI::Range(1, 1 << 20))
      ->needs(blocks);  // a placement says its own
  sub->add_option("--al-target-width", args->al_target_width, "AL's target width d (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  sub->add_flag("--json", args->json, "print the StepReport as JSON");
  sub->add_flag("--timeline", args->timeline, "with --json: include the per-task timeline of one step");
  sub->add_flag("--no-compute-gate", args->no_compute_gate,
                "let emulated devices (speed < 1) compute at the same time on this host's cores instead of taking "
                "turns; they then slow each other, which devices of a real cluster do not");
  sub->callback([args, &exit_code] {
    if (args->placement.empty() && args->strategy.empty() && args->al_blocks == 0) {
      std::cerr << "tapp-cli run: give --placement FILE, --strategy single|bsp|hogwild, or --schedule al --al-blocks N\n";
      exit_code = 2;
      return;
    }
    exit_code = run(*args);
  });
}

}  // namespace tapp::cli
