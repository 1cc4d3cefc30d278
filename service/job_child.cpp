// service/job_child.cpp — a job's child process: read the job, run it, report (see job_child.h).
#include "service/job_child.h"

#include <fcntl.h>
#include <unistd.h>

#include <iostream>
#include <new>

namespace tapp::service {
using nlohmann::json;

namespace {

int exit_code(JobExitCode code) { return static_cast<int>(code); }

[[noreturn]] void exit_out_of_memory() {
  static const char message[] = "tapp job: an allocation failed under the job's memory limit\n";
  ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
  (void)ignored;
  _exit(exit_code(JobExitCode::memory_limit));
}

// A report the server cannot read means the server is gone: the job's work is lost anyway.
void report(int fd, const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(1);
    off += static_cast<size_t>(n);
  }
}

}  // namespace

int run_job_child(const JobChildArgs& args, const JobFnFactory& make_job) {
  if (args.job_id.empty() || args.db_path.empty() || args.report_fd < 0) {
    std::cerr << "--run-job needs a job id, --db and --report-fd\n";
    return exit_code(JobExitCode::bad_arguments);
  }
  // Processes the job starts (tapp-workers) must not hold the pipe open after the job ends.
  fcntl(args.report_fd, F_SETFD, FD_CLOEXEC);
  // operator new failing is the memory limit: end at once with a cause the server can name,
  // rather than unwinding through code that may turn bad_alloc into a misleading error.
  std::set_new_handler(exit_out_of_memory);

  Result<std::unique_ptr<JobStore>> store = JobStore::open(args.db_path);
  if (!store) {
    std::cerr << "job " << args.job_id << ": " << store.error_message() << "\n";
    return exit_code(JobExitCode::store_failed);
  }
  Result<std::optional<JobRecord>> job = (*store)->get(args.job_id, false);
  if (!job || !job->has_value()) {
    std::cerr << "job " << args.job_id << ": " << (job ? "not in " + args.db_path : job.error_message()) << "\n";
    return exit_code(JobExitCode::store_failed);
  }
  JobInput input{args.job_id, (*job)->request, {}};
  if (Result<std::optional<std::string>> upload = (*store)->upload(args.job_id); upload && upload->has_value())
    input.upload = std::move(**upload);

  const std::atomic<bool> never_cancelled{false};
  ProgressFn progress = [&](const ProgressEvent& e) { report(args.report_fd, encode_progress_line(e)); };
  Result<json> result = Status::error("internal error");
  try {
    JobFn fn = make_job(**store, args);
    result = fn(input, progress, never_cancelled);
  } catch (const std::bad_alloc&) {
    exit_out_of_memory();
  } catch (const std::exception& e) {
    result = Status::error(std::string("internal error: ") + e.what());
  } catch (...) {
    result = Status::error("internal error");
  }
  report(args.report_fd, result ? encode_result_line(*result) : encode_error_line(result.error_message()));
  return exit_code(JobExitCode::reported);
}

}  // namespace tapp::service
