// tapp-server: the placement job service (HTTP API, job queue, SQLite store, the page).
//
// Data flow: HTTP (listener/session, io threads) -> router -> JobStore + JobRunner
// (runner threads) -> placer's optimize() -> results in SQLite -> HTTP.
// Startup recovers jobs a previous run left mid-way (re-queued once each).
// SIGINT/SIGTERM stop it cleanly; SIGKILL loses nothing committed.
#include <CLI/CLI.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/allocator.h"
#include "common/host_port.h"
#include "placer/optimize.h"
#include "model/model_json.h"
#include "model/zoo.h"
#include "profiler/model_loader.h"
#include "service/fake_job.h"
#include "service/sqlite_profile_cache.h"
#include "service/http/server.h"

namespace fs = std::filesystem;
using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

bool read_text(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// The real job: placer's optimize() on the stored request. An uploaded model
// file is written next to the database and passed by path.
// Remote workers are checked again when the job runs: a job queued under an
// earlier allow-list and recovered after a restart obeys the current one.
JobFn make_optimize_job(const std::string& upload_dir, const std::set<std::string>& allowed_hosts,
                        ProfileCache* profile_cache) {
  return [upload_dir, allowed_hosts, profile_cache](const JobInput& input, const ProgressFn& progress,
                                     const std::atomic<bool>& cancel) -> Result<json> {
    json request = input.request;
    request.erase("model_file");
    Result<OptimizeRequest> parsed = optimize_request_from_json(request);
    if (!parsed) return parsed.status();
    parsed->profile_cache = profile_cache;
    for (int i = 0; i < parsed->cluster.num_devices(); ++i) {
      const Device& d = parsed->cluster.devices[i];
      if (d.is_local()) continue;
      auto endpoint = parse_host_port(d.where, "cluster.devices[" + std::to_string(i) + "].where");
      if (!endpoint) return endpoint.status();
      const std::string& host = endpoint->host;
      if (!allowed_hosts.count(host))
        return Status::error("cluster.devices[" + std::to_string(i) + "].where: remote host \"" + host +
                             "\" is not in this server's --allow-remote-hosts");
    }
    std::string path;
    if (!input.upload.empty()) {
      std::error_code ec;
      fs::create_directories(upload_dir, ec);
      path = upload_dir + "/" + input.id + ".pt";
      std::ofstream out(path, std::ios::binary);
      out.write(input.upload.data(), static_cast<std::streamsize>(input.upload.size()));
      if (!out) return Status::error("model_file: cannot write " + path);
      parsed->model = path;
    }
    Result<json> result = optimize(*parsed, progress, cancel);
    if (result && result->is_object() && !result->contains("layer_order")) {
      // The page draws the placement in model order; placement.layers is keyed by name.
      ModelOptions mo{parsed->input_size, parsed->num_classes};
      Result<LayerGraph> g = parsed->model_graph.is_null() ? load_model(parsed->model, mo)
                                                          : model_from_json(parsed->model_graph);
      if (g) {
        json order = json::array();
        for (const Layer& l : g->layers) order.push_back(l.name);
        (*result)["layer_order"] = order;
      }
    }
    if (!path.empty()) {
      std::error_code ec;
      fs::remove(path, ec);
    }
    return result;
  };
}

std::set<std::string> split_hosts(const std::string& s) {
  std::set<std::string> out;
  std::stringstream ss(s);
  std::string h;
  while (std::getline(ss, h, ','))
    if (!h.empty()) out.insert(h);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"tapp-server: pipeline-parallel placement jobs over HTTP (TAPP)"};
  HttpOptions http;
  std::string db = "tapp.db", token_file, allow_hosts, web_dir = std::string(TAPP_SOURCE_DIR) + "/web",
              schemas_dir = std::string(TAPP_SOURCE_DIR) + "/schemas";
  JobsOptions jobs;
  bool fake_jobs = false;
  FakeJobOptions fake;
  cli.add_option("--host", http.host, "address to listen on")->capture_default_str();
  cli.add_option("--port", http.port, "port (0 = any free port, printed)")->capture_default_str();
  cli.add_option("--db", db, "SQLite database file")->capture_default_str();
  cli.add_option("--jobs", jobs.runners, "jobs that run at once")->capture_default_str()->check(CLI::Range(1, 64));
  cli.add_option("--queue-size", jobs.queue_size, "queued jobs before POST answers 503")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  cli.add_option("--token-file", token_file, "require Authorization: Bearer <token in this file>");
  cli.add_option("--allow-remote-hosts", allow_hosts, "comma-separated hosts whose tapp-workers jobs may use");
  cli.add_option("--web-dir", web_dir, "directory of the page")->capture_default_str();
  cli.add_option("--schemas-dir", schemas_dir, "directory of openapi.json and job.schema.json")->capture_default_str();
  cli.add_option("--io-threads", http.io_threads, "HTTP threads")->capture_default_str()->check(CLI::Range(1, 64));
  cli.add_option("--cores", jobs.total_cores, "cores measuring jobs share (0 = all)")->capture_default_str();
  // Hidden test flags.
  cli.add_flag("--fake-jobs", fake_jobs, "")->group("");
  cli.add_option("--fake-iteration-ms", fake.iteration_ms, "")->group("");
  cli.add_option("--read-timeout-s", http.read_timeout_s, "")->group("")->check(CLI::Range(1, 3600));
  cli.set_version_flag("--version", "tapp-server, " + allocator_description());
  CLI11_PARSE(cli, argc, argv);

  AppState app;
  if (!token_file.empty()) {
    if (!read_text(token_file, app.token)) {
      std::cerr << "--token-file: cannot read " << token_file << "\n";
      return 2;
    }
    while (!app.token.empty() && std::isspace(static_cast<unsigned char>(app.token.back()))) app.token.pop_back();
    if (app.token.empty()) {
      std::cerr << "--token-file: " << token_file << " is empty\n";
      return 2;
    }
  }
  app.limits.allowed_remote_hosts = split_hosts(allow_hosts);
  app.web_dir = web_dir;
  read_text(schemas_dir + "/openapi.json", app.openapi_json);
  read_text(schemas_dir + "/job.schema.json", app.job_schema_json);

  Result<std::unique_ptr<JobStore>> store = JobStore::open(db);
  if (!store) {
    std::cerr << store.error_message() << "\n";
    return 1;
  }
  Result<std::vector<std::string>> queued = (*store)->recover();
  if (!queued) {
    std::cerr << queued.error_message() << "\n";
    return 1;
  }
  fs::path upload_dir = fs::path(db).parent_path() / (fs::path(db).filename().string() + ".uploads");
  SqliteProfileCache profile_cache(**store);  // profiles live in the job database
  JobFn fn = fake_jobs ? make_fake_job(fake)
                       : make_optimize_job(upload_dir.string(), app.limits.allowed_remote_hosts, &profile_cache);
  JobRunner runner(**store, fn, jobs);
  app.store = store->get();
  app.runner = &runner;

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  runner.start(*queued);
  HttpServer server(app, http);
  Result<int> port = server.start();
  if (!port) {
    std::cerr << port.error_message() << "\n";
    runner.stop();
    return 1;
  }
  std::cout << "tapp-server listening on http://" << http.host << ":" << *port << " (db " << db << ", "
            << jobs.runners << " runner(s), " << queued->size() << " queued job(s) recovered"
            << (fake_jobs ? ", fake jobs" : "") << ")" << std::endl;
  int sig = 0;
  sigwait(&signals, &sig);
  std::cout << "tapp-server: stopping (signal " << sig << ")" << std::endl;
  server.stop();
  runner.stop();
  return 0;
}
