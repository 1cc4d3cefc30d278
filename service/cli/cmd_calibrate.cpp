// tapp-cli calibrate [MODEL...] --devices cluster.json: fits the simulator to this cluster and keeps the fit.
//
// Several models (default: alexnet_cifar and resnet50, both at 32x32) share
// one fit: the corrections are the cluster's, the layer costs each model's. A
// short chain alone cannot tell a per-layer cost from a per-task one or from
// compute (alexnet_cifar alone fitted 0.22 ms a layer, which over-predicted
// inception_v3's 300-layer stages by 14-17%); a deep branchy model beside it can.
// Placements are measured alternating between the models, so a time budget
// that ends the measuring early leaves every model represented.
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
#include <algorithm>
#include <optional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include <chrono>

#include "common/read_file.h"
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

// Used when no model is given: a short chain and a deep branchy model.
const std::vector<std::string> kDefaultModels = {"alexnet_cifar", "resnet50"};
constexpr int64_t kDefaultModelsInputSize = 32;

struct CalibrateArgs {
  std::vector<std::string> models;
  std::string devices, costs = "profile", out, save, load;
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

// One model's part of the fit: its graph, its uncalibrated costs on the
// cluster and its measured placements.
struct ModelPart {
  std::string spec;  // as given (zoo name or file)
  int64_t input_size = 0;
  LayerGraph graph;
  std::optional<CostModel> cost;
  std::string costs_note;
  std::vector<CalibrationSample> samples;
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

// Loads one model with its costs on the cluster (profiles measured or cached); false after printing why.
bool load_part(const CalibrateArgs& a, ModelPart& part, Cluster& cluster) {
  auto loaded = load_model_and_cluster("calibrate", part.spec, part.input_size, a.classes, a.torchscript, a.devices);
  if (!loaded) return false;
  part.graph = std::move(loaded->graph);
  cluster = std::move(loaded->cluster);
  auto inputs = load_cost_inputs(part.graph, cluster, a.batch, a.costs, "");
  if (!inputs) {
    std::cerr << "tapp-cli calibrate: " << part.spec << ": " << inputs.error_message() << "\n";
    return false;
  }
  auto cost = CostModel::build(part.graph, cluster, inputs->libraries, inputs->device_libraries);
  if (!cost) {
    std::cerr << "tapp-cli calibrate: " << part.spec << ": " << cost.error_message() << "\n";
    return false;
  }
  part.cost = std::move(*cost);
  part.costs_note = inputs->costs_note;
  return true;
}

// One saved sample (from --save) as a CalibrationSample of `part`.
Result<CalibrationSample> sample_from_json(const nlohmann::json& s, const ModelPart& part, const Cluster& cluster) {
  auto p = placement_from_json(s.at("placement"), part.graph, cluster);
  if (!p) return p.status();
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
  return CalibrationSample{*p, r};
}

nlohmann::json samples_to_json(const ModelPart& part, const Cluster& cluster) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : part.samples) {
    nlohmann::json devs = nlohmann::json::array();
    for (const auto& d : s.measured.devices)
      devs.push_back({{"device", d.device}, {"busy_ms", d.busy_ms}, {"comm_ms", d.comm_ms}});
    samples.push_back({{"placement", placement_to_json(s.placement, part.graph, cluster)},
                       {"measured_ms", s.measured.step_ms},
                       {"step_samples_ms", s.measured.step_samples_ms},
                       {"devices", devs}});
  }
  return samples;
}

// --load: a file from --save. Its "models" (each with its input size) replace
// the command line's; a file of the earlier one-model form is the first model's.
bool load_saved(const CalibrateArgs& a, std::vector<ModelPart>& parts, Cluster& cluster) {
  Result<std::string> text = read_file(a.load);
  nlohmann::json j = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  const bool several = !j.is_discarded() && j.is_object() && j.contains("models") && j["models"].is_array();
  if (!text || j.is_discarded() || !j.is_object() || (!several && !j.contains("samples"))) {
    std::cerr << "tapp-cli calibrate: --load: '" << a.load << "' is not a samples file\n";
    return false;
  }
  nlohmann::json models = several ? j["models"] : nlohmann::json::array({j});
  if (!several) {
    models[0]["spec"] = parts.front().spec;
    models[0]["input_size"] = parts.front().input_size;
  }
  parts.clear();
  try {
    for (const auto& m : models) {
      ModelPart part;
      part.spec = m.at("spec").get<std::string>();
      part.input_size = m.value("input_size", int64_t{0});
      if (!load_part(a, part, cluster)) return false;
      for (const auto& s : m.at("samples")) {
        auto sample = sample_from_json(s, part, cluster);
        if (!sample) {
          std::cerr << "tapp-cli calibrate: --load: " << part.spec << ": " << sample.error_message() << "\n";
          return false;
        }
        if (sample->measured.step_ms > 0) part.samples.push_back(std::move(*sample));
      }
      parts.push_back(std::move(part));
    }
  } catch (const std::exception& e) {
    std::cerr << "tapp-cli calibrate: --load: '" << a.load << "': " << e.what() << "\n";
    return false;
  }
  return true;
}

// Draws each model's share of the random placements and measures them,
// alternating between the models, until done or out of time.
void measure_parts(const CalibrateArgs& a, std::vector<ModelPart>& parts, const Cluster& cluster) {
  const int n = static_cast<int>(parts.size());
  std::vector<std::vector<Placement>> to_measure(n);  // [model]
  size_t total = 0;
  for (int k = 0; k < n; ++k) {
    PlannerContext ctx;
    ctx.graph = &parts[k].graph;
    ctx.cluster = &cluster;
    ctx.cost = &*parts[k].cost;
    ctx.batch_size = a.batch;
    ctx.seed = a.seed;
    ctx.max_micro_batches = a.max_micro_batches;
    const int share = a.samples / n + (k < a.samples % n ? 1 : 0);
    to_measure[k] = random_placements(ctx, share, a.noncontiguous, a.replicated);
    total += to_measure[k].size();
  }
  RunOptions ro;
  ro.batch_size = a.batch;
  ro.steps = a.steps;
  ro.warmup_steps = a.warmup;
  ro.seed = a.seed;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  size_t done = 0, ok = 0;
  for (size_t i = 0; done < total; ++i) {
    for (int k = 0; k < n; ++k) {
      ModelPart& part = parts[k];
      if (i >= to_measure[k].size()) continue;
      if (ok >= 3 && elapsed_s() > a.time_budget_s) {
        std::cerr << "time budget of " << fixed(a.time_budget_s, 0) << " s reached after " << done << " of " << total
                  << " placements\n";
        return;
      }
      const Placement& p = to_measure[k][i];
      StepReport r = measure_placement(part.graph, cluster, p, ro);
      ++done;
      if (!a.json)
        std::cerr << progress_bar(static_cast<double>(done) / total, 20) << " " << done << "/" << total << " "
                  << fixed(elapsed_s(), 0) << " s  " << part.graph.name << "  " << short_placement(p, cluster) << "  "
                  << (r.ok ? fixed(r.step_ms, 1) + " ms" : failure_kind_name(r.failure_kind) + ": " + r.message)
                  << "\n";
      if (r.ok) {
        part.samples.push_back({p, r});
        ++ok;
      }
    }
  }
}

std::vector<CalibrationWorkload> workloads_of(const std::vector<ModelPart>& parts, int64_t batch) {
  std::vector<CalibrationWorkload> w;
  for (const ModelPart& part : parts) w.push_back({&part.graph, &*part.cost, batch, part.samples});
  return w;
}

// Each sample predicted by a calibration fitted on all the others (every
// model's), so the error is out of sample; 0 where that fit failed.
std::vector<double> leave_one_out(const std::vector<ModelPart>& parts, const Cluster& cluster, int64_t batch,
                                  const CalibrationOptions& options) {
  std::vector<double> predicted;
  for (size_t k = 0; k < parts.size(); ++k)
    for (size_t i = 0; i < parts[k].samples.size(); ++i) {
      std::vector<CalibrationWorkload> rest = workloads_of(parts, batch);
      rest[k].samples.erase(rest[k].samples.begin() + static_cast<std::ptrdiff_t>(i));
      if (rest[k].samples.empty()) rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(k));
      auto fit = rest.empty() ? Result<CalibrationResult>(Status::error("no other sample"))
                              : calibrate(cluster, rest, options);
      predicted.push_back(fit ? predict_steps(parts[k].graph, cluster, parts[k].cost->with_calibration(fit->calibration),
                                              batch, {parts[k].samples[i].placement})[0]
                              : 0.0);
    }
  return predicted;
}

std::string model_names(const std::vector<ModelPart>& parts) {
  std::string names;
  for (const ModelPart& part : parts) names += (names.empty() ? "" : ", ") + part.graph.name;
  return names;
}

int calibrate_cmd(const CalibrateArgs& a) {
  // Output files that cannot be written are found before minutes of measuring.
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--out", a.out}, {"--save", a.save}})
    if (const std::string why = unwritable(flag, path); !why.empty()) {
      std::cerr << "tapp-cli calibrate: " << why << "\n";
      return 2;
    }
  std::vector<ModelPart> parts;
  const bool defaults = a.models.empty();
  for (const std::string& spec : defaults ? kDefaultModels : a.models)
    parts.push_back(ModelPart{spec, defaults && a.input_size == 0 ? kDefaultModelsInputSize : a.input_size});
  Cluster cluster;
  if (!a.load.empty()) {
    if (!load_saved(a, parts, cluster)) return 2;
  } else {
    for (ModelPart& part : parts)
      if (!load_part(a, part, cluster)) return 2;
    measure_parts(a, parts, cluster);
  }
  size_t measured = 0;
  for (const ModelPart& part : parts) measured += part.samples.size();
  if (measured < 3) {
    std::cerr << "tapp-cli calibrate: only " << measured << " successful measurements; need at least 3\n";
    return 1;
  }
  if (!a.save.empty()) {
    nlohmann::json j;
    j["batch_size"] = a.batch;
    j["models"] = nlohmann::json::array();
    for (const ModelPart& part : parts)
      j["models"].push_back({{"spec", part.spec}, {"model", part.graph.name}, {"input_size", part.input_size},
                             {"samples", samples_to_json(part, cluster)}});
    if (const std::string why = write_output("--save", a.save, j.dump(2) + "\n"); !why.empty()) {
      std::cerr << "tapp-cli calibrate: " << why << "\n";
      return 1;
    }
  }
  CalibrationOptions fit_options;
  fit_options.fit_concurrency = a.fit_extra.find("concurrency") != std::string::npos;
  fit_options.fit_backward_extra = a.fit_extra.find("backward") != std::string::npos;
  fit_options.fit_first_task = a.fit_extra.find("first") != std::string::npos;
  // Models without a successful sample take no part in the fit.
  parts.erase(std::remove_if(parts.begin(), parts.end(), [](const ModelPart& p) { return p.samples.empty(); }),
              parts.end());
  auto all = calibrate(cluster, workloads_of(parts, a.batch), fit_options);
  if (!all) {
    std::cerr << "tapp-cli calibrate: " << all.error_message() << "\n";
    return 1;
  }
  const std::vector<double> loo = leave_one_out(parts, cluster, a.batch, fit_options);
  AccuracyStats loo_stats = accuracy(loo, all->measured);

  nlohmann::json out;
  out["model"] = model_names(parts);
  out["models"] = nlohmann::json::array();
  for (const ModelPart& part : parts)
    out["models"].push_back({{"model", part.graph.name}, {"input_size", part.input_size},
                             {"samples", part.samples.size()}, {"costs", part.costs_note}});
  out["cluster"] = cluster.name;
  out["batch_size"] = a.batch;
  out["costs"] = parts.front().costs_note;
  out["uncalibrated"] = stats_json(all->before);
  out["calibrated_in_sample"] = stats_json(all->after);
  out["calibrated_leave_one_out"] = stats_json(loo_stats);
  out["calibration"] = calibration_to_json(all->calibration);
  StoredCalibration stored{cluster_fingerprint(cluster), profile_timing_method(), utc_now_iso8601(),
                           static_cast<int>(measured), all->calibration, {}};
  // The samples are kept with the fit, so later measurements (optimize's
  // verification) can join them and refit on the whole set.
  for (const ModelPart& part : parts) add_samples(stored, part.graph, cluster, a.batch, part.samples);
  out["stored"] = stored_calibration_to_json(stored);
  if (!a.out.empty())
    if (const std::string why = write_output("--out", a.out, out.dump(2) + "\n"); !why.empty()) {
      std::cerr << "tapp-cli calibrate: " << why << "\n";
      return 1;
    }
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
  // Rows in the order of all->measured: the models in turn, each's samples in order.
  struct Row {
    const ModelPart* part;
    const CalibrationSample* sample;
  };
  std::vector<Row> rows;
  for (const ModelPart& part : parts)
    for (const CalibrationSample& s : part.samples) rows.push_back({&part, &s});
  if (a.json) {
    out["placements"] = nlohmann::json::array();
    for (size_t i = 0; i < rows.size(); ++i)
      out["placements"].push_back({{"model", rows[i].part->graph.name},
                                   {"placement", short_placement(rows[i].sample->placement, cluster)},
                                   {"measured_ms", all->measured[i]},
                                   {"predicted_uncalibrated_ms", all->predicted_before[i]},
                                   {"predicted_leave_one_out_ms", loo[i]}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "models " << model_names(parts) << "  batch " << a.batch << "  on " << cluster.num_devices()
            << " device(s)  costs: " << parts.front().costs_note << "\n";
  std::cout << std::left << std::setw(16) << "model" << std::setw(40) << "placement" << std::right << std::setw(12)
            << "measured" << std::setw(14) << "uncalibrated" << std::setw(14) << "calibrated*" << "\n";
  for (size_t i = 0; i < rows.size(); ++i)
    std::cout << std::left << std::setw(16) << rows[i].part->graph.name << std::setw(40)
              << short_placement(rows[i].sample->placement, cluster) << std::right << std::setw(12)
              << fixed(all->measured[i], 1) << std::setw(14) << fixed(all->predicted_before[i], 1) << std::setw(14)
              << fixed(loo[i], 1) << "\n";
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
  sub->add_option("models", args->models,
                  "zoo names, JSON layer graphs or TorchScript files, fitted together (default: alexnet_cifar and "
                  "resnet50 at 32x32, a short chain and a deep branchy model, so per-layer and per-task costs are "
                  "told apart)");
  sub->add_option("--devices", args->devices, "cluster.json (local devices)")->required();
  sub->add_option("--time-budget", args->time_budget_s, "stop measuring after this many seconds (default 600)")
      ->check(CLI::Range(1.0, 86400.0));
  sub->add_flag("!--no-store", args->store, "do not store the calibration for later plan/optimize runs");
  sub->add_option("--samples", args->samples, "random placements to measure, shared among the models (default 20)")->check(CLI::Range(3, 10000));
  sub->add_option("--batch", args->batch, "batch size (default 32)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--steps", args->steps, "timed steps per placement (median)")->check(CLI::Range(1, 1000));
  sub->add_option("--warmup", args->warmup, "warm-up steps per placement (default " + std::to_string(kWarmupSteps) + ")")->check(CLI::Range(0, 1000));
  sub->add_option("--seed", args->seed, "placements, weights and data seed")->check(seed_text());
  sub->add_option("--noncontiguous", args->noncontiguous, "fraction of non-contiguous placements (default 0.25)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--replicated", args->replicated,
                  "fraction of the contiguous placements with replicated stages (hybrid; default 0)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--max-micro-batches", args->max_micro_batches, "largest micro-batch count tried (default 8)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--costs", args->costs, "profile (default: measured layer library, cached) | auto (or cached) | estimated");
  sub->add_option("--input-size", args->input_size, "image side for every model (0: each model's default; 32 for the default models)");
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
