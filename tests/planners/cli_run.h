// tests/planners/cli_run.h — runs the built tapp-cli from a test: its exit
// code and stdout (with stderr when asked), shared by the CLI tests.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tapp::test {

struct CliRun {
  int exit_code = -1;
  std::string out;
};

// `tapp-cli ARGS`; stdout (and stderr when asked) captured.
inline CliRun run_cli(const std::string& args, bool with_stderr = false) {
  const std::string cmd = std::string(TAPP_BIN_DIR) + "/tapp-cli " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tapp::test
