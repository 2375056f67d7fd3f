// A heft command (or any binary) started in the background for an end-to-end test: fork and
// exec, stdin from /dev/null, stdout and stderr to files, every wait with a deadline, and a
// SIGKILL if the test ends first. The forked-rank harness for library tests is ranks.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace heft::test {

struct Outcome {
  int exit_code = -1;  // 128 + signal when the process was killed
  bool timed_out = false;
  double seconds = 0;  // from start to exit
  std::string out;
  std::string err;
  nlohmann::json json() const { return nlohmann::json::parse(out); }
};

// "exit C after S s" and both streams, for assertion messages.
std::string describe(const Outcome& o);

class HeftProcess {
 public:
  // Runs `binary args...` with `env` added to this process's environment; its output goes
  // to `output_base`.out and `output_base`.err.
  HeftProcess(const std::string& binary, const std::vector<std::string>& args,
              const std::string& output_base,
              const std::vector<std::pair<std::string, std::string>>& env = {});
  ~HeftProcess();  // SIGKILL and reap when still running
  HeftProcess(const HeftProcess&) = delete;
  HeftProcess& operator=(const HeftProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for the exit; SIGKILLs at the deadline (timed_out). Reads both output files.
  Outcome wait(std::chrono::seconds timeout);

 private:
  std::string out_path_;
  std::string err_path_;
  std::chrono::steady_clock::time_point start_;
  pid_t pid_ = -1;
};

}  // namespace heft::test
