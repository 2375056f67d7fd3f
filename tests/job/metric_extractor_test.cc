// ctest-labels: unit
// Tests of what the supervisor reads from output lines: metric points (metric_extractor.h),
// the progress line (progress.h) and the report formats of the job commands (job_report.h).
#include "heft/job/metric_extractor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "heft/job/record/job_report.h"
#include "heft/job/progress.h"

namespace heft::job {
namespace {

TEST(SupervisorMetrics, FirstGroupIsTheValueAndStepComesFromTheLine) {
  const MetricExtractor x({{"loss", "loss=([^ ]+)"}, {"acc", "acc=([0-9.]+)"}});
  auto p = x.extract(3, "step=42 epoch=1 loss=0.25 lr=0.1", 100.0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].name, "loss");
  EXPECT_EQ(p[0].rank, 3);
  EXPECT_EQ(p[0].step, 42);
  EXPECT_DOUBLE_EQ(p[0].value, 0.25);
  EXPECT_DOUBLE_EQ(p[0].timestamp, 100.0);

  p = x.extract(0, "loss=nan acc=0.5", 1.0);  // two metrics, no step
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(std::isnan(p[0].value));
  EXPECT_FALSE(p[0].step.has_value());
  EXPECT_DOUBLE_EQ(p[1].value, 0.5);

  EXPECT_TRUE(x.extract(0, "loss=abc", 1.0).empty());      // not a number: no match
  EXPECT_TRUE(x.extract(0, "substep=3 acc=x", 1.0).empty());
  EXPECT_EQ(x.extract(0, "substep=3 acc=1", 1.0)[0].step, std::nullopt);  // not step=
  // Long lines are searched too (RE2: linear time); the value is found at the end.
  p = x.extract(0, std::string(60000, 'a') + " acc=1", 1.0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_DOUBLE_EQ(p[0].value, 1.0);
}

// Patterns that make a backtracking engine recurse per character or run for exponential
// time, on lines built to trigger them: each line takes milliseconds (std::regex crashed the
// supervisor with SIGSEGV on the first, and spun for over ten minutes on the second).
TEST(SupervisorMetrics, PathologicalPatternsAndLinesRunInLinearTime) {
  const MetricExtractor x({{"issue", "^(a|b)*c([0-9])"},  // first group (a|b): never a number
                           {"alt", "^(?:a|b)*c([0-9])"},
                           {"nested", "^(a+)+b=([0-9]+)"},
                           {"stars", "(x*)*(y*)*z=([0-9])"},
                           {"lazy", "(.*?,){11}P=([0-9])"}});
  const std::vector<std::string> lines = {
      std::string(16000, 'a'),                       // (a|b)* then no c
      std::string(16000, 'a') + "c7",                // and a match
      std::string(100000, 'a') + "!",                // nested quantifiers, no b
      std::string(60000, 'x') + std::string(60000, 'y'),
      std::string(30000, ','),
      std::string(1 << 20, 'a'),                     // a megabyte without a newline
      std::string("a\0b\0c1", 6),                    // NUL bytes
      std::string("\xff\xfe\xc3(c2", 6),             // invalid UTF-8
  };
  for (const std::string& line : lines) {
    const auto start = std::chrono::steady_clock::now();
    (void)x.extract(0, line, 0);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Not a timing assertion on speed, a bound on pathology: linear matching of a megabyte
    // takes milliseconds; a backtracking blow-up takes minutes.
    EXPECT_LT(s, 10.0) << "line of " << line.size() << " bytes";
  }
  auto p = x.extract(0, std::string(16000, 'a') + "c7", 0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].name, "alt");
  EXPECT_DOUBLE_EQ(p[0].value, 7);
}

TEST(SupervisorMetrics, BuiltinDefinitionsReadTheTrainerLines) {
  const MetricExtractor x(builtin_metric_definitions());
  auto p = x.extract(0, "step=10 epoch=0 loss=2.3e-1 lr=0.05 samples_per_s=812.5", 0);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "train:loss");
  EXPECT_DOUBLE_EQ(p[0].value, 0.23);
  EXPECT_EQ(p[1].name, "train:throughput");
  EXPECT_DOUBLE_EQ(p[1].value, 812.5);
  EXPECT_EQ(p[1].step, 10);
  p = x.extract(0, "epoch=1 test_loss=0.4 test_acc=0.87", 0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].name, "test:acc");
}

TEST(SupervisorProgress, ShowsTheLatestValuesAndAnEtaOnceTheTotalIsKnown) {
  ProgressLine epochs("job", 4.0, std::nullopt);
  epochs.observe("step=100 epoch=0 loss=0.5 lr=0.1 samples_per_s=1000", 10);
  EXPECT_EQ(epochs.text("Training", 10), "job  Training  step 100  epoch 0  loss 0.5  1000 samples/s  0:10");
  epochs.observe("epoch=0 test_loss=0.4 test_acc=0.8", 20);
  EXPECT_EQ(epochs.text("Training", 20),
            "job  Training  step 100  epoch 0  loss 0.5  1000 samples/s  0:20  ETA 1:00");
  ProgressLine steps("job", std::nullopt, 1000.0);
  steps.observe("step=250 loss=1", 50);
  EXPECT_EQ(steps.text("Training", 50), "job  Training  step 250  loss 1  0:50  ETA 2:30");
  EXPECT_EQ(clock_text(4000), "1:06:40");
}

TEST(SupervisorReport, MetricFormats) {
  const std::vector<MetricPoint> points = {{"train:loss", 0, 1000.5, 7, 0.25},
                                           {"a,b", 1, 1001.0, std::nullopt, std::nan("")}};
  EXPECT_EQ(metrics_csv(points),
            "name,rank,step,value,timestamp\n"
            "train:loss,0,7,0.25,1000.500000\n"
            "\"a,b\",1,,nan,1001.000000\n");
  EXPECT_EQ(metrics_table(points, 1000.0),
            "NAME        RANK  STEP  VALUE  ELAPSED_S\n"
            "train:loss  0     7     0.25   0.500\n"
            "a,b         1     -     nan    1.000\n");
  const nlohmann::json j = metrics_json(points);
  EXPECT_EQ(j[0]["step"], 7);
  EXPECT_TRUE(j[1]["step"].is_null());
  EXPECT_TRUE(j[1]["value"].is_null());
}

}  // namespace
}  // namespace heft::job
