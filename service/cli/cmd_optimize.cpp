// service/cli/cmd_optimize.cpp — `tapp-cli optimize`: find a placement with TAPP.
//
// Runs optimize() in this process (or, with --server URL, submits the same
// request to a tapp-server through optimize_on_server). Progress goes to
// stderr: a bar on a terminal, plain lines otherwise. The result goes to
// stdout: a summary and the baselines table, or the result JSON with --json.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/base64.h"
#include "common/read_file.h"
#include "core/cluster.h"  // resolve_library_paths
#include "placer/optimize.h"
#include "placer/policy.h"
#include "planners/lower_bound.h"  // gap_to_bound
#include "service/cli/commands.h"
#include "service/cli/model_inputs.h"
#include "service/cli/progress_bar.h"
#include "service/cli/text_cells.h"
#include "simulator/calibration_store.h"  // kMinMeasurementsToUse

namespace tapp::cli {

namespace {

using nlohmann::json;

std::atomic<bool> g_cancel{false};
extern "C" void on_sigint(int) { g_cancel = true; }

struct Args {
  std::string model, devices, evaluator = "simulate", out, server;
  int iterations = 0;
  double time_budget_s = 0;
  uint64_t seed = 1;
  int64_t batch = 32, input_size = 0;
  bool json_output = false, warm_start = false, no_baselines = false, no_verify = false, allow_al = false;
  std::string al_out;  // --al-out FILE: the AL row's pipeline (blocks = its groups)
  std::string policy;  // --policy FILE: a trained policy (tapp-cli train-policy)
  std::string optimizer = "sgd";
  std::string costs = "profile";
  std::string torchscript = "auto";
};

// The name a TorchScript file is uploaded under: the server takes letters,
// digits, _ and - before ".pt" (its own copy's name, not a path).
std::string upload_name(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string().substr(0, 64);
  for (char& ch : stem)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-') ch = '_';
  return (stem.empty() ? "model" : stem) + ".pt";
}

std::string fmt_ms(const json& v) {
  if (!v.is_number()) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(v.get<double>() < 100 ? 2 : 1) << v.get<double>();
  return o.str();
}
std::string fmt_x(const json& v) {
  if (!v.is_number()) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << v.get<double>() << "x";
  return o.str();
}
// "+12.3%": how far a step is above the lower bound ((step - bound) / bound); "-" when unknown.
std::string gap_text(const json& gap) {
  if (!gap.is_number()) return "-";
  std::ostringstream o;
  o << "+" << std::fixed << std::setprecision(1) << 100.0 * gap.get<double>() << "%";
  return o.str();
}
json gap_of(const json& ms, const json& bound) {
  if (!ms.is_number() || !bound.is_number() || bound.get<double>() <= 0) return json();
  return gap_to_bound(ms.get<double>(), bound.get<double>());
}
// ", 12 fitted by moving layers" where the measurer moved layers (core/memory_fit.h); "" where it did not.
std::string moved_text(int64_t moved) {
  return moved > 0 ? ", " + std::to_string(moved) + " fitted by moving layers" : "";
}
std::string fmt_pct(const json& v) {
  if (!v.is_number()) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << 100.0 * v.get<double>() << "%";
  return o.str();
}

// Progress on stderr: on a terminal one bar per phase that fills (profiling:
// through the job's profiles, per micro-batch size and layer; baselines:
// through the planners; optimizing: through the iterations); otherwise plain
// lines, a few per phase (a line per planner).
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(isatty(STDERR_FILENO) == 1) {}
  void operator()(const ProgressEvent& e) {
    if (e.phase != phase_) {
      if (tty_ && bar_shown_) std::cerr << "\n";
      bar_shown_ = false;
      phase_ = e.phase;
      last_line_.clear();
      if (e.phase != "optimizing" && e.phase != "done") std::cerr << "[" << e.phase << "]\n";
    }
    if (e.phase == "profiling" && !e.message.empty()) return profiling(e);
    if (e.phase == "baselines" && !e.message.empty()) return planner_started(e);
    if (e.phase != "optimizing") return;
    std::ostringstream line;
    line << "iteration " << e.iteration;
    if (e.total_iterations > 0) line << "/" << e.total_iterations;
    line << "  best " << (e.best_step_ms > 0 ? fmt_ms(e.best_step_ms) + " ms" : "-") << "  reward " << std::fixed
         << std::setprecision(3) << e.reward << "  " << std::setprecision(1) << e.elapsed_s << " s";
    if (tty_) {
      const double fraction = e.total_iterations > 0 ? static_cast<double>(e.iteration) / e.total_iterations : -1;
      bar(fraction, e.iteration, line.str());
    } else {
      int every = e.total_iterations > 0 ? std::max(1, e.total_iterations / 10) : 25;
      if (e.iteration % every == 0 || e.iteration == 1) std::cerr << line.str() << "\n";
    }
  }
  void finish() {
    if (tty_ && bar_shown_) std::cerr << "\n";
  }

 private:
  // Terminal: the bar with the message; otherwise a line per micro-batch size
  // (the message up to its colon), not per layer.
  void profiling(const ProgressEvent& e) {
    if (tty_) return bar(e.phase_fraction, 0, e.message);
    const std::string head = e.message.substr(0, e.message.find(':'));
    if (head != last_line_) std::cerr << "  " << head << "\n";
    last_line_ = head;
  }
  // Terminal: the bar; otherwise a line per planner (a search planner's row can
  // take minutes), then its evaluations so far ("anneal (8 of 22): 1200 of 4000
  // evaluations") at most every 10 s.
  void planner_started(const ProgressEvent& e) {
    if (tty_) return bar(e.phase_fraction, 0, e.message);
    const std::string head = e.message.substr(0, e.message.find(':'));
    const auto now = std::chrono::steady_clock::now();
    if (head == last_line_ && now - last_print_ < std::chrono::seconds(10)) return;
    std::cerr << "  " << e.message << "\n";
    last_line_ = head;
    last_print_ = now;
  }
  // fraction < 0: unknown, the bar cycles with `tick`.
  void bar(double fraction, int tick, const std::string& text) {
    const int width = 30;
    // Unknown progress: the bar fills one cell every 5 ticks and starts over.
    const double shown = fraction >= 0 ? fraction : ((tick / 5) % (width + 1) + 0.5) / width;
    std::cerr << "\r\033[K" << progress_bar(shown, width) << " " << text << std::flush;
    bar_shown_ = true;
  }

  bool tty_;
  bool bar_shown_ = false;
  std::string phase_, last_line_;
  std::chrono::steady_clock::time_point last_print_;
};

// Which calibration the predictions used (schemas/job.schema.json result.calibration).
void print_calibration(const json& c) {
  if (c.value("kind", "") == "fitted")
    std::cout << "calibration: fitted " << c.value("fitted_at", "") << " from " << c.value("measurements", 0)
              << " measurements on this cluster\n";
  else
    std::cout << "calibration: default (none fitted on this cluster: tapp-cli calibrate --devices ...)\n";
  if (c.contains("refused")) std::cout << "  (a stored calibration was refused: " << c.value("refused", "") << ")\n";
  if (c.contains("waiting")) std::cout << "  (" << c.value("waiting", "") << ")\n";
}

std::string fmt_signed_pct(const json& v) {
  if (!v.is_number()) return "-";
  std::ostringstream o;
  o << std::showpos << std::fixed << std::setprecision(1) << 100.0 * v.get<double>() << "%";
  return o.str();
}

// Predicted and measured side by side (schemas/job.schema.json result.verification).
void print_verification(const json& v) {
  const std::string state = v.value("state", "off");
  if (state != "verified") {
    std::cout << "\nverification " << state << ": " << v.value("reason", "") << "\n";
    return;
  }
  std::cout << "\nverified on the workers (" << v.value("warmup_steps", 0) << " warm-up + median of "
            << v.value("steps", 0) << " steps; flagged when |measured - predicted| / measured > "
            << fmt_pct(v["threshold"]) << "):\n";
  std::cout << std::left << std::setw(15) << "" << std::setw(16) << "plan" << std::right << std::setw(14)
            << "predicted ms" << std::setw(13) << "measured ms" << std::setw(10) << "diff" << "\n";
  for (const json& p : v["plans"]) {
    std::cout << label(p.value("role", "") == "best" ? "best" : "best baseline", 15) << label(p.value("name", ""), 16)
              << cell(fmt_ms(p["predicted_ms"]), 14) << cell(fmt_ms(p["measured_ms"]), 13)
              << cell(fmt_signed_pct(p["relative_difference"]), 10);
    if (p.value("disagrees", false)) std::cout << "  DISAGREES";
    if (!p.value("ok", false))
      std::cout << "  not measured (" << p.value("failure_kind", "") << ": " << p.value("message", "")
                << "); the prediction stands";
    if (p.contains("same_plan_as")) std::cout << "  (the same plan as the best)";
    std::cout << "\n";
  }
  if (v.contains("calibration")) {
    const json& c = v["calibration"];
    if (c.value("stored", false))
      std::cout << "calibration: " << c.value("samples_added", 0) << " measurement(s) added; refitted from "
                << c.value("fitted_from", 0) << " and stored for this cluster ("
                << (c.value("fitted_from", 0) >= kMinMeasurementsToUse
                        ? std::string("used by the next plan/optimize")
                        : "used from " + std::to_string(kMinMeasurementsToUse) + " measurements on")
                << ")\n";
    else
      std::cout << "calibration: not updated: " << c.value("error", "") << "\n";
    if (c.contains("replaced_refused"))
      std::cout << "  (replaced a stored calibration that was refused: " << c.value("replaced_refused", "") << ")\n";
  }
}

// --allow-al: the AL row (schemas/job.schema.json result.al), beside the best, never in its place.
void print_al(const json& al, const std::string& model) {
  std::cout << "\nAssociated Learning (--allow-al; changes the learning algorithm, so shown beside the best): ";
  if (!al.value("found", false)) {
    std::cout << al.value("message", "") << "\n";
    for (const auto& why : al.value("refused", json::array())) std::cout << "  " << why.get<std::string>() << "\n";
    return;
  }
  std::string cuts;
  for (const auto& c : al.value("cuts", json::array())) cuts += (cuts.empty() ? "" : ", ") + c.get<std::string>();
  std::cout << fmt_ms(al["step_ms"]) << " ms predicted, " << fmt_x(al["speedup_vs_best"]) << " the best plan's speed\n"
            << "  " << al.value("blocks", 0) << " blocks from " << al.value("from", "") << "'s plan (cut before " << cuts
            << "), " << al.value("micro_batches", 1) << " micro-batches, one in flight per device; "
            << al.value("candidates", 0) << " proposed cut sets priced\n"
            << "  measure it: tapp-cli run " << model << " --placement AL.json --schedule al (AL.json: --al-out)\n";
}

void print_result(const json& r) {
  std::cout << "model " << r.value("model", "") << " (" << r.value("layers", 0) << " layers), cluster "
            << r.value("cluster", "") << " (" << r.value("devices", 0) << " devices), batch "
            << r.value("batch_size", 0) << ", evaluator " << r.value("evaluator", "") << ", profile "
            << r["profile"].value("origin", "") << "\n";
  print_calibration(r.value("calibration", json::object()));
  for (const json& s : r["profile"].value("skipped", json::array()))
    std::cout << "  (micro-batch size " << s.value("batch_size", 0) << " on " << s.value("device", "cpu x1")
              << " not profiled: " << s.value("error", "") << ")\n";
  std::cout << "\n";
  std::cout << "best placement (from " << r.value("source", "") << "): predicted " << fmt_ms(r["predicted_step_ms"])
            << " ms, measured " << fmt_ms(r["measured_step_ms"]) << (r["measured_step_ms"].is_number() ? " ms" : "")
            << ", communication " << fmt_pct(r["comm_fraction"]) << "\n";
  const bool replicas = r["placement"].is_object() && r["placement"].value("data_parallel", false);
  if (replicas && r["groups"].size() == 1)
    std::cout << "  the whole model on one device, the whole batch at once\n";
  else if (replicas)
    std::cout << "  data parallel: a full replica on each of " << r["groups"].size()
              << " devices, the batch split equally, gradients all-reduced\n";
  else if (r["placement"].is_object())
    std::cout << "  micro-batches " << r["placement"].value("micro_batches", 1) << ", schedule "
              << r["placement"].value("schedule", "") << "\n";
  if (r.value("lower_bound_ms", json()).is_number())
    std::cout << "  lower bound " << fmt_ms(r["lower_bound_ms"]) << " ms for this model on this cluster (gap "
              << gap_text(r.value("gap_to_bound", json())) << "): " << r["lower_bound"].value("basis", "")
              << "\n";
  else if (r.contains("lower_bound"))
    std::cout << "  no lower bound: " << r["lower_bound"].value("error", "") << "\n";
  for (const auto& g : r["groups"]) {
    std::string devices = g.value("device", "");
    for (const auto& d : g.value("replicas", json::array())) devices += "+" + d.get<std::string>();
    std::cout << (replicas ? "  replica " : "  group ")<< g.value("group", 0) << " -> " << std::left << std::setw(10) << devices
              << std::right << " layers " << g.value("first_layer", "") << " .. " << g.value("last_layer", "") << " ("
              << g.value("layers", 0) << ")";
    if (g.contains("micro_batches_per_device")) {  // a replicated stage: its devices' shares
      std::string shares;
      for (const auto& n : g["micro_batches_per_device"]) shares += (shares.empty() ? "" : " : ") + n.dump();
      std::cout << ", micro-batches " << shares;
    }
    std::cout << "\n";
  }
  const json& p = r["policy"];
  std::cout << "\nTAPP policy: " << fmt_ms(p["step_ms"]) << " ms after " << p.value("iterations", 0)
            << " iterations (" << p.value("restarts", 0) << " restarts), stopped by " << p.value("stop_reason", "")
            << ", " << std::fixed << std::setprecision(1) << p.value("policy_elapsed_s", 0.0) << " s; refined "
            << fmt_ms(p["refined_step_ms"]) << " ms; " << p.value("evaluations", 0) << " placements evaluated ("
            << p.value("failures", 0) << " failed" << moved_text(p.value("moved_to_fit", 0)) << ") in "
            << p.value("elapsed_s", 0.0) << " s\n";
  if (p.value("started_from", "fresh") != "fresh") {
    std::string repairs;
    const std::string replicas = p.value("zero_shot_replicas", "as_decided");
    if (replicas == "dropped") repairs = " with its replicas dropped";
    if (replicas == "idle_devices_added") repairs = " with its idle devices added as replicas";
    if (replicas == "one_stage") repairs = " as one stage copied onto its devices";
    if (replicas == "data_parallel") repairs = " as data parallelism on its devices";
    if (replicas == "every_device_a_stage") repairs = " with every device a stage of its own";
    if (replicas == "pipelined") repairs = " as the pipeline of its groups, not data parallelism";
    if (replicas == "slowest_device_dropped") repairs = " without its slowest device's stage";
    if (replicas == "fastest_devices") repairs = " on the fastest devices";
    if (replicas == "fewer_stages")
      repairs = " with fewer stages, merged or copied where the model finds it faster";
    if (p.value("zero_shot_reordered", false))
      repairs += std::string(repairs.empty() ? " with" : " and") + " its stages reordered and its cuts placed";
    else if (p.value("zero_shot_cuts_moved", false))
      repairs += std::string(repairs.empty() ? " with" : " and") + " its cuts placed for its stages";
    std::cout << "started from the trained policy " << p.value("started_from", "") << " (its plan before fine-tuning: "
              << fmt_ms(p.value("zero_shot_step_ms", json())) << " ms, its " << p.value("zero_shot_from", "typical")
              << " decision" << repairs;
    if (p.value("zero_shot_climbed_step_ms", json()).is_number())
      std::cout << "; " << fmt_ms(p["zero_shot_climbed_step_ms"]) << " ms after the climb from it";
    std::cout << ")\n";
  }
  std::cout << "\n";
  std::cout << std::left << std::setw(16) << "plan" << std::right << std::setw(12) << "step ms" << std::setw(10)
            << "vs BSP" << std::setw(14) << "vs best base" << std::setw(10) << "comm" << std::setw(11) << "vs bound"
            << "\n";
  const json bound = r.value("lower_bound_ms", json());
  // The policy's plans are synchronous (lower_bound_ms); a row has its own gap.
  auto row = [&](const std::string& name, const json& ms, const json& vb, const json& vbest, const json& comm,
                 const json& gap) {
    std::cout << label(name, 16) << cell(fmt_ms(ms), 12) << cell(fmt_x(vb), 10) << cell(fmt_x(vbest), 14)
              << cell(fmt_pct(comm), 10) << cell(gap_text(gap), 11) << "\n";
  };
  row("TAPP (policy)", p["step_ms"], p["speedup_vs_bsp"], p["speedup_vs_best_baseline"], nullptr,
      gap_of(p["step_ms"], bound));
  if (p["refined_step_ms"].is_number() && p["step_ms"].is_number() &&
      p["refined_step_ms"].get<double>() < p["step_ms"].get<double>())
    row("TAPP +refine", p["refined_step_ms"], p["refined_speedup_vs_bsp"],
        p["refined_speedup_vs_best_baseline"], nullptr, gap_of(p["refined_step_ms"], bound));
  for (const auto& b : r["baselines"]) {
    if (b.value("ok", false))
      row(b.value("name", ""), b["step_ms"], b["speedup_vs_bsp"], b["speedup_vs_best_baseline"],
          b["comm_fraction"], b.value("gap_to_bound", json()));
    else if (b.value("skipped", false))  // did not run: says why ("N candidates > limit L")
      std::cout << label(b.value("name", ""), 16) << cell("skipped", 12) << "  " << b.value("message", "") << "\n";
    else
      std::cout << label(b.value("name", ""), 16) << cell("failed", 12) << "  " << b.value("failure_kind", "") << "\n";
  }
  for (const auto& o : r.value("subspace_optima", json::array()))
    std::cout << "  " << o.value("planner", "") << " (" << fmt_ms(o["step_ms"])
              << " ms): " << o.value("optimal_within", "") << "\n";
  if (r.contains("al")) print_al(r["al"], r.value("model", ""));
  if (r.contains("verification")) print_verification(r["verification"]);
}

void run(const Args& a, int& exit_code) {
  if (Result<EvaluatorKind> kind = evaluator_kind_from_name(a.evaluator, "--evaluator"); !kind) {
    std::cerr << "tapp-cli optimize: " << kind.error_message() << "\n";
    exit_code = 2;
    return;
  }
  // An output file that cannot be written is found before a search of minutes, not after it.
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--out", a.out}, {"--al-out", a.al_out}})
    if (const std::string why = unwritable(flag, path); !why.empty()) {
      std::cerr << "tapp-cli optimize: " << why << "\n";
      exit_code = 2;
      return;
    }
  Result<std::string> cluster_text = read_file(a.devices);
  if (!cluster_text) {
    std::cerr << "tapp-cli optimize: --devices: " << a.devices << ": " << cluster_text.error_message() << "\n";
    exit_code = 2;
    return;
  }
  json cluster;
  try {
    cluster = json::parse(*cluster_text);
  } catch (const std::exception& e) {
    std::cerr << "tapp-cli optimize: --devices: " << a.devices << " is not JSON: " << e.what() << "\n";
    exit_code = 2;
    return;
  }
  resolve_library_paths(cluster, a.devices);
  json options = {{"evaluator", a.evaluator}, {"seed", a.seed}, {"batch_size", a.batch},
                  {"warm_start", a.warm_start}, {"baselines", !a.no_baselines}, {"verify", !a.no_verify},
                  {"optimizer", a.optimizer}, {"costs", a.costs == "auto" ? "cached" : a.costs}, {"torchscript", a.torchscript},
                  {"allow_al", a.allow_al}};
  if (!a.al_out.empty() && !a.allow_al) {
    std::cerr << "tapp-cli optimize: --al-out: needs --allow-al (AL changes the learning algorithm; ask for it)\n";
    exit_code = 2;
    return;
  }
  if (a.iterations > 0) options["iterations"] = a.iterations;
  if (a.time_budget_s > 0) options["time_budget_s"] = a.time_budget_s;
  if (a.input_size > 0) options["input_size"] = a.input_size;
  json body = {{"model", a.model}, {"cluster", cluster}, {"options", options}};
  // A JSON layer-graph file is sent inline (the server may not see our files).
  if (a.model.size() > 5 && a.model.substr(a.model.size() - 5) == ".json") {
    Result<std::string> model_text = read_file(a.model);
    try {
      if (model_text) body["model"] = json::parse(*model_text);
    } catch (const std::exception& e) {
      std::cerr << "MODEL: " << a.model << " is not JSON: " << e.what() << "\n";
      exit_code = 2;
      return;
    }
  }
  if (!a.server.empty() && is_torchscript_path(a.model)) {
    // A TorchScript file goes up as model_file: the server reads no file a request names.
    Result<std::string> bytes = read_file(a.model);
    if (!bytes) {
      std::cerr << "tapp-cli optimize: model: " << a.model << ": " << bytes.error_message() << "\n";
      exit_code = 2;
      return;
    }
    body.erase("model");
    body["model_file"] = {{"name", upload_name(a.model)}, {"base64", base64_encode(*bytes)}};
  }
  if (!a.server.empty()) {
    if (!a.policy.empty()) {
      std::cerr << "tapp-cli optimize: --policy: a policy file is used by a local run only, not with --server\n";
      exit_code = 2;
      return;
    }
    exit_code = optimize_on_server(a.server, body.dump(), a.json_output, a.out, a.al_out);
    return;
  }
  Result<OptimizeRequest> req = optimize_request_from_json(body);
  if (!req) {
    // The request's "cluster" is the --devices file: its fields are named in it.
    const std::string& why = req.error_message();
    const std::string cluster_field = "cluster.";
    std::cerr << "tapp-cli optimize: "
              << (why.rfind(cluster_field, 0) == 0 ? "--devices " + a.devices + ": " + why.substr(cluster_field.size()) : why)
              << "\n";
    exit_code = 2;
    return;
  }
  if (!a.policy.empty()) {
    auto networks = load_policy_networks(a.policy);
    if (!networks) {
      std::cerr << "tapp-cli optimize: --policy: " << networks.error_message() << "\n";
      exit_code = 2;
      return;
    }
    req.value().initial_policy = std::move(networks.value());
    req.value().initial_policy_name = a.policy;
  }
  std::signal(SIGINT, on_sigint);
  ProgressPrinter printer;
  Result<json> result = optimize(req.value(), [&](const ProgressEvent& e) { printer(e); }, g_cancel);
  printer.finish();
  std::signal(SIGINT, SIG_DFL);
  if (!result) {
    std::cerr << "tapp-cli optimize: " << result.error_message() << "\n";
    exit_code = optimize_failure_exit_code(result.error_message());
    return;
  }
  if (!a.out.empty()) {
    if (const std::string why = write_output("--out", a.out, (*result)["placement"].dump(2) + "\n"); !why.empty()) {
      std::cerr << "tapp-cli optimize: " << why << "\n";
      exit_code = 1;
      return;
    }
  }
  if (!a.al_out.empty()) {
    const json& al = (*result)["al"];
    if (!al.value("found", false)) {
      std::cerr << "--al-out: no AL plan to write: " << al.value("message", "") << "\n";
      exit_code = 1;
      return;
    }
    if (const std::string why = write_output("--al-out", a.al_out, al["placement"].dump(2) + "\n"); !why.empty()) {
      std::cerr << "tapp-cli optimize: " << why << "\n";
      exit_code = 1;
      return;
    }
  }
  if (a.json_output)
    std::cout << result->dump(2) << "\n";
  else
    print_result(*result);
  if (!a.out.empty() && !a.json_output) std::cout << "\nplacement written to " << a.out << "\n";
  exit_code = 0;
}

}  // namespace

void add_optimize_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand("optimize", "find a pipeline-parallel placement with TAPP");
  sub->add_option("model", args->model, "zoo name (alexnet, vgg16, inception_v3, ...), JSON layer graph or TorchScript file")
      ->required();
  sub->add_option("--devices", args->devices, "cluster JSON (devices, links)")->required();
  sub->add_option("--evaluator", args->evaluator, "simulate (default) | measure | hybrid");
  // The request's own ranges (placer/optimize_request.cpp), checked here so that the error names the flag.
  auto* it = sub->add_option("--iterations", args->iterations,
                             "policy iterations (default: " + std::to_string(kSimulatedIterations) +
                                 " simulate/hybrid, " + std::to_string(kMeasuredIterations) + " measure)")
                 ->check(CLI::Range(1, kMaxIterations));
  auto* tb = sub->add_option("--time-budget", args->time_budget_s, "seconds for the search instead of an iteration count")
                 ->check(CLI::Validator(
                     [](std::string& text) -> std::string {
                       const double v = std::strtod(text.c_str(), nullptr);
                       return v > 0 && v <= kMaxTimeBudgetS ? "" : "must be a number of seconds in (0, 604800]";
                     },
                     "SECONDS"));
  it->excludes(tb);
  sub->add_option("--seed", args->seed, "random seed (simulate is deterministic for a seed)")->check(seed_text());
  sub->add_option("--batch", args->batch, "training batch size (default 32)")->check(CLI::Range(int64_t{1}, kMaxBatchSize));
  sub->add_option("--input-size", args->input_size, "image side, or a sequence length (default: the model's)")->check(CLI::Range(int64_t{1}, kMaxInputSize));
  sub->add_option("--out", args->out, "write the best placement JSON here");
  sub->add_flag("--json", args->json_output, "print the result JSON");
  sub->add_flag("--warm-start", args->warm_start, "start the policy from the best classical plan");
  sub->add_option("--policy", args->policy, "start from a trained policy file (tapp-cli train-policy) and fine-tune it");
  sub->add_flag("--no-baselines", args->no_baselines, "skip the classical baselines");
  sub->add_flag("--allow-al", args->allow_al,
                "also price Associated Learning (schedule al) over the proposed plans' cut points: its own row");
  sub->add_option("--al-out", args->al_out,
                  "with --allow-al: write the AL row's pipeline here (tapp-cli run MODEL --placement FILE --schedule al)");
  sub->add_option("--costs", args->costs,
                  "profile (default: measure what is not cached) | cached (cached profiles, else estimated; "
                  "also 'auto', as plan names it) | estimated (multiply-adds only, for models too large to profile here)")
      ->check(CLI::IsMember({"profile", "cached", "auto", "estimated"}));
  sub->add_option("--optimizer", args->optimizer,
                  "sgd (with momentum, default) | adam: what the plans train with and their memory counts")
      ->check(CLI::IsMember({"sgd", "adam"}));
  add_torchscript_option(*sub, args->torchscript);
  sub->add_flag("--no-verify", args->no_verify,
                "do not measure the best plan and the best baseline on the workers after the search");
  sub->add_option("--server", args->server, "submit to a tapp-server at URL instead of running here");
  sub->callback([args, &exit_code] { run(*args, exit_code); });
}

}  // namespace tapp::cli
