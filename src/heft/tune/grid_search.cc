#include "heft/tune/grid_search.h"

#include "heft/error.h"

namespace heft::tune {

namespace {

constexpr uint64_t kMaxGrid = 1000000;

uint64_t points_of(const Range& r) {
  return r.kind == Range::Kind::kCategorical ? r.values.size()
                                             : static_cast<uint64_t>(r.max - r.min) + 1;
}

}  // namespace

GridSearch::GridSearch(SearchSpace space) : space_(std::move(space)) {
  for (const Range& r : space_.ranges()) {
    if (r.kind == Range::Kind::kContinuous)
      throw InvalidArgument("hyperparameter_ranges." + r.name +
                            ": grid search takes integer and categorical ranges only, not a "
                            "continuous one");
    size_ *= points_of(r);
    if (size_ > kMaxGrid)
      throw InvalidArgument("hyperparameter_ranges: the grid has more than " +
                            std::to_string(kMaxGrid) + " points");
  }
}

std::optional<Config> GridSearch::suggest() {
  if (next_ >= size_ || space_.empty()) return std::nullopt;
  uint64_t index = next_++;
  Config c;
  const auto& ranges = space_.ranges();
  for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {  // last range fastest
    const uint64_t n = points_of(*it), k = index % n;
    index /= n;
    if (it->kind == Range::Kind::kCategorical)
      c[it->name] = it->values[k];
    else
      c[it->name] = static_cast<int64_t>(it->min) + static_cast<int64_t>(k);
  }
  return c;
}

}  // namespace heft::tune
