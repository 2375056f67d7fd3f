// `heft slurm-worker -- CMD ARGS...` (hidden; what every task of `heft run --launcher slurm`
// runs): maps SLURM_* onto the environment contract (job::slurm_worker_environment) and
// executes CMD in its place.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "heft/cli/commands.h"
#include "heft/job/slurm_launcher.h"

namespace heft::cli {

Command add_slurm_worker_command(CLI::App& app) {
  auto command = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("slurm-worker", "Run CMD as a task of an srun group");
  cmd->group("");  // hidden from help and from the list of commands
  cmd->add_option("command", *command, "The worker command, after --")->required();
  return [command]() -> int {
    const job::Environment env = job::slurm_worker_environment(job::current_environment());
    std::vector<std::string> envp = job::to_envp(env);
    std::vector<char*> argv, envv;
    for (std::string& a : *command) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : envp) envv.push_back(e.data());
    envv.push_back(nullptr);
    const auto path = env.find("PATH");
    if (path != env.end()) ::setenv("PATH", path->second.c_str(), 1);
    ::execvpe(argv[0], argv.data(), envv.data());
    std::cerr << "heft slurm-worker: cannot execute '" << (*command)[0] << "': "
              << std::strerror(errno) << "\n";
    return errno == ENOENT ? 127 : 126;
  };
}

}  // namespace heft::cli
