// Runs a shell command for a test and captures its output: what the end-to-end tests of
// heft-train and the benchmarks' scripts need (the forked-rank harness is ranks.h).
#pragma once

#include <string>
#include <vector>

namespace heft::test {

struct CommandOutput {
  int code = -1;                   // exit code; 128 + signal when killed; -1 not started
  std::string text;                // stdout and stderr, interleaved
  std::vector<std::string> lines;  // text split at '\n'
};

// `command` through /bin/sh with stderr joined to stdout; blocks until it ends.
CommandOutput run_command(const std::string& command);

}  // namespace heft::test
