#include "support/command.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace heft::test {

CommandOutput run_command(const std::string& command) {
  CommandOutput o;
  FILE* f = ::popen((command + " 2>&1").c_str(), "r");
  if (!f) return o;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), f)) o.text += buf.data();
  const int status = ::pclose(f);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  size_t start = 0;
  while (start < o.text.size()) {
    const size_t nl = o.text.find('\n', start);
    o.lines.push_back(o.text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return o;
}

}  // namespace heft::test
