// `heft report JOB`: one self-contained HTML page about a job (no script, no link outside
// it: plots are inline SVG): its status and times, the training metrics, the workers' system
// metrics, the step phase breakdown per rank, the rule findings with their evidence and
// recommendations. docs/observability.md shows one.
//
// Deliberately left out: live updates (the console does those).
#pragma once

#include <string>
#include <vector>

#include "heft/job/job_db.h"

namespace heft::profile {

struct ReportInput {
  job::JobRecord job;
  std::vector<job::Transition> transitions;
  std::vector<job::MetricPoint> metrics;  // every series, profiler's included
  std::vector<job::Finding> findings;
  std::string diagnosis;  // diagnosis text when something is stuck, else ""
};

std::string report_html(const ReportInput& in);

// Mean milliseconds per step of each phase ("data", "forward", "backward",
// "communication", "optimizer", "other"), by rank, from the "step:..._ms" series.
std::vector<std::pair<int, std::vector<std::pair<std::string, double>>>> phase_breakdown(
    const std::vector<job::MetricPoint>& metrics);

}  // namespace heft::profile
