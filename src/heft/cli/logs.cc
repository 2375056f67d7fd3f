// `heft logs JOB [--rank R] [--follow]`: a job's worker logs (logs/rank-N.log). One rank's
// log is printed as the worker wrote it; all ranks' logs are printed rank after rank with
// "[rank N] " before each line. --follow keeps printing new lines (of every rank as they
// come) until the job has ended.
//
// A log is read through job/job_file.h, streamed in chunks of kLogChunk bytes (a log of any
// size costs that much memory, plus a line held back of at most kMaxHeldLine bytes), each
// read up to the size the log had when that read began (a log that grows while it is printed
// ends; --follow prints the rest at its next poll). A log that is not a regular file (a
// worker made it a FIFO, a link, a device) is not read: a line on stderr names it, the other
// ranks' logs are printed, and heft logs exits 1.
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/job_file.h"
#include "heft/job/launch/local_launcher.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"

namespace heft::cli {

namespace {

constexpr size_t kLogChunk = 1 << 20;
// A line longer than this is printed in parts (all ranks' lines are otherwise held whole, so
// that ranks' lines do not interleave mid-line).
constexpr size_t kMaxHeldLine = 1 << 20;

struct LogsArgs {
  std::string job;
  int rank = -1;
  bool follow = false;
};

// One rank's log, read from where the last read stopped; lines are printed whole.
class LogReader {
 public:
  LogReader(std::string path, std::string prefix)
      : path_(std::move(path)), prefix_(std::move(prefix)) {}

  // Prints the complete lines added since the last call, up to the size the log has now;
  // `final` also prints a last line that has no '\n' yet. Returns false when the log could
  // not be read (said on stderr once until it can be again).
  bool print_new(bool final) {
    uint64_t end = 0;
    for (bool first = true; first || offset_ < end; first = false) {
      job::JobFileRead read = job::read_job_file_range(path_, offset_, kLogChunk);
      if (!read.ok()) {
        if (read.status == job::JobFileStatus::kMissing) break;  // nothing written yet
        if (read.error != refused_) std::cerr << "heft logs: " << read.error << std::endl;
        refused_ = read.error;
        return false;
      }
      refused_.clear();
      if (first) {
        end = read.size;
        if (read.size < offset_) {  // truncated or replaced: printed again from its start
          offset_ = 0;
          continue;
        }
      }
      if (read.bytes.empty()) break;
      offset_ = read.offset + read.bytes.size();
      print(read.bytes, false);
    }
    print("", final);
    return true;
  }

 private:
  void print(const std::string& chunk, bool final) {
    pending_ += chunk;
    std::string out;
    size_t begin = 0;
    for (size_t nl; (nl = pending_.find('\n', begin)) != std::string::npos; begin = nl + 1) {
      out += (mid_line_ ? "" : prefix_) + pending_.substr(begin, nl + 1 - begin);
      mid_line_ = false;
    }
    pending_.erase(0, begin);
    if (pending_.size() > kMaxHeldLine || (final && !pending_.empty())) {
      out += (mid_line_ ? "" : prefix_) + pending_;
      pending_.clear();
      mid_line_ = true;
    }
    if (final && mid_line_) {
      out += "\n";
      mid_line_ = false;
    }
    std::cout << out << std::flush;
  }

  std::string path_;
  std::string prefix_;
  uint64_t offset_ = 0;
  std::string pending_;    // the start of a line whose '\n' has not come yet
  bool mid_line_ = false;  // the last thing printed was part of a line
  std::string refused_;    // why the log was last not read
};

int show_logs(const LogsArgs& args) {
  std::optional<FoundJob> found = find_job_or_report("heft logs", args.job);
  if (!found) return 1;
  job::JobDb* db = found->db.get();
  const job::JobRecord& j = found->job;
  if (args.rank >= j.world_size) {
    std::cerr << "heft logs: --rank must be from 0 to " << j.world_size - 1 << " (job '"
              << j.name << "' has " << j.world_size << " workers), got " << args.rank << "\n";
    return 2;
  }
  const std::string logs = j.job_dir + "/logs";
  std::vector<LogReader> readers;
  for (int rank = 0; rank < j.world_size; ++rank)
    if (args.rank < 0 || rank == args.rank)
      readers.emplace_back(logs + "/rank-" + std::to_string(rank) + ".log",
                           args.rank < 0 ? "[rank " + std::to_string(rank) + "] " : "");
  bool all_read = true;
  if (!args.follow) {
    for (LogReader& r : readers) all_read = r.print_new(true) && all_read;
    return all_read ? 0 : 1;
  }
  for (;;) {
    db->fail_orphaned_jobs();
    const heft::Result<job::JobRecord> now = db->find_job(j.name);  // the job found above
    const bool ended = !now.ok() || now.value().ended();
    bool read_now = true;
    for (LogReader& r : readers) read_now = r.print_new(ended) && read_now;  // after the check
    if (ended) return read_now && all_read ? 0 : 1;
    all_read = all_read && read_now;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

Command add_logs_command(CLI::App& app) {
  auto args = std::make_shared<LogsArgs>();
  CLI::App* cmd = app.add_subcommand("logs", "Print a training job's worker logs");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_option("--rank", args->rank, "Only this rank's log, as the worker wrote it")
      ->check(CLI::Range(0, job::kMaxWorkers - 1));
  cmd->add_flag("-f,--follow", args->follow, "Keep printing new lines until the job ends");
  return [args]() -> int { return show_logs(*args); };
}

}  // namespace heft::cli
