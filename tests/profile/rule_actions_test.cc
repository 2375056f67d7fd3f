// ctest-labels: multiproc
// Rule actions on real jobs (`heft train` over tests/profile/workers/step_worker.cc, 2 ranks):
// a notify command receives the finding's JSON on stdin; a failing notify command and an
// unreachable URL are logged and the job still completes; bad actions are spec errors naming
// the field.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/heft_process.h"

namespace {

using std::chrono::seconds;
const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kWorker = HEFT_BINARY_DIR "/test-workers/step_worker";

struct Home {
  heft::test::TempDir dir;
  heft::test::Outcome heft(const std::vector<std::string>& args, seconds timeout = seconds(60)) {
    static int n = 0;
    heft::test::HeftProcess p(kHeft, args, dir.path() + "/out-" + std::to_string(n++),
                              {{"HEFT_HOME", dir.path() + "/home"}});
    return p.wait(timeout);
  }
  std::string spec(const std::string& name, const std::string& rules) {
    const std::string path = dir.path() + "/" + name + ".yaml";
    std::ofstream(path) << "name: " << name << "\nentry_point: [" << kWorker
                        << ", --steps, 60, --phase-ms, 10, --loss-flat]\ncluster: {processes_per_host: 2}\n"
                           "metric_definitions: [{name: 'train:loss', regex: 'loss=([0-9.]+)'}]\n"
                           "profiler: {interval_s: 0.3}\n"
                        << rules;
    return path;
  }
};

TEST(RuleActions, NotifyCommandGetsTheFindingAndFailuresDoNotStopTheJob) {
  Home h;
  const std::string got = h.dir.path() + "/finding.json";
  // MaxInitializationTime with threshold 0 fires on the first step record; the workers print
  // a flat loss, so LossNotDecreasing fires too.
  const auto run = h.heft({"train", h.spec("notified", "rules:\n"
      "  - {rule: MaxInitializationTime, parameters: {threshold_s: 0},\n"
      "     action: {notify: {exec: [/bin/sh, -c, 'cat > " + got + "'], timeout_s: 5}}}\n"
      "  - {rule: LossNotDecreasing, parameters: {num_steps: 3},\n"
      "     action: {stop: false, notify: {exec: [/bin/false], url: 'http://127.0.0.1:1/x',\n"
      "                                    timeout_s: 2}}}\n")});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  const nlohmann::json f = nlohmann::json::parse(heft::test::read_file(got));
  EXPECT_EQ(f["rule"], "MaxInitializationTime");
  EXPECT_EQ(f["rank"], -1);
  EXPECT_EQ(f["job"], "notified");
  EXPECT_NE(f["message"].get<std::string>().find("the first step ended"), std::string::npos);
  EXPECT_EQ(f["action"], "none");
  EXPECT_TRUE(f["evidence"].contains("recommendation"));
  // The failing notifications were logged, and the job completed anyway.
  EXPECT_NE(run.err.find("notify exec '/bin/false': exited with status 1 (the job goes on)"),
            std::string::npos) << run.err;
  EXPECT_NE(run.err.find("notify url POST http://127.0.0.1:1/x"), std::string::npos) << run.err;
  const nlohmann::json d = h.heft({"describe", "notified", "--json"}).json();
  EXPECT_EQ(d["status"], "Completed");
  // The recorded spec keeps the action (heft resume reads it back).
  const auto& rules = d["spec"]["rules"];
  ASSERT_EQ(rules.size(), 2u) << d["spec"].dump();
  EXPECT_EQ(rules[0]["action"]["notify"]["exec"][0], "/bin/sh");
  EXPECT_EQ(rules[1]["action"]["notify"]["url"], "http://127.0.0.1:1/x");
}

TEST(RuleActions, BadActionsAreSpecErrors) {
  Home h;
  const auto empty = h.heft({"train", h.spec("bad", "rules: [{rule: Dataloader, action: {notify: {exec: []}}}]\n")});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("rules[0].action.notify.exec"), std::string::npos) << empty.err;
  const auto https = h.heft({"train", h.spec("bad", "rules: [{rule: Dataloader, action: {notify: {url: 'https://x.example/'}}}]\n")});
  EXPECT_EQ(https.exit_code, 2);
  EXPECT_NE(https.err.find("rules[0].action.notify.url"), std::string::npos) << https.err;
  EXPECT_NE(https.err.find("plain http"), std::string::npos) << https.err;
  const auto nothing = h.heft({"train", h.spec("bad", "rules: [{rule: BatchSize, action: {notify: {timeout_s: 3}}}]\n")});
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_NE(nothing.err.find("expected exec or url"), std::string::npos) << nothing.err;
  const auto word = h.heft({"train", h.spec("bad", "rules: [{rule: BatchSize, action: page}]\n")});
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_NE(word.err.find("rules[0].action"), std::string::npos) << word.err;
  EXPECT_NE(word.err.find("notify"), std::string::npos) << word.err;
}

}  // namespace
