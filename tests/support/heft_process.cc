#include "support/heft_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "support/files.h"

namespace heft::test {

std::string describe(const Outcome& o) {
  return "exit " + std::to_string(o.exit_code) + (o.timed_out ? " (timed out)" : "") +
         " after " + std::to_string(o.seconds) + " s\n--- stdout:\n" + o.out +
         "--- stderr:\n" + o.err;
}

HeftProcess::HeftProcess(const std::string& binary, const std::vector<std::string>& args,
                         const std::string& output_base,
                         const std::vector<std::pair<std::string, std::string>>& env)
    : out_path_(output_base + ".out"),
      err_path_(output_base + ".err"),
      start_(std::chrono::steady_clock::now()) {
  std::vector<std::string> argv_strings{binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::FILE* in = std::freopen("/dev/null", "r", stdin);
    std::FILE* out = std::freopen(out_path_.c_str(), "w", stdout);
    std::FILE* err = std::freopen(err_path_.c_str(), "w", stderr);
    if (in && out && err) ::execv(binary.c_str(), argv.data());
    ::_exit(126);
  }
}

HeftProcess::~HeftProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

Outcome HeftProcess::wait(std::chrono::seconds timeout) {
  using Clock = std::chrono::steady_clock;
  Outcome o;
  const auto deadline = Clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() >= deadline) {
      o.timed_out = true;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  o.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.out = read_file(out_path_);
  o.err = read_file(err_path_);
  return o;
}

}  // namespace heft::test
