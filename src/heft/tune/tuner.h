// A tuning job's run (`heft tune`): asks the strategy for configurations and runs each as a
// normal training job, `heft train TEMPLATE --name <tuning>-NNN --set hyperparameters.k=v`,
// a child process of this one, at most max_parallel_jobs at a time and max_jobs in all.
// A trial's objective is the last value of the objective metric its job recorded (from the
// job database); a trial that fails or records no value is kept with its status and the
// tuning goes on. A trial that diverged (the spec's diverged_if, divergence.h) ends
// Diverged with its reason, is a failure to the strategy (SearchStrategy::observe_failure), to
// the median rule and to Hyperband, and is never the best; one whose loss turns non-finite
// while it runs is stopped at once. Its state lives in <home>/tunings/<name>/: tuning.json (rewritten
// atomically at every change: status, trials, best trial), the training job it ran
// (training-job.yaml, for an inline one) and each trial's output (<trial>.log).
//
// Stopping: SIGINT/SIGTERM to `heft tune`, `heft stop` (a stop-requested file in the tuning's
// folder, tuning_record.h), or stop_requested() turning true, stops the
// running trials (SIGTERM to each `heft train`, which stops its job as `heft stop` would)
// and ends the tuning Stopped.
//
// Early stopping (the median rule), Hyperband and warm start: early_stopping.h, hyperband.h,
// tuning_record.h (parents_trials).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "heft/result.h"
#include "heft/tune/tuning_spec.h"

namespace heft::tune {

struct TunerOptions {
  std::string heft_binary;  // the `heft` that runs trials (this one)
  std::string home;         // $HEFT_HOME
  std::ostream* out = nullptr;  // the live table; nullptr: silent
  // Polled every `poll_ms`; true stops the tuning. Signals are handled besides.
  std::function<bool()> stop_requested;
  int poll_ms = 200;
};

// Runs the tuning to its end. Returns job::kExitCompleted (every trial ran; some may have
// failed), kExitFailed (no trial produced an objective) or kExitStopped; or, before any
// trial starts, an error: a tuning directory that exists already (naming it), a warm_start
// parent missing or with another objective (parents_trials), ranges the strategy cannot
// search (a grid over 1,000,000 points). heft::IoError when a file cannot be written.
heft::Result<int> run_tuning(const TuningSpec& spec, const TunerOptions& options);

}  // namespace heft::tune
