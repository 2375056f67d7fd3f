// ctest-labels: unit
// The spec reader under attack (issue "The console and the spec reader under attack"): cyclic
// aliases and alias bombs in every section, oversized files, values and overrides, floods of
// unknown keys. Each must be refused with a message naming the field and the limit; through
// the `heft train` and `heft tune` binaries, each must exit 2 within 2 s using under 200 MB.
// Also heft-train's own settings, checked before a job is recorded.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_yaml.h"
#include "support/files.h"

namespace heft::job {
namespace {

// A 9-level alias bomb (9^9 leaves from a few hundred bytes) under `section`, indented for
// a block map at `indent` spaces.
std::string bomb(const std::string& indent) {
  std::string s = indent + "a: &a [x, x, x, x, x, x, x, x, x]\n";
  const std::string names = "abcdefghi";
  for (size_t i = 1; i < names.size(); ++i) {
    const std::string prev(1, names[i - 1]);
    s += indent + names[i] + ": &" + names[i] + " [";
    for (int k = 0; k < 9; ++k) s += (k ? ", *" : "*") + prev;
    s += "]\n";
  }
  return s;
}

const std::string kHead = "name: attack\nentry_point: [/bin/true]\n";

// Each attack as a spec text: name, text.
std::vector<std::pair<std::string, std::string>> alias_attacks() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string section :
       {"distribution", "hyperparameters", "environment", "inputs", "cluster"}) {
    out.emplace_back("cycle in " + section, kHead + section + ": &d {loop: *d}\n");
    out.emplace_back("bomb in " + section, kHead + section + ":\n" + bomb("  "));
  }
  out.emplace_back("cycle in metric_definitions",
                   kHead + "metric_definitions: &m [{name: a, regex: 'a=(\\d+)', x: *m}]\n");
  out.emplace_back("bomb in metric_definitions",
                   kHead + "x_defs:\n" + bomb("  ") + "metric_definitions: [*i]\n");
  out.emplace_back("cycle in a list", kHead + "rules: &r [*r]\n");
  return out;
}

TEST(SpecLimits, AliasCyclesAndBombsAreRefusedInEverySection) {
  for (const auto& [what, text] : alias_attacks()) {
    const auto start = std::chrono::steady_clock::now();
    const Result<JobSpec> r = parse_spec(text, "attack.yaml");
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_FALSE(r.ok()) << what;
    const bool cycle = what.rfind("cycle", 0) == 0;
    EXPECT_NE(r.error().find(cycle ? "(a cycle); expected a tree"
                                   : "expands to more than 100000 values"),
              std::string::npos)
        << what << ": " << r.error();
    EXPECT_EQ(r.error().rfind("attack.yaml:", 0), 0u) << what << ": " << r.error();
    EXPECT_LT(s, 2.0) << what;
  }
}

TEST(SpecLimits, AliasesWithinTheBudgetStillWork) {
  const Result<JobSpec> r = parse_spec(
      "name: a\nentry_point: [/bin/true]\n"
      "x_env: &env {A: '1', B: '2'}\n"
      "environment: *env\n",
      "s.yaml");
  // x_env is an unknown field, but the alias itself is read.
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("x_env: unknown field"), std::string::npos) << r.error();
  EXPECT_EQ(r.error().find("cycle"), std::string::npos) << r.error();
}

TEST(SpecLimits, OverridesAreCheckedLikeTheFile) {
  Result<JobSpec> r = parse_spec(kHead, "s.yaml", {"distribution=&d {loop: *d}"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("--set distribution.loop: an alias inside the map or list it names"),
            std::string::npos)
      << r.error();
  r = parse_spec(kHead, "s.yaml", {"hyperparameters.x=" + std::string(100 << 10, 'v')});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("expected at most 65536 bytes, found 102418"), std::string::npos)
      << r.error().substr(0, 300);
  r = parse_spec(kHead, "s.yaml", std::vector<std::string>(300, "hyperparameters.x=1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "--set: given 300 times; expected at most 256");
}

TEST(SpecLimits, ManyUnknownKeysAreLinearAndTheListIsCut) {
  std::string text = kHead;
  for (int i = 0; i < 40000; ++i) text += "unknown_key_" + std::to_string(i) + ": 1\n";
  const auto start = std::chrono::steady_clock::now();
  const Result<JobSpec> r = parse_spec(text, "big.yaml");
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.ok());
  size_t lines = 1;
  for (char c : r.error()) lines += c == '\n';
  EXPECT_EQ(lines, kMaxSpecErrors + 1) << r.error().substr(0, 500);
  EXPECT_NE(r.error().find("... and 39980 more problems (the first 20 are listed)"),
            std::string::npos);
  EXPECT_LT(s, 2.0);
}

TEST(SpecLimits, HyperparameterEnvironmentAndInputLimits) {
  auto error_of = [](const std::string& body) {
    const Result<JobSpec> r = parse_spec(kHead + body, "s.yaml");
    return r.ok() ? std::string("(accepted)") : r.error();
  };
  std::string many = "hyperparameters: {";
  for (int i = 0; i < 101; ++i) many += (i ? ", h" : "h") + std::to_string(i) + ": 1";
  EXPECT_EQ(error_of(many + "}\n"),
            "s.yaml:3: hyperparameters: expected at most 100 entries, found 101");
  EXPECT_EQ(error_of("hyperparameters: {v: " + std::string(2501, '9') + "}\n"),
            "s.yaml:3: hyperparameters.v: expected a value of at most 2500 characters, found "
            "2501");
  EXPECT_EQ(error_of("hyperparameters: {v: " + std::string(2500, '9') + "}\n"), "(accepted)");
  EXPECT_NE(error_of("hyperparameters: {" + std::string(257, 'k') + ": 1}\n")
                .find("at most 256 characters, found '" + std::string(64, 'k') + "...'"),
            std::string::npos);
  EXPECT_EQ(error_of("environment: {V: '" + std::string(5000, 'x') + "'}\n"),
            "s.yaml:3: environment.V: expected a value of at most 4096 characters, found 5000");
  std::string inputs = "inputs: {";
  for (int i = 0; i < 21; ++i) inputs += (i ? ", c" : "c") + std::to_string(i) + ": /tmp";
  EXPECT_EQ(error_of(inputs + "}\n"), "s.yaml:3: inputs: expected at most 20 channels, found 21");
}

// heft-train's settings are checked against its own table before anything starts.
TEST(SpecLimits, BuiltinTrainerSettingsAreCheckedWithNearestName) {
  const std::string head = "name: a\nentry_point: heft-train\n";
  Result<JobSpec> r = parse_spec(head, "s.yaml", {"hyperparameters.learning_rate=0.1"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(),
            "--set hyperparameters.learning_rate: unknown heft-train setting; did you mean "
            "'lr'? (build/heft-train --help lists them)");
  r = parse_spec(head + "hyperparameters: {epochs: 2, optimzer: adamw}\n", "s.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(),
            "s.yaml:3: hyperparameters.optimzer: unknown heft-train setting; did you mean "
            "'optimizer'? (build/heft-train --help lists them)");
  r = parse_spec(head + "hyperparameters: {optimizer: adam, lr: 0}\n", "s.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(),
            "s.yaml:3: hyperparameters.lr: expected a number above 0, found 0\n"
            "s.yaml:3: hyperparameters.optimizer: expected one of sgd, adamw, found 'adam'");
  r = parse_spec(head + "hyperparameters: {model: gpt, n_embd: 100, n_head: 3}\n", "s.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "s.yaml:3: hyperparameters.n_head: expected a divisor of n_embd (100), "
                       "found 3");
  // A user's own script takes any names.
  r = parse_spec("name: a\nentry_point: [python3, t.py]\n", "s.yaml",
                 {"hyperparameters.learning_rate=0.1"});
  EXPECT_TRUE(r.ok()) << r.error();
  r = parse_spec(head + "hyperparameters: {lr: 0.1, scale_lr: true, model: mlp}\n", "s.yaml");
  EXPECT_TRUE(r.ok()) << r.error();
}

// ---- through the binaries: exit 2, quickly, with little memory ----------------------------

struct HeftRun {
  int code = -1;
  double seconds = 0;
  long max_rss_mb = 0;
  std::string output;
};

// Runs build/heft with `args` and HEFT_HOME=`home`, its output to a file; SIGKILL after 30 s.
HeftRun run_heft(const std::vector<std::string>& args, const std::string& home) {
  const std::string out_path = home + "/out.txt";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("HEFT_HOME", home.c_str(), 1);
    FILE* f = std::freopen(out_path.c_str(), "w", stdout);
    if (!f || dup2(fileno(stdout), 2) < 0) _exit(126);
    std::vector<std::string> all = {std::string(HEFT_BINARY_DIR) + "/heft"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  HeftRun run;
  int status = 0;
  rusage usage{};
  for (;;) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.max_rss_mb = usage.ru_maxrss / 1024;
  run.output = test::read_file(out_path);
  return run;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void expect_refused(const HeftRun& r, const std::string& what, const std::string& fragment) {
  EXPECT_EQ(r.code, 2) << what << ": " << r.output.substr(0, 400);
  EXPECT_LT(r.seconds, 2.0) << what;
  EXPECT_LT(r.max_rss_mb, 200) << what;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << what << ": "
                                                       << r.output.substr(0, 400);
  EXPECT_LT(r.output.size(), 8192u) << what;  // a screenful, not one line per key
}

TEST(SpecLimitsBinary, EveryAttackExits2QuicklyWithLittleMemory) {
  test::TempDir home("heft-spec-attack");
  const std::string dir = home.path();
  for (const auto& [what, text] : alias_attacks()) {
    write(dir + "/attack.yaml", text);
    expect_refused(run_heft({"train", dir + "/attack.yaml"}, dir), "train: " + what,
                   what.rfind("cycle", 0) == 0 ? "(a cycle)" : "expands to more than");
  }
  // A tuning spec's inline training job, and a tuning spec of its own.
  const std::string tune_head =
      "name: t\nobjective: {metric: 'test:acc', type: Maximize}\nmax_jobs: 2\n"
      "hyperparameter_ranges: {continuous: [{name: lr, min: 0.01, max: 0.1}]}\n";
  write(dir + "/tune-cycle.yaml", tune_head + "training_job: &t {entry_point: heft-train, x: *t}\n");
  expect_refused(run_heft({"tune", dir + "/tune-cycle.yaml"}, dir), "tune: cycle", "(a cycle)");
  write(dir + "/tune-bomb.yaml",
        tune_head + "training_job:\n  entry_point: heft-train\n  distribution:\n" + bomb("    "));
  expect_refused(run_heft({"tune", dir + "/tune-bomb.yaml"}, dir), "tune: bomb",
                 "expands to more than");
  // Through --set.
  write(dir + "/ok.yaml", kHead);
  expect_refused(run_heft({"train", dir + "/ok.yaml", "--set", "distribution=&d {loop: *d}"}, dir),
                 "train --set cycle", "(a cycle)");
  // Oversized files: 4 MB of unknown keys, 50 MB, and a 50 MB hyperparameter value.
  std::string keys = kHead;
  for (int i = 0; keys.size() < (4u << 20); ++i) keys += "unknown_" + std::to_string(i) + ": 1\n";
  write(dir + "/4mb.yaml", keys);
  expect_refused(run_heft({"train", dir + "/4mb.yaml"}, dir), "4 MB spec",
                 "bytes; expected at most 1048576");
  write(dir + "/50mb.yaml", kHead + "hyperparameters: {v: " + std::string(50u << 20, '9') + "}\n");
  expect_refused(run_heft({"train", dir + "/50mb.yaml"}, dir), "50 MB value",
                 "bytes; expected at most 1048576");
  expect_refused(run_heft({"tune", dir + "/50mb.yaml"}, dir), "tune: 50 MB",
                 "bytes; expected at most 1048576");
  // Nothing was recorded: no job database rows, no job directory.
  const HeftRun jobs = run_heft({"jobs", "--json"}, dir);
  EXPECT_EQ(jobs.output.find("attack"), std::string::npos) << jobs.output;
}

TEST(SpecLimitsBinary, MisspeltTrainerSettingIsRefusedBeforeTheJobIsRecorded) {
  test::TempDir home("heft-spec-setting");
  const std::string dir = home.path();
  write(dir + "/job.yaml",
        "name: typo\nentry_point: heft-train\nhyperparameters: {epochs: 1, limit: 64}\n");
  const HeftRun r = run_heft({"train", dir + "/job.yaml", "--set", "hyperparameters.learning_rate=0.1"},
                         dir);
  expect_refused(r, "misspelt setting", "did you mean 'lr'?");
  const HeftRun jobs = run_heft({"jobs", "--json"}, dir);
  EXPECT_EQ(jobs.output.find("typo"), std::string::npos) << jobs.output;
  // A tuning's ranges of heft-train settings too, before any trial starts.
  write(dir + "/tune.yaml",
        "name: t\nobjective: {metric: 'test:acc', type: Maximize}\nmax_jobs: 2\n"
        "hyperparameter_ranges:\n"
        "  continuous: [{name: learning_rate, min: 0.01, max: 0.1}]\n"
        "  categorical: [{name: optimizer, values: [sgd, adam]}]\n"
        "training_job: {entry_point: heft-train}\n");
  expect_refused(run_heft({"tune", dir + "/tune.yaml"}, dir), "tune: misspelt range",
                 "hyperparameter_ranges: 'learning_rate': unknown heft-train setting; did you "
                 "mean 'lr'?");
  write(dir + "/tune.yaml",
        "name: t\nobjective: {metric: 'test:acc', type: Maximize}\nmax_jobs: 2\n"
        "hyperparameter_ranges:\n"
        "  categorical: [{name: optimizer, values: [sgd, adam]}]\n"
        "training_job: {entry_point: heft-train}\n");
  expect_refused(run_heft({"tune", dir + "/tune.yaml"}, dir), "tune: bad value",
                 "hyperparameter_ranges: 'optimizer': expected one of sgd, adamw, found 'adam'");
}

}  // namespace
}  // namespace heft::job
