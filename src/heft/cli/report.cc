// `heft report JOB [-o FILE]`: writes the job's profiler report (profile/report.h), by default
// to <job>/report.html, and prints where.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/record/job_db.h"
#include "heft/job/paths.h"
#include "heft/profile/diagnosis.h"
#include "heft/profile/job_profiler.h"
#include "heft/profile/report.h"

namespace heft::cli {

Command add_report_command(CLI::App& app) {
  struct Args {
    std::string job;
    std::string out;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Write a job's profiler report: plots, step phases, rule findings (HTML)");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_option("-o,--output", args->out, "Where to write it (default: <job dir>/report.html)")
      ->type_name("FILE");
  return [args]() -> int {
    std::optional<FoundJob> found = find_job_or_report("heft report", args->job);
    if (!found) return 1;
    profile::ReportInput in;
    in.job = found->job;
    in.transitions = found->db->transitions(in.job.id);
    in.metrics = found->db->metrics(in.job.id);
    in.findings = found->db->findings(in.job.id);
    const job::JobPaths paths = job::job_paths(job::heft_home(), in.job.name);
    const double now = job::unix_now();
    const profile::Diagnosis d = profile::diagnose(profile::trace_dir(paths), now);
    if (d.stuck()) in.diagnosis = d.text();
    const std::string out = args->out.empty() ? paths.root + "/report.html" : args->out;
    const std::string tmp = out + ".tmp";
    // A new file: whatever a worker left at the temporary name (a FIFO, a link) is removed,
    // never opened; rename() then replaces a link at `out` rather than following it.
    ::unlink(tmp.c_str());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    const std::string html = profile::report_html(in);
    size_t written = 0;
    while (fd >= 0 && written < html.size()) {
      const ssize_t n = ::write(fd, html.data() + written, html.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
    if (fd >= 0) ::close(fd);
    if (fd < 0 || written < html.size()) {
      ::unlink(tmp.c_str());
      std::cerr << "heft report: cannot write " << out << "\n";
      return 1;
    }
    if (std::rename(tmp.c_str(), out.c_str()) != 0) {
      std::cerr << "heft report: cannot write " << out << "\n";
      return 1;
    }
    std::cout << out << std::endl;
    return 0;
  };
}

}  // namespace heft::cli
