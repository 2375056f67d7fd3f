// ctest-labels: unit
// The record of allreduce forms (comm/choice_cache.h): where it lives, first decision kept,
// other fingerprints and malformed lines ignored, concurrent writers agree, clear errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "heft/comm/choice_cache.h"
#include "heft/comm/options.h"
#include "heft/error.h"

namespace heft::comm {
namespace {

namespace fs = std::filesystem;

const int kRing = static_cast<int>(Algorithm::kRing);
const int kHier = static_cast<int>(Algorithm::kHierarchical);

class ChoiceCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("heft-choice-cache-" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path() const { return (dir_ / "comm" / "allreduce-forms").string(); }
  fs::path dir_;
};

TEST_F(ChoiceCache, PathFollowsTheEnvironment) {
  setenv("HEFT_ALLREDUCE_CACHE", "/x/forms", 1);
  EXPECT_EQ(choice_cache_path(), "/x/forms");
  setenv("HEFT_ALLREDUCE_CACHE", "off", 1);
  EXPECT_EQ(choice_cache_path(), "");
  unsetenv("HEFT_ALLREDUCE_CACHE");
  setenv("HEFT_HOME", "/some/home", 1);
  EXPECT_EQ(choice_cache_path(), "/some/home/comm/allreduce-forms");
  unsetenv("HEFT_HOME");
  setenv("HOME", "/h", 1);
  EXPECT_EQ(choice_cache_path(), "/h/.heft/comm/allreduce-forms");
}

TEST_F(ChoiceCache, FirstDecisionStaysAndKeysAreSeparate) {
  auto none = read_choices(path(), "a");  // no file yet
  for (int c : none) EXPECT_EQ(c, -1);
  EXPECT_EQ(record_choice(path(), "a", 20, kRing), kRing);
  EXPECT_EQ(record_choice(path(), "a", 20, kHier), kRing) << "a recorded decision was replaced";
  EXPECT_EQ(record_choice(path(), "a", 17, kHier), kHier);
  EXPECT_EQ(record_choice(path(), "b c", 20, kHier), kHier);  // another fingerprint
  const auto a = read_choices(path(), "a");
  EXPECT_EQ(a[20], kRing);
  EXPECT_EQ(a[17], kHier);
  EXPECT_EQ(a[21], -1);
  EXPECT_EQ(read_choices(path(), "b c")[20], kHier);
  EXPECT_EQ(read_choices(path(), "b")[20], -1);
  // Lines a person broke are skipped, the rest still read.
  std::ofstream(path(), std::ios::app) << "a\t99\tring\na\t5\tnonsense\ngarbage\na\t\t\n"
                                      << "a\t6\thierarchical\n";
  const auto again = read_choices(path(), "a");
  EXPECT_EQ(again[20], kRing);
  EXPECT_EQ(again[6], kHier);
  EXPECT_EQ(again[5], -1);
}

// Eight processes record different forms for one key at once: every one gets the same
// answer back, and the file holds one line for the key.
TEST_F(ChoiceCache, ConcurrentWritersAgreeOnOneDecision) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int got = record_choice(path(), "k", 21, i % 2 ? kRing : kHier);
      std::ofstream((dir_ / ("got-" + std::to_string(i))).string()) << got;
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const int recorded = read_choices(path(), "k")[21];
  ASSERT_TRUE(recorded == kRing || recorded == kHier);
  for (int i = 0; i < 8; ++i) {
    std::ifstream in((dir_ / ("got-" + std::to_string(i))).string());
    int got = -2;
    in >> got;
    EXPECT_EQ(got, recorded) << "writer " << i;
  }
  std::ifstream in(path());
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 1);
}

TEST_F(ChoiceCache, AnUnwritablePlaceIsAnIoErrorNamingIt) {
  fs::create_directories(dir_);
  std::ofstream((dir_ / "file").string()) << "x";
  const std::string bad = (dir_ / "file" / "forms").string();  // a file as a directory
  try {
    record_choice(bad, "a", 20, kRing);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "file").string()), std::string::npos) << e.what();
  }
}

TEST(ChoiceCacheMachine, DescribesHostCpuAndCores) {
  const std::string m = machine_description();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(m.rfind(host, 0), 0u) << m;
  EXPECT_GT(m.size(), std::string(host).size() + 3) << m;
}

}  // namespace
}  // namespace heft::comm
