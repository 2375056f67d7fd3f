// Metric points from output lines (metric_extractor.h).
#include "heft/job/metric_extractor.h"

#include <cstdlib>

#include "heft/error.h"

namespace heft::job {

namespace {

constexpr size_t kMaxSearchedLine = 16 * 1024;

bool parse_value(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

MetricExtractor::MetricExtractor(const std::vector<MetricDefinition>& definitions)
    : step_("(?:^|[^A-Za-z0-9_])step=([0-9]+)") {
  for (const MetricDefinition& d : definitions) {
    try {
      metrics_.push_back({d.name, std::regex(d.regex, std::regex::ECMAScript)});
    } catch (const std::regex_error& e) {
      throw InvalidArgument("metric " + d.name + ": regex '" + d.regex + "': " + e.what());
    }
  }
}

std::vector<MetricPoint> MetricExtractor::extract(int rank, std::string_view line,
                                                  double timestamp) const {
  std::vector<MetricPoint> points;
  if (metrics_.empty() || line.size() > kMaxSearchedLine) return points;
  const std::string text(line);
  std::smatch m;
  for (const Compiled& metric : metrics_) {
    double value = 0;
    if (!std::regex_search(text, m, metric.re) || m.size() < 2 || !m[1].matched ||
        !parse_value(m[1].str(), &value))
      continue;
    points.push_back({metric.name, rank, timestamp, std::nullopt, value});
  }
  if (!points.empty() && std::regex_search(text, m, step_)) {
    const long long step = std::strtoll(m[1].str().c_str(), nullptr, 10);
    for (MetricPoint& p : points) p.step = step;
  }
  return points;
}

}  // namespace heft::job
