// Hyperband as asynchronous successive halving (ASHA) over a resource: the objective values
// a trial reports (one a step, an epoch, an evaluation: whatever its metric lines count).
//
// Terms. *Rungs*: resources r_k = min_resource * eta^k up to max_resource. When a running
// trial has reported r_k values, its best value so far is its *score* at rung k; it goes on
// only if that score is within the best 1/eta of the scores earlier trials recorded at rung
// k (the 1/eta quantile, minimising), else it is stopped. The first trial at a rung always
// goes on. Configurations come from random search; the stopping does the halving, so trials
// never wait for a rung to fill (asynchronous: max_parallel_jobs stays busy).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace heft::tune {

class Hyperband {
 public:
  // 1 <= min_resource <= max_resource; eta >= 2. heft::InvalidArgument otherwise.
  Hyperband(int min_resource, int max_resource, int eta);

  const std::vector<int>& rungs() const { return rungs_; }

  // Called as `trial`'s series (minimised) grows: records its score at every rung it newly
  // reached and returns true (with `why`) when one of them falls outside the best 1/eta.
  bool should_stop(const std::string& trial, const std::vector<double>& series,
                   std::string* why = nullptr);
  // `trial` diverged (divergence.h): its scores at every rung become +infinity, worse than
  // any, so they no longer hold later trials to the values it had before it diverged.
  void mark_failed(const std::string& trial);

 private:
  int eta_;
  std::vector<int> rungs_;
  std::map<int, std::map<std::string, double>> scores_;  // rung index -> trial -> score
  std::map<std::string, size_t> reached_;      // trial -> rungs recorded
};

}  // namespace heft::tune
