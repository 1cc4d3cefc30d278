// tapp-cli export PLACEMENT.json --model MODEL --devices cluster.json: a plan where users already train.
//
// Loads the model, the cluster and the placement as `plan` and `run` do
// (model_inputs.h, cost_inputs.h, core/placement.h), writes the placement as
// the partition of one stack or all of them (planners/partition_export.h:
// Pipe's balance, DeepSpeed's parts, Megatron's layers per stage,
// torch.distributed.pipelining's split points), and explains it stage by
// stage from one simulated step (planners/stage_breakdown.h): compute,
// communication, bubble and peak memory. Text on the terminal, the JSON
// document with --json; --out writes that document to a file.
// Exit codes: 0 exported (with --format all: at least one format could take
// it; the others say why not), 2 bad input or no format can express it.
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/cluster.h"
#include "core/placement.h"
#include "planners/partition_export.h"
#include "planners/stage_breakdown.h"
#include "service/cli/commands.h"
#include "service/cli/cost_inputs.h"
#include "service/cli/model_inputs.h"

namespace tapp::cli {
namespace {

struct ExportArgs {
  std::string placement, model, devices, format = "all", costs = "auto", calibration, out;
  int64_t batch = 32, input_size = 0, classes = 0;
  std::string torchscript = "auto";  // --torchscript
  bool json = false;
};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

template <typename T>
std::string list_text(const std::vector<T>& items) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < items.size(); ++i) os << (i ? ", " : "") << items[i];
  os << "]";
  return os.str();
}

void print_breakdown(const StageBreakdown& b, const Placement& p, const LayerGraph& g, const Cluster& c,
                     std::ostream& os) {
  os << "simulated step " << fixed(b.report.step_ms, 2) << " ms (" << schedule_name(p.schedule) << ", "
     << p.micro_batches << " micro-batches)  communication fraction " << fixed(b.report.comm_fraction, 3)
     << "\n";
  std::vector<std::string> layer_cells;
  size_t lw = 6, dw = 7;
  for (const StageCost& sc : b.stages) {
    const PipelineStage& s = sc.stage;
    layer_cells.push_back(g.layers[s.first_layer].name +
                          (s.num_layers() > 1 ? ".." + g.layers[s.end_layer - 1].name : "") + " (" +
                          std::to_string(s.num_layers()) + ")");
    lw = std::max(lw, layer_cells.back().size());
    for (int d : s.devices) dw = std::max(dw, c.devices[d].name.size() + (s.devices.size() > 1 ? 2 : 0));
  }
  os << std::left << std::setw(7) << "stage" << std::setw(static_cast<int>(lw) + 2) << "layers"
     << std::setw(static_cast<int>(dw) + 2) << "device" << std::right << std::setw(8) << "mb" << std::setw(10)
     << "fwd ms" << std::setw(10) << "bwd ms" << std::setw(10) << "send ms" << std::setw(10) << "comm ms"
     << std::setw(11) << "bubble ms" << std::setw(10) << "peak MiB"
     << "\n";
  for (size_t s = 0; s < b.stages.size(); ++s) {
    const StageCost& sc = b.stages[s];
    for (size_t k = 0; k < sc.devices.size(); ++k) {
      const StageDeviceCost& dc = sc.devices[k];
      std::string device =
          (sc.devices.size() > 1 ? "r" + std::to_string(k) + " " : "") + c.devices[dc.device].name;
      os << std::left << std::setw(7) << (k == 0 ? std::to_string(s) + (sc.shares_device ? "*" : "") : "")
         << std::setw(static_cast<int>(lw) + 2) << (k == 0 ? layer_cells[s] : "")
         << std::setw(static_cast<int>(dw) + 2) << device << std::right << std::setw(8) << dc.micro_batches
         << std::setw(10) << fixed(dc.forward_ms, 2) << std::setw(10) << fixed(dc.backward_ms, 2)
         << std::setw(10) << fixed(dc.send_ms, 2) << std::setw(10) << fixed(dc.comm_ms, 2) << std::setw(11)
         << fixed(dc.bubble_ms, 2) << std::setw(10) << fixed(dc.peak_memory_bytes / 1048576.0, 1) << "\n";
    }
  }
  os << "  fwd/bwd: the stage's compute over its micro-batches (mb); send: its activations and gradients on "
        "the "
        "wire;\n  comm: the device waiting while an input was on the wire, and draining its sends; bubble: "
        "the rest of "
        "the step it is not busy (waiting for other stages); peak: the device's memory\n";
  for (const StageCost& sc : b.stages)
    if (sc.shares_device) {
      os << "  *: the device runs another stage too; its comm, bubble and memory are shared\n";
      break;
    }
  if (!b.memory_error.empty()) os << "does not fit: " << b.memory_error << "\n";
  for (const std::string& w : b.report.warnings) os << "note: " << w << "\n";
}

void print_export(const PartitionExport& e, const Cluster& c, std::ostream& os) {
  std::vector<std::string> pipe_devices;
  for (const PipelineStage& st : e.stages) pipe_devices.push_back(c.devices[st.devices.front()].name);
  switch (e.format) {
    case PartitionFormat::pipe:
      os << "pipe (torch.distributed.pipeline.sync.Pipe / torchgpipe): balance " << list_text(e.balance)
         << " on " << list_text(pipe_devices);
      break;
    case PartitionFormat::deepspeed:
      os << "deepspeed (PipelineModule): parts " << list_text(e.parts);
      break;
    case PartitionFormat::megatron:
      os << "megatron: layers per stage " << list_text(e.balance);
      break;
    case PartitionFormat::pippy: {
      os << "pippy (torch.distributed.pipelining): pipe_split() before " << list_text(e.split_points)
         << "; split_spec {";
      for (size_t i = 0; i < e.split_points.size(); ++i)
        os << (i ? ", " : "") << "\"" << e.split_points[i] << "\": SplitPoint.BEGINNING";
      os << "}";
      break;
    }
  }
  os << "\n";
  for (const std::string& s : e.settings) os << "  " << s << "\n";
  for (const std::string& n : e.notes) os << "  note: " << n << "\n";
}

int export_placement(const ExportArgs& a) {
  if (const std::string why = unwritable("--out", a.out); !why.empty()) {
    std::cerr << "tapp-cli export: " << why << "\n";
    return 2;
  }
  std::vector<PartitionFormat> formats;
  if (a.format == "all") {
    formats = all_partition_formats();
  } else {
    auto f = partition_format_from_name(a.format);
    if (!f) {
      std::cerr << "tapp-cli export: --format: unknown \"" << a.format
                << "\"; expected all, pipe, deepspeed, megatron or pippy\n";
      return 2;
    }
    formats = {*f};
  }
  auto loaded = load_model_and_cluster("export", a.model, a.input_size, a.classes, a.torchscript, a.devices);
  if (!loaded) return 2;
  const LayerGraph& graph = loaded->graph;
  const Cluster& cluster = loaded->cluster;
  auto placement = load_placement(a.placement, graph, cluster);
  if (!placement) {
    std::cerr << "tapp-cli export: " << placement.error_message() << "\n";
    return 2;
  }
  if (Status s = validate_placement(*placement, graph, cluster, a.batch); !s) {
    std::cerr << "tapp-cli export: " << a.placement << ": " << s.message() << "\n";
    return 2;
  }
  auto stages = pipeline_stages(*placement, graph, cluster);
  if (!stages) {
    std::cerr << "tapp-cli export: " << a.placement << ": " << stages.error_message() << "\n";
    return 2;
  }
  auto inputs = load_cost_inputs(graph, cluster, a.batch, a.costs, a.calibration);
  if (!inputs) {
    std::cerr << "tapp-cli export: " << inputs.error_message() << "\n";
    return 2;
  }
  auto cost = CostModel::build(graph, cluster, inputs->libraries, inputs->calibration);
  if (!cost) {
    std::cerr << "tapp-cli export: " << cost.error_message() << "\n";
    return 2;
  }
  auto breakdown = stage_breakdown(graph, cluster, *cost, *placement, *stages, a.batch);
  if (!breakdown) {
    std::cerr << "tapp-cli export: " << breakdown.error_message() << "\n";
    return 2;
  }

  nlohmann::json doc;
  doc["model"] = graph.name;
  doc["cluster"] = cluster.name;
  doc["placement"] = a.placement;
  doc["batch_size"] = a.batch;
  doc["costs"] = inputs->costs_note;
  doc["calibration"] = inputs->calibration_note;
  doc["breakdown"] = stage_breakdown_to_json(*breakdown, graph, cluster);
  doc["formats"] = nlohmann::json::object();
  std::vector<PartitionExport> exported;
  std::vector<std::pair<PartitionFormat, std::string>> refused;
  for (PartitionFormat f : formats) {
    auto e = export_partition(*placement, graph, cluster, f, a.batch);
    if (e) {
      doc["formats"][partition_format_name(f)] = partition_export_to_json(*e, graph, cluster);
      exported.push_back(*e);
    } else {
      doc["formats"][partition_format_name(f)] = {{"error", e.error_message()}};
      refused.emplace_back(f, e.error_message());
    }
  }

  if (a.json) {
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << "model " << graph.name << "  batch " << a.batch << "  placement " << a.placement << "  on "
              << cluster.num_devices() << " device(s)"
              << (cluster.name.empty() ? "" : " (" + cluster.name + ")") << "\ncosts: " << inputs->costs_note
              << "\ncalibration: " << inputs->calibration_note << "\n\n";
    print_breakdown(*breakdown, *placement, graph, cluster, std::cout);
    std::cout << "\n";
    for (const PartitionExport& e : exported) print_export(e, cluster, std::cout);
    for (const auto& [f, why] : refused)
      std::cout << partition_format_name(f) << ": cannot express it: " << why << "\n";
  }
  for (const auto& [f, why] : refused)
    std::cerr << "tapp-cli export: --format " << partition_format_name(f) << ": " << why << "\n";
  if (!a.out.empty()) {
    if (const std::string why = write_output("--out", a.out, doc.dump(2) + "\n"); !why.empty()) {
      std::cerr << "tapp-cli export: " << why << "\n";
      return 1;
    }
    if (!a.json) std::cerr << "wrote " << a.out << "\n";
  }
  return exported.empty() ? 2 : 0;
}

}  // namespace

void add_export_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ExportArgs>();
  auto* sub = app.add_subcommand(
      "export",
      "write a placement as Pipe's balance, DeepSpeed's parts, Megatron's stage sizes or pipelining's split "
      "points, with a per-stage breakdown");
  sub->add_option("placement", args->placement, "placement.json (from `plan --out`, `optimize` or by hand)")
      ->required();
  sub->add_option("--model", args->model, "zoo name, JSON layer graph or TorchScript file")->required();
  sub->add_option("--devices", args->devices, "cluster.json the placement names devices of")->required();
  sub->add_option("--format", args->format, "all (default) | pipe | deepspeed | megatron | pippy");
  sub->add_option("--batch", args->batch, "batch size (default 32)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--costs", args->costs, "auto (cached profile, else estimated; also 'cached', as optimize names it) | profile | estimated");
  sub->add_option("--calibration", args->calibration, "calibration JSON from `tapp-cli calibrate`");
  sub->add_option("--input-size", args->input_size, "image side, or a sequence length (0: the model's default)");
  sub->add_option("--classes", args->classes, "number of classes (0: the model's default)");
  add_torchscript_option(*sub, args->torchscript);
  sub->add_option("--out", args->out, "write the JSON document here");
  sub->add_flag("--json", args->json, "print the JSON document");
  sub->callback([args, &exit_code] { exit_code = export_placement(*args); });
}

}  // namespace tapp::cli
