// tapp-server: the placement job service (HTTP API, job queue, SQLite store, the page).
//
// Data flow: HTTP (listener/session, io threads) -> router -> JobStore + JobRunner
// (runner threads) -> one child process per job (job_supervisor.h), which is
// this binary again in its hidden job mode (`--run-job ID`: placer's optimize(),
// optimize_job.h) -> progress and result over a pipe -> SQLite -> HTTP.
// Startup recovers jobs a previous run left mid-way (re-queued once each).
// SIGINT/SIGTERM stop it cleanly; SIGKILL loses nothing committed.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "common/allocator.h"
#include "common/read_file.h"
#include "placer/features.h"
#include "service/http/server.h"
#include "service/job_child.h"
#include "service/job_limits.h"
#include "service/job_supervisor.h"
#include "service/optimize_job.h"
#include "service/sqlite_profile_cache.h"
#include "profiler/torch_warnings.h"

namespace fs = std::filesystem;
using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

std::set<std::string> split_hosts(const std::string& s) {
  std::set<std::string> out;
  std::stringstream ss(s);
  std::string h;
  while (std::getline(ss, h, ','))
    if (!h.empty()) out.insert(h);
  return out;
}

// The job mode: this process runs one job and reports to the server that started it.
int run_optimize_job_child(const JobChildArgs& args, const std::set<std::string>& allowed_hosts) {
  return run_job_child(args, [allowed_hosts](JobStore& store, const JobChildArgs& a) -> JobFn {
    // Profiles and fitted calibrations live in the job database.
    auto cache = std::make_shared<SqliteProfileCache>(store);
    OptimizeJobSettings settings{a.work_dir, allowed_hosts, cache.get(), {}};
    settings.latest_policy = [&store] { return store.latest_policy(kPolicyFeatureVersion); };
    return [cache, settings](const JobInput& input, const ProgressFn& progress, const std::atomic<bool>& cancel) {
      return run_optimize_job(input, settings, progress, cancel);
    };
  });
}

// One server per database: a second would recover the jobs the first is
// running and run them again. The lock is the kernel's (flock on DB.lock,
// released when the process ends, however it ends), so a crashed server
// leaves none behind; job children do not inherit it (O_CLOEXEC).
Status hold_database_lock(const std::string& db) {
  const std::string lock = db + ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error("cannot create the lock file " + lock + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK)
      return Status::error("in use by another tapp-server (it holds " + lock + "); give each server its own --db");
    return Status::error("cannot lock " + lock + ": " + std::strerror(e));
  }
  return Status::ok();  // fd stays open for the server's lifetime
}

std::string own_binary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "tapp-server" : self.string();
}

}  // namespace

int main(int argc, char** argv) {
  tapp::print_each_torch_warning_once();  // a model that warns in forward: once, not per step
  CLI::App cli{"tapp-server: pipeline-parallel placement jobs over HTTP (TAPP)"};
  HttpOptions http;
  std::string db = "tapp.db", token_file, allow_hosts, web_dir = std::string(TAPP_SOURCE_DIR) + "/web",
              schemas_dir = std::string(TAPP_SOURCE_DIR) + "/schemas";
  JobsOptions jobs;
  int64_t job_memory_mib = 0;
  double stall_timeout_s = 1800;  // profiling a large model reports nothing until it is done
  std::string job_program;
  JobChildArgs child;
  struct {
    size_t max_body_bytes = AppState{}.max_body_bytes;
    int64_t max_model_bytes = 0;
  } app_limits;
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
  // Limits against hostile clients (README "Security").
  std::vector<std::string> cors_origins;
  cli.add_option("--cors-origin", cors_origins, "an origin (http://host:port) whose pages may call the API; repeatable")
      ->delimiter(',');
  cli.add_option("--max-body-bytes", app_limits.max_body_bytes, "largest request body (413 above)")
      ->capture_default_str()->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cli.add_option("--max-model-bytes", app_limits.max_model_bytes,
                 "largest model training state, 12 bytes a parameter with SGD, 16 with Adam (0 = the cluster's capacity)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 62));
  cli.add_option("--header-limit-bytes", http.header_limit_bytes, "largest request head (431 above)")
      ->capture_default_str()->check(CLI::Range(size_t{1024}, size_t{1} << 20));
  cli.add_option("--max-header-fields", http.max_header_fields, "most header fields in a request (431 above)")
      ->capture_default_str()->check(CLI::Range(size_t{8}, size_t{10000}));
  cli.add_option("--max-connections", http.max_connections, "open connections in total")
      ->capture_default_str()->check(CLI::Range(1, 1000000));
  cli.add_option("--max-connections-per-client", http.max_connections_per_client,
                 "open connections per client address")->capture_default_str()->check(CLI::Range(1, 1000000));
  cli.add_option("--reserve-connections", http.reserve_connections,
                 "connections beyond the caps that answer only /healthz")->capture_default_str()->check(CLI::Range(0, 10000));
  cli.add_option("--max-inflight-body-bytes", http.max_body_bytes_in_flight,
                 "request bodies being read at once, all connections together (503 above)")
      ->capture_default_str()->check(CLI::Range(int64_t{1024}, int64_t{1} << 40));
  cli.add_option("--header-timeout-s", http.header_timeout_s, "seconds to send a request's head")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  cli.add_option("--idle-timeout-s", http.idle_timeout_s, "seconds a keep-alive connection may wait idle")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  cli.add_option("--read-timeout-s", http.read_timeout_s, "seconds to send a whole request")
      ->capture_default_str()->check(CLI::Range(1, 3600));
  cli.add_option("--job-memory-mib", job_memory_mib,
                 "memory limit of each job's processes when its request sets none (0 = the machine's memory / --jobs)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, kMaxJobMemoryLimitMiB));
  cli.add_option("--job-stall-timeout-s", stall_timeout_s, "a job that reports no progress for this long fails")
      ->capture_default_str()->check(CLI::Range(0.1, 7 * 24 * 3600.0));
  // Hidden: the job mode (the server starts itself with these), and test flags.
  cli.add_option("--run-job", child.job_id, "")->group("");
  cli.add_option("--report-fd", child.report_fd, "")->group("");
  cli.add_option("--work-dir", child.work_dir, "")->group("");
  cli.add_option("--job-program", job_program, "")->group("");  // tests: a test-only job entry point
  cli.set_version_flag("--version", "tapp-server, " + allocator_description());
  CLI11_PARSE(cli, argc, argv);
  if (!child.job_id.empty()) {
    child.db_path = db;
    return run_optimize_job_child(child, split_hosts(allow_hosts));
  }

  AppState app;
  app.max_body_bytes = app_limits.max_body_bytes;
  app.limits.max_model_bytes = app_limits.max_model_bytes;
  app.cors_origins = cors_origins;
  if (!token_file.empty()) {
    Result<std::string> token = read_file(token_file);
    if (!token) {
      std::cerr << "--token-file: " << token_file << ": " << token.error_message() << "\n";
      return 2;
    }
    app.token = *token;
    while (!app.token.empty() && std::isspace(static_cast<unsigned char>(app.token.back()))) app.token.pop_back();
    if (app.token.empty()) {
      std::cerr << "--token-file: " << token_file << " is empty\n";
      return 2;
    }
  }
  app.limits.allowed_remote_hosts = split_hosts(allow_hosts);
  app.web_dir = web_dir;
  // Optional: without them the server answers those two routes with 404.
  if (Result<std::string> s = read_file(schemas_dir + "/openapi.json")) app.openapi_json = *s;
  if (Result<std::string> s = read_file(schemas_dir + "/job.schema.json")) app.job_schema_json = *s;

  if (Status locked = hold_database_lock(db); !locked) {
    std::cerr << "tapp-server: --db " << db << ": " << locked.message() << "\n";
    return 2;
  }
  Result<std::unique_ptr<JobStore>> store = JobStore::open(db);
  if (!store) {
    std::cerr << "tapp-server: --db " << db << ": " << store.error_message() << "\n";
    return 1;
  }
  Result<std::vector<std::string>> queued = (*store)->recover();
  if (!queued) {
    std::cerr << queued.error_message() << "\n";
    return 1;
  }
  JobProcessOptions job_process;
  job_process.program = job_program.empty() ? own_binary() : job_program;
  if (!allow_hosts.empty()) job_process.program_args = {"--allow-remote-hosts", allow_hosts};
  job_process.db_path = fs::absolute(db).string();
  job_process.work_root = job_process.db_path + ".jobs";
  job_process.default_memory_limit_mib = job_memory_mib > 0 ? job_memory_mib : memory_share_mib(jobs.runners);
  job_process.stall_timeout_s = stall_timeout_s;
  JobRunner runner(**store, make_supervised_job(job_process), jobs);
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
            << jobs.runners << " runner(s), " << queued->size() << " queued job(s) recovered, jobs limited to "
            << job_process.default_memory_limit_mib << " MiB each"
            << (job_program.empty() ? "" : ", job program " + job_program) << ")" << std::endl;
  int sig = 0;
  sigwait(&signals, &sig);
  std::cout << "tapp-server: stopping (signal " << sig << ")" << std::endl;
  server.stop();
  runner.stop();
  return 0;
}
