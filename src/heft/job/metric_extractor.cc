// Metric points from output lines (metric_extractor.h).
#include "heft/job/metric_extractor.h"

#include <re2/re2.h>

#include <cstdlib>

#include "heft/error.h"
#include "heft/job/spec/metric_regex.h"

namespace heft::job {

namespace {

bool parse_value(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

MetricExtractor::MetricExtractor(const std::vector<MetricDefinition>& definitions) {
  step_ = compile_metric_regex("(?:^|[^A-Za-z0-9_])step=([0-9]+)").value();
  for (const MetricDefinition& d : definitions) {
    auto re = compile_metric_regex(d.regex);
    if (!re) throw InvalidArgument("metric " + d.name + ": regex '" + d.regex + "': " + re.error());
    if (capturing_groups(*re.value()) < 1)
      throw InvalidArgument("metric " + d.name + ": regex '" + d.regex + "' has no group");
    metrics_.push_back({d.name, std::move(re).value()});
  }
}

MetricExtractor::~MetricExtractor() = default;
MetricExtractor::MetricExtractor(MetricExtractor&&) noexcept = default;

std::vector<MetricPoint> MetricExtractor::extract(int rank, std::string_view line,
                                                  double timestamp) const {
  std::vector<MetricPoint> points;
  if (metrics_.empty()) return points;
  const re2::StringPiece text(line.data(), line.size());
  std::string group;
  for (const Compiled& metric : metrics_) {
    double value = 0;
    if (!RE2::PartialMatch(text, *metric.re, &group) || !parse_value(group, &value)) continue;
    points.push_back({metric.name, rank, timestamp, std::nullopt, value});
  }
  if (!points.empty() && RE2::PartialMatch(text, *step_, &group)) {
    const long long step = std::strtoll(group.c_str(), nullptr, 10);
    for (MetricPoint& p : points) p.step = step;
  }
  return points;
}

}  // namespace heft::job
