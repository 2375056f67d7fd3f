// Slurm's own clients for the Slurm launcher (slurm_launcher.h): `heft slurm-batch`, which
// the job supervisor runs outside an allocation, submits the srun group as a batch job with
// sbatch and follows it with squeue and scontrol (scancel when stopped), so that the
// supervisor sees it as it sees srun: output on stdout, an exit code at the end.
//
// Deliberately left out: job arrays, heterogeneous jobs, and following a job heft did not
// submit.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "heft/job/launch/process.h"

namespace heft::job {

// `heft slurm-batch`: writes `<dir>/batch.sh` running `srun_argv`, submits it with sbatch
// (nodes and tasks as given, output <dir>/slurm-<id>.out, the environment exported), copies
// the output to stdout as it grows, reports state changes on stderr, and returns the batch
// job's exit code once it left the queue (128 + signal for a signalled task, 1 for a job
// ended otherwise without a code, e.g. cancelled or timed out). SIGINT/SIGTERM cancel the
// job (scancel) and return 128 + the signal once it is gone.
struct BatchOptions {
  std::string dir;
  std::string job_name = "heft";
  int nodes = 1;
  int processes_per_host = 1;
  std::string custom_sbatch_options;
  std::vector<std::string> srun_argv;
  std::string sbatch = "sbatch", squeue = "squeue", scontrol = "scontrol", scancel = "scancel";
  std::chrono::milliseconds poll{500};
};
int submit_and_follow(const BatchOptions& options);

// Runs a Slurm client (sbatch, squeue, scontrol, scancel) with this process's environment,
// killed after 30 s (a client hangs while the controller is down). Throws SpawnError when it
// cannot start.
CommandOutput slurm_client(const std::vector<std::string>& argv);

// The value of KEY in one line of `scontrol show ... -o` (KEY=value fields separated by
// blanks); "" when the line has none.
std::string scontrol_field(const std::string& line, const std::string& key);

}  // namespace heft::job
