// The interface every search strategy implements (which configuration a tuning tries next;
// not train/'s training strategies, which run a training step), usable as a library: a tuner
// asks for configurations with suggest(), runs them, and reports each objective with
// observe(). Several suggestions may be pending at once (parallel trials); strategies that
// model the objective account for them. Objectives are minimised: a caller with a Maximize
// objective negates it. Warm start is observe() of earlier trials before the first suggest().
//
// Strategies: "grid" (grid_search.h), "random" (random_search.h), "bayesian"
// (bayesian_search.h); "Hyperband" suggests as random does and stops trials in the tuner
// (hyperband.h). Not thread-safe: one tuner drives a strategy.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "heft/tune/search_space.h"

namespace heft::tune {

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // The next configuration to try; nullopt when the strategy has nothing left to try (a
  // grid done). Each returned configuration is pending until observed or forgotten.
  virtual std::optional<Config> suggest() = 0;
  // The objective (lower is better) of a configuration's trial: a pending suggestion, or an
  // earlier trial (warm start). A non-finite objective counts as a failed trial (forget).
  virtual void observe(const Config& config, double objective) = 0;
  // A pending suggestion that will never report (its trial failed or was stopped).
  virtual void forget(const Config& config) = 0;
  // A configuration whose trial diverged (divergence.h): a failure that says something about
  // its region. A strategy that models the objective keeps it as a bad point so later
  // suggestions avoid the region; the others forget it.
  virtual void observe_failure(const Config& config) { forget(config); }
  virtual std::string name() const = 0;
};

// "grid", "random", "bayesian" (or capitalised) or "Hyperband" over `space`, seeded. Throws
// heft::InvalidArgument for another name, or a space the strategy cannot search (a grid over a
// continuous range).
std::unique_ptr<SearchStrategy> make_search_strategy(const std::string& name,
                                                     const SearchSpace& space, uint64_t seed);

}  // namespace heft::tune
