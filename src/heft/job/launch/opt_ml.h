// The managed training container's /opt/ml for a job's workers, without root and without
// touching the machine's /opt: each worker starts in a mount namespace of its own (inside a
// user namespace of its own when heft does not run as root), where /opt is a private tmpfs
// holding the machine's /opt entries bound back in place and ml/ made of the job's folders:
//
//   /opt/ml/model               SM_MODEL_DIR          (<job>/model)
//   /opt/ml/checkpoints         SM_CHECKPOINT_DIR     (<job>/checkpoints, kept across restarts)
//   /opt/ml/local_checkpoints   <job>/local_checkpoints
//   /opt/ml/output              SM_OUTPUT_DIR         (data/, intermediate/, tensorboard/, failure)
//   /opt/ml/input               SM_INPUT_DIR          (config/*.json, data/<channel>)
//
// So a script that writes /opt/ml/model/model.pt leaves it in the job's model folder, two jobs
// at once each see their own, and nothing changes outside the worker's namespace. The
// variables keep naming the job's folders (the same files either way).
//
// A worker gets it when its environment has HEFT_OPT_ML=1 (`heft train` and the estimator set
// it; a spec's `environment` may set HEFT_OPT_ML=0). Limits: a user namespace shows files of
// other users (root's /usr) as owned by nobody and makes setuid programs run unprivileged;
// where neither a mount namespace nor a user namespace can be made (checked once per process
// by a child that tries), the workers run without /opt/ml and heft says so once on stderr;
// /opt/ml/code is not provided (the script runs where it is).
#pragma once

#include <string>
#include <vector>

#include "heft/job/launch/worker_env.h"

namespace heft::job {

// What a child needs to enter its /opt/ml, prepared before fork: fixed strings only.
struct OptMlPlan {
  bool enabled = false;
  bool user_namespace = false;  // not root: a user namespace mapping this uid and gid
  std::string uid_map, gid_map;  // "<uid> <uid> 1"
  std::string opt = "/opt";
  // (target under /opt/ml, source folder), in mount order.
  std::vector<std::pair<std::string, std::string>> binds;
};

// The plan for a worker of environment `env`: disabled unless HEFT_OPT_ML=1, and where this
// machine allows no namespace (see above). Creates the source folders (local_checkpoints,
// output/tensorboard) when missing. Throws
// heft::InvalidArgument naming the variable when HEFT_OPT_ML has another value than 0 or 1, or
// a folder variable it needs is unset.
OptMlPlan opt_ml_plan(const Environment& env);

// In a forked child, before execve: async-signal-safe calls only. Returns 0, or an errno with
// *step naming what failed (a static string).
int enter_opt_ml(const OptMlPlan& plan, const char** step);

}  // namespace heft::job
