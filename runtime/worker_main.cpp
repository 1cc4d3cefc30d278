// tapp-worker: hosts one device of a TAPP run.
//   tapp-worker --store HOST:PORT --rank R --world W   (spawned by the coordinator)
//   tapp-worker --listen HOST:PORT [--jobs N]          (a remote worker, started by the user)
//   tapp-worker --version                              (names the allocator it runs with)
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "common/allocator.h"
#include "common/host_port.h"
#include "runtime/worker.h"
#include "profiler/torch_warnings.h"

namespace {
int usage() {
  std::cerr << "usage: tapp-worker --store HOST:PORT --rank R --world W\n"
               "       tapp-worker --listen HOST:PORT [--jobs N]\n"
               "       tapp-worker --version\n";
  return 2;
}
int bad_endpoint(const tapp::Status& status) {
  std::cerr << "tapp-worker: " << status.message() << "\n";
  return usage();
}
}  // namespace

int main(int argc, char** argv) {
  tapp::print_each_torch_warning_once();  // a model that warns in forward: once, not per step
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
    else if (a == "--version") {
      std::cout << "tapp-worker, " << tapp::allocator_description() << "\n";
      return 0;
    }
    else return usage();
  }
  if (!listen.empty()) {
    auto endpoint = tapp::parse_host_port(listen, "--listen");
    if (!endpoint) return bad_endpoint(endpoint.status());
    return tapp::serve_worker(endpoint->host, endpoint->port, jobs);
  }
  if (store.empty() || rank < 0 || world < 1 || rank >= world) return usage();
  auto endpoint = tapp::parse_host_port(store, "--store");
  if (!endpoint) return bad_endpoint(endpoint.status());
  return tapp::run_worker(tapp::WorkerArgs{endpoint->host, endpoint->port, rank, world});
}
