// The mpirun launcher: runs a group of workers on the hosts of an OpenMPI hostfile through
// `mpirun` (the engine a cluster already runs), so the launch path is mpirun's own (its rsh
// agent, its daemons). heft keeps what it does for the local launcher: the rendezvous store
// runs here, bound to the address the hosts reach this machine by (never every interface),
// with a fresh job token; every rank runs `heft mpi-worker -- CMD`, which maps OpenMPI's
// OMPI_COMM_WORLD_* variables onto the environment contract (RANK, LOCAL_RANK, WORLD_SIZE,
// SM_HOSTS, SM_CURRENT_HOST, ...; docs/clusters.md) and executes CMD.
//
//   heft run --launcher mpirun --hostfile F -n P [--mpi-options "..."] -- CMD ARGS...
//
// Deliberately left out (docs/clusters.md says what is next): Slurm; naming the failed
// rank of an mpirun group.
#pragma once

#include <string>
#include <vector>

#include <chrono>

#include "heft/job/launch/external_group.h"
#include "heft/job/launch/group_watch.h"
#include "heft/result.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

struct MpiHost {
  std::string name;  // a host name or address mpirun (and its rsh agent) understands
  int slots = 0;     // 0: not given in the hostfile
};

// An OpenMPI hostfile: one host a line, "NAME [slots=N] [max_slots=M]", '#' comments. An
// error names the file and line.
Result<std::vector<MpiHost>> read_hostfile(const std::string& path);

struct MpirunOptions : EngineOptions {
  std::vector<MpiHost> hosts;
  // Appended to mpirun's own options (split on blanks; quotes group words).
  std::string custom_mpi_options;
  std::string mpirun = "mpirun";
};

// This machine's address that traffic to `host` leaves from (a route lookup, nothing is
// sent); "127.0.0.1" for loopback names. Throws heft::IoError when `host` does not resolve.
std::string local_address_toward(const std::string& host);

// Splits options the way a shell would split words (blanks; '...' and "..." group).
// Throws heft::InvalidArgument on an unclosed quote.
std::vector<std::string> split_words(const std::string& text);

// mpirun's argument vector: the hostfile, P processes a host in host-major order, no
// binding, `-x NAME` for each of `forward` (values go in mpirun's environment, so the
// token is never on a command line), the custom options, then
// `HEFT mpi-worker -- CMD...`. Pure: tested without running it.
std::vector<std::string> mpirun_argv(const MpirunOptions& options, const std::string& hostfile,
                                     const Environment& forward);

// Runs the group: the store, a hostfile in a private temporary folder, mpirun; SIGINT and
// SIGTERM are passed on to mpirun. Returns mpirun's exit code (128 + signal if killed).
// Throws heft::InvalidArgument on bad options (naming them), heft::IoError when the store
// cannot bind.
int run_mpirun(const MpirunOptions& options);

// As run_mpirun, for the job supervisor: the launchers' hooks (group_watch.h; every
// rank's line through --tag-output, ticks that may stop the group: SIGTERM to mpirun, SIGKILL
// after `grace`; restarts with a fresh store and token). Worker pids are not known here
// (they run on other hosts): on_start gets none. A failure's rank is not known either: the
// end has failed_rank -1 and mpirun's exit status.
GroupEnd run_mpirun_group(const MpirunOptions& options, const LauncherHooks& hooks,
                          std::chrono::milliseconds grace);

// In a rank started by mpirun: `parent` with the contract's variables set from
// OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} and HEFT_MPI_HOSTS (the hostfile's
// names, comma-separated). Throws heft::InvalidArgument naming a missing variable (the
// command was not started by heft's mpirun launcher).
Environment mpi_worker_environment(const Environment& parent);

}  // namespace heft::job
