// ctest-labels: unit
// The report's presentation (profile/report.h): legends with colour swatches, evidence as
// rounded readable lines rather than JSON, y axes from zero or with the non-zero start
// marked, ISO 8601 dates, one status when the secondary says the same, a panel per host
// when the ranks ran on several.
#include "heft/profile/report.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <time.h>

#include <regex>
#include <string>

namespace heft::profile {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The SVG of the chart titled `title` ("" when there is none).
std::string chart(const std::string& html, const std::string& title) {
  const size_t at = html.find("class=\"title\">" + title + "</text>");
  if (at == std::string::npos) return "";
  return html.substr(at, html.find("</svg>", at) - at);
}

job::MetricPoint point(const std::string& name, int rank, int64_t step, double value) {
  job::MetricPoint p;
  p.name = name;
  p.rank = rank;
  p.step = step;
  p.timestamp = 1000 + static_cast<double>(step);
  p.value = value;
  return p;
}

// A job of two ranks with step phases, a loss from 5.5 to 2.4, memory between 300 and 320 MB,
// and one finding whose evidence carries long floats and a time.
ReportInput sample() {
  ReportInput in;
  in.job.name = "polish";
  in.job.status = "Completed";
  in.job.secondary_status = "Completed";
  in.job.created_at = 1764072000;  // 2025-11-25T12:00:00Z
  in.job.training_start = 1000;
  in.job.world_size = 2;
  in.job.instance_count = 1;
  for (int rank = 0; rank < 2; ++rank)
    for (int64_t step = 1; step <= 10; ++step) {
      in.metrics.push_back(point("step:total_ms", rank, step, 20 + rank));
      in.metrics.push_back(point("step:forward_ms", rank, step, 5));
      in.metrics.push_back(point("step:backward_ms", rank, step, 9));
      in.metrics.push_back(point("step:communication_ms", rank, step, 3));
      in.metrics.push_back(point("system:rss_mb", rank, step, 300 + 2 * static_cast<double>(step)));
    }
  for (int64_t step = 1; step <= 10; ++step)
    in.metrics.push_back(point("train:loss", 0, step, 5.5 - 0.31 * static_cast<double>(step - 1)));
  job::Finding f;
  f.rule = "LoadBalancing";
  f.rank = 1;
  f.timestamp = 1005;
  f.message = "rank 1 is the slowest";
  f.evidence = {{"difference", 0.123456789012345},
                {"mean_busy_ms_by_rank", {{"0", 12.345678901234567}, {"1", 3.3333333333333335}}},
                {"last_activity", 1764072000.25},
                {"recommendation", "split the work evenly"}};
  in.findings.push_back(f);
  job::Transition t;
  t.status = "Completed";
  t.start_time = 1764072060;
  in.transitions.push_back(t);
  return in;
}

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tz = std::getenv("TZ");
    saved_ = tz ? tz : "";
    had_ = tz != nullptr;
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
  void TearDown() override {
    if (had_) ::setenv("TZ", saved_.c_str(), 1);
    else ::unsetenv("TZ");
    ::tzset();
  }
  std::string saved_;
  bool had_ = false;
};

TEST_F(Report, PhaseLegendHasASwatchPerPhase) {
  const std::string html = report_html(sample());
  const size_t legend = html.find("<p class=\"legend\">");
  ASSERT_NE(legend, std::string::npos);
  const std::string p = html.substr(legend, html.find("</p>", legend) - legend);
  EXPECT_EQ(count(p, "class=\"swatch\""), 6u) << p;  // data .. optimizer, other
  for (const char* phase : {"data", "forward", "backward", "communication", "optimizer", "other"})
    EXPECT_NE(p.find(std::string("</span>") + phase), std::string::npos) << phase << ": " << p;
  EXPECT_EQ(html.find("Colours:"), std::string::npos);  // the old legend of words only
}

TEST_F(Report, ChartLegendsHaveSwatches) {
  const std::string html = report_html(sample());
  // Two ranks in each per-rank chart: a swatch each, in the series' colours.
  EXPECT_GE(count(html, "class=\"swatch\" fill=\"#1f77b4\""), 3u);
  EXPECT_GE(count(html, "class=\"swatch\" fill=\"#ff7f0e\""), 3u);
}

TEST_F(Report, EvidenceIsRoundedAndReadableNotJson) {
  const std::string html = report_html(sample());
  const std::string ev = evidence_html(sample().findings[0].evidence);
  EXPECT_NE(ev.find("difference:</span> 0.1235"), std::string::npos) << ev;
  EXPECT_NE(ev.find("mean busy ms by rank:</span> 0: 12.35, 1: 3.333"), std::string::npos) << ev;
  EXPECT_NE(ev.find("last activity:</span> 2025-11-25T12:00:00+00:00"), std::string::npos) << ev;
  for (const std::string& doc : {html, ev}) {
    EXPECT_EQ(doc.find("0.123456"), std::string::npos);
    EXPECT_EQ(doc.find("12.345678"), std::string::npos);
    EXPECT_EQ(doc.find("\"difference\""), std::string::npos);  // no JSON keys
  }
  EXPECT_NE(html.find("split the work evenly"), std::string::npos);  // the recommendation column
  EXPECT_EQ(html.find("recommendation:</span>"), std::string::npos);  // not also in evidence
  // Multi-line text (a hang diagnosis) stays in lines.
  EXPECT_NE(evidence_html({{"diagnosis", "a\nb"}}).find("<pre>a\nb</pre>"), std::string::npos);
}

TEST_F(Report, ReadableNumbers) {
  EXPECT_EQ(readable_number(0.123456789012345), "0.1235");
  EXPECT_EQ(readable_number(12.345678901234567), "12.35");
  EXPECT_EQ(readable_number(2), "2");
  EXPECT_EQ(readable_number(1234.4), "1234");
  EXPECT_EQ(readable_number(123456.7), "123457");
  EXPECT_EQ(readable_number(-0.0), "0");
  EXPECT_EQ(readable_number(1.0 / 0.0), "inf");
}

TEST_F(Report, YAxisFromZeroUnlessThatFlattensTheDataThenMarked) {
  AxisRange loss = y_axis(2.4, 5.5);
  EXPECT_TRUE(loss.from_zero);
  EXPECT_EQ(loss.lo, 0);
  EXPECT_EQ(loss.hi, 5.5);
  AxisRange memory = y_axis(302, 320);  // spread 18 < 320 / 5
  EXPECT_FALSE(memory.from_zero);
  EXPECT_EQ(memory.lo, 302);
  AxisRange below = y_axis(-5.5, -2.4);
  EXPECT_TRUE(below.from_zero);
  EXPECT_EQ(below.hi, 0);
  AxisRange across = y_axis(-1, 3);
  EXPECT_EQ(across.lo, -1);
  EXPECT_EQ(across.hi, 3);
  AxisRange constant = y_axis(7, 7);
  EXPECT_EQ(constant.lo, 0);
  EXPECT_EQ(constant.hi, 7);
  AxisRange zero = y_axis(0, 0);
  EXPECT_EQ(zero.lo, 0);
  EXPECT_EQ(zero.hi, 1);

  // The memory chart (302..320 MB) starts at 302, marked; the loss chart starts at 0, unmarked.
  const std::string html = report_html(sample());
  const std::string memory_chart = chart(html, "resident memory (MB)");
  EXPECT_NE(memory_chart.find("class=\"axis-break\""), std::string::npos) << memory_chart;
  EXPECT_NE(memory_chart.find("y axis from 302, not 0"), std::string::npos) << memory_chart;
  const std::string loss_chart = chart(html, "train:loss");
  EXPECT_NE(loss_chart.find("text-anchor=\"end\">0</text>"), std::string::npos) << loss_chart;
  EXPECT_EQ(loss_chart.find("axis-break"), std::string::npos) << loss_chart;
}

TEST_F(Report, DatesAreIso8601) {
  EXPECT_EQ(iso8601(1764072000.9), "2025-11-25T12:00:00+00:00");
  const std::string html = report_html(sample());
  EXPECT_NE(html.find("<td>2025-11-25T12:00:00+00:00</td>"), std::string::npos);  // created
  EXPECT_NE(html.find("<td>2025-11-25T12:01:00+00:00</td>"), std::string::npos);  // transition
  // No date in the old "YYYY-MM-DD HH:MM:SS" form.
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d)")));
  ::setenv("TZ", "XST-5", 1);  // five hours east of UTC, no daylight saving
  ::tzset();
  EXPECT_EQ(iso8601(1764072000), "2025-11-25T17:00:00+05:00");
}

TEST_F(Report, OneStatusWhenTheSecondarySaysTheSame) {
  ReportInput in = sample();
  EXPECT_NE(report_html(in).find("<td>Completed</td>"), std::string::npos);
  EXPECT_EQ(report_html(in).find("Completed (Completed)"), std::string::npos);
  in.job.status = "Stopped";
  in.job.secondary_status = "MaxRuntimeExceeded";
  EXPECT_NE(report_html(in).find("Stopped (MaxRuntimeExceeded)"), std::string::npos);
}

TEST_F(Report, APanelPerHostWithItsCoresAndRanks) {
  ReportInput in = sample();
  EXPECT_NE(report_html(in).find("System metrics per worker"), std::string::npos);
  in.metrics.push_back(point("system:host:node-a", 0, 1, 4));
  in.metrics.push_back(point("system:host:node-b", 1, 1, 8));
  for (int64_t step = 1; step <= 10; ++step) {
    in.metrics.push_back(point("system:cpu_percent", 0, step, 50));
    in.metrics.push_back(point("system:cpu_percent", 1, step, 190));
    in.metrics.push_back(point("system:node-b/core0_busy_percent", -1, step, 95));
  }
  const std::string html = report_html(in);
  EXPECT_NE(html.find("System metrics per host"), std::string::npos);
  EXPECT_NE(html.find("<h3>node-a: 4 cores, rank 0</h3>"), std::string::npos);
  EXPECT_NE(html.find("<h3>node-b: 8 cores, rank 1</h3>"), std::string::npos);
  // Each host's CPU chart holds its own rank only; node-b's cores chart has its core.
  const size_t at_a = html.find("<h3>node-a"), at_b = html.find("<h3>node-b");
  ASSERT_LT(at_a, at_b);
  const std::string a = html.substr(at_a, at_b - at_a), b = html.substr(at_b);
  EXPECT_NE(chart(a, "CPU (% of one core)").find("rank 0"), std::string::npos);
  EXPECT_EQ(chart(a, "CPU (% of one core)").find("rank 1"), std::string::npos);
  EXPECT_NE(chart(b, "CPU (% of one core)").find("rank 1"), std::string::npos);
  EXPECT_NE(chart(b, "cores busy (%)").find("core0"), std::string::npos);
}

}  // namespace
}  // namespace heft::profile
