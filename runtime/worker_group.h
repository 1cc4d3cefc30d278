// runtime/worker_group.h — the worker processes of one run: started, watched, always ended.
//
// Owns one worker per device of a job's cluster (rank = device index):
//   local:  a tapp-worker child process (fork/exec), leader of its own process
//           group, killed with this thread if it dies (PR_SET_PDEATHSIG);
//   remote: a connection to `tapp-worker --listen HOST:PORT`, which runs the
//           job in a child of its own and kills it when the connection drops.
// Data flow: connect_remotes -> (the coordinator hosts the store) ->
//   spawn_locals + start_remotes (store port) -> poll() notes workers that
//   ended -> wait_for_exit -> destructor.
// RAII: the destructor kills (SIGKILL to each local worker's process group)
// and reaps every local worker still running and closes every remote
// connection, so every way out of the coordinator, an exception included,
// leaves no worker process behind.
// Thread safety: one thread per group. Local workers are reaped with waitpid
// on their own pids, so groups in one process do not steal each other's.
// No LibTorch in this header.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp {

struct Cluster;

struct WorkerProcess {
  int rank = 0;
  std::string device;
  bool local = true;
  std::string where;             // remote: host:port
  pid_t pid = -1;                // local, once spawned
  int fd = -1;                   // remote: the control connection, once connected
  bool finished = false;
  int exit_code = 0;             // 128 + signal when killed
  bool lost_connection = false;  // remote: the connection dropped without "exit <code>"
};

class WorkerGroup {
 public:
  explicit WorkerGroup(const Cluster& cluster);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  const WorkerProcess& worker(int rank) const { return workers_.at(rank); }

  // Connects to every remote worker, in rank order, each within timeout_s; the
  // error names the device and its host:port. Call before anything starts, so
  // an unreachable worker fails the run first.
  Status connect_remotes(double timeout_s);
  // Per rank, the address its Gloo device binds: a remote worker's host; a
  // local worker's the coordinator's address as the remote workers reach it
  // (loopback when every worker is local).
  std::vector<std::string> gloo_hosts() const;
  // Starts `binary --store 127.0.0.1:<store_port> --rank r --world n` per local worker.
  Status spawn_locals(const std::string& binary, int store_port);
  // Sends each remote worker its job request (rank, world, store port).
  Status start_remotes(int store_port);
  std::vector<int> local_pids() const;

  // Notes the workers that ended since the last call (local: exited; remote:
  // sent "exit <code>" or dropped the connection); returns their ranks.
  std::vector<int> poll();
  // Waits until every local worker has exited on its own or `deadline` passed.
  void wait_for_exit(std::chrono::steady_clock::time_point deadline);
  // Kills and reaps every local worker still running, closes remote
  // connections (what the destructor does; calling it again does nothing).
  void stop();

  // "worker 1 (device 'd1') exited with code 3 before finishing", "... was killed by signal 9".
  std::string describe_exit(int rank) const;

 private:
  std::vector<WorkerProcess> workers_;
};

// Connects to a `tapp-worker --listen` at host:port with a timeout; the error
// names host:port and suggests starting the listener. (Also the profile
// exchange's connection, runtime/worker_profile.h.)
Result<int> connect_to_worker(const std::string& where, double timeout_s);

}  // namespace tapp
