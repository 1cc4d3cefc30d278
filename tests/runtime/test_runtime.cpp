// Runtime tests: pipelined training equals single-device training, remote
// (loopback) workers, failures and bad input. Small models, few steps.
#include "tests/torch_doctest.h"  // LibTorch + doctest (glog's CHECK macros removed)
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/layer_graph.h"
#include "profiler/torch_model.h"
#include "model/zoo.h"
#include "core/cluster.h"
#include "profiler/accelerator.h"
#include "runtime/measure_evaluator.h"
#include "runtime/runtime.h"
#include "runtime/worker.h"
#include "runtime/worker_profile.h"
#include "simulator/cost_model.h"
#include "tests/runtime/runtime_test_support.h"
#include "tests/model/memory_profile_cache.h"

using namespace tapp;
using namespace tapp::test;

namespace {

// Every process whose parent is this one, zombies (exited, not reaped) included.
std::vector<int> child_pids() {
  std::vector<int> out;
  const std::string self = std::to_string(getpid());
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after its ')'.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    std::string state, ppid;
    if (rest >> state >> ppid && ppid == self) out.push_back(std::stoi(name));
  }
  return out;
}

// This process's HOGWILD segments left in /dev/shm.
int hogwild_segments() {
  int n = 0;
  const std::string prefix = "tapp-hogwild-" + std::to_string(getpid()) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

void check_pipeline_equals_single(const LayerGraph& g, int devices, const std::vector<int>& layer_device,
                                  int micro_batches, Schedule s) {
  RunOptions o = test_options();
  RunResult r = run_placement(g, local_cluster(devices), by_device(layer_device, micro_batches, s), o);
  INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
  REQUIRE(r.report.ok);
  CHECK(r.report.source == "measure");
  CHECK(r.report.step_samples_ms.size() == static_cast<size_t>(o.steps));
  CHECK(r.report.step_ms > 0);
  CHECK(r.report.devices.size() == static_cast<size_t>(devices));
  CHECK(!r.report.timeline.empty());
  check_same_parameters(r.layer_parameters, reference_parameters(g, o), g);
  check_trained(r.layer_parameters, g, o);
  check_no_orphans(r);
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

bool answers_ping(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    send(fd, "ping\n", 5, MSG_NOSIGNAL);
    char buf[8] = {0};
    ok = recv(fd, buf, 5, MSG_WAITALL) == 5 && std::string(buf, 4) == "pong";
  }
  close(fd);
  return ok;
}

// `tapp-worker --listen 127.0.0.1:PORT`, as a user would start it on another host.
// `cache_dir`: the worker's own profile cache ($XDG_CACHE_HOME), as on its own host.
struct RemoteWorker {
  int port = free_port();
  pid_t pid = -1;
  explicit RemoteWorker(const std::string& cache_dir = "") {
    std::string bin = std::string(TAPP_BIN_DIR) + "/tapp-worker";
    std::string where = "127.0.0.1:" + std::to_string(port);
    pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (!cache_dir.empty()) setenv("XDG_CACHE_HOME", cache_dir.c_str(), 1);
      execl(bin.c_str(), bin.c_str(), "--listen", where.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // Up to 30 s: a loaded 2-core machine took over 5 s to start a worker (LibTorch's load).
    for (int i = 0; i < 1200 && !answers_ping(port); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ~RemoteWorker() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  std::string where() const { return "127.0.0.1:" + std::to_string(port); }
};

}  // namespace

TEST_CASE("a chain pipelined over 2 devices with GPipe trains exactly like one device") {
  check_pipeline_equals_single(chain_model(), 2, {0, 0, 0, 1, 1, 1, 1}, 4, Schedule::gpipe);
}

TEST_CASE("a chain over 3 devices, non-contiguous (a device holds several segments), 1F1B, trains like one device") {
  check_pipeline_equals_single(chain_model(), 3, {0, 0, 1, 2, 0, 1, 2}, 3, Schedule::one_f_one_b);
}

TEST_CASE("a model with concat and add branches over 2 devices, non-contiguous, 1F1B, trains like one device") {
  check_pipeline_equals_single(branch_model(), 2, {0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0}, 4, Schedule::one_f_one_b);
}

TEST_CASE("a model with branches over 3 devices, contiguous stages, GPipe, trains like one device") {
  check_pipeline_equals_single(branch_model(), 3, {0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}, 3, Schedule::gpipe);
}

TEST_CASE("a segmentation model's loss is the mean cross-entropy over every pixel of the batch") {
  torch::manual_seed(5);
  torch::Tensor logits = torch::randn({4, 3, 5, 6});  // {B, C, H, W}
  torch::Tensor labels = torch::randint(3, {4, 5, 6}, torch::kLong);
  // The classes moved last, one row per pixel.
  torch::Tensor mean = torch::nn::functional::cross_entropy(logits.permute({0, 2, 3, 1}).reshape({120, 3}), labels.reshape({120}));
  CHECK(training_loss(logits, labels, 4).item<double>() == doctest::Approx(mean.item<double>()).epsilon(1e-6));
  torch::Tensor halves = training_loss(logits.narrow(0, 0, 1), labels.narrow(0, 0, 1), 4) +
                         training_loss(logits.narrow(0, 1, 3), labels.narrow(0, 1, 3), 4);
  CHECK(halves.item<double>() == doctest::Approx(mean.item<double>()).epsilon(1e-6));
}

// A class per pixel (segmentation): stem -> conv -> concat with the stem (a
// skip) -> 1x1 conv to 3 class maps, output {3, 8, 8}, labels {8, 8} a sample.
TEST_CASE("a segmentation model (a class per pixel) over 2 devices, 1F1B, trains like one device") {
  LayerGraph g;
  g.name = "segmentation";
  g.input_shape = {3, 8, 8};
  auto conv = [](const std::string& n, std::vector<int> in, int64_t out, int64_t kernel) {
    Layer l = make_layer(n, "conv2d", std::move(in), out);
    l.attrs.kernel[0] = l.attrs.kernel[1] = kernel;
    l.attrs.padding[0] = l.attrs.padding[1] = kernel / 2;
    return l;
  };
  g.layers = {conv("stem", {}, 6, 3), make_layer("stem_relu", "relu", {0}), conv("a", {1}, 4, 3),
              make_layer("a_relu", "relu", {2}), make_layer("cat", "concat", {1, 3}), conv("classes", {4}, 3, 1)};
  REQUIRE(infer_shapes(g).is_ok());
  CHECK(g.num_classes == 3);
  CHECK(g.label_shape() == Shape{8, 8});
  auto [x, y] = synthetic_batch(g, 2, 1);
  CHECK(y.sizes().vec() == std::vector<int64_t>{2, 8, 8});
  CHECK(y.max().item<int64_t>() < 3);
  check_pipeline_equals_single(g, 2, {0, 0, 1, 1, 0, 1}, 4, Schedule::one_f_one_b);
}

// Runs `p` with and without recomputing the groups in `recompute`; both must
// equal single-device training with the same optimizer after every step.
void check_recompute_equals_plain(const LayerGraph& g, int devices, Placement p, const std::vector<char>& recompute,
                                  Optimizer optimizer) {
  RunOptions o = test_options();
  o.steps = 3;
  o.optimizer = optimizer;  // the reference's
  p.optimizer = optimizer;  // the workers'
  RunResult plain = run_placement(g, local_cluster(devices), p, o);
  INFO(plain.report.message);
  REQUIRE(plain.report.ok);
  p.group_recompute = recompute;
  RunResult recomputed = run_placement(g, local_cluster(devices), p, o);
  INFO(recomputed.report.message);
  REQUIRE(recomputed.report.ok);
  check_same_parameters(recomputed.layer_parameters, plain.layer_parameters, g);
  check_same_parameters(recomputed.layer_parameters, reference_parameters(g, o), g);
  check_trained(recomputed.layer_parameters, g, o);
  for (const DeviceStats& d : recomputed.report.devices) CHECK(d.peak_tensor_bytes > 0);
}

TEST_CASE("a stage that recomputes its forward in backward trains to the same parameters as without (SGD)") {
  check_recompute_equals_plain(chain_model(), 2, by_device({0, 0, 0, 1, 1, 1, 1}, 4, Schedule::one_f_one_b), {1, 0},
                               Optimizer::sgd);
}

TEST_CASE("recomputation on a non-contiguous branched placement with Adam trains like one device with Adam") {
  check_recompute_equals_plain(branch_model(), 2, by_device({0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0}, 4, Schedule::gpipe),
                               {1, 1}, Optimizer::adam);
}

TEST_CASE("the single-device and BSP baselines train like one device; HOGWILD runs on shared parameters") {
  LayerGraph g = chain_model();
  RunOptions o = test_options();
  auto want = reference_parameters(g, o);
  RunResult single = run_strategy(g, local_cluster(2), "single", o);
  INFO(single.report.message);
  REQUIRE(single.report.ok);
  CHECK(single.report.devices.size() == 1);
  check_same_parameters(single.layer_parameters, want, g);

  RunResult bsp = run_strategy(g, local_cluster(2), "bsp", o);
  INFO(bsp.report.message);
  REQUIRE(bsp.report.ok);
  CHECK(bsp.report.devices.size() == 2);
  check_same_parameters(bsp.layer_parameters, want, g);
  check_no_orphans(bsp);

  RunResult hog = run_strategy(g, local_cluster(2), "hogwild", o);
  INFO(hog.report.message);
  REQUIRE(hog.report.ok);
  check_trained(hog.layer_parameters, g, o);
  for (const auto& layer : hog.layer_parameters)
    for (float v : layer) REQUIRE(std::isfinite(v));
  check_no_orphans(hog);
}

TEST_CASE("a data-parallel placement trains like one device on its replicas only") {
  LayerGraph g = chain_model();
  RunOptions o = test_options();
  Cluster c = local_cluster(3);
  RunResult r = run_placement(g, c, Placement::replicas(static_cast<int>(g.layers.size()), {2, 0}), o);
  INFO(r.report.message);
  REQUIRE(r.report.ok);
  REQUIRE(r.report.devices.size() == 2);
  CHECK(r.report.devices[0].device == c.devices[2].name);
  CHECK(r.report.devices[1].device == c.devices[0].name);
  check_same_parameters(r.layer_parameters, reference_parameters(g, o), g);
  check_no_orphans(r);
  Placement twice = Placement::replicas(static_cast<int>(g.layers.size()), {1, 1});
  StepReport bad = measure_placement(g, c, twice, o);
  CHECK(bad.failure_kind == FailureKind::invalid_placement);
  CHECK(bad.message.find("placement.groups[1]") != std::string::npos);
}

TEST_CASE("a non-contiguous placement runs on remote tapp-worker processes over loopback") {
  RemoteWorker w0, w1;
  REQUIRE(answers_ping(w0.port));
  REQUIRE(answers_ping(w1.port));
  Cluster c = local_cluster(2);
  c.devices[0].where = w0.where();
  c.devices[1].where = w1.where();
  LayerGraph g = branch_model();
  RunOptions o = test_options();
  RunResult r = run_placement(g, c, by_device({0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1}, 3, Schedule::one_f_one_b), o);
  INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
  REQUIRE(r.report.ok);
  CHECK(r.local_worker_pids.empty());
  check_same_parameters(r.layer_parameters, reference_parameters(g, o), g);
  // The listeners serve the next job too.
  CHECK(answers_ping(w0.port));
}

TEST_CASE("a stage replicated on two remote tapp-worker processes trains like one device") {
  RemoteWorker w0, w1;
  REQUIRE(answers_ping(w0.port));
  REQUIRE(answers_ping(w1.port));
  Cluster c = local_cluster(3);
  c.devices[0].where = w0.where();
  c.devices[1].where = w1.where();
  LayerGraph g = chain_model();
  Placement p = by_device({0, 0, 0, 1, 1, 1, 1}, 4, Schedule::one_f_one_b);
  p.group_device = {0, 2};
  p.group_replicas = {{1}, {}};  // the first stage on d0 and d1 (remote), the rest on d2 (local)
  RunOptions o = test_options();
  RunResult r = run_placement(g, c, p, o);
  INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
  REQUIRE(r.report.ok);
  CHECK(r.local_worker_pids.size() == 1);
  const auto want = reference_parameters(g, o);
  check_same_parameters(r.layer_parameters, want, g);
  REQUIRE(r.replica_parameters[0].size() == 1);
  CHECK(r.replica_parameters[0][0] == r.layer_parameters[0]);
}

TEST_CASE("a worker that exits mid-run gives worker_failed and leaves no orphan process") {
  RunOptions o = test_options();
  o.fault_rank = 1;
  o.fault_step = 1;
  o.fault_mode = "exit";
  RunResult r = run_placement(chain_model(), local_cluster(3), by_device({0, 0, 1, 1, 2, 2, 2}, 2, Schedule::gpipe), o);
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.failure_kind == FailureKind::worker_failed);
  CHECK(r.report.message.find("device 'd1'") != std::string::npos);
  CHECK(r.report.message.find("exited with code 3") != std::string::npos);
  check_no_orphans(r);
}

TEST_CASE("a worker that hangs gives a timeout error within the timeout and leaves no orphan process") {
  RunOptions o = test_options();
  o.fault_rank = 0;
  o.fault_step = 2;
  o.fault_mode = "hang";
  o.timeout_s = 3;
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = run_placement(chain_model(), local_cluster(2), by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe), o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.failure_kind == FailureKind::timeout);
  CHECK(r.report.message.find("no progress") != std::string::npos);
  CHECK(s < 60);  // bounded by the timeout, not by the hang
  check_no_orphans(r);
}

TEST_CASE("a placement over a device's memory is rejected with the sizes before any worker starts") {
  LayerGraph g = chain_model();
  g.layers[2].attrs.out = 4096;  // fc1: 16 -> 4096, fc2: 4096 -> 12, ~0.25 M params
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = local_cluster(2);
  c.devices[1].memory_mb = 1;
  RunResult r = run_placement(g, c, by_device({0, 0, 1, 1, 1, 1, 1}, 2, Schedule::gpipe), test_options());
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.failure_kind == FailureKind::out_of_memory);
  CHECK(r.report.message.find("device 'd1' needs") != std::string::npos);
  CHECK(r.report.message.find("but has 1.0 MB: over by") != std::string::npos);
  CHECK(r.local_worker_pids.empty());
}

TEST_CASE("a device faster than this host is refused by measurement, naming the device, before any worker starts") {
  LayerGraph g = chain_model();
  Cluster c = local_cluster(3);
  c.devices[2].speed = 4;
  RunResult r = run_placement(g, c, by_device({0, 0, 0, 2, 2, 2, 2}, 2, Schedule::gpipe), test_options());
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.message ==
        "devices[2].speed: 4 cannot be emulated on this host (device \"d2\"; measurement needs speed <= 1)");
  CHECK(r.local_worker_pids.empty());
  RunResult bsp = run_strategy(g, c, "bsp", test_options());
  CHECK(bsp.report.message.rfind("devices[2].speed: 4 cannot be emulated", 0) == 0);
  // A data-parallel placement on some of the devices names the fast one by
  // its index in the cluster given, not in the devices the placement uses.
  RunResult replicas = run_placement(g, c, Placement::replicas(static_cast<int>(g.layers.size()), {2, 1}), test_options());
  CHECK(replicas.report.message ==
        "devices[2].speed: 4 cannot be emulated on this host (device \"d2\"; measurement needs speed <= 1)");
  CHECK(replicas.local_worker_pids.empty());
  c.devices[2].speed = 1;
  c.devices[2].where = "127.0.0.1:1";  // a remote worker: HOGWILD's replicas share memory
  Placement hogwild = Placement::replicas(static_cast<int>(g.layers.size()), {2, 1});
  hogwild.data_parallel = DataParallelMode::hogwild;
  RunResult remote = run_placement(g, c, hogwild, test_options());
  CHECK(remote.report.failure_kind == FailureKind::invalid_strategy);
  CHECK(remote.report.message == "devices[2].where: hogwild needs local devices (shared memory)");
  c.devices[2].where = "local";
  c.devices[2].speed = 4;
  // A placement that leaves the fast device out measures as before.
  RunResult slow_only = run_placement(g, c, by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe), test_options());
  CHECK_MESSAGE(slow_only.report.ok, slow_only.report.message);
}

TEST_CASE("a malformed placement or cluster names the field") {
  LayerGraph g = chain_model();
  Cluster c = local_cluster(2);
  Placement p = by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe);
  p.group_device[1] = 5;
  RunResult r = run_placement(g, c, p, test_options());
  CHECK(r.report.failure_kind == FailureKind::invalid_placement);
  CHECK(r.report.message.find("placement.groups[1]") != std::string::npos);

  Placement many = by_device({0, 0, 0, 1, 1, 1, 1}, 50, Schedule::gpipe);
  r = run_placement(g, c, many, test_options());
  CHECK(r.report.message.find("placement.micro_batches") != std::string::npos);

  nlohmann::json bad = {{"devices", {{{"name", "a"}}, {{"name", "b"}, {"speed", 2000.0}}}}};
  auto parsed = cluster_from_json(bad);
  REQUIRE_FALSE(parsed.is_ok());
  CHECK(parsed.error_message().find("devices[1].speed") != std::string::npos);

  nlohmann::json wrong = {{"micro_batches", 2}, {"groups", {"d0", "nope"}}, {"layers", nlohmann::json::object()}};
  auto pl = placement_from_json(wrong, g, c);
  REQUIRE_FALSE(pl.is_ok());
  CHECK(pl.error_message().find("placement.groups[1]") != std::string::npos);
}

TEST_CASE("an unreachable remote worker gives a clear error naming host:port") {
  Cluster c = local_cluster(2);
  int port = free_port();  // nobody listens here
  c.devices[1].where = "127.0.0.1:" + std::to_string(port);
  RunResult r = run_placement(chain_model(), c, by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe), test_options());
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.failure_kind == FailureKind::worker_unreachable);
  CHECK(r.report.message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(r.report.message.find("device 'd1'") != std::string::npos);
}

TEST_CASE("the runtime warns when the emulated cluster needs more cores than the machine has") {
  RunOptions o = test_options();
  o.physical_cores = 1;
  Cluster c = local_cluster(2);
  c.devices[1].speed = 0.5;
  // Every run's report carries the warning; stderr has it once (a search that
  // measures runs the workers for every evaluation: it was a line each).
  std::ostringstream said;
  std::streambuf* stderr_buf = std::cerr.rdbuf(said.rdbuf());
  std::vector<RunResult> runs;
  for (int k = 0; k < 2; ++k)
    runs.push_back(run_placement(chain_model(), c, by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe), o));
  std::cerr.rdbuf(stderr_buf);
  for (const RunResult& r : runs) {
    REQUIRE(r.report.ok);
    bool over = false, speed = false;
    for (const auto& w : r.report.warnings) {
      over |= w.find("needs 1.50 cores") != std::string::npos;
      speed |= w.find("emulated device speed") != std::string::npos;
    }
    CHECK(over);
    CHECK(speed);
  }
  const std::string text = said.str();
  const size_t first = text.find("needs 1.50 cores");
  CHECK(first != std::string::npos);
  CHECK(text.find("needs 1.50 cores", first + 1) == std::string::npos);
}

TEST_CASE("the measure evaluator scores a placement on the runtime and counts evaluations") {
  RunOptions o = test_options();
  o.steps = 1;
  o.warmup_steps = 0;
  MeasureEvaluator eval(chain_model(), local_cluster(2), o);
  StepReport r = eval.evaluate(by_device({0, 0, 0, 0, 1, 1, 1}, 2, Schedule::one_f_one_b));
  INFO(r.message);
  CHECK(r.ok);
  CHECK(r.source == "measure");
  CHECK(eval.name() == "measure");
  CHECK(eval.evaluations() == 1);
  StepReport bad = eval.evaluate(by_device({0, 0, 0, 0, 1, 1, 1}, 99, Schedule::gpipe));
  CHECK_FALSE(bad.ok);
  CHECK(bad.failure_kind == FailureKind::invalid_placement);
  CHECK(eval.evaluations() == 2);
}

TEST_CASE("a measured step longer than the fixed timeout is waited for when its prediction says so") {
  // d0 -> d1 and back at 700 ms a message: one micro-batch's forward and
  // backward cross twice, so a step takes over 1.4 s, past a 1 s limit.
  Cluster c = local_cluster(2);
  c.default_link.latency_ms = 700;
  c.default_link.bandwidth_mbps = 0.8;  // 768 bytes a message: 8 ms more
  RunOptions o = test_options();
  o.steps = 1;
  o.warmup_steps = 0;
  o.timeout_s = 1;
  const Placement p = by_device({0, 0, 0, 0, 1, 1, 1}, 1, Schedule::gpipe);
  MeasureEvaluator fixed(chain_model(), c, o);
  const StepReport cut = fixed.evaluate(p);
  CHECK(cut.failure_kind == FailureKind::timeout);
  int estimates = 0;
  MeasureEvaluator predicted(chain_model(), c, o, [&](const Placement&) { return ++estimates == 1 ? 1500.0 : 100000.0; });
  const StepReport r = predicted.evaluate(p);
  INFO(r.message);
  CHECK(r.ok);
  CHECK(r.step_ms > 1400);
  CHECK(estimates == 1);
  CHECK(std::any_of(r.warnings.begin(), r.warnings.end(), [](const std::string& w) {
    return w.find("all pairs 0.8 Mbps/700.000 ms") != std::string::npos;  // not rounded to 1 Mbps
  }));
  // A plan predicted at 100 s is cut once it has taken 3x the best step
  // measured (about 4.5 s), not 300 s: it cannot be the best. Alternating
  // devices cross 12 times a step, 8.4 s.
  const auto t0 = std::chrono::steady_clock::now();
  const StepReport slow = predicted.evaluate(by_device({0, 1, 0, 1, 0, 1, 0}, 1, Schedule::gpipe));
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(slow.failure_kind == FailureKind::timeout);
  CHECK(waited_s < 8);
  CHECK(step_timeout_s(60, 1500) == 60);   // the fixed limit stays the floor
  CHECK(step_timeout_s(60, 100000) == 300);
  CHECK(step_timeout_s(60, 0) == 60);      // no prediction
}

TEST_CASE("the shipped cluster and placement examples parse against the zoo model they name") {
  for (const char* f : {"/examples/cluster_2cpu.json", "/examples/cluster_edge_server.json",
                        "/schemas/examples/cluster/valid/two_local_cpus.json",
                        "/schemas/examples/cluster/valid/heterogeneous_asymmetric_links.json"}) {
    INFO(f);
    auto c = load_cluster(std::string(TAPP_SOURCE_DIR) + f);
    CHECK_MESSAGE(c.is_ok(), c.error_message());
  }
  auto alexnet = zoo_model("alexnet_cifar");
  REQUIRE(alexnet.is_ok());
  auto two = load_cluster(std::string(TAPP_SOURCE_DIR) + "/examples/cluster_2cpu.json");
  REQUIRE(two.is_ok());
  for (const char* f : {"/examples/placement_alexnet_cifar_2stage.json", "/examples/placement_alexnet_cifar_2stage_1f1b.json"}) {
    auto p = load_placement(std::string(TAPP_SOURCE_DIR) + f, *alexnet, *two);
    CHECK_MESSAGE(p.is_ok(), p.error_message());
  }
  auto mlp = zoo_model("mlp");
  REQUIRE(mlp.is_ok());
  auto edge = load_cluster(std::string(TAPP_SOURCE_DIR) + "/examples/cluster_edge_server.json");
  REQUIRE(edge.is_ok());
  auto p = load_placement(std::string(TAPP_SOURCE_DIR) + "/examples/placement_mlp_edge_server.json", *mlp, *edge);
  CHECK_MESSAGE(p.is_ok(), p.error_message());
  // PipeLearn: three clients replicate vgg5's first block, the server holds the rest.
  auto vgg5 = zoo_model("vgg5");
  REQUIRE(vgg5.is_ok());
  auto clients = load_cluster(std::string(TAPP_SOURCE_DIR) + "/examples/cluster_pipelearn.json");
  REQUIRE_MESSAGE(clients.is_ok(), clients.error_message());
  auto pipelearn = load_placement(std::string(TAPP_SOURCE_DIR) + "/examples/placement_pipelearn.json", *vgg5, *clients);
  REQUIRE_MESSAGE(pipelearn.is_ok(), pipelearn.error_message());
  CHECK(pipelearn->replica_count(0) == 3);
  CHECK(pipelearn->aggregation_every == 2);
  CHECK(validate_placement(*pipelearn, *vgg5, *clients, 48).is_ok());
  CHECK(check_memory(*pipelearn, *vgg5, *clients, 48).is_ok());
  for (const char* f : {"/schemas/examples/cluster/invalid/speed_above_limit.json", "/schemas/examples/cluster/invalid/no_devices.json",
                        "/schemas/examples/cluster/invalid/bad_kind.json", "/schemas/examples/cluster/invalid/negative_bandwidth.json",
                        "/schemas/examples/cluster/invalid/costs_unknown.json",
                        "/schemas/examples/cluster/invalid/costs_library_extra_field.json"}) {
    INFO(f);
    CHECK_FALSE(load_cluster(std::string(TAPP_SOURCE_DIR) + f).is_ok());
  }
}

namespace {
// One timed step of the chain model (no warm-up), for checks on its timeline.
RunResult one_step(const Cluster& c, const Placement& p) {
  RunOptions o = test_options();
  o.steps = 1;
  o.warmup_steps = 0;
  o.collect_parameters = false;
  return run_placement(chain_model(), c, p, o);
}

TimelineEntry timeline_entry(const RunResult& r, const std::string& task) {
  for (const auto& e : r.report.timeline)
    if (e.task == task) return e;
  FAIL("no timeline entry " << task);
  return TimelineEntry{};
}
}  // namespace

TEST_CASE("sending micro-batch 0's activations over a slow link does not hold up micro-batch 1's forward") {
  Cluster c = local_cluster(2);
  Link slow;
  slow.from = "d0";
  slow.to = "d1";
  slow.bandwidth_mbps = 1000;
  slow.latency_ms = 150;  // emulated: the sender thread sleeps this long per transfer
  c.links.push_back(slow);
  RunResult r = one_step(c, by_device({0, 0, 0, 1, 1, 1, 1}, 3, Schedule::gpipe));
  INFO(r.report.message);
  REQUIRE(r.report.ok);
  TimelineEntry send0 = timeline_entry(r, "X s0->s1 m0");
  TimelineEntry fwd1 = timeline_entry(r, "F s0 m1");
  TimelineEntry fwd2 = timeline_entry(r, "F s0 m2");
  CHECK(send0.device == 0);
  CHECK(fwd1.start_ms < send0.end_ms);
  CHECK(fwd2.start_ms < send0.end_ms);
  CHECK(send0.end_ms - send0.start_ms >= 150);
}

TEST_CASE("an emulated slow device sends a task's outputs only when its emulated compute has ended") {
  Cluster c = local_cluster(2);
  c.devices[0].speed = 0.2;  // every task sleeps 4x its real compute
  RunResult r = one_step(c, by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe));
  INFO(r.report.message);
  REQUIRE(r.report.ok);
  // Both entries come from device 0's clock (another device's timeline is
  // offset by a fraction of a millisecond, too coarse for these tasks).
  for (int m : {0, 1}) {
    const std::string mb = " m" + std::to_string(m);
    TimelineEntry produce = timeline_entry(r, "F s0" + mb);  // its end includes the speed sleep
    CHECK(timeline_entry(r, "X s0->s1" + mb).start_ms >= produce.end_ms);
  }
}

TEST_CASE("a worker killed with SIGKILL mid-run gives worker_failed naming the signal and leaves no orphan") {
  RunOptions o = test_options();
  o.steps = 100000;  // runs until the kill
  o.collect_parameters = false;
  std::thread killer;
  o.on_started = [&killer](const std::vector<int>& pids) {
    int victim = pids.at(1);
    killer = std::thread([victim] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      kill(victim, SIGKILL);
    });
  };
  RunResult r = run_placement(chain_model(), local_cluster(2), by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe), o);
  killer.join();
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.failure_kind == FailureKind::worker_failed);
  CHECK(r.report.message.find("worker 1 (device 'd1') was killed by signal 9") != std::string::npos);
  check_no_orphans(r);
}

TEST_CASE("an emulated device's task lasts its CPU time over its speed, not its contention on the host's cores") {
  // Alone on a core: 100 ms of compute at speed 0.25 lasts 400 ms.
  CHECK(emulated_sleep_ms(100, 100, 0.25, 1) == doctest::Approx(300));
  // Sharing a core (wall 200 ms for 100 ms of CPU): still 400 ms in all, not 800.
  CHECK(emulated_sleep_ms(200, 100, 0.25, 1) == doctest::Approx(200));
  // Slower than the emulated device already: no sleep.
  CHECK(emulated_sleep_ms(500, 100, 0.25, 1) == 0);
  // Several threads: the wall time is the cost (spinning pools inflate CPU time).
  CHECK(emulated_sleep_ms(200, 390, 0.5, 2) == doctest::Approx(200));
  CHECK(emulated_sleep_ms(100, 100, 1.0, 1) == 0);
}

TEST_CASE("workers are killed and reaped when the caller's on_started callback throws") {
  RunOptions o = test_options();
  o.steps = 100000;  // would run for minutes if left alone
  o.collect_parameters = false;
  const std::vector<int> children_before = child_pids();
  std::vector<int> started;
  o.on_started = [&started](const std::vector<int>& pids) {
    started = pids;
    throw std::runtime_error("the caller gives up");
  };
  CHECK_THROWS_WITH_AS(run_placement(chain_model(), local_cluster(2), by_device({0, 0, 0, 1, 1, 1, 1}, 2, Schedule::gpipe), o),
                       "the caller gives up", std::runtime_error);
  REQUIRE(started.size() == 2);
  for (int pid : started) {
    INFO("worker pid " << pid);
    CHECK(process_gone(pid));  // killed and reaped: not even a zombie
  }
  CHECK(child_pids() == children_before);
}

TEST_CASE("a HOGWILD run whose shared segment cannot be sized fails with worker_failed and leaves no process or segment") {
  // The kernel refuses to grow a file past RLIMIT_FSIZE (EFBIG, with SIGXFSZ,
  // ignored here): the segment for the chain's ~3 KB of parameters cannot be sized.
  const std::vector<int> children_before = child_pids();
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 1024;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  RunResult r = run_strategy(chain_model(), local_cluster(2), "hogwild", test_options());
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.failure_kind == FailureKind::worker_failed);
  CHECK(r.report.message.find("shared parameters") != std::string::npos);
  CHECK(hogwild_segments() == 0);
  CHECK(child_pids() == children_before);
  for (int pid : r.local_worker_pids) CHECK(process_gone(pid));
}

TEST_CASE("a spawned worker runs with tcmalloc, the caching allocator") {
  RunOptions o = test_options();
  o.collect_parameters = false;
  bool exec_seen = false, tcmalloc_seen = false;
  o.on_started = [&](const std::vector<int>& pids) {
    // Right after fork the child may not have exec'd yet, and after exec the
    // dynamic loader maps the libraries one by one: watch its maps until
    // tcmalloc shows up, the worker is gone, or 10 s passed.
    const std::string path = "/proc/" + std::to_string(pids.at(0)) + "/maps";
    for (int i = 0; i < 1000 && !tcmalloc_seen; ++i) {
      std::ifstream in(path);
      if (!in) break;
      const std::string maps{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      exec_seen = exec_seen || maps.find("/tapp-worker") != std::string::npos;
      tcmalloc_seen = exec_seen && maps.find("libtcmalloc") != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  RunResult r = run_placement(chain_model(), local_cluster(1), by_device({0, 0, 0, 0, 0, 0, 0}, 1, Schedule::gpipe), o);
  INFO(r.report.message);
  CHECK(r.report.ok);
  REQUIRE(exec_seen);
  CHECK(tcmalloc_seen);
}

namespace {
using test::MemoryProfileCache;

size_t files_under(const std::filesystem::path& dir) {
  size_t n = 0;
  if (std::filesystem::exists(dir))
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}
}  // namespace

TEST_CASE("two loopback workers with different thread counts each profile their own device, cached by their fingerprints") {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("tapp-worker-costs-" + std::to_string(::getpid()));
  RemoteWorker w1((root / "w1").string()), w2((root / "w2").string());
  REQUIRE(answers_ping(w1.port));
  REQUIRE(answers_ping(w2.port));
  LayerGraph g = chain_model();
  Cluster c = local_cluster(3);  // d0 priced here; d1, d2 by their workers
  c.devices[1].where = w1.where();
  c.devices[1].threads = 1;
  c.devices[1].costs.from = CostsFrom::worker;
  c.devices[2].where = w2.where();
  c.devices[2].threads = 2;
  c.devices[2].costs.from = CostsFrom::worker;

  MemoryProfileCache cache;
  CostProfileOptions o;
  o.batch_size = 4;  // micro-batch sizes 1, 2, 4
  o.cache = &cache;
  o.source = CostSource::profile;
  o.worker_costs = worker_costs(&cache, 120);
  CostProfiles p = cost_profiles(g, c, o).value();

  // Each worker describes its own device; the fingerprints differ by thread count.
  Result<WorkerDevice> hw1 = describe_worker_device(w1.where(), "cpu", 1);
  Result<WorkerDevice> hw2 = describe_worker_device(w2.where(), "cpu", 2);
  REQUIRE_MESSAGE(hw1.is_ok(), hw1.error_message());
  REQUIRE_MESSAGE(hw2.is_ok(), hw2.error_message());
  CHECK(hw1->threads == 1);
  CHECK(hw2->threads == 2);
  CHECK(hw1->fingerprint() != hw2->fingerprint());
  CHECK(p.devices[0].from == CostsFrom::host);
  CHECK(p.devices[1].from == CostsFrom::worker);
  CHECK(p.devices[2].from == CostsFrom::worker);
  CHECK(p.devices[1].fingerprint == hw1->fingerprint());
  CHECK(p.devices[2].fingerprint == hw2->fingerprint());
  CHECK(p.devices[1].detail.find("worker " + w1.where()) == 0);
  CHECK(p.devices[2].detail.find("worker " + w2.where()) == 0);

  // Every size profiled by the device's own worker, at the device's threads.
  for (int d : {1, 2}) {
    CAPTURE(d);
    REQUIRE(p.device_libraries[d].size() == 3);
    for (const LayerLibrary& lib : p.device_libraries[d]) {
      CHECK(lib.measured);
      CHECK(lib.threads == c.devices[d].threads);
      CHECK(lib.rows.size() == g.layers.size());
    }
  }
  CHECK(p.measured == 9);  // 3 sizes each: this host's device d0, and each worker's
  // Each worker measured on its own host: its own cache holds its profiles (3 sizes), the other's none of them.
  CHECK(files_under(root / "w1") == 3);
  CHECK(files_under(root / "w2") == 3);
  // Here they are cached under each worker's fingerprint.
  for (int64_t b : {1, 2, 4}) {
    CHECK(cache.entries.count(worker_profile_cache_key(g, hw1->fingerprint(), b)) == 1);
    CHECK(cache.entries.count(worker_profile_cache_key(g, hw2->fingerprint(), b)) == 1);
  }

  // The cost model prices each device from its own worker's per-layer times.
  auto cost = CostModel::build(g, c, p.libraries, p.device_libraries);
  REQUIRE_MESSAGE(cost.is_ok(), cost.error_message());
  for (int d : {1, 2}) {
    REQUIRE(p.device_libraries[d].back().batch_size == 4);
    std::ostringstream per_layer;
    for (int l = 0; l < static_cast<int>(g.layers.size()); ++l) {
      CAPTURE(d);
      CAPTURE(l);
      // The cost model's rule: a layer never gets cheaper with more samples (running max over
      // the sizes); the library's threads equal the device's and speed is 1, so no scaling.
      double want = 0;
      for (const LayerLibrary& lib : p.device_libraries[d]) want = std::max(want, lib.rows[l].forward_ms);
      per_layer << " " << g.layers[l].name << "=" << want;
      CHECK(cost->raw_compute_ms(d, l, l, 4, false) == doctest::Approx(want));
    }
    MESSAGE("d" << d << " (" << c.devices[d].threads << " threads, worker " << c.devices[d].where
                << ") forward ms at micro-batch 4:" << per_layer.str());
  }

  // Again: everything from the cache under the fingerprints, nothing profiled.
  CostProfiles again = cost_profiles(g, c, o).value();
  CHECK(again.measured == 0);
  CHECK(again.cached >= 6);
  CHECK(files_under(root / "w1") == 3);
  std::filesystem::remove_all(root);
}

TEST_CASE("a worker that cannot profile says why, naming the device and the worker") {
  RemoteWorker w;
  REQUIRE(answers_ping(w.port));
  LayerGraph g = chain_model();
  Cluster c = local_cluster(2);
  c.devices[1].where = w.where();
  // A GPU this worker does not have: cuda:0 without CUDA, one past its last GPU with it.
  const std::string absent = "cuda:" + std::to_string(gpu_count());
  c.devices[1].kind = absent;
  c.devices[1].costs.from = CostsFrom::worker;
  MemoryProfileCache cache;
  CostProfileOptions o;
  o.batch_size = 2;
  o.cache = &cache;
  o.worker_costs = worker_costs(&cache, 60);
  auto p = cost_profiles(g, c, o);
  REQUIRE_FALSE(p.is_ok());
  CHECK(p.error_message().rfind("devices[1].costs: worker " + w.where() + " cannot profile: ", 0) == 0);
  CHECK(p.error_message().find("device '" + absent + "': this ") != std::string::npos);
  CHECK(p.error_message().find(built_with_cuda() ? "GPU" : "no CUDA") != std::string::npos);

  c.devices[1].kind = "cpu";
  c.devices[1].where = "127.0.0.1:" + std::to_string(free_port());  // nobody listens there
  auto unreachable = cost_profiles(g, c, o);
  REQUIRE_FALSE(unreachable.is_ok());
  CHECK(unreachable.error_message().rfind("devices[1].costs: cannot reach remote worker at " + c.devices[1].where, 0) == 0);
}

TEST_CASE("a worker with a GPU profiles cuda:0 there: the GPU's times, name and fingerprint (GPU only)") {
  if (gpu_count() == 0) {
    MESSAGE("skipped: no GPU that CUDA can use here");
    return;
  }
  const auto root = std::filesystem::temp_directory_path() / ("tapp_gpu_worker_" + std::to_string(getpid()));
  std::filesystem::remove_all(root);
  RemoteWorker w((root / "w").string());
  REQUIRE(answers_ping(w.port));
  LayerGraph g = chain_model();
  Cluster c = local_cluster(3);
  c.devices[1].where = w.where();
  c.devices[1].kind = "cuda:0";
  c.devices[1].costs.from = CostsFrom::worker;
  c.devices[2].where = w.where();  // the same worker's CPU
  c.devices[2].costs.from = CostsFrom::worker;
  MemoryProfileCache cache;
  CostProfileOptions o;
  o.batch_size = 4;
  o.cache = &cache;
  o.source = CostSource::profile;
  o.worker_costs = worker_costs(&cache, 300);
  auto p = cost_profiles(g, c, o);
  REQUIRE_MESSAGE(p.is_ok(), p.error_message());

  Result<WorkerDevice> gpu = describe_worker_device(w.where(), "cuda:0", 1);
  Result<WorkerDevice> cpu = describe_worker_device(w.where(), "cpu", 1);
  REQUIRE_MESSAGE(gpu.is_ok(), gpu.error_message());
  REQUIRE_MESSAGE(cpu.is_ok(), cpu.error_message());
  CHECK_FALSE(gpu->gpu.empty());
  CHECK(cpu->gpu.empty());
  CHECK(gpu->fingerprint() != cpu->fingerprint());
  CHECK(p->devices[1].fingerprint == gpu->fingerprint());
  CHECK(p->devices[2].fingerprint == cpu->fingerprint());
  REQUIRE(p->device_libraries[1].size() == 3);
  for (const LayerLibrary& lib : p->device_libraries[1]) {
    CHECK(lib.measured);
    CHECK(lib.device_kind == "cuda:0");
    CHECK(gpu->gpu.rfind(lib.device_name, 0) == 0);
    CHECK(lib.device_memory_mb > 0);
    CHECK(lib.whole_step_ms > 0);
  }
  for (const LayerLibrary& lib : p->device_libraries[2]) CHECK(lib.device_name.empty());
  MESSAGE("worker GPU: " << gpu->describe() << "; step at micro-batch 4: GPU "
                         << p->device_libraries[1].back().whole_step_ms << " ms, CPU x1 "
                         << p->device_libraries[2].back().whole_step_ms << " ms");
  std::filesystem::remove_all(root);
}
