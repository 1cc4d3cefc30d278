// service/process_tree.h — ending a job's processes: the job's child and everything it started.
//
// Owns nothing: functions over /proc. A job's child leads its own process
// group, but the runtime starts each tapp-worker in a process group of its
// own, so killing the job's group alone would miss them. kill_process_tree
// therefore stops (SIGSTOP) the root's group and every descendant found in
// /proc, and their groups, rescanning until no new process appears (a
// stopped process cannot fork), then sends SIGKILL to all of them. It never
// signals the calling process's own group.
// Thread safety: stateless; safe from any thread.
#pragma once

#include <sys/types.h>

#include <vector>

namespace tapp::service {

// Children of `root`, their children, ... as /proc shows them now (root excluded).
std::vector<pid_t> descendants_of(pid_t root);

// SIGKILLs `root` (which leads its own process group), every member of that
// group and every descendant with its process group. Returns once the signals
// are sent; the caller still reaps `root`.
void kill_process_tree(pid_t root);

// True when `pid` no longer runs: it is gone, or a zombie not yet reaped.
bool process_ended(pid_t pid);

}  // namespace tapp::service
