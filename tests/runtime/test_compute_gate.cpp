// The compute gate: which emulated devices share a slot, and that a slot's
// turns exclude each other across processes, also when a holder dies.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/cluster.h"
#include "runtime/compute_gate.h"
#include "runtime/worker.h"

using namespace tapp;

namespace {

Cluster cluster_of(const std::string& devices) {
  auto c = cluster_from_json(nlohmann::json::parse(R"({"name": "t", "devices": [)" + devices + "]}"));
  REQUIRE(c.is_ok());
  return *c;
}

std::string device(const std::string& name, double speed, int threads = 1, const std::string& where = "local") {
  return R"({"name": ")" + name + R"(", "kind": "cpu", "threads": )" + std::to_string(threads) +
         R"(, "memory_mb": 1024, "speed": )" + std::to_string(speed) + R"(, "where": ")" + where + R"("})";
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string p = (std::filesystem::temp_directory_path() / "tapp-gate-test-XXXXXX").string();
    REQUIRE(mkdtemp(p.data()) != nullptr);
    path = p;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// One byte through a pipe: the other process has reached a point.
void signal(int fd) { REQUIRE(write(fd, "x", 1) == 1); }
void await(int fd) {
  char c;
  REQUIRE(read(fd, &c, 1) == 1);
}

}  // namespace

TEST_CASE("emulated devices share slots by their demand; full-speed and remote devices are not gated") {
  // 4 x 0.25: one core's worth, one slot.
  Cluster four = cluster_of(device("a", 0.25) + "," + device("b", 0.25) + "," + device("c", 0.25) + "," + device("d", 0.25));
  CHECK(compute_gate_slots(four, 2) == std::vector<int>{0, 0, 0, 0});
  // 4 x 0.5: two cores' worth, two slots taken round-robin.
  Cluster halves = cluster_of(device("a", 0.5) + "," + device("b", 0.5) + "," + device("c", 0.5) + "," + device("d", 0.5));
  CHECK(compute_gate_slots(halves, 2) == std::vector<int>{0, 1, 0, 1});
  CHECK(compute_gate_slot_count(compute_gate_slots(halves, 2)) == 2);
  // Never more slots than cores.
  CHECK(compute_gate_slots(halves, 1) == std::vector<int>{0, 0, 0, 0});
  // A two-thread device counts twice; a full-speed device and a remote one are not gated.
  Cluster mixed = cluster_of(device("fast", 1.0) + "," + device("wide", 0.5, 2) + "," + device("slow", 0.25) + "," +
                             device("far", 0.25, 1, "10.0.0.9:7000"));
  CHECK(compute_gate_slots(mixed, 4) == std::vector<int>{-1, 0, 1, -1});
  Cluster real = cluster_of(device("a", 1.0) + "," + device("b", 1.0));
  CHECK(compute_gate_slots(real, 2) == std::vector<int>{-1, -1});
  CHECK(compute_gate_slot_count(compute_gate_slots(real, 2)) == 0);
}

namespace {

// A child process holds slot 0 until told to let go (or to die holding it);
// this process's turn must wait for that.
void check_turns_exclude(bool dies) {
  CAPTURE(dies);
  TempDir dir;
  int to_parent[2], to_child[2];
  REQUIRE(pipe(to_parent) == 0);
  REQUIRE(pipe(to_child) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the other emulated device: holds the slot until told
    auto gate = ComputeGate::open(dir.path, 0);
    if (!gate) _exit(3);
    {
      ComputeGate::Turn turn(*gate);
      signal(to_parent[1]);
      char c;
      if (read(to_child[0], &c, 1) != 1) _exit(4);
      if (dies) _exit(0);  // the kernel drops the lock with the process
    }
    _exit(0);
  }
  await(to_parent[0]);
  auto gate = ComputeGate::open(dir.path, 0);
  REQUIRE(gate.is_ok());
  CHECK(gate->gated());
  std::atomic<bool> entered{false};
  double waited_ms = 0;
  std::thread t([&] {
    ComputeGate::Turn turn(*gate);
    waited_ms = turn.waited_ms();
    entered = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  CHECK_FALSE(entered.load());  // the child holds the slot
  signal(to_child[1]);
  t.join();
  CHECK(entered.load());
  CHECK(waited_ms > 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // Another slot is never held by this one's turn.
  auto other = ComputeGate::open(dir.path, 1);
  REQUIRE(other.is_ok());
  ComputeGate::Turn mine(*gate);
  ComputeGate::Turn theirs(*other);
  CHECK(theirs.waited_ms() >= 0);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

}  // namespace

TEST_CASE("a slot's turns exclude each other across processes, and a holder that dies frees its slot") {
  check_turns_exclude(false);
  check_turns_exclude(true);
}

TEST_CASE("an ungated device never waits, and a gate's wait is not charged as a multi-thread device's compute") {
  ComputeGate none;
  CHECK_FALSE(none.gated());
  auto also_none = ComputeGate::open("/nonexistent", -1);
  REQUIRE(also_none.is_ok());
  CHECK_FALSE(also_none->gated());
  ComputeGate::Turn turn(none);
  CHECK(turn.waited_ms() == 0);
  CHECK_FALSE(ComputeGate::open("/nonexistent/dir", 0).is_ok());
  // A two-thread device at speed 0.5: 300 ms of wall time of which 100 ms
  // waiting for its turn is 200 ms of compute, so it lasts 400 ms: 100 more.
  CHECK(emulated_sleep_ms(300, 390, 0.5, 2, 100) == doctest::Approx(100));
  // A one-thread device's cost is its CPU time, which a wait does not add to.
  CHECK(emulated_sleep_ms(300, 100, 0.25, 1, 200) == doctest::Approx(100));
}
