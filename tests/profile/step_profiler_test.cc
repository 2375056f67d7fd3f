// ctest-labels: unit
// The step profiler's one reader of HEFT_PROFILE_DIR (StepProfiler::from_env) and its Off:
// while one lives (heft-train's layout trials), from_env gives a disabled profiler, so the
// trials' steps are never recorded as the run's; after, profiling is on again.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "heft/step_profiler/step_profiler.h"

namespace heft::profile {
namespace {

namespace fs = std::filesystem;

size_t lines(const fs::path& p) {
  std::ifstream in(p);
  size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

TEST(StepProfiler, OffDisablesFromEnvWhileItLives) {
  const fs::path dir = fs::temp_directory_path() / ("heft-step-profiler-" + std::to_string(getpid()));
  fs::create_directories(dir);
  ::setenv("HEFT_PROFILE_DIR", dir.c_str(), 1);
  ::setenv("RANK", "3", 1);
  const fs::path file = dir / "rank-3.steps";
  {
    StepProfiler on = StepProfiler::from_env();
    ASSERT_TRUE(on.enabled());
    on.begin_step(1);
    on.end_step();
  }
  EXPECT_EQ(lines(file), 1u);
  {
    const StepProfiler::Off off;
    {
      const StepProfiler::Off nested;
      EXPECT_FALSE(StepProfiler::from_env().enabled());
    }
    StepProfiler trial = StepProfiler::from_env();  // one Off still alive
    EXPECT_FALSE(trial.enabled());
    trial.begin_step(2);
    trial.end_step();
  }
  EXPECT_EQ(lines(file), 1u) << "a step taken under Off was recorded";
  StepProfiler again = StepProfiler::from_env();
  EXPECT_TRUE(again.enabled());
  ::unsetenv("HEFT_PROFILE_DIR");
  ::unsetenv("RANK");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace heft::profile
