// heft: the command-line entry point. Each subcommand lives in its own file (commands.h).
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "heft/cli/commands.h"
#include "heft/error.h"

namespace {
int g_user_umask = 022;  // set once, first thing in main
}  // namespace

int heft::cli::user_umask() { return g_user_umask; }

int main(int argc, char** argv) {
  g_user_umask = static_cast<int>(::umask(077));
  CLI::App app{"heft: distributed deep-learning training, from one laptop to a cluster"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "heft 0.1.0");
  std::map<CLI::App*, heft::cli::Command> commands;
  auto add = [&](heft::cli::Command (*adder)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    heft::cli::Command cmd = adder(app);
    commands[app.get_subcommands({})[before]] = std::move(cmd);
  };
  add(heft::cli::add_train_command);
  add(heft::cli::add_resume_command);
  add(heft::cli::add_plan_command);
  add(heft::cli::add_jobs_command);
  add(heft::cli::add_describe_command);
  add(heft::cli::add_logs_command);
  add(heft::cli::add_metrics_command);
  add(heft::cli::add_stop_command);
  add(heft::cli::add_delete_command);
  add(heft::cli::add_diagnose_command);
  add(heft::cli::add_report_command);
  add(heft::cli::add_console_command);
  add(heft::cli::add_mpi_worker_command);
  add(heft::cli::add_slurm_worker_command);
  add(heft::cli::add_slurm_batch_command);
  add(heft::cli::add_tune_command);
  add(heft::cli::add_tunings_command);
  add(heft::cli::add_home_command);
  add(heft::cli::add_run_command);
  add(heft::cli::add_bench_command);
  add(heft::cli::add_contract_command);
  // An unknown first word is named (CLI11 would only say that a subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (CLI::App* sub : app.get_subcommands({})) {
      found = found || sub->get_name() == argv[1];
      if (!sub->get_group().empty()) known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::cerr << "heft: unknown command '" << argv[1] << "'; the commands are " << known
                << " (heft --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version print and succeed; a usage error exits 2, as shells and
    // argparse do (CLI11's own codes are 100+).
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, cmd] : commands)
      if (sub->parsed()) return cmd();
  } catch (const heft::InvalidArgument& e) {
    std::cerr << "heft: error: " << e.what() << "\n";
    return 2;  // bad input, like a usage error
  } catch (const heft::Error& e) {
    std::cerr << "heft: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "heft: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
