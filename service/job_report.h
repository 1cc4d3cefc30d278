// service/job_report.h — what a job process tells the server: one JSON object per line on a pipe.
//
// Owns the wire format between a job's child process (job_child.h) and the
// server's supervisor (job_supervisor.h), and the child's exit codes:
//   {"progress": {phase, iteration, total_iterations, best_step_ms, reward, elapsed_s}}
//   {"result": <the job's result JSON>}            last line of a job that succeeded
//   {"error": "options.seed: ..."}                 last line of a job that failed cleanly
// A child that dies without a result or error line crashed; its exit status
// says how (a signal, or one of the exit codes below).
// Data flow: child's ProgressFn / return value -> encode_* -> pipe ->
// decode_report_line -> supervisor -> JobRunner (store, live progress).
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "placer/optimize.h"

namespace tapp::service {

// Exit codes of a job process that could not report a result or an error line.
enum class JobExitCode : int {
  reported = 0,       // a result or error line was written
  bad_arguments = 2,  // the entry point was called wrongly
  memory_limit = 3,   // an allocation failed under the job's memory limit
  store_failed = 4,   // the job could not be read from the database
};

struct JobReport {
  enum class Kind { progress, result, error };
  Kind kind = Kind::progress;
  ProgressEvent progress;  // Kind::progress
  nlohmann::json result;   // Kind::result
  std::string error;       // Kind::error
};

std::string encode_progress_line(const ProgressEvent& event);
std::string encode_result_line(const nlohmann::json& result);
std::string encode_error_line(const std::string& error);
// A line the supervisor cannot read is an error naming the line.
Result<JobReport> decode_report_line(const std::string& line);

nlohmann::json progress_to_json(const ProgressEvent& e);
ProgressEvent progress_from_json(const nlohmann::json& j);

}  // namespace tapp::service
