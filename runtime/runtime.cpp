#include "runtime/runtime.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "runtime/job.h"
#include "simulator/task_graph.h"

namespace tapp {
namespace {
using nlohmann::json;
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

struct Worker {
  int rank = 0;
  std::string device;
  bool local = true;
  pid_t pid = -1;     // local
  int fd = -1;        // remote control connection
  std::string where;  // remote host:port
  bool finished = false;
  int exit_code = 0;  // 128 + signal when killed
};

bool split_host_port(const std::string& where, std::string& host, std::string& port) {
  auto colon = where.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  host = where.substr(0, colon);
  port = where.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return !port.empty();
}

// Connects with a timeout; the error names host:port.
Result<int> connect_to(const std::string& where, double timeout_s) {
  std::string host, port;
  if (!split_host_port(where, host, port)) return Status::error("bad worker address \"" + where + "\"");
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    return Status::error("cannot reach remote worker at " + where + ": cannot resolve host (" + gai_strerror(rc) + ")");
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int r = connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      r = poll(&p, 1, static_cast<int>(timeout_s * 1000));
      if (r == 0) {
        last = "connection timed out after " + fmt(timeout_s) + " s";
        close(fd);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r == 0) {
      freeaddrinfo(res);
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    last = strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  return Status::error("cannot reach remote worker at " + where + ": " + last +
                       " (is `tapp-worker --listen " + where + "` running?)");
}

std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char host[NI_MAXHOST];
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0)
    return "127.0.0.1";
  return host;
}

bool send_line(int fd, const std::string& line) {
  std::string s = line + "\n";
  return send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
}

// fork/exec of tapp-worker; the child dies with this process (PR_SET_PDEATHSIG)
// and leads its own process group so the whole group can be killed.
Result<pid_t> spawn_local(const std::string& binary, int store_port, int rank, int world) {
  std::vector<std::string> args = {binary, "--store", "127.0.0.1:" + std::to_string(store_port),
                                   "--rank", std::to_string(rank), "--world", std::to_string(world)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Several workers share this host: OpenMP threads that spin while waiting
  // would steal each other's cores, so they wait passively unless the user chose.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  if (!getenv("OMP_WAIT_POLICY")) env_strings.emplace_back("OMP_WAIT_POLICY=PASSIVE");
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::error(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

void kill_and_reap(std::vector<Worker>& workers) {
  for (Worker& w : workers) {
    if (w.local && w.pid > 0 && !w.finished) {
      kill(-w.pid, SIGKILL);
      kill(w.pid, SIGKILL);
      int st = 0;
      waitpid(w.pid, &st, 0);
      w.finished = true;
      w.exit_code = 128 + SIGKILL;
    }
    if (!w.local && w.fd >= 0) {
      close(w.fd);  // the listener kills its job child when this connection drops
      w.fd = -1;
    }
  }
}

int decode_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0); }

std::string describe_exit(const Worker& w) {
  std::string who = "worker " + std::to_string(w.rank) + " (device '" + w.device + "'" +
                    (w.local ? "" : " at " + w.where) + ")";
  if (w.exit_code == 127 && w.local) return who + " could not start the worker binary";
  if (w.exit_code > 128) return who + " was killed by signal " + std::to_string(w.exit_code - 128);
  return who + " exited with code " + std::to_string(w.exit_code) + " before finishing";
}

// After a first worker failed: waits briefly for the others to notice, then
// names the root cause first (a worker that left no error of its own, e.g.
// crashed or was killed) and the consequences after it.
std::string describe_failures(std::vector<Worker>& workers, c10d::Store& store) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<std::pair<int, std::string>> items;
  for (Worker& w : workers) {
    if (w.local && !w.finished) {
      int st = 0;
      if (waitpid(w.pid, &st, WNOHANG) == w.pid) {
        w.finished = true;
        w.exit_code = decode_status(st);
      }
    }
    if (!w.finished) continue;
    if (w.exit_code == 0) {
      if (!store.check({"done/" + std::to_string(w.rank)}))
        items.push_back({0, "worker " + std::to_string(w.rank) + " (device '" + w.device + "') exited without reporting its step"});
      continue;
    }
    std::string key = "error/" + std::to_string(w.rank), why;
    try {
      if (store.check({key})) {
        auto b = store.get(key);
        why = std::string(b.begin(), b.end());
      }
    } catch (...) {
    }
    items.push_back({why.empty() ? 0 : 1, describe_exit(w) + (why.empty() ? "" : " (" + why + ")")});
  }
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string msg;
  for (const auto& it : items) msg += (msg.empty() ? "" : "; then ") + it.second;
  return msg;
}

int physical_cores(const RunOptions& o) {
  if (o.physical_cores > 0) return o.physical_cores;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::vector<std::string> emulation_warnings(const Cluster& c, const RunOptions& o, bool sends) {
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
        links += l.from + "->" + l.to + " " + fmt(l.bandwidth_mbps, 0) + " Mbps/" + fmt(l.latency_ms, 3) + " ms, ";
    w.push_back("emulated links: each send paced by latency + bytes*8/bandwidth (" + links +
                (links.empty() ? "all pairs " : "other pairs ") + fmt(c.default_link.bandwidth_mbps, 0) + " Mbps/" +
                fmt(c.default_link.latency_ms, 3) + " ms)");
  }
  double demand = c.emulated_core_demand();
  int cores = physical_cores(o);
  if (demand > cores + 1e-9) {
    std::string msg = "emulated cluster needs " + fmt(demand, 2) + " cores (sum of speed x threads of local devices) "
                      "but this machine has " + std::to_string(cores) + ": measured times are not faithful";
    std::cerr << "tapp runtime: warning: " << msg << "\n";
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

// Builds the StepReport from the workers' reports. rank_device maps rank -> device index in `cluster`.
StepReport aggregate(const std::vector<json>& reports, const Cluster& cluster, const std::vector<int>& rank_device) {
  StepReport r;
  r.ok = true;
  r.source = kSource;
  size_t steps = reports.empty() ? 0 : reports[0]["steps"].size();
  for (const json& rep : reports) steps = std::min(steps, rep["steps"].size());
  for (size_t k = 0; k < steps; ++k) {
    double mx = 0;
    for (const json& rep : reports) mx = std::max(mx, rep["steps"][k]["step_ms"].get<double>());
    r.step_samples_ms.push_back(mx);
  }
  r.step_ms = median(r.step_samples_ms);
  size_t rep_step = 0;
  for (size_t k = 0; k < steps; ++k)
    if (std::abs(r.step_samples_ms[k] - r.step_ms) < std::abs(r.step_samples_ms[rep_step] - r.step_ms)) rep_step = k;
  double busy_sum = 0, comm_sum = 0;
  for (size_t rank = 0; rank < reports.size(); ++rank) {
    const json& rep = reports[rank];
    DeviceStats d;
    d.device = cluster.devices[rank_device[rank]].name;
    d.peak_memory_bytes = rep["peak_rss_bytes"].get<int64_t>();
    if (steps > 0) {
      const json& s = rep["steps"][rep_step];
      double step_ms = r.step_samples_ms[rep_step];
      d.busy_ms = s["busy_ms"].get<double>();
      d.comm_ms = s["comm_ms"].get<double>();
      d.idle_ms = std::max(0.0, step_ms - d.busy_ms - d.comm_ms);
      for (const json& e : s["timeline"])
        r.timeline.push_back(TimelineEntry{rank_device[rank], e[0].get<std::string>(), e[1].get<double>(),
                                           e[2].get<double>()});
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

std::string bytes_to_string(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// Runs a job on one worker per device of job.cluster (rank = device index).
RunResult execute(Job job, const std::vector<int>& rank_device, const Cluster& original) {
  RunResult out;
  const RunOptions& o = job.options;
  const int world = job.cluster.num_devices();
  std::vector<std::string> warnings = emulation_warnings(job.cluster, o, job.mode != "hogwild");
  auto fail = [&](FailureKind kind, const std::string& msg) {
    out.report = StepReport::failure(kind, msg, kSource);
    out.report.warnings = warnings;
    return out;
  };
  bool any_local = false, any_remote = false;
  for (const Device& d : job.cluster.devices) (d.is_local() ? any_local : any_remote) = true;
  std::string binary = o.worker_binary.empty() ? self_exe_dir() + "/tapp-worker" : o.worker_binary;
  if (any_local && access(binary.c_str(), X_OK) != 0)
    return fail(FailureKind::worker_failed,
                "worker binary '" + binary + "' not found or not executable (RunOptions.worker_binary)");

  std::vector<Worker> workers(world);
  for (int r = 0; r < world; ++r) {
    workers[r].rank = r;
    workers[r].device = job.cluster.devices[r].name;
    workers[r].local = job.cluster.devices[r].is_local();
    workers[r].where = job.cluster.devices[r].where;
  }
  // Remote workers first: an unreachable one fails before anything starts.
  std::string coordinator_address = "127.0.0.1";
  for (Worker& w : workers) {
    if (w.local) continue;
    auto fd = connect_to(w.where, std::min(o.timeout_s, 10.0));
    if (!fd) {
      kill_and_reap(workers);
      return fail(FailureKind::worker_unreachable, "device '" + w.device + "': " + fd.error_message());
    }
    w.fd = *fd;
    coordinator_address = local_address(w.fd);
  }
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
    store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  } catch (const std::exception& e) {
    kill_and_reap(workers);
    return fail(FailureKind::worker_failed, std::string("cannot start the TCPStore: ") + e.what());
  }
  const int port = store->getPort();
  for (int r = 0; r < world; ++r) {
    if (workers[r].local) {
      job.gloo_hosts.push_back(any_remote ? coordinator_address : "127.0.0.1");
    } else {
      std::string host, p;
      split_host_port(workers[r].where, host, p);
      job.gloo_hosts.push_back(host);
    }
  }
  // HOGWILD's shared parameters: a POSIX shared-memory segment sized for the model.
  std::string shm_name;
  if (job.mode == "hogwild") {
    static std::atomic<int> counter{0};
    shm_name = "/tapp-hogwild-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    int fd = shm_open(shm_name.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    if (fd < 0) return fail(FailureKind::worker_failed, "shm_open: " + std::string(strerror(errno)));
    int64_t floats = std::max<int64_t>(job.graph.total_params(), 1);
    if (ftruncate(fd, floats * 4) != 0) {
      close(fd);
      shm_unlink(shm_name.c_str());
      return fail(FailureKind::worker_failed, "ftruncate of the shared parameters failed");
    }
    close(fd);
    job.shm_name = shm_name;
  }
  struct ShmGuard {
    std::string name;
    ~ShmGuard() {
      if (!name.empty()) shm_unlink(name.c_str());
    }
  } shm_guard{shm_name};

  try {
    std::string text = job_to_json(job).dump();
    store->set("job", std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception& e) {
    kill_and_reap(workers);
    return fail(FailureKind::worker_failed, std::string("cannot publish the job: ") + e.what());
  }
  for (Worker& w : workers) {
    if (w.local) {
      auto pid = spawn_local(binary, port, w.rank, world);
      if (!pid) {
        kill_and_reap(workers);
        return fail(FailureKind::worker_failed, pid.error_message());
      }
      w.pid = *pid;
      out.local_worker_pids.push_back(w.pid);
    } else if (!send_line(w.fd, "job " + std::to_string(port) + " " + std::to_string(w.rank) + " " +
                                    std::to_string(world))) {
      kill_and_reap(workers);
      return fail(FailureKind::worker_unreachable,
                  "device '" + w.device + "': lost the connection to " + w.where);
    }
  }

  if (o.on_started) o.on_started(out.local_worker_pids);
  // Wait: every worker done, or one failed, or no progress for timeout_s.
  const int total_steps = o.warmup_steps + o.steps;
  std::vector<int64_t> progress(world, 0);
  auto last_progress = Clock::now();
  std::vector<std::string> done_keys;
  for (int r = 0; r < world; ++r) done_keys.push_back("done/" + std::to_string(r));
  try {
    for (;;) {
      bool all_done = store->check(done_keys);
      for (Worker& w : workers) {
        if (w.finished) continue;
        if (w.local) {
          int st = 0;
          if (waitpid(w.pid, &st, WNOHANG) == w.pid) {
            w.finished = true;
            w.exit_code = decode_status(st);
          }
        } else {
          pollfd p{w.fd, POLLIN, 0};
          if (poll(&p, 1, 0) > 0) {
            char buf[64] = {0};
            ssize_t n = recv(w.fd, buf, sizeof(buf) - 1, 0);
            w.finished = true;
            w.exit_code = n > 0 && std::sscanf(buf, "exit %d", &w.exit_code) == 1 ? w.exit_code : 255;
            if (n <= 0) {
              kill_and_reap(workers);
              return fail(FailureKind::worker_failed, "lost the connection to remote worker " +
                                                          std::to_string(w.rank) + " (device '" + w.device +
                                                          "' at " + w.where + ")");
            }
          }
        }
        if (w.finished && (w.exit_code != 0 || !store->check({"done/" + std::to_string(w.rank)}))) {
          std::string msg = describe_failures(workers, *store);
          kill_and_reap(workers);
          return fail(FailureKind::worker_failed, msg);
        }
      }
      if (all_done) break;
      for (int r = 0; r < world; ++r) {
        int64_t v = store->add("progress/" + std::to_string(r), 0);
        if (v != progress[r]) {
          progress[r] = v;
          last_progress = Clock::now();
        }
      }
      if (seconds_since(last_progress) > o.timeout_s) {
        int slow = static_cast<int>(std::min_element(progress.begin(), progress.end()) - progress.begin());
        std::string msg = "no progress from the workers for " + fmt(o.timeout_s) + " s (worker " +
                          std::to_string(slow) + ", device '" + workers[slow].device + "', finished " +
                          std::to_string(progress[slow]) + " of " + std::to_string(total_steps) +
                          " steps); all workers were stopped";
        kill_and_reap(workers);
        return fail(FailureKind::timeout, msg);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::vector<json> reports;
    for (int r = 0; r < world; ++r) reports.push_back(json::parse(bytes_to_string(store->get("report/" + std::to_string(r)))));
    if (o.collect_parameters) {
      out.layer_parameters.assign(job.graph.layers.size(), {});
      for (size_t l = 0; l < job.graph.layers.size(); ++l) {
        if (job.graph.layers[l].params == 0) continue;
        std::string key = "params/" + std::to_string(l);
        if (!store->check({key})) continue;
        auto b = store->get(key);
        out.layer_parameters[l].resize(b.size() / sizeof(float));
        if (!b.empty()) std::memcpy(out.layer_parameters[l].data(), b.data(), b.size());
      }
    }
    out.report = aggregate(reports, original, rank_device);
    out.report.warnings = warnings;
  } catch (const std::exception& e) {
    kill_and_reap(workers);
    return fail(FailureKind::worker_failed, std::string("coordinator: ") + e.what());
  }
  // Workers exit on their own after "done"; give them a moment, then make sure.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (Worker& w : workers) {
    if (!w.local || w.finished) continue;
    int st = 0;
    while (Clock::now() < deadline && waitpid(w.pid, &st, WNOHANG) != w.pid)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (Clock::now() < deadline) w.finished = true;
  }
  kill_and_reap(workers);
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
  std::set<int> with_layers;
  for (size_t l = 0; l < p.layer_group.size(); ++l) with_layers.insert(p.device_of_layer(static_cast<int>(l)));
  rank_device.assign(with_layers.begin(), with_layers.end());
  used = subcluster(c, rank_device);
  std::vector<int> rank_of(c.num_devices(), 0);
  for (size_t r = 0; r < rank_device.size(); ++r) rank_of[rank_device[r]] = static_cast<int>(r);
  remapped = p;
  for (int& d : remapped.group_device) d = rank_of[d];
}

bool options_ok(const RunOptions& o, std::string& why) {
  if (o.batch_size < 1) why = "batch_size: must be at least 1";
  else if (o.steps < 1) why = "steps: must be at least 1";
  else if (o.warmup_steps < 0) why = "warmup_steps: must be at least 0";
  else if (!(o.timeout_s > 0)) why = "timeout_s: must be positive";
  else return true;
  return false;
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
    RunResult r = run_placement(graph, cluster, Placement::single_device(n, 0), options);
    return r;
  }
  if (strategy != "bsp" && strategy != "hogwild") {
    out.report = StepReport::failure(
        FailureKind::invalid_strategy,
        "strategy: unknown \"" + strategy + "\"; expected single, bsp or hogwild", kSource);
    return out;
  }
  if (options.batch_size < cluster.num_devices()) {
    out.report = StepReport::failure(
        FailureKind::invalid_options,
        "batch_size: " + std::to_string(options.batch_size) + " is smaller than the number of devices",
        kSource);
    return out;
  }
  for (int d = 0; d < cluster.num_devices(); ++d) {
    if (strategy == "hogwild" && !cluster.devices[d].is_local()) {
      out.report = StepReport::failure(
          FailureKind::invalid_strategy,
          "devices[" + std::to_string(d) + "].where: hogwild needs local devices (shared memory)", kSource);
      return out;
    }
  }
  // Every device holds a full replica at its share of the batch.
  std::vector<int> replicas(cluster.num_devices());
  std::iota(replicas.begin(), replicas.end(), 0);
  if (Status s = check_memory(Placement::replicas(n, replicas), graph, cluster, options.batch_size); !s) {
    out.report = StepReport::failure(FailureKind::out_of_memory, s.message(), kSource);
    return out;
  }
  Job job;
  job.mode = strategy;
  job.graph = graph;
  job.cluster = cluster;
  job.options = options;
  job.placement = Placement::single_device(n, 0);
  std::vector<int> rank_device;
  for (int d = 0; d < cluster.num_devices(); ++d) rank_device.push_back(d);
  return execute(std::move(job), rank_device, cluster);
}

}  // namespace tapp
