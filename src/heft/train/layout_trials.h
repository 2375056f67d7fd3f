// heft-train's layout trials (auto_layout_trials; docs/auto-layout.md): the layout search's
// first candidates, measured. The predictions of the top layouts lie closer to each other than
// the model's error, so before training, each of the first K feasible layouts predicted within
// kTrialWithin x the first trains kTrialSteps steps through train() on the world communicator
// (one warm-up step, then timed ones), in kTrialRounds interleaved rounds (A B C A B C), and the
// run trains with the one whose fastest round's median step, the largest over the ranks, was
// the lowest.
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

struct LayoutTrial {
  parallel::layout::Prediction prediction;
  double measured_step_s = 0;  // median of its timed steps (the largest over the ranks), the
                               // fastest of its rounds
};

// The layouts the trials run: the first `trials` of result.ranked (fastest predicted first)
// predicted within kTrialWithin x the first and, but for the first, within kTrialMemoryShare x
// memory_limit_bytes (<= 0: no limit); empty when that leaves fewer than two.
std::vector<parallel::layout::Prediction> trial_candidates(
    const parallel::layout::SearchResult& result, int trials, int64_t memory_limit_bytes = 0);

// "d1 s1 t2 p2 m1 v1" (" ckpt" after it with checkpointing): a layout in the trial lines.
std::string short_name(const parallel::layout::Layout& layout);

// Collective over `world` (every rank calls it with the same choice, as choose_layout left
// it): runs the trials of trial_candidates(choice.result, auto_layout_trials) and, when there
// were any, sets choice's prediction, distribution, gradient_accumulation, trial and trials to
// the fastest measured (ties: the earlier, i.e. better predicted). `hp` is the run's
// hyperparameters, `test_dir` its held-out data directory (not read: no evaluation). World
// rank 0 writes to `out`, one line a trial and one for the choice:
//   layout trial 1/3: d1 s1 t2 p2 m1 v1 predicted 53.2 ms measured 61.0 ms
//   layout trials: chose d1 s2 t1 p2 m1 v1 (trial 2 of 3, measured 58.1 ms; the predicted first 61.0 ms)
// or, without trials, "layout trials: none (...)" with the reason. Returns the trials run, in
// order. Throws what train() throws (a lost peer, bad data).
std::vector<LayoutTrial> run_layout_trials(const Hyperparameters& hp, const std::string& test_dir,
                                           comm::Communicator& world, std::ostream& out,
                                           LayoutChoice& choice);

}  // namespace heft::train
