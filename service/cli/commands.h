// service/cli/commands.h — the subcommands of tapp-cli, one file each.
//
// Each add_*_command registers its subcommand on the app and a callback that
// runs it; the callback stores the process exit code in `exit_code`
// (0 ok, 1 failure, 2 bad input). main.cpp only wires them together.
#pragma once

#include <CLI/CLI.hpp>

namespace tapp::cli {

void add_profile_command(CLI::App& app, int& exit_code);       // cmd_profile.cpp (profiler)
void add_export_model_command(CLI::App& app, int& exit_code);  // cmd_profile.cpp (profiler)
void add_run_command(CLI::App& app, int& exit_code);           // cmd_run.cpp (runtime)
void add_plan_command(CLI::App& app, int& exit_code);          // cmd_plan.cpp (planners)
void add_optimize_command(CLI::App& app, int& exit_code);      // cmd_optimize.cpp (placer, service)
void add_jobs_command(CLI::App& app, int& exit_code);          // cmd_jobs.cpp (service)

}  // namespace tapp::cli
