// The job-folder reader (job/job_file.h) on real files of each kind a worker can leave: a
// regular file read whole, by range and by tail within their bounds; a FIFO (with no writer:
// an open that would wait for ever), a link to /dev/zero, a link to a regular file, a
// folder and a socket refused at once, naming the file and what it is; a file past its bound
// refused without being read; a deadline already past.
#include "heft/job/job_file.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "support/files.h"

namespace {

using heft::job::JobFileClock;
using heft::job::JobFileRead;
using heft::job::JobFileStatus;
using heft::job::read_job_file;
using heft::job::read_job_file_range;
using heft::job::read_job_file_tail;
using heft::test::TempDir;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Runs `read` and checks it returned within a second (a FIFO's open would never return).
template <class F>
JobFileRead quickly(F read) {
  const auto start = std::chrono::steady_clock::now();
  JobFileRead r = read();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  return r;
}

TEST(JobFile, ARegularFileIsReadWholeByRangeAndByTail) {
  TempDir dir;
  const std::string path = dir.path() + "/rank-0.log";
  write_file(path, "0123456789");
  JobFileRead whole = read_job_file(path, 10);
  ASSERT_TRUE(whole.ok()) << whole.error;
  EXPECT_EQ(whole.bytes, "0123456789");
  EXPECT_EQ(whole.size, 10u);
  EXPECT_EQ(whole.error, "");

  JobFileRead range = read_job_file_range(path, 3, 4);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range.bytes, "3456");
  EXPECT_EQ(range.offset, 3u);
  JobFileRead past = read_job_file_range(path, 50, 4);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past.bytes, "");
  EXPECT_EQ(past.offset, 10u);

  JobFileRead tail = read_job_file_tail(path, 4);
  EXPECT_EQ(tail.bytes, "6789");
  EXPECT_EQ(tail.offset, 6u);
  EXPECT_EQ(read_job_file_tail(path, 100).bytes, "0123456789");
}

TEST(JobFile, AFilePastItsBoundIsRefusedUnread) {
  TempDir dir;
  const std::string path = dir.path() + "/failure";
  write_file(path, std::string(2048, 'x'));
  const JobFileRead r = read_job_file(path, 1024);
  EXPECT_EQ(r.status, JobFileStatus::kTooLarge);
  EXPECT_EQ(r.bytes, "");
  EXPECT_EQ(r.size, 2048u);
  EXPECT_EQ(r.error, path + " holds 2048 bytes; at most 1024 are read");
  // A prefix of it is what a range read gives.
  EXPECT_EQ(read_job_file_range(path, 0, 1024).bytes, std::string(1024, 'x'));
}

TEST(JobFile, AMissingFileIsMissing) {
  TempDir dir;
  const JobFileRead r = read_job_file(dir.path() + "/nothing", 10);
  EXPECT_EQ(r.status, JobFileStatus::kMissing);
  EXPECT_EQ(r.error, dir.path() + "/nothing: no such file");
  EXPECT_EQ(read_job_file(dir.path() + "/no-folder/file", 10).status, JobFileStatus::kMissing);
}

TEST(JobFile, AFifoWithoutAWriterIsRefusedAtOnce) {
  TempDir dir;
  const std::string path = dir.path() + "/rank-0.steps";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  for (const JobFileRead& r :
       {quickly([&] { return read_job_file(path, 1 << 20); }),
        quickly([&] { return read_job_file_range(path, 0, 1 << 20); }),
        quickly([&] { return read_job_file_tail(path, 1 << 20); })}) {
    EXPECT_EQ(r.status, JobFileStatus::kNotRegular);
    EXPECT_EQ(r.error, path + " is a FIFO, not a regular file: not read");
  }
}

TEST(JobFile, LinksAreNeverFollowed) {
  TempDir dir;
  const std::string zero = dir.path() + "/rank-0.log";
  ASSERT_EQ(::symlink("/dev/zero", zero.c_str()), 0);
  const JobFileRead r = quickly([&] { return read_job_file_range(zero, 0, 1 << 20); });
  EXPECT_EQ(r.status, JobFileStatus::kNotRegular);
  EXPECT_EQ(r.bytes, "");
  EXPECT_EQ(r.error, zero + " is a symbolic link, not a regular file: not read");

  // A link to a regular file is refused too: what it leads to is not the job's.
  write_file(dir.path() + "/secret", "key");
  const std::string link = dir.path() + "/failure";
  ASSERT_EQ(::symlink((dir.path() + "/secret").c_str(), link.c_str()), 0);
  EXPECT_EQ(read_job_file(link, 100).status, JobFileStatus::kNotRegular);
  EXPECT_EQ(heft::job::special_file_kind(link), "a symbolic link");
  EXPECT_EQ(heft::job::special_file_kind(dir.path() + "/secret"), "");
}

TEST(JobFile, FoldersAndSocketsAreRefusedNamingWhatTheyAre) {
  TempDir dir;
  EXPECT_EQ(read_job_file(dir.path(), 10).error,
            dir.path() + " is a directory, not a regular file: not read");
  const std::string sock_path = dir.path() + "/s";
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock_path.size(), sizeof(addr.sun_path));
  std::copy(sock_path.begin(), sock_path.end(), addr.sun_path);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(read_job_file(sock_path, 10).error,
            sock_path + " is a socket, not a regular file: not read");
  ::close(sock);
}

TEST(JobFile, ADeadlineAlreadyPastReadsNothing) {
  TempDir dir;
  const std::string path = dir.path() + "/rank-0.log";
  write_file(path, "line\n");
  const JobFileRead r = read_job_file_range(path, 0, 100, JobFileClock::now());
  EXPECT_EQ(r.status, JobFileStatus::kTimedOut);
  EXPECT_EQ(r.bytes, "");
  EXPECT_EQ(r.error, path + ": reading took longer than its deadline");
  // An empty read has nothing to wait for.
  EXPECT_TRUE(read_job_file_range(path, 5, 100, JobFileClock::now()).ok());
}

}  // namespace
