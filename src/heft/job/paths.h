// Where heft keeps its state: the home ($HEFT_HOME, default ~/.heft) with the job database
// heft.db and one directory per job, jobs/<name>/ with logs/, checkpoints/, model/, output/
// and input/ (docs/jobs.md).
//
// Deliberately left out: cleaning up old jobs.
#pragma once

#include <string>

#include "heft/result.h"

namespace heft::job {

// $HEFT_HOME when set and non-empty, else $HOME/.heft (the password database's home when
// HOME is unset). Not created here.
std::string heft_home();

// <home>/heft.db
std::string database_path(const std::string& home);

struct JobPaths {
  std::string root;         // <home>/jobs/<name>
  std::string logs;         // root/logs: rank-N.log, one per worker
  std::string checkpoints;  // root/checkpoints: SM_CHECKPOINT_DIR, kept across restarts
  std::string model;        // root/model: SM_MODEL_DIR
  std::string output;       // root/output: SM_OUTPUT_DIR (a worker's failure file goes here)
  std::string output_data;  // root/output/data: SM_OUTPUT_DATA_DIR
  std::string output_intermediate;  // root/output/intermediate: SM_OUTPUT_INTERMEDIATE_DIR
  std::string input;        // root/input: one folder per host, as each host's /opt/ml/input

  std::string rank_log(int rank) const;  // logs/rank-N.log
  // input/<host>: SM_INPUT_DIR of that host's workers.
  std::string input_dir(const std::string& host) const;
  // input/<host>/config: SM_INPUT_CONFIG_DIR, with hyperparameters.json, resourceconfig.json
  // and inputdataconfig.json.
  std::string input_config_dir(const std::string& host) const;
};

JobPaths job_paths(const std::string& home, const std::string& name);

// Creates the home (mode 0700) when missing. Error: the path and errno's text.
Status make_home(const std::string& home);

// Creates the job's directories. A job directory that already exists and is not empty
// (left by a job whose database entry is gone) is refused, so that no new job resumes from
// a stranger's checkpoints.
Status make_job_dirs(const JobPaths& paths);

// A warning when `home` can be read or entered by users other than its owner (a home made
// by hand with mkdir is 0755); "" when it is private or missing.
std::string home_exposure_warning(const std::string& home);

}  // namespace heft::job
