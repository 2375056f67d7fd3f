// The worker shim an engine starts on every rank (`heft mpi-worker`, `heft slurm-worker`):
// it runs the rank's command as its child and stays beside it, so that the rank ends when its
// supervisor is gone, whichever engine started it and whatever the engine does then.
//
//  - The child runs in a process group of its own and dies with the shim (PR_SET_PDEATHSIG,
//    process.h). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 the shim receives (from
//    mpirun's daemon, slurmstepd, a terminal) go on to the child's group.
//  - Liveness: the shim holds its own authenticated connection to the job's store (HEFT_STORE,
//    HEFT_TOKEN), which lives in the supervisor's process, and asks it a CHECK every
//    `check_every`. A closed connection (the supervisor's process died: its kernel closes the
//    socket), no connection within `silence`, or no answer within `silence` (its machine or
//    network is gone) means the supervisor is lost: the shim says so on stderr, sends SIGTERM
//    to the child's group, SIGKILL HEFT_STOP_GRACE_MS later (default 5 s), and exits.
//  - When the child ends, the shim records its waitpid() status in the store under
//    "<HEFT_JOB>/world/exit/<RANK>" (the supervisor learns which ranks ended while others run:
//    external_group.h), then ends the same way: the child's exit code, or the child's signal
//    raised on itself, so the engine reports what it would have of the command itself.
//  - Sampling: with ShimOptions::sample and sample_every, the watcher calls sample(child's
//    pid) every sample_every (checking the store as often when that is shorter) and keeps a
//    non-empty result in the store under "<HEFT_JOB>/world/system/<RANK>"
//    (profile::rank_sample_key), where the supervisor's profiler reads the system series of
//    ranks on other hosts.
// Without HEFT_STORE or HEFT_TOKEN the command just runs as the shim's child.
//
// Deliberately left out: the engines' own variables (mpi_worker_environment,
// slurm_worker_environment map them before) and reconnecting to a store that went away (a
// store lives exactly as long as one start of the group).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "heft/job/launch/worker_env.h"

namespace heft::job {

// How long after its supervisor's death a rank under an engine is gone at most (docs/clusters.md):
// the store connection closes at once and is noticed within one check (1 s); a supervisor
// machine that vanished is noticed after kShimSilence; then the rank gets the stop grace.
inline constexpr std::chrono::milliseconds kShimCheckEvery{1000};
inline constexpr std::chrono::milliseconds kShimSilence{10000};

struct ShimOptions {
  std::string name = "heft worker";  // leads the shim's lines on stderr ("heft mpi-worker")
  std::chrono::milliseconds check_every = kShimCheckEvery;
  std::chrono::milliseconds silence = kShimSilence;
  // What the rank's process tree and host look like now (the child leads its process group);
  // "" stores nothing. Called on the watcher thread. Empty, or sample_every 0: no sampling.
  std::function<std::string(int child_pid)> sample;
  std::chrono::milliseconds sample_every{0};
};

// Runs `command` (argv[0] looked up on env's PATH) with `env` as above and returns the exit
// code to end with (when the child died of a signal, the shim raises it on itself first and
// returns 128 + it only if it survived that). 127 / 126 after one line on stderr when the
// command is not found / not executable.
int run_worker_shim(const Environment& env, const std::vector<std::string>& command,
                    const ShimOptions& options);

}  // namespace heft::job
