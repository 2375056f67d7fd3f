// heft-train's layout trials (auto_layout_trials; docs/auto-layout.md): the layout search's
// first candidates, measured. The predictions of the top layouts lie closer to each other than
// the model's error, so before training, each of the first K feasible layouts predicted within
// kTrialWithin x the first trains kTrialSteps steps through train() on the world communicator
// (one warm-up step, then timed ones), in kTrialRounds interleaved rounds (A B C A B C); a
// layout's *figure* is its fastest round's median step, the largest over the ranks.
//
// Runoff: 3 timed steps do not tell apart layouts 10% apart on a shared host (two rounds of
// one layout differ by 5-20%; bench/auto_layout.sh's vocabulary head once measured two layouts
// 2% apart whose 9-step rows were 11% apart), so the trials whose figure is within a
// margin of the fastest (twice the rounds' median spread, within [kRunoffMargin,
// kRunoffMarginMax]; at most kRunoffMax of them, the fastest first; the fastest alone too),
// and the prediction's first whatever its trials measured (two rounds of 3 steps can both land
// in a burst of load: deep+narrow's best layout once measured 2x its row in both), train again, kRunoffRounds interleaved rounds of kRunoffSteps steps (1 warm-up + 9 timed,
// the length bench/auto_layout.sh times its rows with), and the run trains with the one whose
// runoff figure is the lowest.
//
// Calibration: the runoff's layouts are measured over the most steps; the median of their
// measured / predicted is the scale (LayoutChoice::calibration) that corrects the search's
// predictions, reported beside them (calibrated_step_s= in the layout: line). It is fitted on
// the fastest layouts only: the micro-batched and replicated ones further down the table
// measure higher ratios (1.7-2.5 against ~1.4), which a median over every trial would spread to
// the fast ones.
//
// A trial is a throw-away run: no checkpoints read or written, no model saved, no evaluation,
// no generated text, its output lines discarded (the supervisor parses heft-train's stdout for
// metrics), the step profiler off (HEFT_PROFILE_DIR unset while trials run), and everything it
// built freed (model, optimizer, the mesh's sub-communicators) and the heap trimmed before the
// next. Afterwards torch's default generator and the tensor-parallel counters are put back, so
// the run trains exactly as one given the chosen layout explicitly. Peak memory: a trial's
// layout is within kTrialMemoryShare of the memory limit by prediction (the first: within it).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/parallel/layout/layout_search.h"
#include "heft/train/auto_layout.h"
#include "heft/train/hyperparameters.h"

namespace heft::train {

constexpr double kTrialWithin = 1.3;  // a trial's predicted step at most this x the first's
constexpr int64_t kTrialSteps = 4;    // 1 warm-up + 3 timed (median_step_s skips the first)
constexpr int kTrialRounds = 2;       // each layout's trial runs this many times, interleaved
// Beyond the first, a trial's predicted memory at most this share of the limit: the trials run
// one after another in one process, and what one leaves in the allocator adds to the next's
// peak (the vocabulary-head GPT's ranks peaked 1 MB over a 0.451 GB limit after trials of
// layouts predicted within 3% of it; the search's first is run whatever the trials do).
constexpr double kTrialMemoryShare = 0.93;
constexpr int64_t kRunoffSteps = 10;       // 1 warm-up + 9 timed: the bench's rows' length
constexpr int kRunoffRounds = 2;           // interleaved, as the trials' rounds
constexpr double kRunoffMargin = 0.10;     // the least margin a runoff takes in
constexpr double kRunoffMarginMax = 0.25;  // the most, however noisy the rounds were
constexpr int kRunoffMax = 3;              // at most this many run off by their figures (and the
                                           // prediction's first): bounds the added time

struct LayoutTrial {
  parallel::layout::Prediction prediction;
  std::vector<double> rounds;  // each round's median timed step (the largest over the ranks)
  double measured_step_s = 0;  // the fastest of `rounds`: the trial's figure
  double runoff_step_s = 0;    // the same over the runoff's rounds; 0: it did not run off
};

// The trials' noise: the median over trials of (slowest round / fastest round - 1); 0 with
// fewer than two rounds.
double round_spread(const std::vector<LayoutTrial>& trials);

// The runoff's margin for a round spread: 2 x spread, within [kRunoffMargin, kRunoffMarginMax].
double runoff_margin(double spread);

// The indices of the trials that run off: those whose measured_step_s is within (1 + margin) x
// the fastest's, fastest first (ties: the earlier trial), at most kRunoffMax, then the first
// trial (the prediction's first) when it is not among them; never empty when trials is not.
std::vector<size_t> runoff_entrants(const std::vector<LayoutTrial>& trials, double margin);

// The runoff's winner: the entrant with the lowest runoff_step_s (ties: the earlier trial).
// entrants must not be empty.
size_t runoff_winner(const std::vector<LayoutTrial>& trials, const std::vector<size_t>& entrants);

// The calibration: the median over the entrants of runoff_step_s / prediction.step_s (0 when
// none has both).
double calibration_scale(const std::vector<LayoutTrial>& trials, const std::vector<size_t>& entrants);

// The layouts the trials run: the first `trials` of result.ranked (fastest predicted first)
// predicted within `within` x the first and, but for the first, within kTrialMemoryShare x
// memory_limit_bytes (<= 0: no limit); empty when that leaves fewer than two.
std::vector<parallel::layout::Prediction> trial_candidates(
    const parallel::layout::SearchResult& result, int trials, int64_t memory_limit_bytes = 0,
    double within = kTrialWithin);

// The trials' window: HEFT_LAYOUT_TRIAL_WITHIN (a factor >= 1) where set, else kTrialWithin.
// Widening it tries layouts the model ranks further off (experiments; tests that must see
// trials whatever a loaded machine makes the collectives' measured costs). InvalidArgument
// naming the variable for anything else.
double trial_within();

// "d1 s1 t2 p2 m1 v1" (" ckpt" after it with checkpointing): a layout in the trial lines.
std::string short_name(const parallel::layout::Layout& layout);

// Collective over `world` (every rank calls it with the same choice, as choose_layout left
// it): runs the trials of trial_candidates(choice.result, auto_layout_trials), then their
// runoff, and, when there were any, sets choice's prediction, distribution,
// gradient_accumulation, trial, trials and calibration to the runoff's winner. `hp` is the
// run's hyperparameters, `test_dir` its held-out data directory (not read: no evaluation).
// World rank 0 writes to `out` a line a trial, the runoff's entrants and a line each, the
// calibration with each phase's seconds, the peak RSS after each phase; every rank the choice:
//   layout trial 1/3: d1 s1 t2 p2 m1 v1 predicted 53.2 ms measured 61.0 ms x1.15 (rounds 61.0 63.1 ms)
//   layout runoff: 2 of 3 trials, those within 10% of the fastest (at most 3; the margin twice the rounds' median spread 3%, 10%-25%) and the prediction's first, 2 rounds of 10 steps
//   layout runoff 1/2: d1 s2 t1 p2 m1 v1 (trial 2) predicted 55.0 ms measured 57.2 ms x1.04
//   layout trials: calibration x1.06 (measured / predicted, median of the runoff's 2); trials 4.1 s, runoff 3.2 s
//   layout trials: peak RSS 0.301 GB after the trials, 0.305 GB after the runoff (the largest over the ranks; limit 4.000 GB)
//   layout trials: chose d1 s2 t1 p2 m1 v1 (trial 2 of 3, measured 57.2 ms in the runoff; the predicted first 61.0 ms in the trials)
// or, without trials, "layout trials: none (...)" with the reason. Returns the trials run, in
// order. Throws what train() throws (a lost peer, bad data).
std::vector<LayoutTrial> run_layout_trials(const Hyperparameters& hp, const std::string& test_dir,
                                           comm::Communicator& world, std::ostream& out,
                                           LayoutChoice& choice);

}  // namespace heft::train
