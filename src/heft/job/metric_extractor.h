// Turns worker output lines into metric points: each metric definition's regex is searched
// in the line (ECMAScript, std::regex) and its first group, read as a number, is the value;
// `step=N` anywhere on the same line gives the step. Every match is a point, on every rank.
//
// Deliberately left out: storing the points (job_db.h) and aggregating across ranks.
#pragma once

#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "heft/job/job_db.h"
#include "heft/job/spec.h"

namespace heft::job {

class MetricExtractor {
 public:
  // Compiles every definition once. The definitions were validated by the spec (they compile
  // and have a group); throws heft::InvalidArgument naming the metric otherwise.
  explicit MetricExtractor(const std::vector<MetricDefinition>& definitions);

  // The points `line` gives. A first group that is not a number (nan and inf count as
  // numbers) is no match. Lines over 16 KiB are not searched (std::regex recurses per
  // character). Not thread-safe only in that it must not run concurrently with itself.
  std::vector<MetricPoint> extract(int rank, std::string_view line, double timestamp) const;

 private:
  struct Compiled {
    std::string name;
    std::regex re;
  };
  std::vector<Compiled> metrics_;
  std::regex step_;
};

}  // namespace heft::job
