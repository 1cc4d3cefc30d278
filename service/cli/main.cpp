// tapp-cli: profile models, run and plan placements, and optimize them with TAPP.
#include <iostream>

#include "common/allocator.h"
#include "service/cli/commands.h"
#include "profiler/torch_warnings.h"

int main(int argc, char** argv) {
  tapp::print_each_torch_warning_once();  // a model that warns in forward: once, not per step
  CLI::App app{"tapp-cli: pipeline-parallel placements for training DNNs (TAPP)"};
  app.set_version_flag("--version", "tapp-cli, " + tapp::allocator_description());
  app.require_subcommand(1);
  int exit_code = 0;
  tapp::cli::add_profile_command(app, exit_code);
  tapp::cli::add_export_model_command(app, exit_code);
  tapp::cli::add_run_command(app, exit_code);
  tapp::cli::add_plan_command(app, exit_code);
  tapp::cli::add_export_command(app, exit_code);
  tapp::cli::add_calibrate_command(app, exit_code);
  tapp::cli::add_train_policy_command(app, exit_code);
  tapp::cli::add_optimize_command(app, exit_code);
  tapp::cli::add_jobs_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
