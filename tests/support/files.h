// Files for tests: a temporary directory removed with everything in it at scope exit, and
// reading a whole file.
#pragma once

#include <string>

namespace heft::test {

class TempDir {
 public:
  // Creates <tmp>/<tag>-XXXXXX.
  explicit TempDir(const std::string& tag = "heft-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The file's bytes; "" when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace heft::test
