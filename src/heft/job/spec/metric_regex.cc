#include "heft/job/spec/metric_regex.h"

#include <re2/re2.h>

namespace heft::job {

Result<std::unique_ptr<re2::RE2>> compile_metric_regex(const std::string& pattern) {
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(8 << 20);  // compiled program and DFA cache, per regex
  auto re = std::make_unique<re2::RE2>(pattern, options);
  if (!re->ok()) return Result<std::unique_ptr<re2::RE2>>::failure(re->error());
  return Result<std::unique_ptr<re2::RE2>>::success(std::move(re));
}

int capturing_groups(const re2::RE2& re) { return re.NumberOfCapturingGroups(); }

}  // namespace heft::job
