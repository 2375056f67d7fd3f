#include "heft/comm/choice_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "heft/comm/options.h"
#include "heft/contract/worker.h"
#include "heft/error.h"

namespace heft::comm {

namespace fs = std::filesystem;

namespace {

// The value `text` names: its index in `names`, or with none an Algorithm's number; -1 when
// it names nothing known.
int value_of(const std::string& text, const FormNames& names) {
  if (!names.empty()) {
    const auto it = std::find(names.begin(), names.end(), text);
    return it == names.end() ? -1 : static_cast<int>(it - names.begin());
  }
  try {
    return static_cast<int>(parse_algorithm(text));
  } catch (const InvalidArgument&) {
    return -1;
  }
}

std::string name_of(int value, const FormNames& names) {
  return names.empty() ? name(static_cast<Algorithm>(value)) : names.at(static_cast<size_t>(value));
}

// One line of the file: fingerprint, bucket, form; false when malformed.
bool parse_line(const std::string& line, const FormNames& names, std::string& fingerprint, int& bucket,
                int& choice) {
  const auto a = line.find('\t');
  const auto b = a == std::string::npos ? a : line.find('\t', a + 1);
  if (b == std::string::npos) return false;
  fingerprint = line.substr(0, a);
  char* end = nullptr;
  const std::string number = line.substr(a + 1, b - a - 1);
  bucket = static_cast<int>(std::strtol(number.c_str(), &end, 10));
  if (number.empty() || *end != '\0' || bucket < 0 || bucket >= kSizeBuckets) return false;
  choice = value_of(line.substr(b + 1), names);
  return choice >= 0;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return "";
    throw IoError("allreduce form cache " + path + ": cannot read: " + std::strerror(errno));
  }
  std::ostringstream all;
  all << in.rdbuf();
  return all.str();
}

// Holds an exclusive flock on `path` (a lock file beside the cache) while alive.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0)
      throw IoError("allreduce form cache: cannot lock " + path + ": " + std::strerror(errno));
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// The decisions for `fingerprint` in the file's text.
std::array<int, kSizeBuckets> choices_in(const std::string& text, const std::string& fingerprint,
                                         const FormNames& names) {
  std::array<int, kSizeBuckets> out;
  out.fill(-1);
  std::istringstream lines(text);
  std::string line, key;
  int bucket = 0, choice = 0;
  while (std::getline(lines, line))
    if (parse_line(line, names, key, bucket, choice) && key == fingerprint && out[bucket] < 0)
      out[bucket] = choice;  // the first line for a key wins
  return out;
}

}  // namespace

std::string choice_cache_path() {
  const std::string forced = env_or("HEFT_ALLREDUCE_CACHE", "");
  if (forced == "off") return "";
  if (!forced.empty()) return forced;
  const std::string home = contract::heft_home();
  return home + "/comm/allreduce-forms";
}

std::array<int, kSizeBuckets> read_choices(const std::string& path, const std::string& fingerprint,
                                           const FormNames& names) {
  return choices_in(read_all(path), fingerprint, names);
}

int record_choice(const std::string& path, const std::string& fingerprint, int bucket, int choice,
                  const FormNames& names) {
  const fs::path file(path);
  std::error_code ec;
  if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
  if (ec)
    throw IoError("allreduce form cache: cannot create " + file.parent_path().string() + ": " +
                  ec.message());
  FileLock lock(path + ".lock");
  const std::string old = read_all(path);
  const int known = choices_in(old, fingerprint, names)[bucket];
  if (known >= 0) return known;
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << old;
    if (!old.empty() && old.back() != '\n') out << '\n';
    out << fingerprint << '\t' << bucket << '\t' << name_of(choice, names) << '\n';
    out.flush();
    if (!out) throw IoError("allreduce form cache: cannot write " + tmp);
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw IoError("allreduce form cache: cannot replace " + path);
  }
  return choice;
}

std::string machine_description() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) model = line.substr(line.find_first_not_of(' ', colon + 1));
    break;
  }
  return std::string(host) + " " + model + " " +
         std::to_string(std::thread::hardware_concurrency());
}

}  // namespace heft::comm
