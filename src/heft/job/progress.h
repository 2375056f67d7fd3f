// The one-line progress display `heft train` keeps at the bottom of a terminal:
//   fashion-cnn  Training  step 120  epoch 2  loss 0.512  600 samples/s  0:42  ETA 1:10
// fed with rank 0's output lines, which it reads as space-separated key=value tokens
// (step, epoch, loss, samples_per_s: the built-in trainer's words). The ETA is shown when
// the total is known: a `steps`/`max_steps` hyperparameter, or `epochs` once one epoch has
// ended (an "epoch=E test_..." line).
//
// Deliberately left out: writing to the terminal (the supervisor clears and redraws it).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace heft::job {

class ProgressLine {
 public:
  ProgressLine(std::string job, std::optional<double> total_epochs,
               std::optional<double> total_steps)
      : job_(std::move(job)), total_epochs_(total_epochs), total_steps_(total_steps) {}

  void observe(std::string_view line, double elapsed_s);
  std::string text(const std::string& status, double elapsed_s) const;

 private:
  std::string job_;
  std::optional<double> total_epochs_;
  std::optional<double> total_steps_;
  std::optional<double> step_, epoch_, loss_, throughput_;
  int epochs_done_ = 0;
  double elapsed_at_epoch_end_ = 0;
};

// 42 -> "0:42", 4000 -> "1:06:40".
std::string clock_text(double seconds);

}  // namespace heft::job
