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
  const auto& ranges = space_.ranges();
  while (next_ < size_ && !space_.empty()) {
    uint64_t index = next_++;
    std::vector<uint64_t> at(ranges.size());
    for (size_t i = ranges.size(); i-- > 0;) {  // last range fastest
      const uint64_t n = points_of(ranges[i]);
      at[i] = index % n;
      index /= n;
    }
    Config parents;  // the unconditional categoricals, which conditions read
    for (size_t i = 0; i < ranges.size(); ++i)
      if (ranges[i].kind == Range::Kind::kCategorical && ranges[i].when.empty())
        parents[ranges[i].name] = ranges[i].values[at[i]];
    // An inactive conditional range takes only its first point, left out of the
    // configuration: its other points would repeat it.
    Config c;
    bool repeat = false;
    for (size_t i = 0; i < ranges.size() && !repeat; ++i) {
      const Range& r = ranges[i];
      if (!SearchSpace::active(r, parents)) {
        repeat = at[i] != 0;
        continue;
      }
      if (r.kind == Range::Kind::kCategorical)
        c[r.name] = r.values[at[i]];
      else
        c[r.name] = static_cast<int64_t>(r.min) + static_cast<int64_t>(at[i]);
    }
    if (!repeat) return c;
  }
  return std::nullopt;
}

}  // namespace heft::tune
