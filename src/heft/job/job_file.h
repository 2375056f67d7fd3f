// Reading a file in a job's folder, which the job's workers can write and replace: any file
// there may be a FIFO (an open(2) that waits for a writer for ever), a link to /dev/zero
// (bytes without end), a device, a socket, or gigabytes. Every reader heft has of a job
// folder goes through here (the supervisor's failure records, the profiler's step files,
// the collective traces and their labels, `heft logs`, the console's log route, the Slurm
// batch output; docs/jobs.md, "What heft reads from a job folder"). Each read:
//   - refuses anything lstat(2) and, after opening, fstat(2) do not call a regular file,
//     naming the file and what it found ("... is a FIFO, not a regular file");
//   - opens with O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC: a link as the
//     last component is refused (never followed), and a FIFO that appears between the
//     lstat and the open opens at once, without waiting for a writer, and is then refused;
//   - reads at most the caller's bound, and never past the size fstat gave at the open (a
//     file that grows while it is read is read up to that size: the next call reads on);
//   - checks `deadline` before each chunk of kJobFileChunk bytes;
//   - returns what happened as a value and never throws.
// Blocking: never waits for a writer; the only waits are read(2)s of a regular file (on a
// local disk, bounded; on a network filesystem, as long as the kernel takes). Thread-safe:
// no shared state.
//
// Deliberately left out: links in the folders above the file (heft made them; what a link
// there leads to is still refused unless it is a regular file, and read within the bound);
// writing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace heft::job {

// Bytes read per read(2), between deadline checks.
constexpr size_t kJobFileChunk = 64 << 10;
// The bound of a record a worker writes whole (a failure file, a label file): 1 MiB.
constexpr size_t kMaxJobRecordBytes = 1 << 20;

enum class JobFileStatus {
  kRead,        // `bytes` holds what was read (possibly nothing: at or past the end)
  kMissing,     // no such file (or a folder on its path is missing)
  kNotRegular,  // a link, FIFO, device, socket or folder: not opened, or closed unread
  kTooLarge,    // read_job_file: larger than its bound; nothing read
  kTimedOut,    // the deadline passed before the bytes asked for were read
  kIoError,     // open, fstat or read failed otherwise (permissions, I/O)
};

struct JobFileRead {
  JobFileStatus status = JobFileStatus::kRead;
  std::string bytes;    // kRead: the bytes from `offset`
  uint64_t offset = 0;  // where `bytes` begins in the file
  uint64_t size = 0;    // the file's size at the open (kRead, kTooLarge, kTimedOut)
  // Empty for kRead; else product text naming the file and what was found or went wrong:
  // "<path> is a FIFO, not a regular file: not read", "<path> holds 5242880 bytes; at most
  // 1048576 are read", "<path>: no such file", "<path>: reading took longer than its deadline".
  std::string error;

  bool ok() const { return status == JobFileStatus::kRead; }
};

using JobFileClock = std::chrono::steady_clock;
inline constexpr JobFileClock::time_point kNoDeadline = JobFileClock::time_point::max();

// The whole file, when it holds at most max_bytes; kTooLarge (nothing read) past that.
JobFileRead read_job_file(const std::string& path, size_t max_bytes,
                          JobFileClock::time_point deadline = kNoDeadline);

// At most max_bytes from `offset` (nothing when offset is at or past the end): a prefix of
// a record, or the next part of a file that grows (a log, a step file) followed from where
// the last read stopped.
JobFileRead read_job_file_range(const std::string& path, uint64_t offset, size_t max_bytes,
                                JobFileClock::time_point deadline = kNoDeadline);

// The last max_bytes of the file (all of it when smaller): a log's tail.
JobFileRead read_job_file_tail(const std::string& path, size_t max_bytes,
                               JobFileClock::time_point deadline = kNoDeadline);

// What lstat(2) finds at `path` when it is not a regular file ("a FIFO", "a symbolic link",
// "a character device", "a block device", "a socket", "a directory"); "" for a regular
// file, or when there is nothing there. Does not open it.
std::string special_file_kind(const std::string& path);

}  // namespace heft::job
