// The worker contract: every variable heft gives a worker process (torchrun's, the cloud
// training container's, heft's own), each once, with who sets it, its type, what its readers
// take when it is unset, an example and its meaning: the table docs/worker-contract.md is
// written from (`heft contract --markdown`). And heft's own variables typed: the one writer
// the launchers and `heft train` use, the one reader comm, heft-train, the worker shim and the
// Python package use, so each default (the collective timeout's above all) is written once.
//
// The layer below comm: it depends on heft/error.h and the standard library only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "heft/contract/defaults.h"

namespace heft::contract {

using Environment = std::map<std::string, std::string>;

struct Variable {
  std::string_view name;        // "SM_HP_<NAME>": one variable per name
  std::string_view set_by;      // "every launcher", "heft train", ...
  std::string_view type;        // "integer >= 1", "host:port", "JSON object", ...
  std::string_view when_unset;  // what heft's readers take when it is unset; "" required
  std::string_view example;
  std::string_view meaning;
  bool reserved = false;        // a job spec's `environment` may not set it
};

// Every variable a worker gets from heft, in the order docs list them: torchrun's, the
// training container's, heft's own.
const std::vector<Variable>& worker_variables();

// The row for `name` ("SM_HP_LR" finds "SM_HP_<NAME>"); nullptr when heft sets no such variable.
const Variable* find_variable(std::string_view name);

// Whether a job spec's `environment` may not set `name` (heft's own settings of the group).
bool reserved(std::string_view name);

// The table as Markdown (docs/worker-contract.md's, between its generated markers).
std::string markdown(const std::vector<Variable>& rows);

// heft's own variables, typed. A launcher fills the ones it owns and writes them; a worker
// reads them all at once. Unset fields are not written; read() leaves absent variables unset.
struct HeftVariables {
  std::optional<std::string> store;         // HEFT_STORE, host:port
  std::optional<std::string> token;         // HEFT_TOKEN
  std::optional<std::string> job;           // HEFT_JOB
  std::optional<int> timeout_s;             // HEFT_TIMEOUT, >= 1
  std::optional<std::string> host;          // HEFT_HOST
  std::optional<std::string> job_dir;       // HEFT_JOB_DIR
  std::optional<std::string> distribution;  // HEFT_DISTRIBUTION, a JSON object's text
  std::optional<std::string> checkpoint;    // HEFT_CHECKPOINT, a JSON object's text
  std::optional<int64_t> stop_grace_ms;     // HEFT_STOP_GRACE_MS, >= 0
  std::optional<std::string> cpus;          // HEFT_CPUS, a CPU list ("2-3")
  // HEFT_RECOVERY: "in_place" when the launcher restarts a rank killed by a signal alone
  // and the others rejoin it (docs/recovery.md); unset: a lost rank stops the group.
  std::optional<std::string> recovery;
  std::optional<int> generation;            // HEFT_GENERATION, >= 0: the world this worker joins

  // Sets every field that is set under its variable in `env`.
  void write(Environment& env) const;

  // From an environment. A malformed number throws InvalidArgument naming the variable and
  // what was expected; an empty value counts as unset.
  static HeftVariables read(const Environment& env);
  // From this process's environment.
  static HeftVariables from_process();

  int timeout() const { return timeout_s.value_or(kDefaultTimeoutS); }
  int64_t stop_grace() const { return stop_grace_ms.value_or(kDefaultStopGraceMs); }
  std::string job_name() const { return job.value_or(kDefaultJob); }
  bool in_place_recovery() const { return recovery.value_or("") == "in_place"; }
};

// The world communicator's group of `job` in generation `generation`: "<job>/world" for the
// first, "<job>/world.g<N>" for the world re-formed after the N-th in-place recovery.
std::string world_group(const std::string& job, int generation);
// The store key under which the launcher publishes the generation the workers of `job` are
// to join next (its value: the decimal number), once it has restarted a lost rank.
std::string generation_key(const std::string& job);
// The store key under which a rank that has joined generation N's world (every rank has)
// records N, so the launcher knows the group re-formed.
std::string formed_key(const std::string& job);

// heft's home: $HEFT_HOME when set and non-empty, else $HOME/.heft (the password database's
// home when HOME is unset, /tmp without one). The job database, the jobs and comm's record of
// allreduce choices live under it.
std::string heft_home();

}  // namespace heft::contract
