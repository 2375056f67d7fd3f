// `heft logs JOB [--rank R] [--follow]`: a job's worker logs (logs/rank-N.log). One rank's
// log is printed as the worker wrote it; all ranks' logs are printed rank after rank with
// "[rank N] " before each line. --follow keeps printing new lines (of every rank as they
// come) until the job has ended.
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/launch/local_launcher.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"

namespace heft::cli {

namespace {

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

  // Prints the complete lines added since the last call; `final` also prints a last line
  // that has no '\n' yet.
  void print_new(bool final) {
    std::ifstream in(path_, std::ios::binary);
    if (in) {
      in.seekg(static_cast<std::streamoff>(offset_));
      std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      offset_ += chunk.size();
      pending_ += chunk;
    }
    std::string out;
    size_t begin = 0;
    for (size_t nl; (nl = pending_.find('\n', begin)) != std::string::npos; begin = nl + 1)
      out += prefix_ + pending_.substr(begin, nl + 1 - begin);
    pending_.erase(0, begin);
    if (final && !pending_.empty()) {
      out += prefix_ + pending_ + "\n";
      pending_.clear();
    }
    std::cout << out << std::flush;
  }

 private:
  std::string path_;
  std::string prefix_;
  size_t offset_ = 0;
  std::string pending_;
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
  if (!args.follow) {
    for (LogReader& r : readers) r.print_new(true);
    return 0;
  }
  for (;;) {
    db->fail_orphaned_jobs();
    const heft::Result<job::JobRecord> now = db->find_job(j.name);  // the job found above
    const bool ended = !now.ok() || now.value().ended();
    for (LogReader& r : readers) r.print_new(ended);  // after the check: nothing is missed
    if (ended) return 0;
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
