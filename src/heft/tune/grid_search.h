// Grid search over integer and categorical ranges: every combination once, in order (the
// last range varies fastest), then nothing. The job count is the grid's size (size()); a
// tuning job's max_jobs caps it. Continuous ranges cannot be enumerated: refused. A
// conditional range's points are enumerated where it is active only (size() counts them all,
// so the grid may end before size() suggestions).
#pragma once

#include "heft/tune/search_strategy.h"

namespace heft::tune {

class GridSearch : public SearchStrategy {
 public:
  // Throws heft::InvalidArgument naming a continuous range, or a grid over 1,000,000 points.
  explicit GridSearch(SearchSpace space);
  std::optional<Config> suggest() override;
  void observe(const Config&, double) override {}
  void forget(const Config&) override {}
  std::string name() const override { return "grid"; }
  // Combinations in all.
  uint64_t size() const { return size_; }

 private:
  SearchSpace space_;
  uint64_t size_ = 1;
  uint64_t next_ = 0;
};

}  // namespace heft::tune
