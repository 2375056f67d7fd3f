// `heft slurm-batch --dir D --name N --nodes K --tasks-per-node T -- SRUN ARGS...` (hidden;
// what the job supervisor runs for cluster.launcher slurm outside an allocation): submits a
// batch script running SRUN with sbatch and follows the batch job until it ends
// (job::submit_and_follow).
#include "heft/cli/commands.h"
#include "heft/job/launch/slurm_batch.h"

namespace heft::cli {

Command add_slurm_batch_command(CLI::App& app) {
  auto o = std::make_shared<job::BatchOptions>();
  CLI::App* cmd = app.add_subcommand("slurm-batch", "Submit an srun group with sbatch and follow it");
  cmd->group("");  // hidden from help and from the list of commands
  cmd->add_option("--dir", o->dir, "Folder for the batch script and its output")->required();
  cmd->add_option("--name", o->job_name, "Slurm job name");
  cmd->add_option("--nodes", o->nodes, "Nodes");
  cmd->add_option("--tasks-per-node", o->processes_per_host, "Tasks on each node");
  cmd->add_option("--sbatch-options", o->custom_sbatch_options, "Appended to sbatch's options");
  cmd->add_option("srun", o->srun_argv, "The srun command, after --")->required();
  return [o]() -> int { return job::submit_and_follow(*o); };
}

}  // namespace heft::cli
