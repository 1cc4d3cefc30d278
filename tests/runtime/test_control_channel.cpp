// The control channel: what one end sends the other reads back, through a
// real c10d::TCPStore (server = coordinator end, client = worker end), and the
// `tapp-worker --listen` line messages.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "tests/torch_doctest.h"  // doctest after LibTorch (glog's CHECK macros removed)

#include <chrono>

#include "core/cluster.h"
#include "model/model_json.h"
#include "model/zoo.h"
#include "runtime/control_channel.h"
#include "runtime/job.h"

using namespace tapp;

namespace {

// A coordinator's store and a worker's client of it, in one process.
struct StorePair {
  c10::intrusive_ptr<c10d::TCPStore> server, client;
  StorePair() {
    c10d::TCPStoreOptions so;
    so.port = 0;
    so.isServer = true;
    so.waitWorkers = false;
    so.timeout = std::chrono::milliseconds(5000);
    server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
    c10d::TCPStoreOptions co;
    co.port = server->getPort();
    co.isServer = false;
    co.timeout = std::chrono::milliseconds(5000);
    client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", co);
  }
};

Job small_job() {
  Job job;
  job.mode = "pipeline";
  auto g = zoo_model("mlp");
  REQUIRE(g.is_ok());
  job.graph = *g;
  for (int d = 0; d < 2; ++d) {
    Device dev;
    dev.name = "d" + std::to_string(d);
    dev.speed = d == 0 ? 1.0 : 0.5;
    job.cluster.devices.push_back(dev);
  }
  const int n = static_cast<int>(job.graph.layers.size());
  for (int l = 0; l < n; ++l) job.placement.layer_group.push_back(l < n / 2 ? 0 : 1);
  job.placement.group_device = {0, 1};
  job.placement.micro_batches = 3;
  job.placement.schedule = Schedule::one_f_one_b;
  job.options.steps = 4;
  job.options.batch_size = 12;
  job.options.fault_rank = 1;
  job.options.fault_mode = "hang";
  job.gloo_hosts = {"127.0.0.1", "10.0.0.2"};
  job.compute_gate_dir = "/tmp/tapp-gate-test";
  job.compute_gate_slot = {0, -1};
  return job;
}

WorkerReport sample_report(int rank) {
  WorkerReport r;
  r.rank = rank;
  r.peak_rss_bytes = 123456789;
  WorkerStep s;
  s.step_ms = 12.5;
  s.busy_ms = 8.25;
  s.comm_ms = 1.5;
  s.timeline = {{"F s0 m0", 0.0, 2.0}, {"X s0->s1 m0", 2.0, 2.75}, {"optimizer", 11.0, 12.5}};
  r.steps = {s, s};
  r.steps[1].step_ms = 13.0;
  return r;
}

void check_same(const WorkerReport& a, const WorkerReport& b) {
  CHECK(a.rank == b.rank);
  CHECK(a.peak_rss_bytes == b.peak_rss_bytes);
  REQUIRE(a.steps.size() == b.steps.size());
  for (size_t k = 0; k < a.steps.size(); ++k) {
    CHECK(a.steps[k].step_ms == b.steps[k].step_ms);
    CHECK(a.steps[k].busy_ms == b.steps[k].busy_ms);
    CHECK(a.steps[k].comm_ms == b.steps[k].comm_ms);
    REQUIRE(a.steps[k].timeline.size() == b.steps[k].timeline.size());
    for (size_t t = 0; t < a.steps[k].timeline.size(); ++t) {
      CHECK(a.steps[k].timeline[t].task == b.steps[k].timeline[t].task);
      CHECK(a.steps[k].timeline[t].start_ms == b.steps[k].timeline[t].start_ms);
      CHECK(a.steps[k].timeline[t].end_ms == b.steps[k].timeline[t].end_ms);
    }
  }
}

}  // namespace

TEST_CASE("the plan the coordinator publishes is the plan a worker reads") {
  StorePair stores;
  ControlChannel coordinator(*stores.server), worker(*stores.client);
  const Job job = small_job();
  coordinator.publish_job(job);
  auto read = worker.read_job();
  REQUIRE(read.is_ok());
  CHECK(job_to_json(*read) == job_to_json(job));
  CHECK(read->placement.schedule == Schedule::one_f_one_b);
  CHECK(read->options.fault_mode == "hang");
  CHECK(read->cluster.devices[1].speed == 0.5);
  CHECK(read->compute_gate_dir == "/tmp/tapp-gate-test");
  CHECK(read->compute_gate_slot == std::vector<int>{0, -1});
}

TEST_CASE("a worker's progress, report, parameters, done and error reach the coordinator") {
  StorePair stores;
  ControlChannel coordinator(*stores.server), worker(*stores.client);
  CHECK(coordinator.steps_finished(1) == 0);
  worker.step_finished(1);
  worker.step_finished(1);
  CHECK(coordinator.steps_finished(1) == 2);
  CHECK(coordinator.steps_finished(0) == 0);

  worker.publish_report(sample_report(1));
  auto report = coordinator.report_of(1);
  REQUIRE(report.is_ok());
  check_same(*report, sample_report(1));

  // Sets are not acknowledged; "done" is read back, so what came before it is there once it is.
  const std::vector<float> flat = {1.5f, -2.25f, 3e-8f};
  worker.publish_parameters(4, flat);
  CHECK_FALSE(coordinator.is_done(1));
  worker.mark_done(1);
  CHECK(coordinator.is_done(1));
  CHECK(coordinator.parameters_of(4) == flat);
  CHECK_FALSE(coordinator.parameters_of(5).has_value());
  CHECK_FALSE(coordinator.all_done(2));
  worker.mark_done(0);
  CHECK(coordinator.all_done(2));

  CHECK(coordinator.error_of(0).empty());
  worker.publish_error(0, "task graph: layer 3 has no device");
  CHECK(coordinator.error_of(0) == "task graph: layer 3 has no device");
}

TEST_CASE("a malformed worker report or plan is an error naming what it is, not an exception") {
  auto report = decode_report("{\"rank\": 0, \"steps\": [{\"step_ms\": 1}]}");
  REQUIRE_FALSE(report.is_ok());
  CHECK(report.error_message().rfind("worker report: ", 0) == 0);
  CHECK_FALSE(decode_report("not json").is_ok());
  auto job = decode_job("{\"mode\": \"pipeline\"}");
  REQUIRE_FALSE(job.is_ok());
  CHECK(job.error_message().rfind("job: ", 0) == 0);
  auto again = decode_report(encode_report(sample_report(3)));
  REQUIRE(again.is_ok());
  check_same(*again, sample_report(3));
}

TEST_CASE("the listener's line messages round-trip and bad requests are refused") {
  auto ping = decode_listener_request(encode_ping());
  REQUIRE(ping.is_ok());
  CHECK(ping->kind == ListenerRequest::Kind::ping);

  auto job = decode_listener_request(encode_job_request(29500, 2, 3));
  REQUIRE(job.is_ok());
  CHECK(job->kind == ListenerRequest::Kind::job);
  CHECK(job->store_port == 29500);
  CHECK(job->rank == 2);
  CHECK(job->world == 3);

  CHECK_FALSE(decode_listener_request("job 29500 2").is_ok());
  CHECK_FALSE(decode_listener_request("job 29500 3 3").is_ok());  // rank outside the world
  CHECK_FALSE(decode_listener_request("job 0 0 1").is_ok());      // no store on port 0
  CHECK_FALSE(decode_listener_request("job 29500 0 1 extra").is_ok());
  CHECK_FALSE(decode_listener_request("hello").is_ok());

  CHECK(decode_exit(encode_exit(0)) == 0);
  CHECK(decode_exit(encode_exit(137)) == 137);
  CHECK_FALSE(decode_exit(encode_pong()).has_value());
  CHECK_FALSE(decode_exit(encode_bad_request()).has_value());
}

TEST_CASE("the profile exchange's messages round-trip and malformed ones are refused") {
  auto device = decode_listener_request(encode_device_request("cpu", 2));
  REQUIRE(device.is_ok());
  CHECK(device->kind == ListenerRequest::Kind::device);
  CHECK(device->device_kind == "cpu");
  CHECK(device->threads == 2);
  CHECK_FALSE(decode_listener_request("device cpu 0").is_ok());
  CHECK_FALSE(decode_listener_request("device cpu").is_ok());
  auto profile = decode_listener_request(encode_profile_header(1234));
  REQUIRE(profile.is_ok());
  CHECK(profile->kind == ListenerRequest::Kind::profile);
  CHECK(profile->payload_bytes == 1234);
  CHECK_FALSE(decode_listener_request("profile 0").is_ok());
  CHECK_FALSE(decode_listener_request("profile 999999999999").is_ok());  // over 256 MiB

  WorkerDevice hw{"cpu", 2, "AMD EPYC", "1.13.0", "tcmalloc", 3};
  WorkerDevice other = hw;
  other.threads = 1;
  CHECK(hw.fingerprint() != other.fingerprint());
  other = hw;
  other.cpu_model = "Intel Xeon";
  CHECK(hw.fingerprint() != other.fingerprint());
  auto line = decode_listener_reply(encode_device_reply(hw));
  REQUIRE(line.is_ok());
  CHECK(line->kind == ListenerReply::Kind::device);
  auto back = worker_device_from_json(nlohmann::json::parse(line->text));
  REQUIRE(back.is_ok());
  CHECK(back->fingerprint() == hw.fingerprint());
  // A GPU device: its card is part of the fingerprint and survives the reply; a CPU's has none.
  WorkerDevice gpu = hw;
  gpu.device_kind = "cuda:0";
  gpu.gpu = "NVIDIA H100 80GB HBM3, 81559 MiB";
  WorkerDevice other_card = gpu;
  other_card.gpu = "NVIDIA A100-SXM4-40GB, 40536 MiB";
  CHECK(gpu.fingerprint() != other_card.fingerprint());
  CHECK(gpu.describe().rfind("NVIDIA H100 80GB HBM3, 81559 MiB on AMD EPYC", 0) == 0);
  auto gpu_back = worker_device_from_json(nlohmann::json::parse(decode_listener_reply(encode_device_reply(gpu))->text));
  REQUIRE(gpu_back.is_ok());
  CHECK(gpu_back->gpu == gpu.gpu);
  CHECK(gpu_back->fingerprint() == gpu.fingerprint());
  CHECK(worker_device_to_json(hw).count("gpu") == 0);

  LayerGraph g = zoo_model("mlp").value();
  ProfileRequest request{model_to_json(g), "cpu", 2, {1, 2, 4}, 7};
  auto request_back = decode_profile_request(encode_profile_request(request));
  REQUIRE(request_back.is_ok());
  CHECK(request_back->batch_sizes == std::vector<int64_t>{1, 2, 4});
  CHECK(request_back->threads == 2);
  CHECK(request_back->model == request.model);
  CHECK_FALSE(decode_profile_request(R"({"model": {}, "device_kind": "cpu", "threads": 0, "batch_sizes": [1], "seed": 1})").is_ok());
  CHECK_FALSE(decode_profile_request("{").is_ok());

  ProfileReply reply{hw, {estimated_library(g, 2)}, {{1, "one sample through a BatchNorm"}}};
  auto reply_back = decode_profile_reply(encode_profile_reply(reply));
  REQUIRE(reply_back.is_ok());
  CHECK(reply_back->device.fingerprint() == hw.fingerprint());
  REQUIRE(reply_back->libraries.size() == 1);
  CHECK(reply_back->libraries[0].rows.size() == g.layers.size());
  CHECK(reply_back->skipped == reply.skipped);

  auto error = decode_listener_reply(encode_error_reply("device 'cuda:0': this LibTorch has no CUDA\nmore"));
  REQUIRE(error.is_ok());
  CHECK(error->kind == ListenerReply::Kind::error);
  CHECK(error->text == "device 'cuda:0': this LibTorch has no CUDA");
  CHECK_FALSE(decode_listener_reply("garbage").is_ok());
}
