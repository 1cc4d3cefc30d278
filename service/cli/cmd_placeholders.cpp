// Temporary: subcommands whose part has not landed yet. Each part's owner
// deletes its entry here when its cmd_*.cpp lands.
#include <iostream>

#include "service/cli/commands.h"

namespace tapp::cli {
namespace {
void not_yet(CLI::App& app, const char* name, const char* what, int& exit_code) {
  auto* sub = app.add_subcommand(name, what);
  sub->allow_extras();
  sub->callback([&exit_code, name] {
    std::cerr << "tapp-cli " << name << ": not built in this version\n";
    exit_code = 1;
  });
}
}  // namespace

}  // namespace tapp::cli
