#include "runtime/runtime.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "runtime/compute_gate.h"
#include "runtime/control_channel.h"
#include "runtime/job.h"
#include "runtime/worker_group.h"
#include "simulator/task_graph.h"

namespace tapp {
namespace {
using Clock = std::chrono::steady_clock;
constexpr const char* kSource = "measure";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt(double v, int digits = 1) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

int physical_cores(const RunOptions& o) {
  if (o.physical_cores > 0) return o.physical_cores;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// On stderr once per process: a search that measures runs the workers for every evaluation.
void warn_once(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(message).second) std::cerr << "tapp runtime: warning: " << message << "\n";
}

// "400", "0.8", "0.05": a link under 10 Mbit/s keeps its digits (0.8 is not 1).
std::string mbps_text(double mbps) {
  if (mbps >= 10) return fmt(mbps, 0);
  std::ostringstream o;
  o << std::setprecision(3) << mbps;
  return o.str();
}

// gate_slots: how many slots the job's compute gate has (0: none).
std::vector<std::string> emulation_warnings(const Cluster& c, const RunOptions& o, bool sends, int gate_slots) {
  std::vector<std::string> w;
  std::string slow;
  for (const Device& d : c.devices)
    if (d.speed < 1.0) slow += (slow.empty() ? "" : ", ") + d.name + "=" + fmt(d.speed, 2);
  if (!slow.empty())
    w.push_back("emulated device speed (a compute task lasts its CPU time / speed, one-thread devices; wall time / speed otherwise): " + slow);
  if (sends && c.num_devices() > 1) {
    std::string links;
    for (const Link& l : c.links)
      if (c.index_of(l.from) >= 0 && c.index_of(l.to) >= 0)
        links += l.from + "->" + l.to + " " + mbps_text(l.bandwidth_mbps) + " Mbps/" + fmt(l.latency_ms, 3) + " ms, ";
    w.push_back("emulated links: each send paced by latency + bytes*8/bandwidth (" + links +
                (links.empty() ? "all pairs " : "other pairs ") + mbps_text(c.default_link.bandwidth_mbps) + " Mbps/" +
                fmt(c.default_link.latency_ms, 3) + " ms)");
  }
  double demand = c.emulated_core_demand();
  int cores = physical_cores(o);
  if (gate_slots > 0)
    w.push_back("emulated devices take turns computing on " + std::to_string(gate_slots) + " of " + std::to_string(cores) +
                " cores, so they do not slow each other");
  if (demand > cores + 1e-9) {
    std::string msg = "emulated cluster needs " + fmt(demand, 2) + " cores (sum of speed x threads of local devices) "
                      "but this machine has " + std::to_string(cores) + ": measured times are not faithful";
    warn_once(msg);
    w.push_back(msg);
  }
  return w;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The StepReport of the workers' reports: a step lasts as long as its slowest
// worker; the median step is the report's, and the timed step nearest to it
// gives the per-device split and the timeline. rank_device maps rank -> device
// index in `cluster`.
StepReport measure(const std::vector<WorkerReport>& reports, const Cluster& cluster,
                   const std::vector<int>& rank_device) {
  StepReport r;
  r.ok = true;
  r.source = kSource;
  size_t steps = reports.empty() ? 0 : reports[0].steps.size();
  for (const WorkerReport& rep : reports) steps = std::min(steps, rep.steps.size());
  for (size_t k = 0; k < steps; ++k) {
    double mx = 0;
    for (const WorkerReport& rep : reports) mx = std::max(mx, rep.steps[k].step_ms);
    r.step_samples_ms.push_back(mx);
  }
  r.step_ms = median(r.step_samples_ms);
  size_t rep_step = 0;
  for (size_t k = 0; k < steps; ++k)
    if (std::abs(r.step_samples_ms[k] - r.step_ms) < std::abs(r.step_samples_ms[rep_step] - r.step_ms)) rep_step = k;
  double busy_sum = 0, comm_sum = 0;
  for (size_t rank = 0; rank < reports.size(); ++rank) {
    const WorkerReport& rep = reports[rank];
    DeviceStats d;
    d.device = cluster.devices[rank_device[rank]].name;
    d.peak_memory_bytes = rep.peak_rss_bytes;
    d.peak_tensor_bytes = rep.peak_tensor_bytes;
    if (steps > 0) {
      const WorkerStep& s = rep.steps[rep_step];
      double step_ms = r.step_samples_ms[rep_step];
      d.busy_ms = s.busy_ms;
      d.comm_ms = s.comm_ms;
      d.idle_ms = std::max(0.0, step_ms - d.busy_ms - d.comm_ms);
      for (const TaskSpan& e : s.timeline)
        r.timeline.push_back(TimelineEntry{rank_device[rank], e.task, e.start_ms, e.end_ms});
    }
    busy_sum += d.busy_ms;
    comm_sum += d.comm_ms;
    r.devices.push_back(d);
  }
  r.comm_fraction = busy_sum + comm_sum > 0 ? comm_sum / (busy_sum + comm_sum) : 0;
  std::sort(r.timeline.begin(), r.timeline.end(),
            [](const TimelineEntry& a, const TimelineEntry& b) { return a.start_ms < b.start_ms; });
  return r;
}

// A run that did not produce a measurement: StepReport::failure's kind and message.
struct RunFailure {
  FailureKind kind;
  std::string message;
};

// HOGWILD's shared parameters: a POSIX shared-memory segment sized for the
// model, unlinked when this goes (the workers have mapped it by then, or are gone).
class HogwildSegment {
 public:
  HogwildSegment() = default;
  HogwildSegment(const HogwildSegment&) = delete;
  HogwildSegment& operator=(const HogwildSegment&) = delete;
  ~HogwildSegment() {
    if (!name_.empty()) shm_unlink(name_.c_str());
  }
  Status create(int64_t floats) {
    static std::atomic<int> counter{0};
    const std::string name = "/tapp-hogwild-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    int fd = shm_open(name.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    if (fd < 0) return Status::error("shm_open: " + std::string(strerror(errno)));
    name_ = name;
    const bool sized = ftruncate(fd, std::max<int64_t>(floats, 1) * 4) == 0;
    close(fd);
    if (!sized) return Status::error("ftruncate of the shared parameters failed: " + std::string(strerror(errno)));
    return Status::ok();
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// The job's compute-gate directory (runtime/compute_gate.h): the workers
// create its slot files when they open them; removed with it.
class GateDirectory {
 public:
  GateDirectory() = default;
  GateDirectory(const GateDirectory&) = delete;
  GateDirectory& operator=(const GateDirectory&) = delete;
  ~GateDirectory() {
    for (int s = 0; s < slots_; ++s) unlink(compute_gate_file(dir_, s).c_str());
    if (!dir_.empty()) rmdir(dir_.c_str());
  }
  Status create(int slots) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tapp-gate-XXXXXX";
    if (!mkdtemp(pattern.data())) return Status::error("compute gate: mkdtemp: " + std::string(strerror(errno)));
    dir_ = pattern;
    slots_ = slots;
    return Status::ok();
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int slots_ = 0;
};

std::string worker_binary(const RunOptions& o) {
  return o.worker_binary.empty() ? self_exe_dir() + "/tapp-worker" : o.worker_binary;
}

// The run's TCPStore, hosted here on a free port; workers connect to it.
Result<c10::intrusive_ptr<c10d::TCPStore>> host_store(double timeout_s) {
  try {
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  } catch (const std::exception& e) {
    return Status::error(std::string("cannot start the TCPStore: ") + e.what());
  }
}

// After a first worker failed: waits for the others to notice (until every
// worker ended, at most 2 s: a peer blocked on the dead one, in a receive or
// an all-reduce, fails within milliseconds and leaves its reason), then names
// the root cause first (a worker that left no error of its own, e.g. crashed
// or was killed) and the consequences after it.
std::string describe_failures(WorkerGroup& workers, ControlChannel& channel) {
  const auto give_up = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    workers.poll();
    bool all_ended = true;
    for (int r = 0; r < workers.size(); ++r) all_ended = all_ended && workers.worker(r).finished;
    if (all_ended || Clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::pair<int, std::string>> items;
  for (int r = 0; r < workers.size(); ++r) {
    const WorkerProcess& w = workers.worker(r);
    if (!w.finished) continue;
    if (w.exit_code == 0) {
      if (!channel.is_done(r))
        items.push_back({0, "worker " + std::to_string(r) + " (device '" + w.device + "') exited without reporting its step"});
      continue;
    }
    std::string why;
    try {
      why = channel.error_of(r);
    } catch (...) {
    }
    items.push_back({why.empty() ? 0 : 1, workers.describe_exit(r) + (why.empty() ? "" : " (" + why + ")")});
  }
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string msg;
  for (const auto& it : items) msg += (msg.empty() ? "" : "; then ") + it.second;
  return msg;
}

// Waits until every worker is done; a worker that ends without "done", a lost
// remote connection, or no progress from any worker for timeout_s is a failure.
std::optional<RunFailure> wait_for_workers(WorkerGroup& workers, ControlChannel& channel, const RunOptions& o) {
  const int world = workers.size();
  const int total_steps = o.warmup_steps + o.steps;
  std::vector<int64_t> progress(world, 0);
  auto last_progress = Clock::now();
  for (;;) {
    const bool all_done = channel.all_done(world);
    for (int r : workers.poll()) {
      const WorkerProcess& w = workers.worker(r);
      if (w.lost_connection)
        return RunFailure{FailureKind::worker_failed, "lost the connection to remote worker " + std::to_string(r) +
                                               " (device '" + w.device + "' at " + w.where + ")"};
      if (w.exit_code != 0 || !channel.is_done(r)) return RunFailure{FailureKind::worker_failed, describe_failures(workers, channel)};
    }
    if (all_done) return std::nullopt;
    for (int r = 0; r < world; ++r) {
      int64_t v = channel.steps_finished(r);
      if (v != progress[r]) {
        progress[r] = v;
        last_progress = Clock::now();
      }
    }
    if (seconds_since(last_progress) > o.timeout_s) {
      int slow = static_cast<int>(std::min_element(progress.begin(), progress.end()) - progress.begin());
      return RunFailure{FailureKind::timeout, "no progress from the workers for " + fmt(o.timeout_s) + " s (worker " +
                                       std::to_string(slow) + ", device '" + workers.worker(slow).device +
                                       "', finished " + std::to_string(progress[slow]) + " of " +
                                       std::to_string(total_steps) + " steps); all workers were stopped"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Every worker's report, and the trained parameters when asked for.
Status collect(ControlChannel& channel, const Job& job, std::vector<WorkerReport>& reports, RunResult& out) {
  for (int r = 0; r < job.cluster.num_devices(); ++r) {
    auto report = channel.report_of(r);
    if (!report) return report.status();
    reports.push_back(std::move(*report));
  }
  if (!job.options.collect_parameters) return Status::ok();
  out.layer_parameters.assign(job.graph.layers.size(), {});
  out.replica_parameters.assign(job.graph.layers.size(), {});
  const bool pipeline = job.mode == "pipeline";
  for (size_t l = 0; l < job.graph.layers.size(); ++l) {
    if (job.graph.layers[l].params == 0) continue;
    const int layer = static_cast<int>(l);
    if (auto flat = channel.parameters_of(layer)) out.layer_parameters[l] = std::move(*flat);
    const int replicas = pipeline ? job.placement.replica_count(job.placement.layer_group[l]) : 1;
    for (int k = 1; k < replicas; ++k)
      out.replica_parameters[l].push_back(channel.parameters_of(layer, k).value_or(std::vector<float>{}));
  }
  return Status::ok();
}

bool any_local(const Cluster& cluster) {
  for (const Device& d : cluster.devices)
    if (d.is_local()) return true;
  return false;
}

// Runs a job on one worker per device of job.cluster (rank = device index):
// host the store, start the workers, hand them the plan, wait, collect,
// measure. The worker group, declared after the store and the shared segment,
// ends every worker on every way out (an exception included) before those go.
RunResult execute(Job job, const std::vector<int>& rank_device, const Cluster& original) {
  RunResult out;
  const RunOptions& o = job.options;
  std::vector<int> gate_slots;
  if (o.gate_emulated_compute) gate_slots = compute_gate_slots(job.cluster, physical_cores(o));
  const int gate_slot_count = compute_gate_slot_count(gate_slots);
  const std::vector<std::string> warnings =
      emulation_warnings(job.cluster, o, job.mode != "hogwild", gate_slot_count);
  auto fail = [&](FailureKind kind, const std::string& msg) {
    out.report = StepReport::failure(kind, msg, kSource);
    out.report.warnings = warnings;
    return out;
  };
  const std::string binary = worker_binary(o);
  if (any_local(job.cluster) && access(binary.c_str(), X_OK) != 0)
    return fail(FailureKind::worker_failed, "worker binary '" + binary + "' not found or not executable (RunOptions.worker_binary)");
  auto store = host_store(o.timeout_s);
  if (!store) return fail(FailureKind::worker_failed, store.error_message());
  const int store_port = (*store)->getPort();
  ControlChannel channel(**store);
  HogwildSegment shared_parameters;
  if (job.mode == "hogwild") {
    if (Status s = shared_parameters.create(job.graph.total_params()); !s) return fail(FailureKind::worker_failed, s.message());
    job.shm_name = shared_parameters.name();
  }
  GateDirectory gate;
  if (gate_slot_count > 0) {
    if (Status s = gate.create(gate_slot_count); !s) return fail(FailureKind::worker_failed, s.message());
    job.compute_gate_dir = gate.dir();
    job.compute_gate_slot = std::move(gate_slots);
  }

  WorkerGroup workers(job.cluster);
  // Remote workers first: an unreachable one fails before any worker starts.
  if (Status s = workers.connect_remotes(std::min(o.timeout_s, 10.0)); !s) return fail(FailureKind::worker_unreachable, s.message());
  job.gloo_hosts = workers.gloo_hosts();
  try {
    channel.publish_job(job);
  } catch (const std::exception& e) {
    return fail(FailureKind::worker_failed, std::string("cannot publish the job: ") + e.what());
  }
  const Status spawned = workers.spawn_locals(binary, store_port);
  out.local_worker_pids = workers.local_pids();
  if (!spawned) return fail(FailureKind::worker_failed, spawned.message());
  if (Status s = workers.start_remotes(store_port); !s) return fail(FailureKind::worker_unreachable, s.message());
  if (o.on_started) o.on_started(out.local_worker_pids);

  try {
    if (auto failure = wait_for_workers(workers, channel, o)) return fail(failure->kind, failure->message);
    std::vector<WorkerReport> reports;
    if (Status s = collect(channel, job, reports, out); !s) return fail(FailureKind::worker_failed, "coordinator: " + s.message());
    out.report = measure(reports, original, rank_device);
    out.report.warnings = warnings;
  } catch (const std::exception& e) {
    return fail(FailureKind::worker_failed, std::string("coordinator: ") + e.what());
  }
  // Workers exit on their own after "done"; give them a moment (the group kills the rest).
  workers.wait_for_exit(Clock::now() + std::chrono::seconds(5));
  return out;
}

// `devices` of c (in that order) as a cluster of their own, with the links between them.
Cluster subcluster(const Cluster& c, const std::vector<int>& devices) {
  Cluster used = c;
  used.devices.clear();
  for (int d : devices) used.devices.push_back(c.devices[d]);
  // Links that name a dropped device would not parse in the workers' cluster.
  const std::set<int> kept(devices.begin(), devices.end());
  used.links.clear();
  for (const Link& l : c.links)
    if (kept.count(c.index_of(l.from)) && kept.count(c.index_of(l.to))) used.links.push_back(l);
  return used;
}

// The devices a placement uses, as a smaller cluster, and the placement remapped onto it.
void compact(const Cluster& c, const Placement& p, Cluster& used, Placement& remapped, std::vector<int>& rank_device) {
  std::set<int> with_layers;  // every replica of a group that holds a layer
  std::vector<char> used_group(p.num_groups(), 0);
  for (int g : p.layer_group) used_group[g] = 1;
  for (int g = 0; g < p.num_groups(); ++g)
    if (used_group[g])
      for (int d : p.devices_of_group(g)) with_layers.insert(d);
  rank_device.assign(with_layers.begin(), with_layers.end());
  used = subcluster(c, rank_device);
  std::vector<int> rank_of(c.num_devices(), 0);
  for (size_t r = 0; r < rank_device.size(); ++r) rank_of[rank_device[r]] = static_cast<int>(r);
  remapped = p;
  for (int& d : remapped.group_device) d = rank_of[d];
  for (auto& replicas : remapped.group_replicas)
    for (int& d : replicas) d = rank_of[d];
}

bool options_ok(const RunOptions& o, std::string& why) {
  if (o.batch_size < 1) why = "batch_size: must be at least 1";
  else if (o.steps < 1) why = "steps: must be at least 1";
  else if (o.warmup_steps < 0) why = "warmup_steps: must be at least 0";
  else if (!(o.timeout_s > 0)) why = "timeout_s: must be positive";
  else if (o.fault_mode != "exit" && o.fault_mode != "hang" && o.fault_mode != "exit_at_allreduce")
    why = "fault_mode: unknown \"" + o.fault_mode + "\"; expected exit, hang or exit_at_allreduce";
  else return true;
  return false;
}

// Why replicas of the whole model cannot run on `devices` (indices of
// `cluster`, the user's numbering, which the fields name): a speed this host
// cannot emulate, or, for HOGWILD's shared memory, a device that is not local.
std::optional<StepReport> refuse_replica_devices(const Cluster& cluster, const std::vector<int>& devices,
                                                 bool hogwild) {
  if (Status s = measurable_here(cluster, devices); !s)
    return StepReport::failure(FailureKind::invalid_options, s.message(), kSource);
  for (int d : devices)
    if (hogwild && !cluster.devices[d].is_local())  // HOGWILD's replicas share one copy of the weights
      return StepReport::failure(FailureKind::invalid_strategy,
                                 "devices[" + std::to_string(d) + "].where: hogwild needs local devices (shared memory)",
                                 kSource);
  return std::nullopt;
}

}  // namespace

std::string self_exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

RunResult run_placement(const LayerGraph& graph, const Cluster& cluster, const Placement& placement,
                        const RunOptions& options) {
  RunResult out;
  std::string why;
  if (!options_ok(options, why)) {
    out.report = StepReport::failure(FailureKind::invalid_options, why, kSource);
    return out;
  }
  if (placement.is_data_parallel()) {
    if (Status s = validate_placement(placement, graph, cluster, options.batch_size); !s) {
      out.report = StepReport::failure(FailureKind::invalid_placement, s.message(), kSource);
      return out;
    }
    // Checked here, where the fields can still name the user's devices (the subcluster renumbers them).
    if (auto refused = refuse_replica_devices(cluster, placement.group_device,
                                              placement.data_parallel == DataParallelMode::hogwild)) {
      out.report = *refused;
      return out;
    }
    return run_strategy(graph, subcluster(cluster, placement.group_device),
                        data_parallel_mode_name(placement.data_parallel), options);
  }
  auto tg = build_task_graph(graph, placement, cluster, options.batch_size);
  if (!tg) {
    out.report = StepReport::failure(FailureKind::invalid_placement, tg.error_message(), kSource);
    return out;
  }
  if (Status s = check_memory(placement, graph, cluster, options.batch_size); !s) {
    out.report = StepReport::failure(FailureKind::out_of_memory, s.message(), kSource);
    return out;
  }
  Job job;
  job.mode = "pipeline";
  job.graph = graph;
  job.options = options;
  std::vector<int> rank_device;
  compact(cluster, placement, job.cluster, job.placement, rank_device);
  if (Status s = measurable_here(cluster, rank_device); !s) {
    out.report = StepReport::failure(FailureKind::invalid_options, s.message(), kSource);
    return out;
  }
  return execute(std::move(job), rank_device, cluster);
}

StepReport measure_placement(const LayerGraph& graph, const Cluster& cluster, const Placement& placement,
                             const RunOptions& options) {
  return run_placement(graph, cluster, placement, options).report;
}

RunResult run_strategy(const LayerGraph& graph, const Cluster& cluster, const std::string& strategy,
                       const RunOptions& options) {
  RunResult out;
  std::string why;
  if (!options_ok(options, why)) {
    out.report = StepReport::failure(FailureKind::invalid_options, why, kSource);
    return out;
  }
  if (cluster.devices.empty()) {
    out.report =
        StepReport::failure(FailureKind::invalid_placement, "devices: the cluster has no device", kSource);
    return out;
  }
  const int n = static_cast<int>(graph.layers.size());
  if (strategy == "single") {
    Placement single = Placement::single_device(n, 0);
    single.optimizer = options.optimizer;
    RunResult r = run_placement(graph, cluster, single, options);
    return r;
  }
  if (strategy != "bsp" && strategy != "hogwild") {
    out.report = StepReport::failure(
        FailureKind::invalid_strategy,
        "strategy: unknown \"" + strategy + "\"; expected single, bsp or hogwild", kSource);
    return out;
  }
  std::vector<int> every_device(cluster.num_devices());
  std::iota(every_device.begin(), every_device.end(), 0);
  if (auto refused = refuse_replica_devices(cluster, every_device, strategy == "hogwild")) {
    out.report = *refused;
    return out;
  }
  if (options.batch_size < cluster.num_devices()) {
    out.report = StepReport::failure(
        FailureKind::invalid_options,
        "batch_size: " + std::to_string(options.batch_size) + " is smaller than the number of devices",
        kSource);
    return out;
  }
  // Every device holds a full replica at its share of the batch.
  Placement whole = Placement::replicas(n, every_device);
  whole.optimizer = options.optimizer;
  if (Status s = check_memory(whole, graph, cluster, options.batch_size); !s) {
    out.report = StepReport::failure(FailureKind::out_of_memory, s.message(), kSource);
    return out;
  }
  Job job;
  job.mode = strategy;
  job.graph = graph;
  job.cluster = cluster;
  job.options = options;
  job.placement = Placement::single_device(n, 0);
  job.placement.optimizer = options.optimizer;
  return execute(std::move(job), every_device, cluster);
}

}  // namespace tapp
