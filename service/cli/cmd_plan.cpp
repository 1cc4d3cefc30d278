// tapp-cli plan MODEL --devices cluster.json --planner NAME: the classical planners.
//
// Loads the model and the cluster, builds the simulator's costs (cached
// profile, fresh profile or multiply-add estimates; optional calibration),
// runs one planner — or every planner with `--planner all` — and scores the
// result with the chosen evaluator (placer/evaluator_factory.h): `simulate`
// (the simulator), `measure` (real workers) or `hybrid`. Prints the placement and its
// StepReport (a table with `all`), JSON with --json, and writes the placement
// with --out. Bad input: message on stderr, exit 2; no placement fits: exit 1.
// Associated Learning changes the learning algorithm, so it is planned only
// when asked for: --allow-al adds a row with the AL form of the best pipeline
// row (its groups as blocks, the best micro-batch count), and --placement
// FILE --schedule al scores the AL form of that placement; both are simulated
// from the AL form's own costs (its added layers profiled or estimated like any).
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/al_placement.h"
#include "planners/lower_bound.h"
#include "planners/planners.h"
#include "simulator/simulator.h"
#include "simulator/simulator_evaluator.h"
#include "core/cluster.h"
#include "placer/evaluator_factory.h"
#include "service/cli/commands.h"
#include "service/cli/model_inputs.h"
#include "service/cli/cost_inputs.h"
#include "service/cli/text_cells.h"

namespace tapp::cli {
namespace {

struct PlanArgs {
  std::string model, devices, planner = "dp", evaluator = "simulate", costs = "auto", calibration, out, schedule = "gpipe";
  std::string placement;  // evaluate this placement instead of planning
  std::string optimizer;  // "" = sgd (a given placement keeps its own)
  int64_t batch = 32, input_size = 0, classes = 0;
  std::string torchscript = "auto";  // --torchscript
  int micro_batches = 0, max_micro_batches = 64, budget = 200, steps = 3, warmup = kWarmupSteps;
  int64_t exhaustive_limit = 200000;
  uint64_t seed = 1;
  bool json = false, timeline = false, allow_al = false;
};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

// "dev0: conv1..relu3 (7 layers) | dev1+dev2: ..." for contiguous runs of
// groups (a replicated group names all its devices).
std::string describe(const Placement& p, const LayerGraph& g, const Cluster& c) {
  if (is_data_parallel(p)) {
    std::string s = p.data_parallel == DataParallelMode::hogwild ? "HOGWILD (asynchronous) over"
                                                                 : "data parallel (BSP) over";
    for (int d : p.group_device) s += " " + c.devices[d].name;
    return s;
  }
  std::string s;
  size_t i = 0;
  while (i < g.layers.size()) {
    size_t j = i;
    const int grp = p.layer_group[i];
    while (j + 1 < g.layers.size() && p.layer_group[j + 1] == grp) ++j;
    if (!s.empty()) s += " | ";
    std::string devices;
    for (int d : p.devices_of_group(grp)) devices += (devices.empty() ? "" : "+") + c.devices[d].name;
    s += devices + ": " + g.layers[i].name + (j > i ? ".." + g.layers[j].name : "") + " (" +
         std::to_string(j - i + 1) + ")";
    i = j + 1;
  }
  return s;
}

void print_report(const StepReport& r, std::ostream& os) {
  os << "step " << fixed(r.step_ms, 2) << " ms (" << r.source << ")  communication fraction "
     << fixed(r.comm_fraction, 3) << "\n";
  size_t w = 6, t = 10;  // t: the time columns, wide enough for a step of hours
  for (const auto& d : r.devices) {
    w = std::max(w, d.device.size());
    for (double ms : {d.busy_ms, d.comm_ms, d.idle_ms}) t = std::max(t, fixed(ms, 2).size() + 2);
  }
  const int tw = static_cast<int>(t);
  os << "  " << std::left << std::setw(static_cast<int>(w)) << "device" << std::right << std::setw(tw) << "busy ms"
     << std::setw(tw) << "comm ms" << std::setw(tw) << "idle ms" << std::setw(12) << "memory MiB" << "\n";
  for (const auto& d : r.devices)
    os << "  " << std::left << std::setw(static_cast<int>(w)) << d.device << std::right << std::setw(tw)
       << fixed(d.busy_ms, 2) << std::setw(tw) << fixed(d.comm_ms, 2) << std::setw(tw) << fixed(d.idle_ms, 2)
       << std::setw(12) << fixed(d.peak_memory_bytes / 1048576.0, 1) << "\n";
  for (const auto& warning : r.warnings) os << "note: " << warning << "\n";
}

// The row's step over the bound that holds for its plan, less 1; none
// without a step or a bound.
std::optional<double> row_gap(const PlannerRow& row, const std::optional<StepLowerBound>& bound) {
  if (!row.report.ok || !bound) return std::nullopt;
  const double under = bound_for(*bound, row.placement);
  if (under <= 0) return std::nullopt;
  return gap_to_bound(row.report.step_ms, under);
}

// "+12.3%" above the bound, or "-".
std::string gap_text(const PlannerRow& row, const std::optional<StepLowerBound>& bound) {
  const std::optional<double> gap = row_gap(row, bound);
  return gap ? "+" + fixed(100 * *gap, 1) + "%" : "-";
}

nlohmann::json row_json(const PlannerRow& row, const LayerGraph& g, const Cluster& c, bool timeline,
                        const std::optional<StepLowerBound>& bound) {
  nlohmann::json j;
  j["planner"] = row.name;
  const std::optional<double> gap = row_gap(row, bound);
  j["gap_to_bound"] = gap ? nlohmann::json(*gap) : nlohmann::json();
  if (auto within = planner_optimality(row.name)) j["optimal_within"] = *within;
  j["placement"] = row.placement ? placement_to_json(*row.placement, g, c) : nlohmann::json();
  if (row.placement && is_data_parallel(*row.placement))
    j["strategy"] = data_parallel_mode_name(row.placement->data_parallel);
  j["report"] = step_report_to_json(row.report, timeline);
  j["plan_s"] = row.plan_s;
  if (row.skipped) j["skipped"] = true;
  return j;
}

// An Associated Learning row: the AL form of a pipeline placement, simulated from its own costs.
struct AlRow {
  PlannerRow row;
  LayerGraph graph;       // the AL form
  std::string from;       // the row (or "given") whose groups became the blocks
  std::string costs_note;
};

// The AL form of `pipeline` at each micro-batch count in `counts`; the fastest. Errors: the
// placement has no AL form (groups that are not runs of layers, replicas), costs, nothing fits.
// `costs_mode`: as --costs, except that "auto" profiles the AL form where the
// rows it is compared with came from profiles (estimates beside measurements would not compare).
Result<AlRow> simulate_al(const LayerGraph& g, const Cluster& c, const Placement& pipeline, const std::string& from,
                          const PlanArgs& a, const std::string& rows_costs_note, const std::vector<int>& counts) {
  const bool rows_estimated = rows_costs_note.rfind("estimated", 0) == 0;
  const Result<CostSource> source = cost_source(a.costs);
  const bool cached = source && *source == CostSource::cached_only;
  const std::string costs_mode = cached && !rows_estimated ? "profile" : a.costs;
  auto plan = al_plan_from_pipeline(g, pipeline);
  if (!plan) return plan.status();
  AlRow out;
  out.graph = std::move(plan->graph);
  out.from = from;
  auto inputs = load_cost_inputs(out.graph, c, a.batch, costs_mode, a.calibration);
  if (!inputs) return inputs.status();
  out.costs_note = inputs->costs_note;
  auto cost = CostModel::build(out.graph, c, inputs->libraries, inputs->device_libraries, inputs->calibration);
  if (!cost) return cost.status();
  Simulator sim(out.graph, c, *cost, a.batch);
  const auto t0 = std::chrono::steady_clock::now();
  out.row.name = "al";
  for (int m : counts) {
    Placement p = plan->placement;
    p.micro_batches = m;
    StepReport r = sim.evaluate(p);
    if (!out.row.placement || runs_faster(r, out.row.report)) {
      out.row.placement = p;
      out.row.report = r;
    }
  }
  out.row.plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// --allow-al: the AL form of the fastest pipeline row that has one, at 1, 2, 4, ... micro-batches.
Result<AlRow> al_row(const std::vector<PlannerRow>& rows, const LayerGraph& g, const Cluster& c, const PlanArgs& a,
                     const std::string& rows_costs_note) {
  std::vector<const PlannerRow*> order;
  for (const auto& r : rows)
    if (r.report.ok && r.placement && !r.placement->is_data_parallel() && !r.placement->has_replicated_groups())
      order.push_back(&r);
  std::sort(order.begin(), order.end(), [](auto* x, auto* y) { return x->report.step_ms < y->report.step_ms; });
  std::vector<int> counts;
  for (int m = 1; m <= std::min<int64_t>(a.max_micro_batches, a.batch); m *= 2) counts.push_back(m);
  Status last = Status::error("no pipeline row to take blocks from");
  for (const PlannerRow* r : order) {
    auto al = simulate_al(g, c, *r->placement, r->name, a, rows_costs_note, counts);
    if (al) return al;
    last = al.status();
  }
  return last;
}

void print_al_row(const AlRow& al, const Cluster& c, std::ostream& os) {
  os << "al (Associated Learning, the AL form of " << al.from << "'s plan; costs: " << al.costs_note << ")\n";
  if (!al.row.report.ok) {
    os << "  - " << al.row.report.message << "\n";
    return;
  }
  os << "  " << describe(*al.row.placement, al.graph, c) << "\n  micro-batches " << al.row.placement->micro_batches
     << ", schedule al\n";
}

int plan(const PlanArgs& a) {
  if (const std::string why = unwritable("--out", a.out); !why.empty()) {  // before any planning
    std::cerr << "tapp-cli plan: " << why << "\n";
    return 2;
  }
  auto loaded = load_model_and_cluster("plan", a.model, a.input_size, a.classes, a.torchscript, a.devices);
  if (!loaded) return 2;
  const LayerGraph& graph = loaded->graph;
  const Cluster& cluster = loaded->cluster;
  auto schedule = schedule_from_name(a.schedule);
  if (!schedule) {
    std::cerr << "tapp-cli plan: --schedule: " << schedule.error_message() << "\n";
    return 2;
  }
  if (*schedule == Schedule::al && a.placement.empty()) {
    std::cerr << "tapp-cli plan: --schedule: the planners propose pipelines; add --allow-al for the AL form of the "
                 "best one, or give --placement FILE --schedule al\n";
    return 2;
  }
  Optimizer optimizer = Optimizer::sgd;
  if (!a.optimizer.empty()) {
    auto named = optimizer_from_name(a.optimizer);
    if (!named) {
      std::cerr << "tapp-cli plan: --optimizer: " << named.error_message() << "\n";
      return 2;
    }
    optimizer = *named;
  }
  if (a.micro_batches > a.batch) {
    std::cerr << "tapp-cli plan: --micro-batches: must be at most the batch size " << a.batch << "\n";
    return 2;
  }
  auto inputs = load_cost_inputs(graph, cluster, a.batch, a.costs, a.calibration);
  if (!inputs) {
    std::cerr << "tapp-cli plan: " << inputs.error_message() << "\n";
    return 2;
  }
  auto cost = CostModel::build(graph, cluster, inputs->libraries, inputs->device_libraries, inputs->calibration);
  if (!cost) {
    std::cerr << "tapp-cli plan: " << cost.error_message() << "\n";
    return 2;
  }
  std::vector<std::string> planners;
  if (a.planner != "all") {
    const auto& names = planner_names();
    if (std::find(names.begin(), names.end(), a.planner) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      std::cerr << "tapp-cli plan: --planner: unknown \"" << a.planner << "\"; expected all, " << known << "\n";
      return 2;
    }
    planners = {a.planner};
  }
  // --evaluator, parsed once; the one factory builds it.
  Result<EvaluatorKind> kind = evaluator_kind_from_name(a.evaluator, "--evaluator");
  if (!kind) {
    std::cerr << "tapp-cli plan: " << kind.error_message() << "\n";
    return 2;
  }
  EvaluatorInputs evaluator_inputs;
  evaluator_inputs.graph = &graph;
  evaluator_inputs.cluster = &cluster;
  evaluator_inputs.cost = &*cost;
  evaluator_inputs.batch_size = a.batch;
  evaluator_inputs.run.steps = a.steps;
  evaluator_inputs.run.warmup_steps = a.warmup;
  evaluator_inputs.run.seed = a.seed;
  evaluator_inputs.run.optimizer = optimizer;
  Result<JobEvaluator> job_evaluator = make_evaluator(*kind, evaluator_inputs, "--evaluator");
  if (!job_evaluator) {
    std::cerr << "tapp-cli plan: " << job_evaluator.error_message() << "\n";
    return 2;
  }
  Evaluator* evaluator = job_evaluator->evaluator.get();
  SimulatorEvaluator* sim = job_evaluator->simulator;
  PlannerContext ctx;
  ctx.graph = &graph;
  ctx.cluster = &cluster;
  ctx.cost = &*cost;
  ctx.batch_size = a.batch;
  ctx.schedule = *schedule;
  ctx.optimizer = optimizer;
  ctx.micro_batches = a.micro_batches;
  ctx.max_micro_batches = a.max_micro_batches;
  ctx.seed = a.seed;
  ctx.budget = a.budget;
  ctx.exhaustive_limit = a.exhaustive_limit;
  PlannerRunOptions options;
  options.planners = planners;
  options.strategy_evaluator = job_evaluator->strategy_evaluator;
  std::vector<PlannerRow> rows;
  if (!a.placement.empty()) {
    auto given = load_placement(a.placement, graph, cluster);
    if (!given) {
      std::cerr << "tapp-cli plan: --placement: " << given.error_message() << "\n";
      return 2;
    }
    if (!a.optimizer.empty()) given->optimizer = optimizer;
    // What the file cannot say by itself (its batch, data parallelism's rules) is checked here as
    // `export` does, so a bad placement is bad input (exit 2), not a failed evaluation; its AL
    // form (--schedule al) keeps its groups and micro-batches, so the same holds there.
    if (Status s = validate_placement(*given, graph, cluster, a.batch); !s) {
      std::cerr << "tapp-cli plan: --placement: " << a.placement << ": " << s.message() << "\n";
      return 2;
    }
    if (*schedule == Schedule::al) {
      auto al = simulate_al(graph, cluster, *given, "given", a, inputs->costs_note, {given->micro_batches});
      if (!al) {
        std::cerr << "tapp-cli plan: " << al.error_message() << "\n";
        return 2;
      }
      if (a.json) {
        std::cout << nlohmann::json{{"model", graph.name},
                                    {"al", row_json(al->row, al->graph, cluster, false, std::nullopt)},
                                    {"al_costs", al->costs_note}}
                         .dump(2)
                  << "\n";
      } else {
        print_al_row(*al, cluster, std::cout);
        if (al->row.report.ok) print_report(al->row.report, std::cout);
      }
      return al->row.report.ok ? 0 : 1;
    }
    PlannerRow row;
    row.name = "given";
    row.placement = *given;
    row.report = evaluator->evaluate(*given);
    rows.push_back(row);
  } else {
    rows = run_planners(ctx, *evaluator, options);
  }
  // The single plan's timeline, when asked for, from a simulation with timeline on.
  if (sim && a.timeline && rows.size() == 1 && rows[0].placement && rows[0].report.ok) {
    sim->timeline = true;
    rows[0].report = sim->evaluate(*rows[0].placement);
  }
  int failures = 0;
  for (const auto& r : rows) failures += !r.report.ok;
  std::optional<AlRow> al;
  std::string al_error;
  if (a.allow_al) {
    auto made = al_row(rows, graph, cluster, a, inputs->costs_note);
    if (made)
      al = std::move(*made);
    else
      al_error = made.error_message();
  }
  // What no placement's simulated step beats (planners/lower_bound.h).
  Result<StepLowerBound> bound_r = step_lower_bound(graph, cluster, *cost, a.batch);
  std::optional<StepLowerBound> bound;
  if (bound_r) bound = *bound_r;

  if (a.json) {
    nlohmann::json j;
    j["model"] = graph.name;
    j["cluster"] = cluster.name;
    j["batch_size"] = a.batch;
    j["evaluator"] = evaluator->name();
    j["costs"] = inputs->costs_note;
    j["calibration"] = inputs->calibration_note;
    j["costs_skipped"] = inputs->skipped;
    if (!inputs->device_costs.empty()) j["device_costs"] = inputs->device_costs;
    j["evaluations"] = evaluator->evaluations();
    j["lower_bound_ms"] = bound ? nlohmann::json(bound->synchronous_ms) : nlohmann::json();
    j["lower_bound"] = lower_bound_json(bound_r);
    if (rows.size() == 1) {
      j.update(row_json(rows[0], graph, cluster, a.timeline, bound));
    } else {
      j["rows"] = nlohmann::json::array();
      for (const auto& r : rows) j["rows"].push_back(row_json(r, graph, cluster, false, bound));
    }
    if (al) {
      j["al"] = row_json(al->row, al->graph, cluster, false, bound);
      j["al"]["from"] = al->from;
      j["al"]["costs"] = al->costs_note;
    } else if (a.allow_al) {
      j["al"] = {{"error", al_error}};
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "model " << graph.name << "  batch " << a.batch << "  on " << cluster.num_devices()
              << " device(s)" << (cluster.name.empty() ? "" : " (" + cluster.name + ")") << "  evaluator "
              << evaluator->name() << "\ncosts: " << inputs->costs_note << "\ncalibration: " << inputs->calibration_note
              << "\n";
    for (const std::string& skipped : inputs->skipped) std::cout << "  (not profiled: " << skipped << ")\n";
    for (const std::string& own : inputs->device_costs) std::cout << "  costs of " << own << "\n";
    if (bound)
      std::cout << "lower bound: " << fixed(bound->synchronous_ms, 2) << " ms, " << fixed(bound->ms, 2)
                << " ms for asynchronous replicas (" << bound->basis << ")\n";
    else
      std::cout << "lower bound: none (" << bound_r.error_message() << ")\n";
    std::cout << "\n";
    if (rows.size() == 1) {
      const PlannerRow& r = rows[0];
      std::cout << "planner " << r.name << " (" << fixed(r.plan_s, 2) << " s, " << evaluator->evaluations()
                << " evaluations)\n";
      if (r.placement)
        std::cout << "placement: " << describe(*r.placement, graph, cluster) << "\n  micro-batches "
                  << r.placement->micro_batches << ", schedule " << schedule_name(r.placement->schedule) << "\n";
      if (r.report.ok) print_report(r.report, std::cout);
      if (r.report.ok && bound) std::cout << "gap to the lower bound " << gap_text(r, bound) << "\n";
      if (auto within = planner_optimality(r.name)) std::cout << r.name << ": " << *within << "\n";
    } else {
      double single = 0, best = 0;
      for (const auto& r : rows) {
        if (r.name == "single" && r.report.ok) single = r.report.step_ms;
        if (r.report.ok && (best == 0 || r.report.step_ms < best)) best = r.report.step_ms;
      }
      std::cout << std::left << std::setw(11) << "planner" << std::right << std::setw(11) << "step ms" << std::setw(10)
                << "vs single" << std::setw(7) << "comm" << std::setw(5) << "mb" << std::setw(9) << "plan s"
                << std::setw(10) << "vs bound" << "  placement\n";
      for (const auto& r : rows) {
        std::cout << label(r.name, 11);
        if (!r.report.ok) {
          std::cout << cell("-", 11) << "  " << (r.skipped ? "skipped: " : "") << r.report.message << "\n";
          continue;
        }
        std::cout << cell(fixed(r.report.step_ms, 2), 11)
                  << cell(single > 0 ? fixed(single / r.report.step_ms, 2) + "x" : "-", 10)
                  << cell(fixed(r.report.comm_fraction, 2), 7)
                  << cell(std::to_string(r.placement->micro_batches), 5) << cell(fixed(r.plan_s, 2), 9)
                  << cell(gap_text(r, bound), 10) << "  " << (r.report.step_ms == best ? "* " : "")
                  << describe(*r.placement, graph, cluster) << "\n";
      }
      for (const auto& r : rows)
        if (auto within = planner_optimality(r.name); within && r.report.ok)
          std::cout << "  " << r.name << ": " << *within << "\n";
    }
    if (al) {
      std::cout << "\n";
      print_al_row(*al, cluster, std::cout);
      if (al->row.report.ok)
        std::cout << "  step " << fixed(al->row.report.step_ms, 2) << " ms (simulated, vs bound "
                  << gap_text(al->row, bound) << "); it trains by local losses, not backpropagation\n";
    } else if (a.allow_al) {
      std::cout << "\nal: none (" << al_error << ")\n";
    }
  }
  for (const auto& r : rows)
    if (!r.report.ok && rows.size() == 1) std::cerr << "tapp-cli plan: " << r.report.message << "\n";
  if (!a.out.empty()) {
    const PlannerRow* best = nullptr;
    for (const auto& r : rows)
      if (r.report.ok && r.placement && (!best || r.report.step_ms < best->report.step_ms)) best = &r;
    if (best) {
      const std::string text = placement_to_json(*best->placement, graph, cluster).dump(2) + "\n";
      if (const std::string why = write_output("--out", a.out, text); !why.empty()) {
        std::cerr << "tapp-cli plan: " << why << "\n";
        return 1;
      }
      if (!a.json) std::cerr << "wrote " << a.out << " (" << best->name << ")\n";
    }
  }
  return failures == static_cast<int>(rows.size()) ? 1 : 0;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PlanArgs>();
  auto* sub = app.add_subcommand("plan", "run a classical planner (or all of them) and score the placement");
  sub->add_option("model", args->model, "zoo name, JSON layer graph or TorchScript file")->required();
  sub->add_option("--devices", args->devices, "cluster.json")->required();
  sub->add_option("--planner", args->planner,
                  "all | single | bsp | uniform | params | time | dp | random | anneal | exhaustive | hogwild | pipedream | "
                  "pipelearn (default dp)");
  sub->add_option("--evaluator", args->evaluator, "simulate (default) | measure | hybrid");
  sub->add_option("--batch", args->batch, "batch size (default 32)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--micro-batches", args->micro_batches, "fix the number of micro-batches (default: planner picks)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--max-micro-batches", args->max_micro_batches, "largest micro-batch count planners try (default 64)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--schedule", args->schedule,
                  "gpipe (default) | 1f1b | timed_1f1b | al (with --placement: its AL form)");
  sub->add_flag("--allow-al", args->allow_al,
                "also plan Associated Learning (local losses: it changes the learning algorithm): the AL form of "
                "the best pipeline row, as its own row");
  sub->add_option("--optimizer", args->optimizer,
                  "sgd (with momentum, default) | adam: what the plan trains with and its memory counts")
      ->check(CLI::IsMember({"sgd", "adam"}));
  sub->add_option("--budget", args->budget, "evaluations for random search and annealing (default 200)")
      ->check(CLI::Range(1, 100000000));
  sub->add_option("--exhaustive-limit", args->exhaustive_limit, "most candidates exhaustive search enumerates")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_option("--seed", args->seed, "random seed")->check(seed_text());
  sub->add_option("--costs", args->costs, "auto (cached profile, else estimated; also 'cached', as optimize names it) | profile | estimated");
  sub->add_option("--calibration", args->calibration, "calibration JSON from `tapp-cli calibrate`");
  sub->add_option("--steps", args->steps, "measure: timed steps per placement")->check(CLI::Range(1, 1000));
  sub->add_option("--warmup", args->warmup, "measure: warm-up steps (default " + std::to_string(kWarmupSteps) + ")")->check(CLI::Range(0, 1000));
  sub->add_option("--input-size", args->input_size, "image side, or a sequence length (0: the model's default)");
  sub->add_option("--classes", args->classes, "number of classes (0: the model's default)");
  add_torchscript_option(*sub, args->torchscript);
  sub->add_option("--placement", args->placement, "evaluate this placement.json instead of planning");
  sub->add_option("--out", args->out, "write the (best) placement JSON here");
  sub->add_flag("--json", args->json, "print JSON");
  sub->add_flag("--timeline", args->timeline, "with --json and one planner: include the simulated timeline");
  sub->callback([args, &exit_code] { exit_code = plan(*args); });
}

}  // namespace tapp::cli
