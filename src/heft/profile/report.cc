#include "heft/profile/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "heft/job/job_report.h"
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

std::string num(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // x, y
};

// A line chart as inline SVG: x and y ranges from the data, labelled at their ends.
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
  if (y1 == y0) y1 = y0 + 1, y0 = y0 - (y0 == 0 ? 0 : 1);
  if (y0 > 0 && y0 < 0.3 * y1) y0 = 0;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\""
    << H - T - B << "\" class=\"frame\"/>";
  o << "<text x=\"" << L - 4 << "\" y=\"" << py(y1) + 4 << "\" class=\"tick\" text-anchor=\"end\">"
    << num(y1, y1 < 10 ? 3 : 1) << "</text>";
  o << "<text x=\"" << L - 4 << "\" y=\"" << py(y0) + 4 << "\" class=\"tick\" text-anchor=\"end\">"
    << num(y0, y1 < 10 ? 3 : 1) << "</text>";
  o << "<text x=\"" << L << "\" y=\"" << H - B + 14 << "\" class=\"tick\">" << num(x0, 0)
    << "</text><text x=\"" << W - R << "\" y=\"" << H - B + 14
    << "\" class=\"tick\" text-anchor=\"end\">" << num(x1, 0) << "</text>";
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 6
    << "\" class=\"tick\" text-anchor=\"middle\">" << esc(x_label) << "</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % 10];
    std::string path;
    for (auto [x, y] : series[i].points) {
      if (!std::isfinite(y)) continue;
      path += (path.empty() ? "M" : " L") + num(px(x), 1) + "," + num(py(y), 1);
    }
    o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << color
      << "\" stroke-width=\"1.5\"/>";
    o << "<rect x=\"" << W - R + 10 << "\" y=\"" << T + 14 * i << "\" width=\"10\" height=\"10\" fill=\""
      << color << "\"/><text x=\"" << W - R + 24 << "\" y=\"" << T + 9 + 14 * i
      << "\" class=\"tick\">" << esc(series[i].label) << "</text>";
  }
  return o.str() + "</svg>";
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
)";

}  // namespace

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

std::string report_html(const ReportInput& in) {
  const job::JobRecord& j = in.job;
  const double t0 = j.training_start ? *j.training_start : j.created_at;
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset=\"utf-8\"><title>heft report: " << esc(j.name)
    << "</title><style>" << kStyle << "</style></head><body>";
  o << "<h1>heft report: " << esc(j.name) << "</h1>";
  o << "<table><tr><th>Status</th><td>" << esc(j.status) << " (" << esc(j.secondary_status)
    << ")</td></tr><tr><th>Created</th><td>" << esc(job::local_time_text(j.created_at))
    << "</td></tr><tr><th>Training time</th><td>" << num(job::live_training_seconds(j))
    << " s</td></tr><tr><th>Billable time</th><td>" << num(job::billable_instance_seconds(j))
    << " s (" << num(j.billable_seconds) << " s x " << j.instance_count
    << " instances)</td></tr><tr><th>Workers</th><td>" << j.world_size
    << "</td></tr><tr><th>Attempts</th><td>" << j.attempts << "</td></tr>";
  if (!j.failure_reason.empty())
    o << "<tr><th>Failure reason</th><td><pre>" << esc(j.failure_reason) << "</pre></td></tr>";
  o << "</table>";

  // Findings first: they are what a reader came for.
  o << "<h2>Rule findings</h2>";
  if (in.findings.empty()) o << "<p>None: every rule stayed silent.</p>";
  else {
    o << "<table><tr><th>Rule</th><th>Rank</th><th>At</th><th>Finding</th><th>Evidence</th><th>Recommendation</th></tr>";
    for (const job::Finding& f : in.findings) {
      nlohmann::json ev = f.evidence;
      const std::string rec = ev.value("recommendation", recommendation(f.rule));
      ev.erase("recommendation");
      o << "<tr><td>" << esc(f.rule) << (f.action == "stop" ? " <span class=\"stop\">stopped the job</span>" : "")
        << "</td><td>" << (f.rank >= 0 ? std::to_string(f.rank) : "all") << "</td><td>"
        << num(f.timestamp - t0) << " s</td><td>" << esc(f.message) << "</td><td><pre>"
        << esc(ev.dump(1)) << "</pre></td><td>" << esc(rec) << "</td></tr>";
    }
    o << "</table>";
  }
  if (!in.diagnosis.empty())
    o << "<h2>Hang diagnosis</h2><pre>" << esc(in.diagnosis) << "</pre>";

  std::set<std::string> names;
  for (const job::MetricPoint& p : in.metrics) names.insert(p.name);
  o << "<h2>Training metrics</h2>";
  int training = 0;
  for (const std::string& n : names) {
    if (job::is_profile_metric(n)) continue;
    ++training;
    o << svg_chart(n, "seconds since training start", by_rank(in.metrics, n, t0, false));
  }
  if (!training) o << "<p>No metric lines matched the job's metric definitions.</p>";

  o << "<h2>Step phases per rank</h2>";
  const auto phases = phase_breakdown(in.metrics);
  if (phases.empty()) o << "<p>No step timings (the program did not report them, or the profiler was off).</p>";
  else {
    o << "<table><tr><th>Rank</th>";
    for (const auto& [ph, v] : phases[0].second) o << "<th>" << ph << " ms</th>";
    o << "<th>share</th></tr>";
    const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#bbb"};
    for (const auto& [rank, row] : phases) {
      double total = 0;
      for (const auto& [ph, v] : row) total += v;
      o << "<tr><td>" << rank << "</td>";
      for (const auto& [ph, v] : row) o << "<td>" << num(v, 2) << "</td>";
      o << "<td style=\"width:320px\">";
      for (size_t i = 0; i < row.size(); ++i)
        o << "<span class=\"bar\" title=\"" << row[i].first << "\" style=\"background:" << colors[i]
          << ";width:" << num(total > 0 ? 300 * row[i].second / total : 0, 0) << "px\"></span>";
      o << "</td></tr>";
    }
    o << "</table><p>Colours: data, forward, backward, communication, optimizer, other.</p>";
    o << svg_chart("step time without communication (ms)", "step",
                   [&] {
                     std::vector<Series> total = by_rank(in.metrics, "step:total_ms", t0, true);
                     std::vector<Series> comm = by_rank(in.metrics, "step:communication_ms", t0, true);
                     for (size_t i = 0; i < total.size() && i < comm.size(); ++i)
                       for (size_t k = 0; k < total[i].points.size() && k < comm[i].points.size(); ++k)
                         total[i].points[k].second -= comm[i].points[k].second;
                     return total;
                   }());
    o << svg_chart("step time (ms)", "step", by_rank(in.metrics, "step:total_ms", t0, true));
  }

  o << "<h2>System metrics per worker</h2>";
  o << svg_chart("CPU (% of one core)", "seconds since training start",
                 by_rank(in.metrics, "system:cpu_percent", t0, false));
  o << svg_chart("resident memory (MB)", "seconds since training start",
                 by_rank(in.metrics, "system:rss_mb", t0, false));
  std::vector<Series> cores;
  for (const std::string& n : names)
    if (n.rfind("system:core", 0) == 0) {
      std::vector<Series> s = by_rank(in.metrics, n, t0, false);
      if (!s.empty()) {
        s[0].label = n.substr(7, n.find('_') - 7);
        cores.push_back(std::move(s[0]));
      }
    }
  o << svg_chart("machine cores busy (%)", "seconds since training start", cores);

  o << "<h2>Transitions</h2><table>";
  for (const job::Transition& t : in.transitions)
    o << "<tr><td>" << esc(t.status) << "</td><td>" << esc(job::local_time_text(t.start_time))
      << "</td><td>" << esc(t.message) << "</td></tr>";
  o << "</table></body></html>\n";
  return o.str();
}

}  // namespace heft::profile
