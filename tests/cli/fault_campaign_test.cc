// ctest-labels: slow
// A 10-trial run of bench/fault_campaign.sh (SIGKILL / SIGSTOP of a random rank at a random
// moment, heft-train and a Gloo loop, one host and two): no trial may hang or leave a
// process behind. The 100-trial figures are in docs/errors.md.
#include <gtest/gtest.h>

#include <string>

#include "support/command.h"

namespace {

TEST(FaultCampaign, TenTrialsNoHangNoOrphan) {
  const std::string cmd = std::string("cd ") + HEFT_SOURCE_DIR +
                          " && bash bench/fault_campaign.sh --trials 10 --seed 7 --build " +
                          HEFT_BINARY_DIR;
  const heft::test::CommandOutput o = heft::test::run_command(cmd);
  const std::string& out = o.text;
  EXPECT_EQ(o.code, 0) << out;
  EXPECT_NE(out.find("summary: trials=10 hangs=0 orphans=0 not_started=0"), std::string::npos)
      << out;
}

}  // namespace
