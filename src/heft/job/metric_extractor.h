// Turns worker output lines into metric points: each metric definition's regex is searched
// in the line and its first group, read as a number, is the value; `step=N` anywhere on the
// same line gives the step. Every match is a point, on every rank.
//
// The regexes are the user's and the lines are whatever a worker prints, so they are
// matched with RE2 (metric_regex.h): linear time in the line, bounded memory, no recursion.
// Nothing a worker prints can crash or stall the supervisor.
//
// Deliberately left out: storing the points (job_db.h) and aggregating across ranks.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "heft/job/record/job_db.h"
#include "heft/job/spec/spec.h"

namespace re2 {
class RE2;
}

namespace heft::job {

class MetricExtractor {
 public:
  // Compiles every definition once. The definitions were validated by the spec (they compile
  // and have a group); throws heft::InvalidArgument naming the metric otherwise.
  explicit MetricExtractor(const std::vector<MetricDefinition>& definitions);
  ~MetricExtractor();
  MetricExtractor(MetricExtractor&&) noexcept;

  // The points `line` gives. A first group that is not a number (nan and inf count as
  // numbers) is no match. Any bytes (NUL, invalid UTF-8) and any length are fine; the time
  // is linear in the line's length. Must not run concurrently with itself.
  std::vector<MetricPoint> extract(int rank, std::string_view line, double timestamp) const;

 private:
  struct Compiled {
    std::string name;
    std::unique_ptr<re2::RE2> re;
  };
  std::vector<Compiled> metrics_;
  std::unique_ptr<re2::RE2> step_;
};

}  // namespace heft::job
