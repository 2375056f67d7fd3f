// Reading a file in a job's folder (job_file.h).
//
// The order is lstat, open, fstat: lstat refuses a link or a FIFO without opening it (an
// open has side effects on a device), and fstat of the open descriptor refuses whatever a
// worker swapped in between the two (O_NOFOLLOW and O_NONBLOCK make that open harmless).
#include "heft/job/job_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "heft/error.h"

namespace heft::job {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

JobFileRead failed(JobFileStatus status, std::string error) {
  JobFileRead r;
  r.status = status;
  r.error = std::move(error);
  return r;
}

JobFileRead not_regular(const std::string& path, const char* kind) {
  return failed(JobFileStatus::kNotRegular,
                path + " is " + kind + ", not a regular file: not read");
}

JobFileRead from_errno(const std::string& path, int err, const char* what) {
  if (err == ENOENT || err == ENOTDIR)
    return failed(JobFileStatus::kMissing, path + ": no such file");
  return failed(JobFileStatus::kIoError, path + ": cannot " + what + ": " + errno_string(err));
}

// An open descriptor of a regular file, closed at scope exit; `r` says why not otherwise.
class RegularFile {
 public:
  explicit RegularFile(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      result_ = from_errno(path, errno, "read it");
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      result_ = not_regular(path, kind_of(st.st_mode));
      return;
    }
    do fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) {
      const int err = errno;
      // ELOOP: the last component became a link after the lstat; ENXIO: a socket.
      result_ = err == ELOOP   ? not_regular(path, "a symbolic link")
                : err == ENXIO ? not_regular(path, "a socket")
                               : from_errno(path, err, "open it");
      return;
    }
    if (::fstat(fd_, &st) != 0) {
      result_ = from_errno(path, errno, "read it");
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      result_ = not_regular(path, kind_of(st.st_mode));
      return;
    }
    result_.size = static_cast<uint64_t>(st.st_size);
    open_ = true;
  }
  ~RegularFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  bool open() const { return open_; }
  JobFileRead take() { return std::move(result_); }

  // Reads [offset, offset + n) into the result, kJobFileChunk bytes a read(2), stopping
  // early at the end (the file shrank) or the deadline.
  JobFileRead read(const std::string& path, uint64_t offset, size_t n,
                   JobFileClock::time_point deadline) {
    result_.offset = offset;
    result_.bytes.resize(n);
    size_t got = 0;
    while (got < n) {
      if (deadline != kNoDeadline && JobFileClock::now() >= deadline) {
        result_.bytes.clear();
        result_.status = JobFileStatus::kTimedOut;
        result_.error = path + ": reading took longer than its deadline";
        return take();
      }
      const size_t want = std::min(kJobFileChunk, n - got);
      const ssize_t k = ::pread(fd_, result_.bytes.data() + got, want,
                                static_cast<off_t>(offset + got));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) {
        JobFileRead r = from_errno(path, errno, "read it");
        r.size = result_.size;
        return r;
      }
      if (k == 0) break;
      got += static_cast<size_t>(k);
    }
    result_.bytes.resize(got);
    return take();
  }

  uint64_t size() const { return result_.size; }

 private:
  int fd_ = -1;
  bool open_ = false;
  JobFileRead result_;
};

}  // namespace

JobFileRead read_job_file(const std::string& path, size_t max_bytes,
                          JobFileClock::time_point deadline) {
  RegularFile f(path);
  if (!f.open()) return f.take();
  if (f.size() > max_bytes) {
    JobFileRead r = failed(JobFileStatus::kTooLarge,
                           path + " holds " + std::to_string(f.size()) + " bytes; at most " +
                               std::to_string(max_bytes) + " are read");
    r.size = f.size();
    return r;
  }
  return f.read(path, 0, static_cast<size_t>(f.size()), deadline);
}

JobFileRead read_job_file_range(const std::string& path, uint64_t offset, size_t max_bytes,
                                JobFileClock::time_point deadline) {
  RegularFile f(path);
  if (!f.open()) return f.take();
  const uint64_t from = std::min(offset, f.size());
  return f.read(path, from, static_cast<size_t>(std::min<uint64_t>(max_bytes, f.size() - from)),
                deadline);
}

JobFileRead read_job_file_tail(const std::string& path, size_t max_bytes,
                               JobFileClock::time_point deadline) {
  RegularFile f(path);
  if (!f.open()) return f.take();
  const uint64_t n = std::min<uint64_t>(max_bytes, f.size());
  return f.read(path, f.size() - n, static_cast<size_t>(n), deadline);
}

std::string special_file_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "";
  return kind_of(st.st_mode);
}

}  // namespace heft::job
