#include "heft/tune/random_search.h"

namespace heft::tune {

std::vector<double> uniform_point(const SearchSpace& space, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> u;
  u.reserve(static_cast<size_t>(space.dims()));
  for (const Range& r : space.ranges()) {
    if (r.kind != Range::Kind::kCategorical) {
      u.push_back(unit(rng));
      continue;
    }
    std::uniform_int_distribution<size_t> pick(0, r.values.size() - 1);
    const size_t chosen = pick(rng);
    for (size_t i = 0; i < r.values.size(); ++i) u.push_back(i == chosen ? 1.0 : 0.0);
  }
  return u;
}

std::vector<double> RandomSearch::draw() { return uniform_point(space_, rng_); }

}  // namespace heft::tune
