// A training job's output: logs, metric points, terminal (job_output.h).
#include "heft/job/job_output.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "heft/error.h"
#include "heft/job/job_file.h"

namespace heft::job {

namespace {

// A failed job's reason quotes the last lines of its failing rank: the newest whole (an error
// message is one long line: a list of names, a path, a shape), older ones while they fit.
constexpr size_t kTailLines = 10;
constexpr size_t kTailLineBytes = 4096;
constexpr size_t kTailBytes = 4096;
// Buffered points beyond this are written at once, whatever the interval.
constexpr size_t kMaxPendingPoints = 2000;

// Best effort: a terminal or log that fails (a full disk, a closed pipe) must not stop the job.
void write_all(int fd, const std::string& data) {
  const char* p = data.data();
  size_t n = data.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (!(w < 0 && errno == EINTR)) {
      return;
    }
  }
}

std::string kind_or(const std::string& kind, const char* otherwise) {
  return kind.empty() ? otherwise : kind;
}

int terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

JobOutput::JobOutput(const JobPaths& paths, const JobSpec& spec, bool echo, bool progress,
                     ProgressLine progress_line)
    : tails_(static_cast<size_t>(spec.world_size())),
      extractor_(spec.metric_definitions),
      last_flush_(std::chrono::steady_clock::now()),
      echo_(echo),
      progress_(progress),
      progress_line_(std::move(progress_line)) {
  for (int rank = 0; rank < spec.world_size(); ++rank) {
    const std::string path = paths.rank_log(rank);
    // A log a worker left as a link or a FIFO (seen again by heft resume) is refused, never
    // followed nor waited on.
    const int fd = ::open(
        path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    const int err = fd < 0 ? errno : 0;
    struct stat st {};
    std::string why;
    if (err == ELOOP || err == ENXIO ||
        (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))))
      why = "it is " + kind_or(special_file_kind(path), "something else") +
            ", not a regular file: remove it to run the job again";
    else if (err != 0)
      why = errno_string(err);
    if (!why.empty()) {
      if (fd >= 0) ::close(fd);
      for (int open_fd : log_fds_) ::close(open_fd);
      throw IoError("cannot open the log " + path + ": " + why);
    }
    log_fds_.push_back(fd);
  }
}

JobOutput::~JobOutput() {
  for (int fd : log_fds_) ::close(fd);
}

void JobOutput::line(int rank, bool is_stderr, std::string_view text, double elapsed_s) {
  if (rank < 0 || rank >= static_cast<int>(log_fds_.size())) return;
  std::string with_newline(text);
  with_newline.push_back('\n');
  write_all(log_fds_[rank], with_newline);

  std::deque<std::string>& tail = tails_[rank];
  tail.emplace_back(text.size() <= kTailLineBytes
                        ? std::string(text)
                        : std::string(text.substr(0, kTailLineBytes)) + " [... " +
                              std::to_string(text.size() - kTailLineBytes) + " more bytes]");
  if (tail.size() > kTailLines) tail.pop_front();

  const std::vector<MetricPoint> points = extractor_.extract(rank, text, unix_now());
  pending_.insert(pending_.end(), points.begin(), points.end());
  if (rank == 0) progress_line_.observe(text, elapsed_s);

  if (echo_) {
    clear_progress();
    write_all(is_stderr ? STDERR_FILENO : STDOUT_FILENO,
              "[rank " + std::to_string(rank) + "] " + with_newline);
  }
}

void JobOutput::tick(JobDb& db, int64_t job_id, double flush_every_s, const std::string& status,
                     double elapsed_s) {
  const double since_flush =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_flush_).count();
  if (since_flush >= flush_every_s || pending_.size() >= kMaxPendingPoints)
    flush_metrics(db, job_id);
  if (!progress_) return;
  std::string text = progress_line_.text(status, elapsed_s);
  const size_t width = static_cast<size_t>(std::max(20, terminal_width() - 1));
  if (text.size() > width) text.resize(width);
  write_all(STDOUT_FILENO, "\r\033[K" + text);
  progress_shown_ = true;
}

void JobOutput::flush_metrics(JobDb& db, int64_t job_id) {
  last_flush_ = std::chrono::steady_clock::now();
  if (pending_.empty()) return;
  db.add_metrics(job_id, pending_);
  pending_.clear();
}

void JobOutput::clear_progress() {
  if (!progress_shown_) return;
  write_all(STDOUT_FILENO, "\r\033[K");
  progress_shown_ = false;
}

std::string JobOutput::tail(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(tails_.size())) return "";
  std::string out;
  for (auto it = tails_[rank].rbegin(); it != tails_[rank].rend(); ++it) {
    if (!out.empty() && out.size() + it->size() + 1 > kTailBytes) break;
    out = out.empty() ? *it : *it + "\n" + out;
  }
  return out;
}

}  // namespace heft::job
