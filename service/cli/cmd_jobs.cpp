// tapp-cli jobs, and `tapp-cli optimize --server URL` (optimize_on_server):
// the command line as a client of tapp-server.
//
// Data flow: request JSON -> POST /placements -> poll GET /placements/{id}
// twice a second -> progress bar (terminal) or one line per change (pipe) ->
// the result (JSON with --json, else a summary and the baselines table).
// Ctrl-C while following a job cancels it on the server.
// Token: $TAPP_TOKEN, or --token-file for `jobs`.
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/read_file.h"
#include "service/cli/commands.h"
#include "service/cli/progress_bar.h"
#include "service/http_client.h"

namespace tapp::cli {
using nlohmann::json;
using service::HttpReply;
using service::ServerUrl;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

std::map<std::string, std::string> auth_headers(const std::string& token_file) {
  std::string token;
  if (!token_file.empty()) {
    Result<std::string> text = read_file(token_file);
    if (text) token = text->substr(0, text->find('\n'));
  } else if (const char* env = std::getenv("TAPP_TOKEN")) {
    token = env;
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) return {};
  return {{"Authorization", "Bearer " + token}};
}

// Prints the server's error ({"error", "field"}) and returns the exit code.
int report_error(const std::string& what, const Result<HttpReply>& r) {
  if (!r) {
    std::cerr << what << ": " << r.error_message() << "\n";
    return 1;
  }
  json j = json::parse(r->body, nullptr, false);
  std::string msg = j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r->body;
  std::string field = j.is_object() && j.contains("field") && j["field"].is_string() ? j["field"].get<std::string>() : "";
  std::cerr << what << ": HTTP " << r->status << ": " << (field.empty() ? "" : field + ": ") << msg << "\n";
  if (r->status == 503 && r->headers.count("retry-after"))
    std::cerr << "  (retry after " << r->headers.at("retry-after") << " s)\n";
  return r->status >= 400 && r->status < 500 ? 2 : 1;
}

// An answer no tapp-server sends (another program on the port, a proxy's
// page, a server of another version): said with the URL, exit 1, never a crash.
int unexpected_answer(const std::string& what, const std::string& server_url, const std::string& why) {
  std::cerr << what << ": unexpected answer from " << server_url << ": " << why << " (is it a tapp-server?)\n";
  return 1;
}

// A job id as the server makes them: safe to put in a URL path.
bool plausible_job_id(const json& id) {
  if (!id.is_string() || id.get<std::string>().empty() || id.get<std::string>().size() > 64) return false;
  for (char c : id.get<std::string>())
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

std::string num(const json& v, int digits = 2) {
  if (!v.is_number()) return "-";
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(digits) << v.get<double>();
  return ss.str();
}

std::string progress_line(const json& job, bool bar) {
  const json& p = job.value("progress", json());
  std::ostringstream ss;
  std::string status = job.value("status", "?");
  int it = p.is_object() ? p.value("iteration", 0) : 0;
  int total = p.is_object() ? p.value("total_iterations", 0) : 0;
  if (bar) {
    const int width = 28;
    double frac = status == "succeeded" ? 1.0 : total > 0 ? std::min(1.0, double(it) / total) : 0.0;
    ss << progress_bar(frac, width) << " ";
  }
  ss << status;
  if (p.is_object()) {
    std::string phase = p.value("phase", "");
    if (phase != status) ss << " (" << phase << ")";
    if (total > 0) ss << " " << it << "/" << total;
    else if (it > 0) ss << " " << it;
    ss << " best " << num(p.value("best_step_ms", json())) << " ms";
    if (p.contains("reward") && p["reward"].is_number()) ss << " reward " << num(p["reward"], 3);
  }
  return ss.str();
}

void print_result(const json& job) {
  const json& r = job.value("result", json());
  const json& best = r.contains("best") ? r["best"] : r;  // placer's result is flat
  std::cout << "job " << job.value("id", "") << ": " << job.value("status", "") << " (" << job.value("model", "")
            << ", " << num(job.value("elapsed_s", json()), 1) << " s)\n";
  if (best.is_object()) {
    std::cout << "best placement: " << best.value("source", "?") << ", step " << num(best.value("step_ms", json()), 3)
              << " ms";
    if (best.contains("measured_step_ms") && best["measured_step_ms"].is_number())
      std::cout << " (measured " << num(best["measured_step_ms"], 3) << " ms)";
    std::cout << ", comm " << num(json(100.0 * best.value("comm_fraction", 0.0)), 1) << "%\n";
    const json& pl = best.value("placement", json());
    if (pl.is_object()) {
      std::cout << "  groups -> devices: " << pl.value("groups", json::array()).dump() << ", micro-batches "
                << pl.value("micro_batches", 0) << ", schedule " << pl.value("schedule", "") << "\n";
    }
  }
  if (r.contains("speedup_vs_bsp"))
    std::cout << "speedup vs BSP " << num(r["speedup_vs_bsp"]) << "x, vs best baseline "
              << num(r.value("speedup_vs_best_baseline", json())) << "x\n";
  if (r.contains("baselines") && r["baselines"].is_array()) {
    std::cout << std::left << std::setw(22) << "baseline" << std::right << std::setw(12) << "step ms" << std::setw(12)
              << "vs BSP" << std::setw(10) << "comm\n";
    for (const json& b : r["baselines"]) {
      std::cout << std::left << std::setw(22) << b.value("name", "?") << std::right << std::setw(12)
                << (b.value("ok", true) ? num(b.value("step_ms", json()), 3) : "failed") << std::setw(12)
                << num(b.value("speedup_vs_bsp", json())) << std::setw(9)
                << (b.contains("comm_fraction") && b["comm_fraction"].is_number()
                        ? num(json(100 * b["comm_fraction"].get<double>()), 1) + "%"
                        : "-")
                << "\n";
    }
  }
  // Predicted and measured side by side (result.verification), flagged over the threshold.
  if (r.contains("verification") && r["verification"].is_object()) {
    const json& v = r["verification"];
    if (v.value("state", "") != "verified")
      std::cout << "verification " << v.value("state", "") << ": " << v.value("reason", "") << "\n";
    for (const json& p : v.value("plans", json::array())) {
      std::cout << "verified " << p.value("role", "") << " (" << p.value("name", "") << "): predicted "
                << num(p.value("predicted_ms", json()), 3) << " ms, ";
      if (p.value("ok", false))
        std::cout << "measured " << num(p.value("measured_ms", json()), 3) << " ms ("
                  << num(json(100 * p.value("relative_difference", 0.0)), 1) << "%)"
                  << (p.value("disagrees", false) ? "  DISAGREES" : "");
      else
        std::cout << "not measured (" << p.value("failure_kind", "") << ": " << p.value("message", "") << ")";
      std::cout << "\n";
    }
  }
}

int list_jobs(const std::string& server_url, const std::string& status, int limit, bool as_json,
              const std::string& token_file) {
  Result<ServerUrl> url = service::parse_server_url(server_url);
  if (!url) {
    std::cerr << url.error_message() << "\n";
    return 2;
  }
  std::string target = "/placements?limit=" + std::to_string(limit);
  if (!status.empty()) target += "&status=" + status;
  Result<HttpReply> r = service::http_call(*url, "GET", target, "", auth_headers(token_file), 15);
  if (!r || r->status != 200) return report_error("tapp-cli jobs", r);
  json page = json::parse(r->body, nullptr, false);
  if (!page.is_object() || !page.contains("jobs") || !page["jobs"].is_array())
    return unexpected_answer("tapp-cli jobs", server_url, "expected an object with a jobs array");
  if (as_json) {
    std::cout << page.dump(2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(16) << "id" << std::setw(12) << "status" << std::setw(16) << "model"
            << std::setw(12) << "iteration" << std::setw(14) << "best ms" << "created\n";
  for (const json& j : page["jobs"]) {
    if (!j.is_object()) return unexpected_answer("tapp-cli jobs", server_url, "a job that is not an object");
    const json& p = j.value("progress", json());
    std::string it = p.is_object() ? std::to_string(p.value("iteration", 0)) +
                                         (p.value("total_iterations", 0) ? "/" + std::to_string(p.value("total_iterations", 0)) : "")
                                   : "-";
    std::cout << std::left << std::setw(16) << j.value("id", "") << std::setw(12) << j.value("status", "")
              << std::setw(16) << j.value("model", "") << std::setw(12) << it << std::setw(14)
              << num(p.is_object() ? p.value("best_step_ms", json()) : json())
              << (j.contains("created_at") && j["created_at"].is_string() ? j["created_at"].get<std::string>() : "")
              << "\n";
  }
  std::cout << page.value("total", 0) << " job(s)\n";
  return 0;
}

// A succeeded job's placement (and AL plan) written where --out (--al-out)
// names; false after saying why.
bool write_job_plans(const json& result, const std::string& out, const std::string& al_out) {
  for (const auto& [flag, path, plan] :
       {std::tuple<const char*, const std::string&, json>{"--out", out, result.value("placement", json())},
        {"--al-out", al_out, result.value("al", json::object()).value("placement", json())}}) {
    if (path.empty()) continue;
    if (!plan.is_object()) {
      std::cerr << "tapp-cli optimize --server: " << flag << ": the job's result has no such plan to write\n";
      return false;
    }
    if (const std::string why = write_output(flag, path, plan.dump(2) + "\n"); !why.empty()) {
      std::cerr << "tapp-cli optimize --server: " << why << "\n";
      return false;
    }
  }
  return true;
}

// Follows the job to its end; then the result as a local run gives it, and
// its placement (and AL plan) written to `out` (`al_out`) where named.
int follow_job(const ServerUrl& url, const std::string& server_url, const std::string& request_json,
               bool json_output, const std::string& out, const std::string& al_out) {
  auto headers = auth_headers("");
  auto post_headers = headers;
  post_headers["Content-Type"] = "application/json";
  Result<HttpReply> r = service::http_call(url, "POST", "/placements", request_json, post_headers, 60);
  if (!r || r->status != 202) return report_error("tapp-cli optimize --server", r);
  const json posted = json::parse(r->body, nullptr, false);
  if (!posted.is_object() || !plausible_job_id(posted.value("id", json())))
    return unexpected_answer("tapp-cli optimize --server", server_url, "expected {\"id\": ...} for the job submitted");
  const std::string id = posted["id"].get<std::string>();
  bool tty = isatty(fileno(stderr));
  std::cerr << "submitted job " << id << " to " << server_url << "\n";
  auto previous = std::signal(SIGINT, on_sigint);
  std::string last_line;
  json job;
  int failures = 0;
  for (;;) {
    if (g_interrupted) {
      service::http_call(url, "DELETE", "/placements/" + id, "", headers, 10);
      std::cerr << (tty ? "\n" : "") << "interrupted: cancelled job " << id << "\n";
      std::signal(SIGINT, previous);
      return 130;
    }
    Result<HttpReply> g = service::http_call(url, "GET", "/placements/" + id, "", headers, 15);
    if (!g || g->status != 200) {
      if (++failures >= 10) return report_error("tapp-cli optimize --server: following job " + id, g);
    } else {
      job = json::parse(g->body, nullptr, false);
      if (!job.is_object() || !job.value("status", json()).is_string()) {
        if (++failures >= 10)
          return unexpected_answer("tapp-cli optimize --server", server_url, "job " + id + " has no status");
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      failures = 0;
      std::string line = progress_line(job, tty);
      if (tty) {
        std::cerr << "\r\033[K" << line << std::flush;
      } else if (line != last_line) {
        std::cerr << line << "\n";
      }
      last_line = line;
      std::string st = job.value("status", "");
      if (st == "succeeded" || st == "failed" || st == "cancelled") break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::signal(SIGINT, previous);
  if (tty) std::cerr << "\n";
  std::string st = job.value("status", "");
  if (st == "succeeded" && !job.value("result", json()).is_object())
    return unexpected_answer("tapp-cli optimize --server", server_url, "job " + id + " succeeded without a result");
  if (st == "succeeded" && !write_job_plans(job["result"], out, al_out)) return 1;
  if (json_output) {
    std::cout << (st == "succeeded" ? job["result"] : job).dump(2) << "\n";
  } else if (st == "succeeded") {
    print_result(job);
  } else {
    std::cerr << "job " << id << " " << st << ": " << job.value("error", "") << "\n";
  }
  if (st == "failed") return optimize_failure_exit_code(job.value("error", ""));
  return st == "succeeded" ? 0 : 1;
}

}  // namespace

void add_jobs_command(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("jobs", "list jobs on a tapp-server");
  auto server = std::make_shared<std::string>("http://127.0.0.1:8080");
  auto status = std::make_shared<std::string>();
  auto token_file = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto limit = std::make_shared<int>(50);
  sub->add_option("--server", *server, "tapp-server URL")->capture_default_str();
  sub->add_option("--status", *status, "only jobs in this state")
      ->check(CLI::IsMember({"queued", "profiling", "optimizing", "succeeded", "failed", "cancelled"}));
  sub->add_option("--limit", *limit, "at most this many (newest first)")->check(CLI::Range(1, 500))->capture_default_str();
  sub->add_option("--token-file", *token_file, "bearer token file (default: $TAPP_TOKEN)");
  sub->add_flag("--json", *as_json, "print the server's JSON");
  sub->callback([=, &exit_code] {
    try {
      exit_code = list_jobs(*server, *status, *limit, *as_json, *token_file);
    } catch (const json::exception& e) {  // a field of another type than the server's: never std::terminate
      exit_code = unexpected_answer("tapp-cli jobs", *server, e.what());
    }
  });
}

int optimize_failure_exit_code(const std::string& error) {
  for (const char* input : {"model", "cluster", "options"})
    if (error.rfind(input, 0) == 0) return 2;
  return 1;
}

int optimize_on_server(const std::string& server_url, const std::string& request_json, bool json_output,
                       const std::string& out, const std::string& al_out) {
  Result<ServerUrl> url = service::parse_server_url(server_url);
  if (!url) {
    std::cerr << url.error_message() << "\n";
    return 2;
  }
  try {
    return follow_job(*url, server_url, request_json, json_output, out, al_out);
  } catch (const json::exception& e) {  // a field of another type than the server's: never std::terminate
    return unexpected_answer("tapp-cli optimize --server", server_url, e.what());
  }
}

}  // namespace tapp::cli
