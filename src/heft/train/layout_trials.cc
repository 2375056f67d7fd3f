#include "heft/train/layout_trials.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "heft/error.h"
#include "heft/parallel/tensor/tensor_parallel.h"
#include "heft/parallel/torch_state.h"
#include "heft/step_profiler/step_profiler.h"
#include "heft/train/trainer.h"

namespace heft::train {

namespace {

using parallel::layout::Prediction;

std::string ms_number(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s * 1e3);
  return buf;
}

std::string milliseconds(double s) { return ms_number(s) + " ms"; }

// The run's hyperparameters cut down to a trial of `steps` steps: nothing saved, read back,
// evaluated or generated.
Hyperparameters trial_hyperparameters(const Hyperparameters& hp, int64_t steps, int64_t gradient_accumulation) {
  Hyperparameters t = hp;
  t.max_steps = steps;
  t.log_every = steps;
  t.checkpoint_dir.clear();
  t.checkpoint_every = 0;
  t.model_dir.clear();
  t.eval = false;
  t.eval_every = 0;
  t.generate = 0;
  t.gradient_accumulation = gradient_accumulation;
  return t;
}

// One trial of `steps` steps: train() on the layout, its output discarded; the median timed
// step, max over ranks.
double measure(const Hyperparameters& hp, const std::string& test_dir, comm::Communicator& world,
               const LayoutChoice& choice, const Prediction& p, int64_t steps) {
  int64_t accumulation = 1;
  const config::Distribution d = layout_distribution(choice.distribution, p, &accumulation);
  std::ostream nowhere(nullptr);  // writes fail silently: nothing reaches stdout
  TrainResult r = train(trial_hyperparameters(hp, steps, accumulation), d, test_dir, world, nowhere);
  double step_s = r.median_step_s;
  world.allreduce(&step_s, 1, comm::DataType::f64, comm::ReduceOp::max);
  ::malloc_trim(0);  // the trial's model, optimizer and activations back to the system
  return step_s;
}

// The process's peak resident bytes so far (getrusage), the largest over the ranks: collective.
double peak_rss_gb(comm::Communicator& world) {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  double gb = static_cast<double>(u.ru_maxrss) * 1024 / 1e9;
  world.allreduce(&gb, 1, comm::DataType::f64, comm::ReduceOp::max);
  return gb;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string ratio(double measured_s, double predicted_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "x%.2f", predicted_s > 0 ? measured_s / predicted_s : 0.0);
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", share * 100);
  return buf;
}

// The trials' rounds, interleaved (A B C A B C): a burst of load on the host hits one round of
// a layout, not all of it. Fills each trial's rounds and measured_step_s.
void run_rounds(const Hyperparameters& hp, const std::string& test_dir, comm::Communicator& world,
                const LayoutChoice& choice, std::vector<LayoutTrial>& trials) {
  for (int round = 0; round < kTrialRounds; ++round)
    for (LayoutTrial& t : trials) t.rounds.push_back(measure(hp, test_dir, world, choice, t.prediction, kTrialSteps));
  for (LayoutTrial& t : trials) t.measured_step_s = *std::min_element(t.rounds.begin(), t.rounds.end());
}

// The runoff's rounds over `entrants`, interleaved; fills their runoff_step_s.
void run_runoff(const Hyperparameters& hp, const std::string& test_dir, comm::Communicator& world,
                const LayoutChoice& choice, std::vector<LayoutTrial>& trials, const std::vector<size_t>& entrants) {
  for (size_t i : entrants) trials[i].runoff_step_s = std::numeric_limits<double>::infinity();
  for (int round = 0; round < kRunoffRounds; ++round)
    for (size_t i : entrants)
      trials[i].runoff_step_s =
          std::min(trials[i].runoff_step_s, measure(hp, test_dir, world, choice, trials[i].prediction, kRunoffSteps));
}

void print_trials(std::ostream& out, const std::vector<LayoutTrial>& trials) {
  for (size_t i = 0; i < trials.size(); ++i) {
    const LayoutTrial& t = trials[i];
    out << "layout trial " << i + 1 << "/" << trials.size() << ": " << short_name(t.prediction.layout) << " predicted "
        << milliseconds(t.prediction.step_s) << " measured " << milliseconds(t.measured_step_s) << " "
        << ratio(t.measured_step_s, t.prediction.step_s) << " (rounds";
    for (double r : t.rounds) out << " " << ms_number(r);
    out << " ms)" << std::endl;
  }
}

void print_runoff(std::ostream& out, const std::vector<LayoutTrial>& trials, const std::vector<size_t>& entrants,
                  double spread, double margin) {
  out << "layout runoff: " << entrants.size() << " of " << trials.size() << " trials, those within " << percent(margin)
      << " of the fastest (at most " << kRunoffMax << "; the margin twice the rounds' median spread "
      << percent(spread) << ", " << percent(kRunoffMargin) << "-" << percent(kRunoffMarginMax)
      << ") and the prediction's first, " << kRunoffRounds << " rounds of " << kRunoffSteps << " steps" << std::endl;
  for (size_t k = 0; k < entrants.size(); ++k) {
    const LayoutTrial& t = trials[entrants[k]];
    out << "layout runoff " << k + 1 << "/" << entrants.size() << ": " << short_name(t.prediction.layout) << " (trial "
        << entrants[k] + 1 << ") predicted " << milliseconds(t.prediction.step_s) << " measured "
        << milliseconds(t.runoff_step_s) << " " << ratio(t.runoff_step_s, t.prediction.step_s) << std::endl;
  }
}

// What the trials and the runoff took: seconds, the peak RSS after each (max over ranks), the
// rounds' spread and the margin it gave.
struct Phases {
  double trials_s = 0, runoff_s = 0, trials_gb = 0, runoff_gb = 0, spread = 0, margin = 0;
};

void print_phases(std::ostream& out, const Phases& p, double calibration, size_t entrants, int64_t limit_bytes) {
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "layout trials: calibration x%.2f (measured / predicted, median of the runoff's %zu); trials %.1f s, "
                "runoff %.1f s",
                calibration, entrants, p.trials_s, p.runoff_s);
  out << buf << std::endl;
  std::snprintf(buf, sizeof buf,
                "layout trials: peak RSS %.3f GB after the trials, %.3f GB after the runoff (the largest over the "
                "ranks; limit %.3f GB)",
                p.trials_gb, p.runoff_gb, static_cast<double>(limit_bytes) / 1e9);
  out << buf << std::endl;
}

}  // namespace

double round_spread(const std::vector<LayoutTrial>& trials) {
  std::vector<double> spreads;
  for (const LayoutTrial& t : trials) {
    if (t.rounds.size() < 2) continue;
    const auto [lo, hi] = std::minmax_element(t.rounds.begin(), t.rounds.end());
    if (*lo > 0) spreads.push_back(*hi / *lo - 1);
  }
  if (spreads.empty()) return 0;
  std::sort(spreads.begin(), spreads.end());
  const size_t n = spreads.size();
  return n % 2 ? spreads[n / 2] : (spreads[n / 2 - 1] + spreads[n / 2]) / 2;
}

double runoff_margin(double spread) { return std::clamp(2 * spread, kRunoffMargin, kRunoffMarginMax); }

std::vector<size_t> runoff_entrants(const std::vector<LayoutTrial>& trials, double margin) {
  std::vector<size_t> order(trials.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return trials[a].measured_step_s < trials[b].measured_step_s;
  });
  std::vector<size_t> out;
  for (size_t i : order) {
    if (static_cast<int>(out.size()) >= kRunoffMax) break;
    if (!out.empty() && trials[i].measured_step_s > (1 + margin) * trials[order.front()].measured_step_s) break;
    out.push_back(i);
  }
  // The prediction's first runs off too: the model's evidence beside the 3-step trials', whose
  // both rounds can land in a burst of load.
  if (!out.empty() && std::find(out.begin(), out.end(), size_t{0}) == out.end()) out.push_back(0);
  return out;
}

size_t runoff_winner(const std::vector<LayoutTrial>& trials, const std::vector<size_t>& entrants) {
  size_t best = entrants.front();
  for (size_t i : entrants)
    if (trials[i].runoff_step_s < trials[best].runoff_step_s ||
        (trials[i].runoff_step_s == trials[best].runoff_step_s && i < best))
      best = i;
  return best;
}

double calibration_scale(const std::vector<LayoutTrial>& trials, const std::vector<size_t>& entrants) {
  std::vector<double> ratios;
  for (size_t i : entrants)
    if (trials[i].runoff_step_s > 0 && trials[i].prediction.step_s > 0)
      ratios.push_back(trials[i].runoff_step_s / trials[i].prediction.step_s);
  if (ratios.empty()) return 0;
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  return n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
}

namespace {
std::string within_text(double within) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", within);
  return buf;
}
}  // namespace

double trial_within() {
  const char* v = std::getenv("HEFT_LAYOUT_TRIAL_WITHIN");
  if (!v || !*v) return kTrialWithin;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x >= 1) || !std::isfinite(x))
    throw InvalidArgument(std::string("HEFT_LAYOUT_TRIAL_WITHIN: expected a factor >= 1 (layouts predicted "
                                      "within it x the first's step are tried), found '") + v + "'");
  return x;
}

std::vector<Prediction> trial_candidates(const parallel::layout::SearchResult& result, int trials,
                                         int64_t memory_limit_bytes, double within) {
  std::vector<Prediction> out;
  if (result.ranked.empty()) return out;
  const double bound = result.ranked.front().step_s * within;
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
  const double within = trial_within();
  const std::vector<Prediction> candidates =
      trial_candidates(choice.result, wanted, choice.inputs.options.memory_limit_bytes, within);
  std::vector<LayoutTrial> trials;
  if (candidates.empty()) {
    if (world.rank() == 0)
      out << "layout trials: none ("
          << (wanted < 2 ? "auto_layout_trials " + std::to_string(wanted)
                         : "one layout predicted within " + within_text(within) +
                               "x of the first")
          << ")" << std::endl;
    return trials;
  }
  const std::string rng = parallel::rng_to_bytes();
  const parallel::tensor::TensorParallelCounters counters = parallel::tensor::counters();
  for (const Prediction& p : candidates) trials.push_back({p, {}, 0, 0});
  std::vector<size_t> entrants;
  Phases phases;
  {
    // The trials' steps are not the run's: the step profiler records none of them.
    const profile::StepProfiler::Off profiler_off;
    auto start = std::chrono::steady_clock::now();
    run_rounds(hp, test_dir, world, choice, trials);
    phases.trials_s = seconds_since(start);
    phases.trials_gb = peak_rss_gb(world);
    // Every rank holds the same figures (max over ranks), so every rank picks the same entrants.
    phases.spread = round_spread(trials);
    phases.margin = runoff_margin(phases.spread);
    entrants = runoff_entrants(trials, phases.margin);
    start = std::chrono::steady_clock::now();
    run_runoff(hp, test_dir, world, choice, trials, entrants);
    phases.runoff_s = seconds_since(start);
    phases.runoff_gb = peak_rss_gb(world);
  }
  parallel::rng_from_bytes(rng, "the RNG state saved before the trials");
  parallel::tensor::counters() = counters;
  const size_t best = runoff_winner(trials, entrants);
  choice.prediction = trials[best].prediction;
  choice.distribution = layout_distribution(choice.distribution, choice.prediction, &choice.gradient_accumulation);
  choice.trial = static_cast<int>(best) + 1;
  choice.trials = static_cast<int>(trials.size());
  choice.calibration = calibration_scale(trials, entrants);
  if (world.rank() == 0) {
    print_trials(out, trials);
    print_runoff(out, trials, entrants, phases.spread, phases.margin);
    print_phases(out, phases, choice.calibration, entrants.size(), choice.inputs.options.memory_limit_bytes);
  }
  // Every rank says what it chose (the same: the times are agreed), so a log shows it per rank.
  out << "layout trials: chose " << short_name(choice.prediction.layout) << " (trial " << choice.trial << " of "
      << choice.trials << ", measured " << milliseconds(trials[best].runoff_step_s)
      << " in the runoff; the predicted first " << milliseconds(trials.front().measured_step_s) << " in the trials)"
      << std::endl;
  return trials;
}

}  // namespace heft::train
