// What `heft tune` leaves in $HEFT_HOME/tunings/<name>/tuning.json (tuner.h) read back for
// `heft tunings`, `heft describe TUNING` and `heft stop TUNING`: listing, a text or JSON
// description with counts by status and the best trial, and a stop request (a file the
// running `heft tune` polls; a tuning whose `heft tune` is gone is marked Stopped at once).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "heft/result.h"
#include "heft/tune/search_space.h"
#include "heft/tune/tuning_spec.h"

namespace heft::tune {

// <home>/tunings/<name>
std::string tuning_dir(const std::string& home, const std::string& name);
// <dir>/stop-requested: present once `heft stop` asked the tuning to stop.
std::string stop_file(const std::string& dir);
// Writes `text` to `path` through a temporary file renamed over it, so a reader (or a crash)
// never sees half a record. Throws heft::IoError naming the file.
void write_file_atomically(const std::string& path, const std::string& text);

// tuning.json of `name`, with "trial_counts" (by status) added; a tuning InProgress whose
// `heft tune` process is gone reads as Failed ("failure_reason" says so). When no tuning is
// named `name`, the newest whose spec gave it as base_name (its "name" says which). nullopt
// when there is none (or its record cannot be read).
std::optional<nlohmann::json> read_tuning(const std::string& home, const std::string& name);
// Completed, Failed or Stopped.
bool tuning_ended(const nlohmann::json& tuning);
// Every tuning of `home`, newest first.
std::vector<nlohmann::json> list_tunings(const std::string& home);

// NAME STATUS STRATEGY TRIALS BEST OBJECTIVE CREATED, one line a tuning, with a header.
std::string tunings_table(const std::vector<nlohmann::json>& tunings);
// Status, strategy, objective, counts by status, the best trial, then every trial.
std::string describe_tuning_text(const nlohmann::json& tuning);

// A trial of a warm start's parent tuning: its configuration, its objective (minimised:
// negated for Maximize) and whether it diverged (then a failure to the strategy).
struct SeedTrial {
  Config config;
  double objective = 0;
  bool diverged = false;
};
// The trials of `spec`'s warm_start parents that have an objective or diverged, with a value
// for each of spec's ranges they name (an active range left out is the strategy's to refuse).
// An error naming the field (warm_start.parents[i]) for a missing parent or one that
// optimised another objective.
heft::Result<std::vector<SeedTrial>> parents_trials(const std::string& home, const TuningSpec& spec);

enum class TuningStop { kRequested, kAlreadyEnded, kOrphanStopped };
// Asks a running tuning to stop. nullopt when there is no tuning of that name.
std::optional<TuningStop> request_tuning_stop(const std::string& home, const std::string& name);

}  // namespace heft::tune
