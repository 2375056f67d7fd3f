#include "heft/job/launch/straggler_watch.h"

#include <sys/wait.h>

namespace heft::job {

void StragglerWatch::start(int world) {
  status_.assign(static_cast<size_t>(world > 0 ? world : 0), -1);
  first_success_.reset();
}

void StragglerWatch::exited(int rank, int wait_status, Clock::time_point now) {
  if (rank < 0 || rank >= static_cast<int>(status_.size())) return;
  int& s = status_[static_cast<size_t>(rank)];
  if (s != -1) return;
  s = wait_status < 0 ? 0x7f00 : wait_status;  // a status is never negative: keep -1 for running
  if (WIFEXITED(s) && WEXITSTATUS(s) == 0 && !first_success_) first_success_ = now;
}

std::vector<int> StragglerWatch::overdue(Clock::time_point now) const {
  std::vector<int> ranks;
  if (!first_success_ || now - *first_success_ < grace_) return ranks;
  for (size_t r = 0; r < status_.size(); ++r)
    if (status_[r] == -1) ranks.push_back(static_cast<int>(r));
  return ranks;
}

std::vector<int> StragglerWatch::finished() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < status_.size(); ++r)
    if (status_[r] != -1 && WIFEXITED(status_[r]) && WEXITSTATUS(status_[r]) == 0)
      ranks.push_back(static_cast<int>(r));
  return ranks;
}

std::string rank_list_text(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string text = "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) text += ", ";
    if (j >= i + 2) {
      text += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      text += std::to_string(ranks[i]);
      ++i;
    }
  }
  return text;
}

}  // namespace heft::job
