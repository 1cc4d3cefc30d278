// service/process_tree.cpp — finding and killing a job's processes by /proc (see process_tree.h).
#include "service/process_tree.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace tapp::service {
namespace {

struct ProcInfo {
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = '?';
};

// Fields of /proc/PID/stat after "(comm)", which may itself hold spaces and parentheses.
bool read_stat(pid_t pid, ProcInfo& info) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  return static_cast<bool>(rest >> info.state >> info.ppid >> info.pgrp);
}

std::map<pid_t, ProcInfo> all_processes() {
  std::map<pid_t, ProcInfo> out;
  DIR* dir = opendir("/proc");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    ProcInfo info;
    if (read_stat(static_cast<pid_t>(pid), info)) out[static_cast<pid_t>(pid)] = info;
  }
  closedir(dir);
  return out;
}

std::vector<pid_t> descendants_in(const std::map<pid_t, ProcInfo>& procs, pid_t root) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& [pid, info] : procs) children.emplace(info.ppid, pid);
  std::vector<pid_t> out, frontier{root};
  while (!frontier.empty()) {
    pid_t p = frontier.back();
    frontier.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return out;
}

}  // namespace

std::vector<pid_t> descendants_of(pid_t root) { return descendants_in(all_processes(), root); }

void kill_process_tree(pid_t root) {
  if (root <= 1 || root == getpid()) return;
  const pid_t own_group = getpgrp();
  std::set<pid_t> pids{root}, groups;
  if (root != own_group) groups.insert(root);
  auto signal_all = [&](int sig) {
    for (pid_t g : groups) kill(-g, sig);
    for (pid_t p : pids) kill(p, sig);
  };
  signal_all(SIGSTOP);
  // Stopped processes cannot fork: rescan until the set stops growing.
  for (int round = 0; round < 20; ++round) {
    std::map<pid_t, ProcInfo> procs = all_processes();
    size_t before = pids.size() + groups.size();
    for (pid_t d : descendants_in(procs, root)) pids.insert(d);
    for (const auto& [pid, info] : procs) {
      if (info.pgrp == root) pids.insert(pid);
      if (pids.count(pid) && info.pgrp > 1 && info.pgrp != own_group) groups.insert(info.pgrp);
    }
    pids.erase(getpid());
    if (pids.size() + groups.size() == before && round > 0) break;
    signal_all(SIGSTOP);
  }
  signal_all(SIGKILL);  // a stopped process dies of SIGKILL too
}

bool process_ended(pid_t pid) {
  ProcInfo info;
  if (!read_stat(pid, info)) return true;
  return info.state == 'Z' || info.state == 'X';
}

}  // namespace tapp::service
