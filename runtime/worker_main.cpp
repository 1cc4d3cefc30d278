// tapp-worker: hosts one device of a TAPP run.
//   tapp-worker --store HOST:PORT --rank R --world W   (spawned by the coordinator)
//   tapp-worker --listen HOST:PORT [--jobs N]          (a remote worker, started by the user)
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "runtime/worker.h"

namespace {
bool split_host_port(const std::string& s, std::string& host, int& port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  host = s.substr(0, colon);
  port = std::atoi(s.c_str() + colon + 1);
  return port >= 0 && port < 65536;
}
int usage() {
  std::cerr << "usage: tapp-worker --store HOST:PORT --rank R --world W\n"
               "       tapp-worker --listen HOST:PORT [--jobs N]\n";
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  std::string store, listen;
  int rank = -1, world = -1, jobs = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--store") store = next();
    else if (a == "--listen") listen = next();
    else if (a == "--rank") rank = std::atoi(next().c_str());
    else if (a == "--world") world = std::atoi(next().c_str());
    else if (a == "--jobs") jobs = std::atoi(next().c_str());
    else return usage();
  }
  std::string host;
  int port = 0;
  if (!listen.empty()) {
    if (!split_host_port(listen, host, port)) return usage();
    return tapp::serve_worker(host, port, jobs);
  }
  if (store.empty() || rank < 0 || world < 1 || rank >= world || !split_host_port(store, host, port)) return usage();
  return tapp::run_worker(tapp::WorkerArgs{host, port, rank, world});
}
