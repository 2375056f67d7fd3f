// `heft slurm-worker -- CMD ARGS...` (hidden; what every task of `heft run --launcher slurm`
// runs): maps SLURM_* onto the environment contract (job::slurm_worker_environment) and
// executes CMD in its place (Gloo's interface chosen as for mpi-worker).
#include "heft/cli/commands.h"
#include "heft/job/launch/slurm_launcher.h"

namespace heft::cli {

Command add_slurm_worker_command(CLI::App& app) {
  auto command = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("slurm-worker", "Run CMD as a task of an srun group");
  cmd->group("");  // hidden from help and from the list of commands
  cmd->add_option("command", *command, "The worker command, after --")->required();
  return [command]() -> int {
    job::Environment env = job::slurm_worker_environment(job::current_environment());
    choose_socket_interface(env);
    return exec_worker(env, *command, "heft slurm-worker");
  };
}

}  // namespace heft::cli
