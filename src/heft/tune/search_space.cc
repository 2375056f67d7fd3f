#include "heft/tune/search_space.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "heft/error.h"

namespace heft::tune {

namespace {

std::string number(double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

[[noreturn]] void bad(const Range& r, const std::string& what) {
  throw InvalidArgument("hyperparameter_ranges." + r.name + ": " + what);
}

double clamp01(double u) { return std::isnan(u) ? 0.0 : std::min(1.0, std::max(0.0, u)); }

// Conditions that can never hold at once: on one range, with no value in common.
bool exclusive(const Condition& a, const Condition& b) {
  if (a.empty() || b.empty() || a.range != b.range) return false;
  for (const std::string& v : a.values)
    if (std::find(b.values.begin(), b.values.end(), v) != b.values.end()) return false;
  return true;
}

// The coordinate of an inactive range.
constexpr double kInactive = 0.5;

}  // namespace

const char* scaling_name(Scaling s) {
  switch (s) {
    case Scaling::kAuto: return "Auto";
    case Scaling::kLinear: return "Linear";
    case Scaling::kLogarithmic: return "Logarithmic";
    case Scaling::kReverseLogarithmic: return "ReverseLogarithmic";
  }
  return "?";
}

Scaling parse_scaling(const std::string& name) {
  for (Scaling s : {Scaling::kAuto, Scaling::kLinear, Scaling::kLogarithmic,
                    Scaling::kReverseLogarithmic})
    if (name == scaling_name(s)) return s;
  throw InvalidArgument("scaling: expected Auto, Linear, Logarithmic or ReverseLogarithmic, found '" +
                        name + "'");
}

std::string value_text(const ParamValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return number(*d);
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return std::get<std::string>(v);
}

double scale_to_unit(const Range& r, double x) {
  x = std::min(r.max, std::max(r.min, x));
  if (r.max == r.min) return 0.0;
  switch (r.scaling) {
    case Scaling::kLogarithmic:
      return clamp01((std::log(x) - std::log(r.min)) / (std::log(r.max) - std::log(r.min)));
    case Scaling::kReverseLogarithmic:
      return clamp01((std::log1p(-r.min) - std::log1p(-x)) / (std::log1p(-r.min) - std::log1p(-r.max)));
    default:
      return clamp01((x - r.min) / (r.max - r.min));
  }
}

double scale_from_unit(const Range& r, double u) {
  u = clamp01(u);
  double x;
  switch (r.scaling) {
    case Scaling::kLogarithmic:
      x = std::exp(std::log(r.min) + u * (std::log(r.max) - std::log(r.min)));
      break;
    case Scaling::kReverseLogarithmic:
      x = -std::expm1(std::log1p(-r.min) + u * (std::log1p(-r.max) - std::log1p(-r.min)));
      break;
    default:
      x = r.min + u * (r.max - r.min);
  }
  return std::min(r.max, std::max(r.min, x));
}

void SearchSpace::add(Range r) {
  if (r.name.empty()) throw InvalidArgument("hyperparameter_ranges: a range without a name");
  for (const Range& other : ranges_)
    if (other.name == r.name && !exclusive(other.when, r.when))
      bad(r, "defined twice (a name may repeat only in ranges whose `when` names one "
             "categorical range with no value in common)");
  if (!r.when.empty() && r.when.values.empty()) bad(r, "when: expected at least one value");
  if (r.kind == Range::Kind::kCategorical) {
    if (r.values.empty()) bad(r, "expected at least one value");
    std::set<std::string> seen;
    for (const std::string& v : r.values) {
      if (v.empty()) bad(r, "an empty value");
      if (!seen.insert(v).second) bad(r, "the value '" + v + "' appears twice");
    }
    dims_ += static_cast<int>(r.values.size());
    ranges_.push_back(std::move(r));
    return;
  }
  if (!std::isfinite(r.min) || !std::isfinite(r.max)) bad(r, "min and max must be finite numbers");
  if (r.min > r.max)
    bad(r, "min (" + number(r.min) + ") is greater than max (" + number(r.max) + ")");
  if (r.scaling == Scaling::kAuto)
    r.scaling = r.min > 0 && r.max / r.min >= 100 ? Scaling::kLogarithmic : Scaling::kLinear;
  if (r.scaling == Scaling::kLogarithmic && r.min <= 0)
    bad(r, "Logarithmic scaling needs min > 0, found min " + number(r.min));
  if (r.scaling == Scaling::kReverseLogarithmic && !(r.min >= 0 && r.max < 1))
    bad(r, "ReverseLogarithmic scaling needs 0 <= min and max < 1, found [" + number(r.min) +
               ", " + number(r.max) + "]");
  dims_ += 1;
  ranges_.push_back(std::move(r));
}

void SearchSpace::check_conditions() const {
  for (const Range& r : ranges_) {
    if (r.when.empty()) continue;
    const auto parent = std::find_if(ranges_.begin(), ranges_.end(),
                                     [&](const Range& p) { return p.name == r.when.range; });
    if (parent == ranges_.end() || parent->kind != Range::Kind::kCategorical)
      bad(r, "when: expected the name of a categorical range, found '" + r.when.range + "'");
    if (!parent->when.empty())
      bad(r, "when: '" + r.when.range + "' is conditional itself (conditions do not nest)");
    for (const std::string& v : r.when.values)
      if (std::find(parent->values.begin(), parent->values.end(), v) == parent->values.end())
        bad(r, "when: '" + v + "' is not one of " + r.when.range + "'s values");
  }
}

int SearchSpace::active_dims() const {
  int always = 0;
  std::map<std::string, int> by_value;  // "range=value" -> coordinates active with it
  std::map<std::string, int> most;      // parent range -> the most over its values
  for (const Range& r : ranges_) {
    const int d = r.kind == Range::Kind::kCategorical ? static_cast<int>(r.values.size()) : 1;
    if (r.when.empty()) {
      always += d;
      continue;
    }
    for (const std::string& v : r.when.values) {
      int& n = by_value[r.when.range + "=" + v];
      n += d;
      most[r.when.range] = std::max(most[r.when.range], n);
    }
  }
  for (const auto& [parent, n] : most) always += n;
  return always;
}

bool SearchSpace::active(const Range& r, const Config& config) {
  if (r.when.empty()) return true;
  const auto it = config.find(r.when.range);
  if (it == config.end()) return false;
  const auto* v = std::get_if<std::string>(&it->second);
  return v && std::find(r.when.values.begin(), r.when.values.end(), *v) != r.when.values.end();
}

void SearchSpace::add_continuous(const std::string& name, double min, double max, Scaling s,
                                 Condition when) {
  Range r;
  r.kind = Range::Kind::kContinuous;
  r.name = name;
  r.min = min;
  r.max = max;
  r.scaling = s;
  r.when = std::move(when);
  add(std::move(r));
}

void SearchSpace::add_integer(const std::string& name, int64_t min, int64_t max, Scaling s,
                              Condition when) {
  Range r;
  r.kind = Range::Kind::kInteger;
  r.name = name;
  r.min = static_cast<double>(min);
  r.max = static_cast<double>(max);
  r.scaling = s;
  r.when = std::move(when);
  add(std::move(r));
}

void SearchSpace::add_categorical(const std::string& name, std::vector<std::string> values,
                                  Condition when) {
  Range r;
  r.kind = Range::Kind::kCategorical;
  r.name = name;
  r.values = std::move(values);
  r.when = std::move(when);
  add(std::move(r));
}

std::vector<double> SearchSpace::to_unit(const Config& config) const {
  std::vector<double> u;
  u.reserve(static_cast<size_t>(dims_));
  for (const Range& r : ranges_) {
    if (!active(r, config)) {
      u.insert(u.end(), r.kind == Range::Kind::kCategorical ? r.values.size() : 1, kInactive);
      continue;
    }
    const auto it = config.find(r.name);
    if (it == config.end()) throw InvalidArgument("configuration: no value for '" + r.name + "'");
    const ParamValue& v = it->second;
    if (r.kind == Range::Kind::kCategorical) {
      const auto* s = std::get_if<std::string>(&v);
      const auto pos = s ? std::find(r.values.begin(), r.values.end(), *s) : r.values.end();
      if (pos == r.values.end())
        throw InvalidArgument("configuration: '" + r.name + "' = '" + value_text(v) +
                              "' is not one of its values");
      for (size_t i = 0; i < r.values.size(); ++i)
        u.push_back(static_cast<long>(i) == pos - r.values.begin() ? 1.0 : 0.0);
      continue;
    }
    double x;
    if (const auto* d = std::get_if<double>(&v))
      x = *d;
    else if (const auto* i = std::get_if<int64_t>(&v))
      x = static_cast<double>(*i);
    else
      throw InvalidArgument("configuration: '" + r.name + "' expects a number, found '" +
                            value_text(v) + "'");
    u.push_back(scale_to_unit(r, x));
  }
  return u;
}

Config SearchSpace::from_unit(const std::vector<double>& u) const {
  if (static_cast<int>(u.size()) != dims_)
    throw InvalidArgument("from_unit: " + std::to_string(u.size()) + " coordinates for a space of " +
                          std::to_string(dims_));
  Config c;
  // Unconditional ranges first: the conditions read their values.
  for (const bool conditional : {false, true}) {
    size_t k = 0;
    for (const Range& r : ranges_) {
      const size_t at = k;
      k += r.kind == Range::Kind::kCategorical ? r.values.size() : 1;
      if (r.when.empty() == conditional || (conditional && !active(r, c))) continue;
      if (r.kind == Range::Kind::kCategorical) {
        size_t best = 0;
        for (size_t i = 1; i < r.values.size(); ++i)
          if (u[at + i] > u[at + best]) best = i;
        c[r.name] = r.values[best];
        continue;
      }
      const double x = scale_from_unit(r, u[at]);
      if (r.kind == Range::Kind::kInteger)
        c[r.name] = static_cast<int64_t>(std::llround(std::min(r.max, std::max(r.min, std::round(x)))));
      else
        c[r.name] = x;
    }
  }
  return c;
}

}  // namespace heft::tune
