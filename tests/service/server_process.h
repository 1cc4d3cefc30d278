// tests/service/server_process.h — starts a real tapp-server on 127.0.0.1 for tests.
//
// Spawns build/bin/tapp-server with --port 0 (it prints the port it bound),
// a database in a fresh temp directory and the given extra flags; kill(SIGKILL)
// or stop(SIGTERM) ends it. Test-only helper.
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
#include <vector>

namespace tapp::testing {

inline std::string temp_dir(const std::string& tag) {
  std::random_device rd;
  auto dir = std::filesystem::temp_directory_path() / ("tapp-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

class ServerProcess {
 public:
  // Returns false if the server did not print its port within 20 s.
  bool start(const std::string& db, const std::vector<std::string>& extra = {}) {
    int out[2];
    if (pipe(out) != 0) return false;
    std::vector<std::string> args = {std::string(TAPP_BIN_DIR) + "/tapp-server", "--host", "127.0.0.1", "--port", "0",
                                     "--db", db};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
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
