// comm's tuning knobs: the environment variables that override CommunicatorOptions' defaults
// (options.h), one table: the name, what it means, the default as the docs show it, and how a
// value is read into the options. CommunicatorOptions::from_env() applies every row;
// `heft contract --knobs` prints the table, which docs/comm.md's "Tuning variables" holds
// (a test keeps them equal). The worker contract's variables (HEFT_TOKEN, HEFT_TIMEOUT,
// HEFT_HOST: contract/worker.h) are not knobs.
#pragma once

#include <string>
#include <vector>

#include "heft/comm/options.h"

namespace heft::comm {

struct Knob {
  const char* name;
  // The default as docs show it: the options' default in the knob's own syntax, or, where
  // it depends on the machine, how it is chosen.
  std::string shown_default;
  const char* meaning;
  // Reads a set, non-empty value into `o`; a malformed one throws heft::InvalidArgument
  // naming the variable and what was expected. nullptr: read where it acts (named in
  // `meaning`), not into the options.
  void (*apply)(CommunicatorOptions& o, const std::string& value);
};

const std::vector<Knob>& tuning_knobs();

// The environment's non-empty value of knob variable `name`, else nullptr: the one place the
// knobs are read (CommunicatorOptions::from_env, and the callers that derive a default
// where one is absent: HEFT_BIND_ADDRESS from the store's interface).
const char* knob_value(const char* name);

// The table as Markdown (docs/comm.md's, between its generated markers).
std::string knobs_markdown();

}  // namespace heft::comm
