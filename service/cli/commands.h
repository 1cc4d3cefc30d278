// service/cli/commands.h — the subcommands of tapp-cli, one file each.
//
// Each add_*_command registers its subcommand on the app and a callback that
// runs it; the callback stores the process exit code in `exit_code`
// (0 ok, 1 failure, 2 bad input). main.cpp only wires them together.
// Also what several subcommands share: the seed check (seed_text) and their
// output files (unwritable before any work, write_output after it).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/write_file.h"

namespace tapp::cli {

// An output flag's file (--out, --save, ...): "" when none is named or it can
// be written, else "FLAG: PATH: why" for the command to print (exit 2).
inline std::string unwritable(const std::string& flag, const std::string& path) {
  if (path.empty()) return "";
  const Status s = writable_file(path);
  return s ? "" : flag + ": " + path + ": " + s.message();
}

// Writes `text` to the flag's file, whole (common/write_file.h): "" or "FLAG: PATH: why".
inline std::string write_output(const std::string& flag, const std::string& path, const std::string& text) {
  const Status s = write_file(path, text);
  return s ? "" : flag + ": " + path + ": " + s.message();
}

// --seed as written: digits only, at most 2^64 - 1 (CLI11 would read "-1" as 2^64 - 1).
inline CLI::Validator seed_text() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "expected a non-negative integer, got " + s;
        try {
          (void)std::stoull(s);
        } catch (const std::exception&) {
          return "at most 18446744073709551615, got " + s;
        }
        return "";
      },
      "", "seed");
}

void add_profile_command(CLI::App& app, int& exit_code);       // cmd_profile.cpp (profiler)
void add_export_model_command(CLI::App& app, int& exit_code);  // cmd_profile.cpp (profiler)
void add_run_command(CLI::App& app, int& exit_code);           // cmd_run.cpp (runtime)
void add_plan_command(CLI::App& app, int& exit_code);          // cmd_plan.cpp (planners)
void add_export_command(CLI::App& app, int& exit_code);        // cmd_export.cpp (planners)
void add_calibrate_command(CLI::App& app, int& exit_code);     // cmd_calibrate.cpp (simulator)
void add_train_policy_command(CLI::App& app, int& exit_code);  // cmd_train_policy.cpp (placer)
void add_optimize_command(CLI::App& app, int& exit_code);      // cmd_optimize.cpp (placer, service)
void add_jobs_command(CLI::App& app, int& exit_code);          // cmd_jobs.cpp (service)

// `tapp-cli optimize --server URL`: submits the request JSON (POST /placements
// body) to a tapp-server and follows the job with a progress bar; returns the
// exit code. Defined by the service (cmd_jobs.cpp).
// Its placement (and AL plan) is written to `out` (`al_out`) where named.
int optimize_on_server(const std::string& server_url, const std::string& request_json, bool json_output,
                       const std::string& out, const std::string& al_out);

// An optimization that failed, run here or on a server: 2 where its error
// names the request's input (model, cluster, options: bad input), else 1.
int optimize_failure_exit_code(const std::string& error);

}  // namespace tapp::cli
