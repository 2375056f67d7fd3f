// The heft command's subcommands: each file in cli/ adds one to the CLI11 app and returns
// the callback that runs it. Every command returns its process exit code; errors go to
// stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace heft::cli {

using Command = std::function<int()>;

// `heft run [--hosts H] [-n P] [--timeout S] -- CMD ARGS...` (run.cc)
Command add_run_command(CLI::App& app);
// `heft bench <collective> ...` (bench.cc)
Command add_bench_command(CLI::App& app);

}  // namespace heft::cli
