// runtime/worker.h — the worker process: one per device, runs its share of a job.
//
// Owns the worker side of the runtime. Data flow:
//   store address + rank -> c10d::TCPStore "job" (runtime/job.h) -> GraphModel of
//   this rank's layers (pipeline) or a full replica (bsp, hogwild) ->
//   device_order[rank] executed step by step; activations and gradients over
//   c10d::ProcessGroupGloo (irecvs posted at step start, waited just before
//   use; sends on a sender thread that paces them by the emulated link, so
//   compute never waits for a send) -> "report/<rank>" (+ "params/<layer>")
//   and "done/<rank>" in the store.
// `serve_worker` is `tapp-worker --listen HOST:PORT`: it accepts one job at a
// time over a one-line control message, runs it in a child process and kills
// that child if the coordinator's connection drops.
// Thread safety: one job per process; the sender thread is internal.
#pragma once

#include <string>

namespace tapp {

struct WorkerArgs {
  std::string store_host;
  int store_port = 0;
  int rank = 0;
  int world = 1;
};

// Runs one job to completion; returns the process exit code (0 ok).
int run_worker(const WorkerArgs& args);

// Device-speed emulation: the sleep (ms) after a task that took `wall_ms`
// (`cpu_ms` of its thread's CPU) so that it ends cost / speed after it began,
// where cost is the CPU time on a one-thread device (so emulated devices that
// share the host's cores are not stretched by each other's contention) and
// the wall time on a multi-thread one (its pools spin between calls), less
// `waited_ms` spent waiting for the compute gate (runtime/compute_gate.h).
double emulated_sleep_ms(double wall_ms, double cpu_ms, double speed, int threads, double waited_ms = 0);

// Listens on host:port for coordinators (forever, or `max_jobs` jobs if >= 0).
// Control protocol, one line each way: "ping" -> "pong";
// "job <store_port> <rank> <world>" (store host = the coordinator's address)
// -> ... -> "exit <code>" when the job's child process ends.
int serve_worker(const std::string& host, int port, int max_jobs = -1);

}  // namespace tapp
