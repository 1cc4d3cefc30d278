// tests/service/server_process.h — starts a real tapp-server on 127.0.0.1 for tests.
//
// Spawns build/bin/tapp-server with --port 0 (it prints the port it bound),
// a database in a fresh temp directory, the given extra flags and environment
// variables; kill(SIGKILL) or stop(SIGTERM) ends it. fake_jobs() are the flags
// that make it run the test-only job program (test_job_main.cpp) instead of
// placer's optimize(). Test-only helper.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tapp::testing {

// The scratch directories of this test process, removed when it exits (by
// the process that made them only: a forked child that exits must not take
// its parent's files), so test runs leave nothing behind in /tmp.
class ScratchDirs {
 public:
  ~ScratchDirs() {
    if (getpid() != owner_) return;
    std::error_code ec;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ec);
  }
  void add(const std::filesystem::path& d) { dirs_.push_back(d); }

 private:
  pid_t owner_ = getpid();
  std::vector<std::filesystem::path> dirs_;
};

inline std::string temp_dir(const std::string& tag) {
  static ScratchDirs made;
  std::random_device rd;
  auto dir = std::filesystem::temp_directory_path() / ("tapp-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  made.add(dir);
  return dir.string();
}

// Flags and environment for a server whose jobs are the test-only fake job
// (tests/service/fake_job.h) run by tapp-test-job, `iteration_ms` per iteration.
struct FakeJobs {
  std::vector<std::string> flags;
  std::vector<std::pair<std::string, std::string>> env;
};
inline FakeJobs fake_jobs(int iteration_ms = 40) {
  return {{"--job-program", std::string(TAPP_BIN_DIR) + "/tapp-test-job"},
          {{"TAPP_FAKE_ITERATION_MS", std::to_string(iteration_ms)}}};
}

class ServerProcess {
 public:
  // Returns false if the server did not print its port within 20 s.
  bool start(const std::string& db, const std::vector<std::string>& extra = {},
             const std::vector<std::pair<std::string, std::string>>& env = {}) {
    int out[2];
    if (pipe(out) != 0) return false;
    std::vector<std::string> args = {std::string(TAPP_BIN_DIR) + "/tapp-server", "--host", "127.0.0.1", "--port", "0",
                                     "--db", db};
    args.insert(args.end(), extra.begin(), extra.end());
    // The environment is built before fork: the child may only exec.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(out[1]);
    std::string line;
    char c;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline && read(out[0], &c, 1) == 1) {
      if (c == '\n') break;
      line += c;
    }
    stdout_fd_ = out[0];
    auto pos = line.find("127.0.0.1:");
    if (pos == std::string::npos) return false;
    port_ = std::stoi(line.substr(pos + 10));
    return port_ > 0;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  void kill_hard() { end(SIGKILL); }
  void stop() { end(SIGTERM); }
  // Starts a server whose jobs are fake (see fake_jobs()), with more flags.
  bool start_fake(const std::string& db, int iteration_ms, std::vector<std::string> extra = {}) {
    FakeJobs fake = fake_jobs(iteration_ms);
    extra.insert(extra.end(), fake.flags.begin(), fake.flags.end());
    return start(db, extra, fake.env);
  }
  bool alive() const { return pid_ > 0 && ::kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  ~ServerProcess() { end(SIGKILL); }

 private:
  void end(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    if (stdout_fd_ >= 0) close(stdout_fd_);
    stdout_fd_ = -1;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  int stdout_fd_ = -1;
};

}  // namespace tapp::testing
