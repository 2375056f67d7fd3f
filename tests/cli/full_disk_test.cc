// ctest-labels: multiproc
// A full disk under $HEFT_HOME (regression test of the finding "workers SIGKILLed without
// SIGTERM, a .tmp-ckpt-* left, a generic failure reason, and heft jobs/describe exit 1 until
// space is freed"). $HEFT_HOME is a 16 MiB tmpfs in a mount namespace of its own (unshare
// -m; skipped where this process may not mount), filled by the job's own log lines. The
// supervisor gives back the space it held in reserve, records the real reason, stops the
// workers with SIGTERM first and removes the interrupted checkpoint write; heft jobs and
// heft describe answer without writing.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/command.h"
#include "support/files.h"

namespace {

using heft::test::TempDir;

const std::string kHeft = HEFT_BINARY_DIR "/heft";

TEST(FullDisk, TheJobFailsSayingSoAfterSigtermAndReadsStillAnswer) {
  if (heft::test::run_command("unshare -m true").code != 0)
    GTEST_SKIP() << "cannot make a mount namespace here (unshare -m needs CAP_SYS_ADMIN)";
  TempDir dir;
  const std::string home = dir.path() + "/home", out = dir.path() + "/out";
  heft::test::run_command("mkdir -p " + home + " " + out);
  const std::string tmp = home + "/jobs/full/checkpoints/.tmp-ckpt-000000000001-1";
  // Each rank leaves an interrupted checkpoint write, then logs until the disk is full;
  // SIGTERM is noted outside $HEFT_HOME.
  std::ofstream(dir.path() + "/full.yaml")
      << "name: full\nentry_point: [/bin/sh, -c, 'trap \"echo term > " << out
      << "/term-$RANK; exit 143\" TERM; mkdir -p " << tmp
      << "; while :; do echo \"step=1 loss=0.5 padding-padding-padding-padding-padding-padding\"; "
         "done']\ncluster: {instance_count: 1, processes_per_host: 2}\n"
         "stopping: {grace_s: 10}\n";
  const std::string env = "HEFT_HOME=" + home + " ";
  const heft::test::CommandOutput o = heft::test::run_command(
      "unshare -m sh -c 'mount -t tmpfs -o size=16m tmpfs " + home + " && chmod 700 " + home +
      " && { " + env + "timeout 120 " + kHeft + " train " + dir.path() + "/full.yaml 2>&1; echo train=$?; " +
      env + kHeft + " jobs >/dev/null; echo jobs=$?; " + env + kHeft + " describe full --json > " + out +
      "/describe.json; echo describe=$?; ls -a " + home + "/jobs/full " + home +
      "/jobs/full/checkpoints; }' 2>&1");
  const std::string& t = o.text;
  EXPECT_NE(t.find("train=1"), std::string::npos) << t;
  EXPECT_NE(t.find("no space left on the disk of " + home + "/jobs/full"), std::string::npos) << t;
  EXPECT_NE(t.find("jobs=0"), std::string::npos) << t;
  EXPECT_NE(t.find("describe=0"), std::string::npos) << t;
  EXPECT_EQ(t.find(".tmp-ckpt-"), std::string::npos) << "an interrupted write was left:\n" << t;
  EXPECT_EQ(t.find(".space-reserve"), std::string::npos) << t;
  // Both workers were asked to stop (SIGTERM) before any SIGKILL.
  EXPECT_EQ(heft::test::read_file(out + "/term-0"), "term\n") << t;
  EXPECT_EQ(heft::test::read_file(out + "/term-1"), "term\n") << t;
  const nlohmann::json j = nlohmann::json::parse(heft::test::read_file(out + "/describe.json"));
  EXPECT_EQ(j["status"], "Failed") << j.dump();
  EXPECT_NE(j["failure_reason"].get<std::string>().find("no space left"), std::string::npos)
      << j.dump();
}

}  // namespace
