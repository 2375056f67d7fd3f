// The hyperparameter ranges a tuning job searches, as the seeds define them: continuous,
// integer and categorical ranges, each numeric one with a scaling (Auto, Linear,
// Logarithmic, ReverseLogarithmic). Every strategy works on the *unit cube* of the scaled
// ranges: one coordinate in [0, 1] per numeric range and one per value of a categorical
// range (one-hot); to_unit() and from_unit() map between a configuration and a point.
//
// Scalings (u in [0, 1] is the coordinate, x the value):
//   Linear              x = min + u (max - min)
//   Logarithmic         log x linear in u; needs 0 < min
//   ReverseLogarithmic  log(1 - x) linear in u; needs 0 <= min < max < 1 (for values near 1,
//                       such as momentum 0.9 .. 0.999)
//   Auto                Logarithmic when 0 < min and max / min >= 100, else Linear
// Integers are rounded to the nearest value after the map (and clamped into the range).
//
// Conditional ranges: a range with a *condition* (`when`: a categorical range and some of its
// values) is *active* only when that categorical takes one of them; a configuration holds
// values for its active ranges only. Two ranges may share a name when both are conditional on
// the same categorical with disjoint values (a learning rate range per optimizer). An
// inactive range's coordinate is 0.5 in to_unit (so snapped points agree) and ignored by
// from_unit.
//
// Deliberately left out: nested conditions (a condition on a conditional range), constraints
// between numeric ranges.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace heft::tune {

enum class Scaling { kAuto, kLinear, kLogarithmic, kReverseLogarithmic };

// "Auto", "Linear", "Logarithmic", "ReverseLogarithmic"; parse_scaling throws
// heft::InvalidArgument naming the accepted names.
const char* scaling_name(Scaling s);
Scaling parse_scaling(const std::string& name);

// One value of a configuration: a real, an integer or a category.
using ParamValue = std::variant<double, int64_t, std::string>;
// A configuration: range name -> value. Ordered, so it prints and compares stably.
using Config = std::map<std::string, ParamValue>;
// "0.01", "32", "sgd": as a hyperparameter is written on a command line.
std::string value_text(const ParamValue& v);

// A range's condition: active only when the categorical range `range` takes one of `values`.
struct Condition {
  std::string range;  // empty: no condition
  std::vector<std::string> values;
  bool empty() const { return range.empty(); }
};

struct Range {
  enum class Kind { kContinuous, kInteger, kCategorical };
  Kind kind = Kind::kContinuous;
  std::string name;
  double min = 0, max = 1;            // numeric kinds
  Scaling scaling = Scaling::kAuto;   // numeric kinds; kAuto resolved by SearchSpace::add
  std::vector<std::string> values;    // categorical
  Condition when;                     // empty: always active
};

class SearchSpace {
 public:
  // Each add checks its range and throws heft::InvalidArgument naming the range and what was
  // expected: a name used twice, min > max, a non-finite bound, Logarithmic with min <= 0,
  // ReverseLogarithmic outside 0 <= min < max < 1, an empty or repeated categorical value.
  // A name may be used twice only by ranges conditional on one categorical with disjoint
  // values; whether that categorical exists is check_conditions()'s (ranges come in any order).
  void add_continuous(const std::string& name, double min, double max, Scaling s = Scaling::kAuto,
                      Condition when = {});
  void add_integer(const std::string& name, int64_t min, int64_t max, Scaling s = Scaling::kAuto,
                   Condition when = {});
  void add_categorical(const std::string& name, std::vector<std::string> values, Condition when = {});
  // Once every range is added: each condition names an unconditional categorical range and
  // some of its values. heft::InvalidArgument naming the range otherwise.
  void check_conditions() const;
  // Whether `r` is active in `config` (its condition's categorical has one of its values).
  static bool active(const Range& r, const Config& config);

  const std::vector<Range>& ranges() const { return ranges_; }
  bool empty() const { return ranges_.empty(); }
  // Coordinates of the unit cube (numeric ranges 1 each, categoricals 1 per value).
  int dims() const { return dims_; }
  // The most coordinates active at once: dims() less those of conditional ranges that
  // cannot be active together (for sizing an initial design).
  int active_dims() const;

  // The point of `config` (every active range must have a value of its kind;
  // heft::InvalidArgument otherwise). Values outside a range are clamped onto it.
  std::vector<double> to_unit(const Config& config) const;
  // The configuration at `u` (dims() coordinates, clamped into [0, 1]); integers rounded,
  // a categorical takes its largest coordinate; inactive ranges left out.
  Config from_unit(const std::vector<double>& u) const;
  // from_unit(to_unit(from_unit(u))): the point a suggestion really is after rounding.
  std::vector<double> snap(const std::vector<double>& u) const { return to_unit(from_unit(u)); }

 private:
  void add(Range r);
  std::vector<Range> ranges_;
  int dims_ = 0;
};

// The numeric map of one range (exposed for tests): value -> [0, 1] and back.
double scale_to_unit(const Range& r, double x);
double scale_from_unit(const Range& r, double u);

}  // namespace heft::tune
