// `heft report JOB`: one self-contained HTML page about a job (no script, no link outside
// it: plots are inline SVG): its status and times, the training metrics, the workers' system
// metrics, the step phase breakdown per rank, the rule findings with their evidence and
// recommendations. docs/observability.md shows one.
//
// Presentation: times are ISO 8601 in local time with the offset
// ("2026-11-25T12:33:19+00:00"); numbers in evidence and on axes are rounded to 4
// significant digits; a chart's y axis starts at zero unless that would flatten the data
// (y_axis below), and then the non-zero start is marked on the axis; every legend has colour
// swatches.
//
// Deliberately left out: live updates (the console does those).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "heft/job/record/job_db.h"

namespace heft::profile {

struct ReportInput {
  job::JobRecord job;
  std::vector<job::Transition> transitions;
  std::vector<job::MetricPoint> metrics;  // every series, profiler's included
  std::vector<job::Finding> findings;
  std::string diagnosis;  // diagnosis text when something is stuck, else ""
};

std::string report_html(const ReportInput& in);

// A chart's y range for data from `lo` to `hi` (lo <= hi): from zero (or to zero, for data
// all below it) unless the data's spread is under a fifth of its distance from zero, which a
// zero-based axis would flatten; then from `lo` itself with `from_zero` false (the chart
// marks that start). A constant series gets zero and its value; all-zero data 0 to 1.
struct AxisRange {
  double lo = 0, hi = 1;
  bool from_zero = true;  // false: the axis starts at a value other than zero
};
AxisRange y_axis(double lo, double hi);

// v rounded for reading: 4 significant digits ("0.1235", "12.35", "1234"), whole numbers
// from 10000 on ("123457"), "nan"/"inf"/"-inf" for the non-finite.
std::string readable_number(double v);

// Unix seconds as ISO 8601 local time with its UTC offset, to the second.
std::string iso8601(double unix_seconds);

// A finding's evidence (an object, the "recommendation" key left out by the caller) as HTML:
// one line per key ("mean busy ms by rank: 0: 12.35, 1: 4.5"), numbers readable_number(),
// keys naming a time ("last_activity", "*_at") as iso8601(), multi-line text in <pre>;
// escaped. Anything but an object is shown as one value.
std::string evidence_html(const nlohmann::json& evidence);

// Mean milliseconds per step of each phase ("data", "forward", "backward",
// "communication", "optimizer", "other"), by rank, from the "step:..._ms" series.
std::vector<std::pair<int, std::vector<std::pair<std::string, double>>>> phase_breakdown(
    const std::vector<job::MetricPoint>& metrics);

}  // namespace heft::profile
