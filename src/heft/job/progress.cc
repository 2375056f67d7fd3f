// The progress line (progress.h).
#include "heft/job/progress.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace heft::job {

namespace {

std::optional<double> number(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') return std::nullopt;
  return v;
}

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

}  // namespace

std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", s / 60, s % 60);
  return buf;
}

void ProgressLine::observe(std::string_view line, double elapsed_s) {
  bool epoch_end = false;
  size_t pos = 0;
  bool first = true;
  while (pos < line.size()) {
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    const std::string_view token = line.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) {
      first = false;
      continue;
    }
    const std::string_view key = token.substr(0, eq);
    const std::optional<double> value = number(token.substr(eq + 1));
    if (first && key == "epoch") epoch_end = true;  // "epoch=E test_loss=..."
    first = false;
    if (!value) continue;
    if (key == "step") step_ = value;
    if (key == "epoch") epoch_ = value;
    if (key == "loss") loss_ = value;
    if (key == "samples_per_s") throughput_ = value;
  }
  if (epoch_end) {
    ++epochs_done_;
    elapsed_at_epoch_end_ = elapsed_s;
  }
}

std::string ProgressLine::text(const std::string& status, double elapsed_s) const {
  std::string t = job_ + "  " + status;
  if (step_) t += "  step " + short_number(*step_);
  if (epoch_) t += "  epoch " + short_number(*epoch_);
  if (loss_) t += "  loss " + short_number(*loss_);
  if (throughput_) t += "  " + short_number(*throughput_) + " samples/s";
  t += "  " + clock_text(elapsed_s);
  std::optional<double> eta;
  if (total_steps_ && step_ && *step_ > 0)
    eta = elapsed_s / *step_ * (*total_steps_ - *step_);
  else if (total_epochs_ && epochs_done_ > 0)
    eta = elapsed_at_epoch_end_ / epochs_done_ * (*total_epochs_ - epochs_done_) -
          (elapsed_s - elapsed_at_epoch_end_);
  if (eta) t += "  ETA " + clock_text(*eta);
  return t;
}

}  // namespace heft::job
