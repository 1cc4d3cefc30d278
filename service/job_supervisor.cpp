// service/job_supervisor.cpp — one child process per job, watched to its end (see job_supervisor.h).
#include "service/job_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "service/job_limits.h"
#include "service/process_tree.h"

namespace tapp::service {
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int kReportFd = 3;                            // the child's end of the report pipe
constexpr int kPollMs = 20;                             // cancel is seen within this
constexpr size_t kMaxReportLineBytes = size_t{64} << 20;  // a child cannot grow the server without bound
constexpr const char* kJobOomScoreAdj = "500";          // the kernel's OOM killer takes a job before the server

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The process's writable private memory (what RLIMIT_DATA limits), in MiB; 0 if unknown.
int64_t data_mib_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  int64_t kib = 0;
  while (in >> key) {
    if (key == "VmData:" && in >> kib) return kib / 1024;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

// Everything the forked child needs, prepared before fork: between fork and
// exec only async-signal-safe calls are allowed (the server has other threads).
struct ChildSetup {
  std::vector<std::string> args;
  int report_write_fd = -1;
  int64_t memory_limit_mib = 0;
  pid_t parent = 0;
};

[[noreturn]] void exec_child(const ChildSetup& setup, char* const* argv) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the job dies with the server (then it is re-queued at restart)
  if (getppid() != setup.parent) _exit(1);
  if (setup.memory_limit_mib > 0) {
    // RLIMIT_DATA: the process's writable private memory (heap, anonymous maps,
    // thread stacks), which is what a job's tensors use. RLIMIT_AS would also
    // count address space that is only reserved, which LibTorch reserves a lot of.
    rlim_t bytes = static_cast<rlim_t>(setup.memory_limit_mib) * 1024 * 1024;
    rlimit limit{bytes, bytes};
    setrlimit(RLIMIT_DATA, &limit);
  }
  if (int fd = open("/proc/self/oom_score_adj", O_WRONLY); fd >= 0) {
    ssize_t ignored = write(fd, kJobOomScoreAdj, strlen(kJobOomScoreAdj));
    (void)ignored;
    close(fd);
  }
  if (setup.report_write_fd == kReportFd)
    fcntl(kReportFd, F_SETFD, 0);  // keep it across exec
  else
    dup2(setup.report_write_fd, kReportFd);
  if (int null_fd = open("/dev/null", O_RDONLY); null_fd >= 0) {
    dup2(null_fd, 0);
    if (null_fd != 0 && null_fd != kReportFd) close(null_fd);
  }
  // The server blocks SIGINT/SIGTERM in every thread and ignores SIGPIPE; a job starts with neither.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &default_action, nullptr);
  // No server socket or database handle leaks into the job.
  if (syscall(SYS_close_range, kReportFd + 1, ~0U, 0) != 0)
    for (int fd = kReportFd + 1; fd < 65536; ++fd) close(fd);
  execv(argv[0], argv);
  _exit(127);
}

Result<pid_t> spawn_child(const ChildSetup& setup) {
  std::vector<std::string> args = setup.args;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return Status::error(std::string("cannot start the job process: fork: ") + strerror(errno));
  if (pid == 0) exec_child(setup, argv.data());
  setpgid(pid, pid);  // also here, so the group exists before either side goes on
  return pid;
}

// The report pipe's read side: splits what the child wrote into lines.
class ReportReader {
 public:
  explicit ReportReader(int fd) : fd_(fd) { fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK); }
  ~ReportReader() { close(fd_); }
  // Waits up to `timeout_ms` for data; reads all there is. False once the child's side is closed.
  bool read_available(int timeout_ms) {
    if (closed_) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return true;
    char buf[65536];
    for (;;) {
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n > 0) {
        pending_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) closed_ = true;
      return !closed_ && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
  }
  // Reads what is in the pipe now without waiting (a process the job left
  // behind may still hold the pipe open, so this must not wait for its end).
  void drain() {
    char buf[65536];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof buf)) > 0) pending_.append(buf, static_cast<size_t>(n));
  }
  // The next complete line, if any.
  std::optional<std::string> next_line() {
    size_t nl = pending_.find('\n', scanned_);
    if (nl == std::string::npos) {
      scanned_ = pending_.size();
      return std::nullopt;
    }
    std::string line = pending_.substr(0, nl);
    pending_.erase(0, nl + 1);
    scanned_ = 0;
    return line;
  }
  bool overlong() const { return pending_.size() > kMaxReportLineBytes; }

 private:
  int fd_;
  bool closed_ = false;
  std::string pending_;
  size_t scanned_ = 0;
};

// One job's child from spawn to reaping.
class SupervisedRun {
 public:
  SupervisedRun(const JobProcessOptions& options, const JobInput& input)
      : options_(options), input_(input), work_dir_(fs::path(options.work_root) / input.id) {}

  Result<json> run(const ProgressFn& progress, const std::atomic<bool>& cancel) {
    Result<std::optional<int64_t>> requested = requested_memory_limit_mib(input_.request);
    if (!requested) return requested.status();
    memory_limit_mib_ = requested->value_or(options_.default_memory_limit_mib);
    std::error_code ec;
    fs::create_directories(work_dir_, ec);
    if (ec) return Status::error("cannot create the job's directory " + work_dir_.string() + ": " + ec.message());
    Result<json> result = spawn_and_watch(progress, cancel);
    fs::remove_all(work_dir_, ec);
    return result;
  }

 private:
  Result<json> spawn_and_watch(const ProgressFn& progress, const std::atomic<bool>& cancel) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return Status::error(std::string("cannot start the job process: pipe: ") + strerror(errno));
    ChildSetup setup;
    setup.args = {options_.program, "--run-job", input_.id,        "--db",
                  options_.db_path, "--report-fd", std::to_string(kReportFd), "--work-dir", work_dir_.string()};
    setup.args.insert(setup.args.end(), options_.program_args.begin(), options_.program_args.end());
    setup.report_write_fd = fds[1];
    setup.memory_limit_mib = memory_limit_mib_;
    setup.parent = getpid();
    Result<pid_t> pid = spawn_child(setup);
    close(fds[1]);
    if (!pid) {
      close(fds[0]);
      return pid.status();
    }
    pid_ = *pid;
    ReportReader reader(fds[0]);
    return watch(reader, progress, cancel);
  }

  Result<json> watch(ReportReader& reader, const ProgressFn& progress, const std::atomic<bool>& cancel) {
    auto last_report = std::chrono::steady_clock::now();
    bool pipe_open = true;
    for (;;) {
      if (pipe_open) {
        pipe_open = reader.read_available(kPollMs);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      }
      while (std::optional<std::string> line = reader.next_line()) {
        last_report = std::chrono::steady_clock::now();
        if (Status s = take_line(*line, progress); !s) return end_now(s);
      }
      if (reader.overlong())
        return end_now(Status::error("the job process sent a report line over " +
                                     std::to_string(kMaxReportLineBytes >> 20) + " MiB"));
      if (cancel.load()) return end_now(Status::error("cancelled"));
      if (seconds_since(last_report) > options_.stall_timeout_s)
        return end_now(Status::error(
            describe_stall(options_.stall_timeout_s, data_mib_of(pid_), memory_limit_mib_)));
      if (has_exited()) {
        reader.drain();  // all the child wrote before exiting is in the pipe now
        while (std::optional<std::string> line = reader.next_line())
          if (Status s = take_line(*line, progress); !s) return end_now(s);
        int status = reap();
        if (final_) return std::move(*final_);
        return Status::error(describe_job_exit(status, memory_limit_mib_));
      }
    }
  }

  // A progress line goes to the runner; a result or error line is kept for the end.
  Status take_line(const std::string& line, const ProgressFn& progress) {
    if (line.empty()) return Status::ok();
    Result<JobReport> report = decode_report_line(line);
    if (!report) return report.status();
    switch (report->kind) {
      case JobReport::Kind::progress:
        if (progress) progress(report->progress);
        break;
      case JobReport::Kind::result:
        final_ = Result<json>(std::move(report->result));
        break;
      case JobReport::Kind::error:
        final_ = Result<json>(Status::error(report->error));
        break;
    }
    return Status::ok();
  }

  // Whether the child has exited, without reaping it: while it is a zombie its
  // pid (and so its process group id) cannot be reused by another process.
  bool has_exited() {
    siginfo_t info{};
    return waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
  }

  // Ends the child's process tree (or what an exited child left in its group)
  // and reaps the child; returns its wait status.
  int reap() {
    kill_process_tree(pid_);
    int status = 0;
    waitpid(pid_, &status, 0);
    return status;
  }

  Result<json> end_now(const Status& why) {
    reap();
    return why;
  }

  const JobProcessOptions& options_;
  const JobInput& input_;
  fs::path work_dir_;
  int64_t memory_limit_mib_ = 0;
  pid_t pid_ = -1;
  std::optional<Result<json>> final_;
};

}  // namespace

std::string format_seconds(double s) {
  char buf[32];
  if (std::fabs(s - std::round(s)) < 1e-9)
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  else
    std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string describe_stall(double silent_s, int64_t data_mib, int64_t memory_limit_mib) {
  std::string what = "no progress for " + format_seconds(silent_s);
  if (memory_limit_mib > 0 && data_mib * 4 >= memory_limit_mib * 3)
    what += "; it was using " + std::to_string(data_mib) + " MiB of its memory limit of " +
            std::to_string(memory_limit_mib) + " MiB, so it may be waiting for memory it cannot get";
  return what;
}

std::string describe_job_exit(int wait_status, int64_t memory_limit_mib) {
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* abbrev = sigabbrev_np(sig);
    std::string name = abbrev ? std::string("SIG") + abbrev : "unknown signal";
    std::string what = "crashed: signal " + std::to_string(sig) + " (" + name + ")";
    if (sig == SIGKILL) what += "; the server did not send it: the kernel's out-of-memory killer, or another process";
    return what;
  }
  int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  switch (static_cast<JobExitCode>(code)) {
    case JobExitCode::memory_limit:
      return "exceeded its memory limit of " + std::to_string(memory_limit_mib) + " MiB";
    case JobExitCode::store_failed:
      return "the job process could not read the job from the database";
    case JobExitCode::bad_arguments:
      return "the job process was started with wrong arguments";
    case JobExitCode::reported:
      return "the job process exited without a result";
  }
  if (code == 127) return "the job process could not be started (exec failed)";
  return "the job process exited with code " + std::to_string(code) + " without a result";
}

JobFn make_supervised_job(JobProcessOptions options) {
  return [options = std::move(options)](const JobInput& input, const ProgressFn& progress,
                                        const std::atomic<bool>& cancel) -> Result<json> {
    return SupervisedRun(options, input).run(progress, cancel);
  };
}

}  // namespace tapp::service
