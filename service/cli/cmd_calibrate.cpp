// tapp-cli calibrate [MODEL] --devices cluster.json: fits the simulator to this cluster and keeps the fit.
//
// Data flow: random placements that fit (planners/planners.h) -> measured on
// real workers (runtime measure_placement, median of --steps after warm-up)
// -> predicted by the simulator, uncalibrated and calibrated -> accuracy:
// median |predicted - measured| / measured and Spearman's rank correlation.
// Calibrated predictions are leave-one-out: each placement is predicted by a
// calibration fitted on the others, so the error is out-of-sample. The
// calibration fitted on all samples is stored under the cluster's fingerprint
// (simulator/calibration_store.h, in the profile cache) with the samples it
// was fitted from, where every later `plan` and `optimize` on the same cluster
// finds it (and optimize's verification adds its measurements); --out also writes
// it to a file. Measuring stops at --time-budget (with at least 3 samples).
// --save / --load keep the measurements, so a fit can be redone without
// measuring again. Bad input: exit 2.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include <chrono>

#include "core/cluster_fingerprint.h"
#include "model/profile_cache.h"
#include "planners/planners.h"
#include "simulator/calibration.h"
#include "simulator/calibration_store.h"
#include "core/cluster.h"
#include "runtime/runtime.h"
#include "service/cli/commands.h"
#include "service/cli/progress_bar.h"
#include "service/cli/model_inputs.h"
#include "service/cli/cost_inputs.h"

namespace tapp::cli {
namespace {

struct CalibrateArgs {
  std::string model = "alexnet_cifar", devices, costs = "profile", out, save, load;
  int64_t batch = 32, input_size = 0, classes = 0;
  std::string torchscript = "auto";  // --torchscript
  int samples = 20, steps = 3, warmup = kWarmupSteps, max_micro_batches = 8;
  uint64_t seed = 1;
  double noncontiguous = 0.25;
  double replicated = 0;
  double time_budget_s = 600;
  bool json = false, store = true;
  std::string fit_extra;  // "concurrency,backward,first"
};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

std::string short_placement(const Placement& p, const Cluster& c) {
  std::string s;
  int prev = -1, run = 0;
  auto flush = [&] {
    if (prev >= 0) s += (s.empty() ? "" : " ") + c.devices[prev].name + "x" + std::to_string(run);
  };
  for (size_t i = 0; i < p.layer_group.size(); ++i) {
    int d = p.device_of_layer(static_cast<int>(i));
    if (d != prev) {
      flush();
      prev = d;
      run = 0;
    }
    ++run;
  }
  flush();
  return s + " m" + std::to_string(p.micro_batches);
}

nlohmann::json stats_json(const AccuracyStats& s) {
  return {{"n", s.n},
          {"median_abs_rel_error", s.median_abs_rel_error},
          {"mean_abs_rel_error", s.mean_abs_rel_error},
          {"max_abs_rel_error", s.max_abs_rel_error},
          {"spearman", s.spearman}};
}

int calibrate_cmd(const CalibrateArgs& a) {
  auto loaded = load_model_and_cluster("calibrate", a.model, a.input_size, a.classes, a.torchscript, a.devices);
  if (!loaded) return 2;
  const LayerGraph& graph = loaded->graph;
  const Cluster& cluster = loaded->cluster;
  auto inputs = load_cost_inputs(graph, cluster, a.batch, a.costs, "");
  if (!inputs) {
    std::cerr << "tapp-cli calibrate: " << inputs.error_message() << "\n";
    return 2;
  }
  auto cost = CostModel::build(graph, cluster, inputs->libraries, inputs->device_libraries);
  if (!cost) {
    std::cerr << "tapp-cli calibrate: " << cost.error_message() << "\n";
    return 2;
  }
  std::vector<CalibrationSample> samples;
  if (!a.load.empty()) {
    std::ifstream f(a.load);
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (!f || j.is_discarded() || !j.contains("samples")) {
      std::cerr << "tapp-cli calibrate: --load: '" << a.load << "' is not a samples file\n";
      return 2;
    }
    for (const auto& s : j["samples"]) {
      auto p = placement_from_json(s["placement"], graph, cluster);
      if (!p) {
        std::cerr << "tapp-cli calibrate: --load: " << p.error_message() << "\n";
        return 2;
      }
      StepReport r;
      r.ok = true;
      r.source = "measure";
      r.step_ms = s.value("measured_ms", 0.0);
      for (const auto& d : s.value("devices", nlohmann::json::array())) {
        DeviceStats ds;
        ds.device = d.value("device", "");
        ds.busy_ms = d.value("busy_ms", 0.0);
        ds.comm_ms = d.value("comm_ms", 0.0);
        r.devices.push_back(ds);
      }
      samples.push_back({*p, r});
    }
  } else {
    PlannerContext ctx;
    ctx.graph = &graph;
    ctx.cluster = &cluster;
    ctx.cost = &*cost;
    ctx.batch_size = a.batch;
    ctx.seed = a.seed;
    ctx.max_micro_batches = a.max_micro_batches;
    std::vector<Placement> placements = random_placements(ctx, a.samples, a.noncontiguous, a.replicated);
    RunOptions ro;
    ro.batch_size = a.batch;
    ro.steps = a.steps;
    ro.warmup_steps = a.warmup;
    ro.seed = a.seed;
    const auto start = std::chrono::steady_clock::now();
    auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    for (size_t i = 0; i < placements.size(); ++i) {
      if (samples.size() >= 3 && elapsed_s() > a.time_budget_s) {
        std::cerr << "time budget of " << fixed(a.time_budget_s, 0) << " s reached after " << i << " of "
                  << placements.size() << " placements\n";
        break;
      }
      StepReport r = measure_placement(graph, cluster, placements[i], ro);
      if (!a.json)
        std::cerr << progress_bar(static_cast<double>(i + 1) / placements.size(), 20) << " " << (i + 1) << "/"
                  << placements.size() << " " << fixed(elapsed_s(), 0) << " s  "
                  << short_placement(placements[i], cluster) << "  "
                  << (r.ok ? fixed(r.step_ms, 1) + " ms" : failure_kind_name(r.failure_kind) + ": " + r.message)
                  << "\n";
      if (r.ok) samples.push_back({placements[i], r});
    }
  }
  if (samples.size() < 3) {
    std::cerr << "tapp-cli calibrate: only " << samples.size() << " successful measurements; need at least 3\n";
    return 1;
  }
  if (!a.save.empty()) {
    nlohmann::json j;
    j["model"] = graph.name;
    j["batch_size"] = a.batch;
    j["samples"] = nlohmann::json::array();
    for (const auto& s : samples) {
      nlohmann::json devs = nlohmann::json::array();
      for (const auto& d : s.measured.devices)
        devs.push_back({{"device", d.device}, {"busy_ms", d.busy_ms}, {"comm_ms", d.comm_ms}});
      j["samples"].push_back({{"placement", placement_to_json(s.placement, graph, cluster)},
                              {"measured_ms", s.measured.step_ms},
                              {"step_samples_ms", s.measured.step_samples_ms},
                              {"devices", devs}});
    }
    std::ofstream(a.save) << j.dump(2) << "\n";
  }
  CalibrationOptions fit_options;
  fit_options.fit_concurrency = a.fit_extra.find("concurrency") != std::string::npos;
  fit_options.fit_backward_extra = a.fit_extra.find("backward") != std::string::npos;
  fit_options.fit_first_task = a.fit_extra.find("first") != std::string::npos;
  // Fit on all (the calibration to keep), and leave-one-out for the out-of-sample error.
  auto all = calibrate(graph, cluster, *cost, a.batch, samples, fit_options);
  if (!all) {
    std::cerr << "tapp-cli calibrate: " << all.error_message() << "\n";
    return 1;
  }
  std::vector<double> loo(samples.size(), 0);
  for (size_t i = 0; i < samples.size(); ++i) {
    std::vector<CalibrationSample> rest;
    for (size_t k = 0; k < samples.size(); ++k)
      if (k != i) rest.push_back(samples[k]);
    auto fit = calibrate(graph, cluster, *cost, a.batch, rest, fit_options);
    if (!fit) continue;
    loo[i] = predict_steps(graph, cluster, cost->with_calibration(fit->calibration), a.batch,
                           {samples[i].placement})[0];
  }
  AccuracyStats loo_stats = accuracy(loo, all->measured);

  nlohmann::json out;
  out["model"] = graph.name;
  out["cluster"] = cluster.name;
  out["batch_size"] = a.batch;
  out["costs"] = inputs->costs_note;
  out["uncalibrated"] = stats_json(all->before);
  out["calibrated_in_sample"] = stats_json(all->after);
  out["calibrated_leave_one_out"] = stats_json(loo_stats);
  out["calibration"] = calibration_to_json(all->calibration);
  StoredCalibration stored{cluster_fingerprint(cluster), profile_timing_method(), utc_now_iso8601(),
                           static_cast<int>(samples.size()), all->calibration, {}};
  // The samples are kept with the fit, so later measurements (optimize's
  // verification) can join them and refit on the whole set.
  add_samples(stored, graph, cluster, a.batch, samples);
  out["stored"] = stored_calibration_to_json(stored);
  if (!a.out.empty()) std::ofstream(a.out) << out.dump(2) << "\n";
  if (a.store) {
    FileProfileCache store(default_cache_dir());
    if (Status s = save_calibration(store, stored); !s) {
      std::cerr << "tapp-cli calibrate: " << s.message() << "\n";
      return 1;
    }
    std::cerr << "calibration stored for cluster " << stored.cluster_fingerprint << " (" << stored.measurements
              << " measurements) in " << store.path_of(calibration_key(stored.cluster_fingerprint))
              << "; later plan and optimize runs on this cluster use it\n";
  }
  if (a.json) {
    out["placements"] = nlohmann::json::array();
    for (size_t i = 0; i < samples.size(); ++i)
      out["placements"].push_back({{"placement", short_placement(samples[i].placement, cluster)},
                                   {"measured_ms", all->measured[i]},
                                   {"predicted_uncalibrated_ms", all->predicted_before[i]},
                                   {"predicted_leave_one_out_ms", loo[i]}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "model " << graph.name << "  batch " << a.batch << "  on " << cluster.num_devices() << " device(s)"
            << "  costs: " << inputs->costs_note << "\n";
  std::cout << std::left << std::setw(40) << "placement" << std::right << std::setw(12) << "measured" << std::setw(14)
            << "uncalibrated" << std::setw(14) << "calibrated*" << "\n";
  for (size_t i = 0; i < samples.size(); ++i)
    std::cout << std::left << std::setw(40) << short_placement(samples[i].placement, cluster) << std::right
              << std::setw(12) << fixed(all->measured[i], 1) << std::setw(14) << fixed(all->predicted_before[i], 1)
              << std::setw(14) << fixed(loo[i], 1) << "\n";
  auto line = [](const char* what, const AccuracyStats& s) {
    std::cout << std::left << std::setw(30) << what << std::right << "median error " << std::setw(6)
              << fixed(100 * s.median_abs_rel_error, 1) << "%  mean " << std::setw(6)
              << fixed(100 * s.mean_abs_rel_error, 1) << "%  max " << std::setw(6) << fixed(100 * s.max_abs_rel_error, 1)
              << "%  Spearman " << fixed(s.spearman, 3) << "\n";
  };
  line("uncalibrated", all->before);
  line("calibrated (in sample)", all->after);
  line("calibrated* (leave-one-out)", loo_stats);
  const Calibration& c = all->calibration;
  std::cout << "calibration: device factors";
  for (double f : c.device_factor) std::cout << " " << fixed(f, 3);
  std::cout << " (+" << fixed(c.concurrency_slowdown, 3) << " per other local device)";
  std::cout << ", per task " << fixed(c.task_overhead_ms, 3) << " ms, per layer " << fixed(c.layer_overhead_ms, 3)
            << " ms, per message " << fixed(c.message_overhead_ms, 3) << " ms + " << fixed(c.message_ms_per_mb, 3)
            << " ms/MB, wire x" << fixed(c.wire_factor, 3)
            << ", per step " << fixed(c.step_overhead_ms, 3) << " ms, update " << fixed(c.update_ms_per_param_mb, 3)
            << " ms/MB\n";
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CalibrateArgs>();
  auto* sub = app.add_subcommand("calibrate", "measure random placements, fit the simulator to this cluster, store the fit");
  sub->add_option("model", args->model, "zoo name, JSON layer graph or TorchScript file (default alexnet_cifar)");
  sub->add_option("--devices", args->devices, "cluster.json (local devices)")->required();
  sub->add_option("--time-budget", args->time_budget_s, "stop measuring after this many seconds (default 600)")
      ->check(CLI::Range(1.0, 86400.0));
  sub->add_flag("!--no-store", args->store, "do not store the calibration for later plan/optimize runs");
  sub->add_option("--samples", args->samples, "random placements to measure (default 20)")->check(CLI::Range(3, 10000));
  sub->add_option("--batch", args->batch, "batch size (default 32)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--steps", args->steps, "timed steps per placement (median)")->check(CLI::Range(1, 1000));
  sub->add_option("--warmup", args->warmup, "warm-up steps per placement (default " + std::to_string(kWarmupSteps) + ")")->check(CLI::Range(0, 1000));
  sub->add_option("--seed", args->seed, "placements, weights and data seed");
  sub->add_option("--noncontiguous", args->noncontiguous, "fraction of non-contiguous placements (default 0.25)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--replicated", args->replicated,
                  "fraction of the contiguous placements with replicated stages (hybrid; default 0)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--max-micro-batches", args->max_micro_batches, "largest micro-batch count tried (default 8)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--costs", args->costs, "profile (default: measured layer library, cached) | auto | estimated");
  sub->add_option("--input-size", args->input_size, "image side (0: the model's default)");
  sub->add_option("--classes", args->classes, "number of classes (0: the model's default)");
  add_torchscript_option(*sub, args->torchscript);
  sub->add_option("--out", args->out, "write the fitted calibration and its accuracy (JSON)");
  sub->add_option("--save", args->save, "write the measurements (JSON) for --load");
  sub->add_option("--load", args->load, "reuse saved measurements instead of measuring");
  sub->add_option("--fit-extra", args->fit_extra,
                  "also fit: concurrency (local devices slowing each other), backward (backward vs profile), "
                  "first (a step's first task); comma-separated");
  sub->add_flag("--json", args->json, "print JSON");
  sub->callback([args, &exit_code] { exit_code = calibrate_cmd(*args); });
}

}  // namespace tapp::cli
