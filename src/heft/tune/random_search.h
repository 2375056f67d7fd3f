// Random search: each suggestion an independent uniform draw over the unit cube of the
// scaled ranges (so a Logarithmic range is sampled log-uniformly), a categorical value
// uniformly. Reproducible: the same seed gives the same sequence.
#pragma once

#include <random>

#include "heft/tune/search_strategy.h"

namespace heft::tune {

class RandomSearch : public SearchStrategy {
 public:
  RandomSearch(SearchSpace space, uint64_t seed) : space_(std::move(space)), rng_(seed) {}
  std::optional<Config> suggest() override { return space_.from_unit(draw()); }
  void observe(const Config&, double) override {}
  void forget(const Config&) override {}
  std::string name() const override { return "random"; }
  // One uniform point of the unit cube (categoricals one-hot).
  std::vector<double> draw();

 private:
  SearchSpace space_;
  std::mt19937_64 rng_;
};

// A uniform point of `space`'s unit cube from `rng` (categoricals one-hot).
std::vector<double> uniform_point(const SearchSpace& space, std::mt19937_64& rng);

}  // namespace heft::tune
