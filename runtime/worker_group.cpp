#include "runtime/worker_group.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/host_port.h"
#include "core/cluster.h"
#include "runtime/control_channel.h"

namespace tapp {
namespace {

std::string seconds_text(double s) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << s;
  return o.str();
}

}  // namespace

// Connects with a timeout; the error names host:port.
Result<int> connect_to_worker(const std::string& where, double timeout_s) {
  auto endpoint = parse_host_port(where, "where");
  if (!endpoint) return endpoint.status();
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(endpoint->host.c_str(), std::to_string(endpoint->port).c_str(), &hints, &res);
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
        last = "connection timed out after " + seconds_text(timeout_s) + " s";
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

namespace {

// This end's address of a connected socket: the coordinator as a remote worker sees it.
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
  std::vector<std::string> args = {binary, "--store", format_host_port("127.0.0.1", store_port),
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

int decode_wait_status(int st) {
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// A remote worker's control connection has something to say: "exit <code>" or a hang-up.
void read_remote_exit(WorkerProcess& w) {
  char buf[64] = {0};
  ssize_t n = recv(w.fd, buf, sizeof(buf) - 1, 0);
  w.finished = true;
  w.lost_connection = n <= 0;
  auto code = n > 0 ? decode_exit(std::string(buf, static_cast<size_t>(n))) : std::nullopt;
  w.exit_code = code ? *code : 255;
}

}  // namespace

WorkerGroup::WorkerGroup(const Cluster& cluster) {
  for (int r = 0; r < cluster.num_devices(); ++r) {
    WorkerProcess w;
    w.rank = r;
    w.device = cluster.devices[r].name;
    w.local = cluster.devices[r].is_local();
    w.where = cluster.devices[r].where;
    workers_.push_back(w);
  }
}

WorkerGroup::~WorkerGroup() { stop(); }

Status WorkerGroup::connect_remotes(double timeout_s) {
  for (WorkerProcess& w : workers_) {
    if (w.local) continue;
    auto fd = connect_to_worker(w.where, timeout_s);
    if (!fd) return Status::error("device '" + w.device + "': " + fd.error_message());
    w.fd = *fd;
  }
  return Status::ok();
}

std::vector<std::string> WorkerGroup::gloo_hosts() const {
  std::string coordinator = "127.0.0.1";
  for (const WorkerProcess& w : workers_)
    if (!w.local && w.fd >= 0) coordinator = local_address(w.fd);
  std::vector<std::string> hosts;
  for (const WorkerProcess& w : workers_) {
    auto endpoint = w.local ? Result<HostPort>(HostPort{coordinator, 0}) : parse_host_port(w.where, "where");
    hosts.push_back(endpoint ? endpoint->host : w.where);
  }
  return hosts;
}

Status WorkerGroup::spawn_locals(const std::string& binary, int store_port) {
  for (WorkerProcess& w : workers_) {
    if (!w.local) continue;
    auto pid = spawn_local(binary, store_port, w.rank, size());
    if (!pid) return pid.status();
    w.pid = *pid;
  }
  return Status::ok();
}

Status WorkerGroup::start_remotes(int store_port) {
  for (WorkerProcess& w : workers_) {
    if (w.local) continue;
    if (!send_line(w.fd, encode_job_request(store_port, w.rank, size())))
      return Status::error("device '" + w.device + "': lost the connection to " + w.where);
  }
  return Status::ok();
}

std::vector<int> WorkerGroup::local_pids() const {
  std::vector<int> pids;
  for (const WorkerProcess& w : workers_)
    if (w.local && w.pid > 0) pids.push_back(w.pid);
  return pids;
}

std::vector<int> WorkerGroup::poll() {
  std::vector<int> ended;
  for (WorkerProcess& w : workers_) {
    if (w.finished) continue;
    if (w.local && w.pid > 0) {
      int st = 0;
      if (waitpid(w.pid, &st, WNOHANG) == w.pid) {
        w.finished = true;
        w.exit_code = decode_wait_status(st);
      }
    } else if (!w.local && w.fd >= 0) {
      pollfd p{w.fd, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) read_remote_exit(w);
    }
    if (w.finished) ended.push_back(w.rank);
  }
  return ended;
}

void WorkerGroup::wait_for_exit(std::chrono::steady_clock::time_point deadline) {
  for (WorkerProcess& w : workers_) {
    if (!w.local || w.pid <= 0 || w.finished) continue;
    int st = 0;
    bool exited = false;
    while (std::chrono::steady_clock::now() < deadline && !(exited = waitpid(w.pid, &st, WNOHANG) == w.pid))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (exited) {
      w.finished = true;
      w.exit_code = decode_wait_status(st);
    }
  }
}

void WorkerGroup::stop() {
  for (WorkerProcess& w : workers_) {
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

std::string WorkerGroup::describe_exit(int rank) const {
  const WorkerProcess& w = workers_.at(rank);
  std::string who = "worker " + std::to_string(w.rank) + " (device '" + w.device + "'" +
                    (w.local ? "" : " at " + w.where) + ")";
  if (w.exit_code == 127 && w.local) return who + " could not start the worker binary";
  if (w.exit_code > 128) return who + " was killed by signal " + std::to_string(w.exit_code - 128);
  return who + " exited with code " + std::to_string(w.exit_code) + " before finishing";
}

}  // namespace tapp
