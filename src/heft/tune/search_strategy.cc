#include "heft/tune/search_strategy.h"

#include "heft/error.h"
#include "heft/tune/bayesian_search.h"
#include "heft/tune/grid_search.h"
#include "heft/tune/random_search.h"

namespace heft::tune {

std::unique_ptr<SearchStrategy> make_search_strategy(const std::string& name,
                                                     const SearchSpace& space, uint64_t seed) {
  if (name == "grid" || name == "Grid") return std::make_unique<GridSearch>(space);
  // Hyperband draws its configurations at random; its stopping is the tuner's (hyperband.h).
  if (name == "random" || name == "Random" || name == "Hyperband")
    return std::make_unique<RandomSearch>(space, seed);
  if (name == "bayesian" || name == "Bayesian") return std::make_unique<BayesianSearch>(space, seed);
  throw InvalidArgument("strategy: expected Grid, Random, Bayesian or Hyperband, found '" + name + "'");
}

}  // namespace heft::tune
