#include "heft/profile/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include "heft/job/record/job_report.h"
#include "heft/profile/rules.h"

namespace heft::profile {

namespace {

const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, int digits = 1) { return job::decimal_text(v, digits); }

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // x, y
};

// The chart's legend: a swatch and a label per series, as many rows as fit beside the plot
// (the rest summed up in a last row).
std::string svg_legend(const std::vector<Series>& series, double x, double top, double bottom) {
  const size_t fit = static_cast<size_t>(std::max(1.0, (bottom - top) / 14));
  std::ostringstream o;
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = top + 14 * static_cast<double>(i);
    if (i + 1 == fit && series.size() > fit) {
      o << "<text x=\"" << x << "\" y=\"" << y + 9 << "\" class=\"tick\">+"
        << series.size() - i << " more</text>";
      break;
    }
    o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"10\" height=\"10\" class=\"swatch\" fill=\""
      << kColors[i % 10] << "\"/><text x=\"" << x + 14 << "\" y=\"" << y + 9
      << "\" class=\"tick\">" << esc(series[i].label) << "</text>";
  }
  return o.str();
}

// A line chart as inline SVG: the x range from the data, the y range from y_axis(); both
// labelled at their ends, a y axis that does not start at zero marked with a break.
std::string svg_chart(const std::string& title, const std::string& x_label,
                      const std::vector<Series>& series) {
  const double W = 680, H = 240, L = 60, R = 150, T = 28, B = 36;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::ostringstream o;
  o << "<svg class=\"chart\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\"><text x=\"" << L << "\" y=\"18\" class=\"title\">" << esc(title)
    << "</text>";
  if (x0 > x1) return o.str() + "<text x=\"" + num(L, 0) + "\" y=\"120\">no data</text></svg>";
  if (x1 == x0) x1 = x0 + 1;
  const AxisRange y = y_axis(y0, y1);
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double v) { return H - B - (v - y.lo) / (y.hi - y.lo) * (H - T - B); };
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\""
    << H - T - B << "\" class=\"frame\"/>";
  o << "<text x=\"" << L - 4 << "\" y=\"" << py(y.hi) + 4 << "\" class=\"tick\" text-anchor=\"end\">"
    << readable_number(y.hi) << "</text>";
  o << "<text x=\"" << L - 4 << "\" y=\"" << py(y.lo) + 4 << "\" class=\"tick\" text-anchor=\"end\">"
    << readable_number(y.lo) << "</text>";
  if (!y.from_zero) {
    // A zigzag across the foot of the y axis, and words for who misses it.
    const double b = H - B - 6;
    o << "<path class=\"axis-break\" d=\"M" << L - 5 << "," << b + 3 << " L" << L << "," << b - 1
      << " L" << L - 5 << "," << b - 5 << " L" << L << "," << b - 9
      << "\" fill=\"none\" stroke=\"#b00\" stroke-width=\"1.5\"/><text x=\"" << W - R
      << "\" y=\"18\" class=\"tick\" text-anchor=\"end\">y axis from " << readable_number(y.lo)
      << ", not 0</text>";
  }
  o << "<text x=\"" << L << "\" y=\"" << H - B + 14 << "\" class=\"tick\">" << num(x0, 0)
    << "</text><text x=\"" << W - R << "\" y=\"" << H - B + 14
    << "\" class=\"tick\" text-anchor=\"end\">" << num(x1, 0) << "</text>";
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 6
    << "\" class=\"tick\" text-anchor=\"middle\">" << esc(x_label) << "</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    std::string path;
    for (auto [x, v] : series[i].points) {
      if (!std::isfinite(v)) continue;
      path += (path.empty() ? "M" : " L") + num(px(x), 1) + "," + num(py(v), 1);
    }
    o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << kColors[i % 10]
      << "\" stroke-width=\"1.5\"/>";
  }
  return o.str() + svg_legend(series, W - R + 10, T, H - B) + "</svg>";
}

// Series of `name` by rank, x = seconds since `t0` (or the step when by_step).
std::vector<Series> by_rank(const std::vector<job::MetricPoint>& metrics, const std::string& name,
                            double t0, bool by_step) {
  std::map<int, Series> out;
  for (const job::MetricPoint& p : metrics) {
    if (p.name != name) continue;
    Series& s = out[p.rank];
    s.label = p.rank >= 0 ? "rank " + std::to_string(p.rank) : "job";
    s.points.emplace_back(by_step && p.step ? static_cast<double>(*p.step) : p.timestamp - t0,
                          p.value);
  }
  std::vector<Series> v;
  for (auto& [r, s] : out) v.push_back(std::move(s));
  return v;
}

const char* const kStyle = R"(
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;font-size:13px;text-align:left;vertical-align:top}
.chart{margin:6px 12px 6px 0}.title{font-size:13px;font-weight:600}.tick{font-size:11px;fill:#555}
.frame{fill:none;stroke:#ccc}.stop{color:#b00;font-weight:600}pre{font-size:12px;background:#f6f6f6;padding:6px;white-space:pre-wrap}
.bar{height:16px;display:inline-block}
.swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px;vertical-align:baseline}
.ev div{margin:1px 0}.ev .k{color:#555}
)";

// Phases of a step and their colours: the table's bars and its legend.
const char* const kPhaseColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#bbb"};

bool names_a_time(const std::string& key) {
  return key == "last_activity" || key == "timestamp" ||
         (key.size() > 3 && key.compare(key.size() - 3, 3, "_at") == 0);
}

// One evidence value as text (not escaped).
std::string value_text(const nlohmann::json& v, bool time) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return time && d > 1e8 ? iso8601(d) : readable_number(d);
  }
  if (v.is_number()) return time && v.get<double>() > 1e8 ? iso8601(v.get<double>()) : v.dump();
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  std::string out;
  if (v.is_array())
    for (const nlohmann::json& e : v) out += (out.empty() ? "" : ", ") + value_text(e, time);
  else if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it)
      out += (out.empty() ? "" : ", ") + it.key() + ": " + value_text(it.value(), time);
  else
    out = v.dump();  // a boolean
  return out;
}

}  // namespace

AxisRange y_axis(double lo, double hi) {
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (lo == 0 && hi == 0) return {};
  if (lo == hi) return {std::min(0.0, lo), std::max(0.0, hi), true};
  if (lo <= 0 && hi >= 0) return {lo, hi, true};
  const double far = std::max(std::abs(lo), std::abs(hi));  // the end far from zero
  if (hi - lo < 0.2 * far) return {lo, hi, false};
  return lo > 0 ? AxisRange{0, hi, true} : AxisRange{lo, 0, true};
}

std::string readable_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (std::abs(v) >= 1e4) std::snprintf(buf, sizeof(buf), "%.0f", v);
  else std::snprintf(buf, sizeof(buf), "%.4g", v);
  return std::string(buf) == "-0" ? "0" : buf;
}

std::string iso8601(double unix_seconds) {
  const time_t t = static_cast<time_t>(std::floor(unix_seconds));
  struct tm tm {};
  ::localtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", &tm);  // ...+0100
  std::string out = buf;
  if (out.size() >= 5) out.insert(out.size() - 2, ":");           // ...+01:00
  return out;
}

std::string evidence_html(const nlohmann::json& evidence) {
  if (!evidence.is_object()) return "<div class=\"ev\">" + esc(value_text(evidence, false)) + "</div>";
  std::ostringstream o;
  o << "<div class=\"ev\">";
  for (auto it = evidence.begin(); it != evidence.end(); ++it) {
    std::string key = it.key();
    std::replace(key.begin(), key.end(), '_', ' ');
    const std::string text = value_text(it.value(), names_a_time(it.key()));
    o << "<div><span class=\"k\">" << esc(key) << ":</span> ";
    if (text.find('\n') != std::string::npos) o << "<pre>" << esc(text) << "</pre>";
    else o << esc(text);
    o << "</div>";
  }
  return o.str() + "</div>";
}

std::vector<std::pair<int, std::vector<std::pair<std::string, double>>>> phase_breakdown(
    const std::vector<job::MetricPoint>& metrics) {
  const std::vector<std::string> phases = {"data", "forward", "backward", "communication",
                                           "optimizer"};
  std::map<int, std::map<std::string, std::pair<double, int>>> sums;
  for (const job::MetricPoint& p : metrics) {
    if (p.name.rfind("step:", 0) != 0 || !std::isfinite(p.value)) continue;
    std::string phase = p.name.substr(5);
    phase = phase.substr(0, phase.size() - 3);  // "_ms"
    auto& [sum, n] = sums[p.rank][phase];
    sum += p.value;
    ++n;
  }
  std::vector<std::pair<int, std::vector<std::pair<std::string, double>>>> out;
  for (auto& [rank, m] : sums) {
    auto mean = [&](const std::string& ph) {
      auto it = m.find(ph);
      return it == m.end() || it->second.second == 0 ? 0.0 : it->second.first / it->second.second;
    };
    std::vector<std::pair<std::string, double>> row;
    double covered = 0;
    for (const std::string& ph : phases) {
      row.emplace_back(ph, mean(ph));
      covered += mean(ph);
    }
    row.emplace_back("other", std::max(0.0, mean("total") - covered));
    out.emplace_back(rank, row);
  }
  return out;
}

namespace {

// The job's status and times.
std::string summary_html(const job::JobRecord& j) {
  std::ostringstream o;
  o << "<table><tr><th>Status</th><td>" << esc(job::status_text(j.status, j.secondary_status))
    << "</td></tr><tr><th>Created</th><td>" << esc(iso8601(j.created_at))
    << "</td></tr><tr><th>Training time</th><td>" << num(job::live_training_seconds(j))
    << " s</td></tr><tr><th>Billable time</th><td>"
    << esc(job::billable_text(j.billable_seconds, j.instance_count))
    << "</td></tr><tr><th>Workers</th><td>" << j.world_size
    << "</td></tr><tr><th>Attempts</th><td>" << j.attempts << "</td></tr>";
  if (!j.failure_reason.empty())
    o << "<tr><th>Failure reason</th><td><pre>" << esc(j.failure_reason) << "</pre></td></tr>";
  o << "</table>";
  return o.str();
}

// The rules' findings: when (seconds since t0), what, the evidence and what to do.
std::string findings_html(const std::vector<job::Finding>& findings, double t0) {
  std::ostringstream o;
  o << "<h2>Rule findings</h2>";
  if (findings.empty()) return o.str() + "<p>None: every rule stayed silent.</p>";
  o << "<table><tr><th>Rule</th><th>Rank</th><th>At</th><th>Finding</th><th>Evidence</th>"
       "<th>Recommendation</th></tr>";
  for (const job::Finding& f : findings) {
    nlohmann::json ev = f.evidence;
    const std::string rec = ev.value("recommendation", recommendation(f.rule));
    ev.erase("recommendation");
    o << "<tr><td>" << esc(f.rule)
      << (f.action == "stop" ? " <span class=\"stop\">stopped the job</span>" : "")
      << "</td><td>" << (f.rank >= 0 ? std::to_string(f.rank) : "all")
      << "</td><td title=\"" << esc(iso8601(f.timestamp)) << "\">" << num(f.timestamp - t0)
      << " s</td><td>" << esc(f.message) << "</td><td>" << evidence_html(ev) << "</td><td>"
      << esc(rec) << "</td></tr>";
  }
  return o.str() + "</table>";
}

// A chart of every series the job's metric definitions gave (the profiler's left out).
std::string training_metrics_html(const std::vector<job::MetricPoint>& metrics,
                                  const std::set<std::string>& names, double t0) {
  std::ostringstream o;
  o << "<h2>Training metrics</h2>";
  int training = 0;
  for (const std::string& n : names) {
    if (job::is_profile_metric(n)) continue;
    ++training;
    o << svg_chart(n, "seconds since training start", by_rank(metrics, n, t0, false));
  }
  if (!training) o << "<p>No metric lines matched the job's metric definitions.</p>";
  return o.str();
}

// The phase_breakdown() table: a row a rank, its phases' means and a bar of their shares,
// then the colours' legend.
std::string phase_table_html(
    const std::vector<std::pair<int, std::vector<std::pair<std::string, double>>>>& phases) {
  std::ostringstream o;
  o << "<table><tr><th>Rank</th>";
  for (const auto& [ph, v] : phases[0].second) o << "<th>" << ph << " ms</th>";
  o << "<th>share</th></tr>";
  for (const auto& [rank, row] : phases) {
    double total = 0;
    for (const auto& [ph, v] : row) total += v;
    o << "<tr><td>" << rank << "</td>";
    for (const auto& [ph, v] : row) o << "<td>" << num(v, 2) << "</td>";
    o << "<td style=\"width:320px\">";
    for (size_t i = 0; i < row.size(); ++i)
      o << "<span class=\"bar\" title=\"" << row[i].first << "\" style=\"background:"
        << kPhaseColors[i] << ";width:" << num(total > 0 ? 300 * row[i].second / total : 0, 0)
        << "px\"></span>";
    o << "</td></tr>";
  }
  o << "</table><p class=\"legend\">";
  for (size_t i = 0; i < phases[0].second.size(); ++i)
    o << "<span class=\"swatch\" style=\"background:" << kPhaseColors[i] << "\"></span>"
      << phases[0].second[i].first;
  o << "</p>";
  return o.str();
}

// Each rank's step time less its communication wait, by step.
std::vector<Series> busy_by_rank(const std::vector<job::MetricPoint>& metrics, double t0) {
  std::vector<Series> total = by_rank(metrics, "step:total_ms", t0, true);
  std::vector<Series> comm = by_rank(metrics, "step:communication_ms", t0, true);
  for (size_t i = 0; i < total.size() && i < comm.size(); ++i)
    for (size_t k = 0; k < total[i].points.size() && k < comm[i].points.size(); ++k)
      total[i].points[k].second -= comm[i].points[k].second;
  return total;
}

// The step profiler's view: the phase table and the step time charts.
std::string step_phases_html(const std::vector<job::MetricPoint>& metrics, double t0) {
  std::string out = "<h2>Step phases per rank</h2>";
  const auto phases = phase_breakdown(metrics);
  if (phases.empty())
    return out + "<p>No step timings (the program did not report them, or the profiler was "
                 "off).</p>";
  return out + phase_table_html(phases) +
         svg_chart("step time without communication (ms)", "step", busy_by_rank(metrics, t0)) +
         svg_chart("step time (ms)", "step", by_rank(metrics, "step:total_ms", t0, true));
}

// One host's panel: CPU and memory of its ranks (all ranks: `ranks` null) and its cores
// (the series named core_prefix + "N_busy_percent").
std::string host_panel_html(const std::vector<job::MetricPoint>& metrics,
                            const std::set<std::string>& names, double t0,
                            const std::string& core_prefix, const std::set<int>* ranks) {
  const std::string x_label = "seconds since training start";
  std::vector<job::MetricPoint> mine;
  for (const job::MetricPoint& p : metrics)
    if ((p.name == "system:cpu_percent" || p.name == "system:rss_mb") &&
        (!ranks || ranks->count(p.rank)))
      mine.push_back(p);
  std::vector<Series> cores;
  for (const std::string& n : names)
    if (n.rfind(core_prefix, 0) == 0 && n.find('/', core_prefix.size()) == std::string::npos) {
      std::vector<Series> s = by_rank(metrics, n, t0, false);
      if (!s.empty()) {
        const size_t at = core_prefix.size() - 4;  // "coreN"
        s[0].label = n.substr(at, n.find('_', at) - at);
        cores.push_back(std::move(s[0]));
      }
    }
  return svg_chart("CPU (% of one core)", x_label, by_rank(mine, "system:cpu_percent", t0, false)) +
         svg_chart("resident memory (MB)", x_label, by_rank(mine, "system:rss_mb", t0, false)) +
         svg_chart("cores busy (%)", x_label, cores);
}

// The system sampler's view: each worker's CPU and memory and the cores, a panel per host
// (the system:host:HOST series) when the ranks ran on more than one.
std::string system_metrics_html(const std::vector<job::MetricPoint>& metrics,
                                const std::set<std::string>& names, double t0) {
  std::map<std::string, std::pair<double, std::set<int>>> hosts;  // cores, ranks
  const std::string tag = "system:host:";
  for (const job::MetricPoint& p : metrics)
    if (p.name.rfind(tag, 0) == 0) {
      auto& h = hosts[p.name.substr(tag.size())];
      h.first = p.value;
      h.second.insert(p.rank);
    }
  if (hosts.size() <= 1)
    return "<h2>System metrics per worker</h2>" +
           host_panel_html(metrics, names, t0, "system:core", nullptr);
  std::string out = "<h2>System metrics per host</h2>";
  for (const auto& [host, h] : hosts) {
    std::string ranks;
    for (int r : h.second) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    out += "<h3>" + esc(host) + ": " + num(h.first, 0) + " cores, rank" +
           (h.second.size() == 1 ? " " : "s ") + ranks + "</h3>" +
           host_panel_html(metrics, names, t0, "system:" + host + "/core", &h.second);
  }
  return out;
}

std::string transitions_html(const std::vector<job::Transition>& transitions) {
  std::ostringstream o;
  o << "<h2>Transitions</h2><table>";
  for (const job::Transition& t : transitions)
    o << "<tr><td>" << esc(t.status) << "</td><td>" << esc(iso8601(t.start_time))
      << "</td><td>" << esc(t.message) << "</td></tr>";
  o << "</table>";
  return o.str();
}

}  // namespace

std::string report_html(const ReportInput& in) {
  const job::JobRecord& j = in.job;
  const double t0 = j.training_start ? *j.training_start : j.created_at;
  std::set<std::string> names;
  for (const job::MetricPoint& p : in.metrics) names.insert(p.name);
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset=\"utf-8\"><title>heft report: " << esc(j.name)
    << "</title><style>" << kStyle << "</style></head><body>";
  o << "<h1>heft report: " << esc(j.name) << "</h1>" << summary_html(j);
  // Findings first: they are what a reader came for.
  o << findings_html(in.findings, t0);
  if (!in.diagnosis.empty())
    o << "<h2>Hang diagnosis</h2><pre>" << esc(in.diagnosis) << "</pre>";
  o << training_metrics_html(in.metrics, names, t0) << step_phases_html(in.metrics, t0)
    << system_metrics_html(in.metrics, names, t0) << transitions_html(in.transitions)
    << "</body></html>\n";
  return o.str();
}

}  // namespace heft::profile
