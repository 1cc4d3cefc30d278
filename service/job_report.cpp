// service/job_report.cpp — the job process's report lines (see job_report.h).
#include "service/job_report.h"

#include <cmath>

namespace tapp::service {
using nlohmann::json;

json progress_to_json(const ProgressEvent& e) {
  json j{{"phase", e.phase},           {"iteration", e.iteration}, {"total_iterations", e.total_iterations},
         {"reward", e.reward},         {"elapsed_s", e.elapsed_s}};
  j["best_step_ms"] = e.best_step_ms > 0 ? json(e.best_step_ms) : json();
  if (!e.message.empty()) j["message"] = e.message;  // profiling: micro-batch size and layer
  if (e.phase_fraction >= 0) j["phase_fraction"] = e.phase_fraction;
  if (!std::isfinite(e.reward)) j["reward"] = nullptr;
  return j;
}

ProgressEvent progress_from_json(const json& j) {
  ProgressEvent e;
  if (!j.is_object()) return e;
  auto number = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  if (auto it = j.find("phase"); it != j.end() && it->is_string()) e.phase = it->get<std::string>();
  e.iteration = static_cast<int>(number("iteration"));
  e.total_iterations = static_cast<int>(number("total_iterations"));
  e.best_step_ms = number("best_step_ms");
  e.reward = j.contains("reward") && j["reward"].is_null() ? NAN : number("reward");
  e.elapsed_s = number("elapsed_s");
  if (auto it = j.find("message"); it != j.end() && it->is_string()) e.message = it->get<std::string>();
  if (auto it = j.find("phase_fraction"); it != j.end() && it->is_number()) e.phase_fraction = it->get<double>();
  return e;
}

std::string encode_progress_line(const ProgressEvent& event) {
  return json{{"progress", progress_to_json(event)}}.dump() + "\n";
}

std::string encode_result_line(const json& result) { return json{{"result", result}}.dump() + "\n"; }

std::string encode_error_line(const std::string& error) { return json{{"error", error}}.dump() + "\n"; }

Result<JobReport> decode_report_line(const std::string& line) {
  auto unreadable = [&] {
    return Status::error("the job process sent an unreadable report line: " + line.substr(0, 200));
  };
  json j = json::parse(line, nullptr, false);
  if (!j.is_object() || j.size() != 1) return unreadable();
  JobReport report;
  if (auto it = j.find("progress"); it != j.end() && it->is_object()) {
    report.kind = JobReport::Kind::progress;
    report.progress = progress_from_json(*it);
  } else if (auto it = j.find("result"); it != j.end()) {
    report.kind = JobReport::Kind::result;
    report.result = std::move(*it);
  } else if (auto it = j.find("error"); it != j.end() && it->is_string()) {
    report.kind = JobReport::Kind::error;
    report.error = it->get<std::string>();
  } else {
    return unreadable();
  }
  return report;
}

}  // namespace tapp::service
