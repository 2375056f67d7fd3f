#include "heft/train/layout_trials.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "heft/parallel/tensor/tensor_parallel.h"
#include "heft/parallel/torch_state.h"
#include "heft/train/trainer.h"

namespace heft::train {

namespace {

using parallel::layout::Prediction;

std::string milliseconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  return buf;
}

// The run's hyperparameters cut down to a trial of `prediction`'s layout: kTrialSteps steps,
// nothing saved, read back, evaluated or generated.
Hyperparameters trial_hyperparameters(const Hyperparameters& hp, int64_t gradient_accumulation) {
  Hyperparameters t = hp;
  t.max_steps = kTrialSteps;
  t.log_every = kTrialSteps;
  t.checkpoint_dir.clear();
  t.checkpoint_every = 0;
  t.model_dir.clear();
  t.eval = false;
  t.eval_every = 0;
  t.generate = 0;
  t.gradient_accumulation = gradient_accumulation;
  return t;
}

// HEFT_PROFILE_DIR unset for the trials' lifetime (the step profiler would record their steps
// as the run's), put back after. setenv/unsetenv: no other thread reads the environment here.
class ProfilerOff {
 public:
  ProfilerOff() {
    if (const char* v = std::getenv("HEFT_PROFILE_DIR")) saved_ = v;
    if (saved_) ::unsetenv("HEFT_PROFILE_DIR");
  }
  ~ProfilerOff() {
    if (saved_) ::setenv("HEFT_PROFILE_DIR", saved_->c_str(), 1);
  }
  ProfilerOff(const ProfilerOff&) = delete;
  ProfilerOff& operator=(const ProfilerOff&) = delete;

 private:
  std::optional<std::string> saved_;
};

// One trial: train() on the layout, its output discarded; the median step, max over ranks.
double measure(const Hyperparameters& hp, const std::string& test_dir, comm::Communicator& world,
               const LayoutChoice& choice, const Prediction& p) {
  int64_t accumulation = 1;
  const config::Distribution d = layout_distribution(choice.distribution, p, &accumulation);
  std::ostream nowhere(nullptr);  // writes fail silently: nothing reaches stdout
  TrainResult r = train(trial_hyperparameters(hp, accumulation), d, test_dir, world, nowhere);
  double step_s = r.median_step_s;
  world.allreduce(&step_s, 1, comm::DataType::f64, comm::ReduceOp::max);
  ::malloc_trim(0);  // the trial's model, optimizer and activations back to the system
  return step_s;
}

}  // namespace

std::vector<Prediction> trial_candidates(const parallel::layout::SearchResult& result, int trials,
                                         int64_t memory_limit_bytes) {
  std::vector<Prediction> out;
  if (result.ranked.empty()) return out;
  const double bound = result.ranked.front().step_s * kTrialWithin;
  const double memory = memory_limit_bytes > 0 ? kTrialMemoryShare * static_cast<double>(memory_limit_bytes) : 0;
  for (const Prediction& p : result.ranked) {
    if (static_cast<int>(out.size()) >= trials || p.step_s > bound) break;
    if (!out.empty() && memory > 0 && static_cast<double>(p.memory_bytes) > memory) continue;
    out.push_back(p);
  }
  if (out.size() < 2) out.clear();
  return out;
}

std::string short_name(const parallel::layout::Layout& l) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "d%d s%d t%d p%d m%d v%d%s", l.data, l.sharded, l.tensor, l.pipeline,
                l.microbatches, l.virtual_stages, l.checkpointing ? " ckpt" : "");
  return buf;
}

std::vector<LayoutTrial> run_layout_trials(const Hyperparameters& hp, const std::string& test_dir,
                                           comm::Communicator& world, std::ostream& out,
                                           LayoutChoice& choice) {
  const int wanted = choice.distribution.modelparallel.auto_layout_trials;
  const std::vector<Prediction> candidates =
      trial_candidates(choice.result, wanted, choice.inputs.options.memory_limit_bytes);
  std::vector<LayoutTrial> trials;
  if (candidates.empty()) {
    if (world.rank() == 0)
      out << "layout trials: none ("
          << (wanted < 2 ? "auto_layout_trials " + std::to_string(wanted)
                         : "one layout predicted within " + std::to_string(kTrialWithin).substr(0, 3) +
                               "x of the first")
          << ")" << std::endl;
    return trials;
  }
  const std::string rng = parallel::rng_to_bytes();
  const parallel::tensor::TensorParallelCounters counters = parallel::tensor::counters();
  for (const Prediction& p : candidates) trials.push_back({p, std::numeric_limits<double>::infinity()});
  {
    ProfilerOff profiler_off;
    // Rounds interleave the layouts (A B C A B C): a burst of load on the host hits one round
    // of a layout, not all of it, and the fastest round is kept.
    for (int round = 0; round < kTrialRounds; ++round)
      for (LayoutTrial& t : trials)
        t.measured_step_s = std::min(t.measured_step_s, measure(hp, test_dir, world, choice, t.prediction));
  }
  if (world.rank() == 0)
    for (size_t i = 0; i < trials.size(); ++i)
      out << "layout trial " << i + 1 << "/" << trials.size() << ": " << short_name(trials[i].prediction.layout)
          << " predicted " << milliseconds(trials[i].prediction.step_s) << " measured "
          << milliseconds(trials[i].measured_step_s) << std::endl;
  parallel::rng_from_bytes(rng);
  parallel::tensor::counters() = counters;
  size_t best = 0;
  for (size_t i = 1; i < trials.size(); ++i)
    if (trials[i].measured_step_s < trials[best].measured_step_s) best = i;
  choice.prediction = trials[best].prediction;
  choice.distribution = layout_distribution(choice.distribution, choice.prediction, &choice.gradient_accumulation);
  choice.trial = static_cast<int>(best) + 1;
  choice.trials = static_cast<int>(trials.size());
  // Every rank says what it chose (the same: the times are agreed), so a log shows it per rank.
  out << "layout trials: chose " << short_name(choice.prediction.layout) << " (trial " << choice.trial
      << " of " << choice.trials << ", measured " << milliseconds(trials[best].measured_step_s)
      << "; the predicted first " << milliseconds(trials.front().measured_step_s) << ")" << std::endl;
  return trials;
}

}  // namespace heft::train
