// The layout search's collective costs (CommTable, layout_search.h) measured on the job's own
// communicator: all-reduce, reduce-scatter and all-gather on every group size a layout of the
// world can need (each divisor of the world above 1), and p2p between pairs, each at a few
// message sizes, fitted per collective and group size to seconds = alpha_s + bytes / beta.
// Torch-free: it runs on heft::comm::Communicator's raw buffers.
//
// Terms: a group size g splits the world into world / g groups of consecutive ranks (color
// rank / g), all running the same collective at once, as a layout's groups of one dimension
// do; a sample is one (collective, g, bytes) with the median seconds of `repeats` timed calls
// after `warmup` untimed ones, each call started by a barrier of its group and timed on world
// rank 0. bytes follows the search's convention: the buffer of an all-reduce, the whole
// (gathered) buffer of an all-gather and of a reduce-scatter's input, one message of a p2p.
// Rank 0 fits the samples and broadcasts the table, so every rank gets the same table.
//
// Deliberately left out: placement (groups are consecutive ranks, the "cluster" placement),
// the async forms' overlap, compression.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/parallel/layout/layout_search.h"

namespace heft::parallel::layout {

struct MeasureOptions {
  // Message sizes; three spread over the range the search prices (activations of a
  // micro-batch up to a stage's gradients) give the fit both ends.
  std::vector<int64_t> bytes = {int64_t{16} << 10, int64_t{256} << 10, int64_t{2} << 20};
  int warmup = 2;   // untimed calls per sample (first-touch of buffers, shm segments)
  int repeats = 5;  // timed calls per sample; the median is kept
  // Group sizes to measure; empty: every divisor of the world above 1.
  std::vector<int> groups;
};

// One timed point: the median seconds of `collective` over groups of `group` ranks moving
// `bytes` (the convention above).
struct CommSample {
  Collective collective = Collective::kAllReduce;
  int group = 2;
  int64_t bytes = 0;
  double seconds = 0;
};

// Least squares of seconds = alpha + bytes / beta over samples of one collective and group
// size. alpha < 0 is clamped to 0 (the slope refitted through the origin); a slope <= 0 gives
// beta = infinity (no measurable bandwidth cost) and alpha the mean. Throws heft::InvalidArgument naming
// `samples` when there are none or a sample has bytes < 0 or seconds not finite.
CollectiveCost fit(Collective collective, int group, const std::vector<CommSample>& samples);

// One fit per (collective, group) present in samples, in the order first seen.
CommTable fit_table(const std::vector<CommSample>& samples);

// Measures and fits (see the file comment). Collective over `world`: every rank calls it with
// the same options and gets rank 0's table (identical on every rank). A world of 1 measures
// nothing and returns default_comm_table(). `samples`, when given, receives rank 0's samples
// (on every rank). Throws heft::InvalidArgument naming the option for bytes < 4, warmup < 0,
// repeats < 1 or a group size that does not divide the world; the communicator's errors
// (heft::PeerLost, heft::Timeout) as they come.
CommTable measure_comm_table(comm::Communicator& world, const MeasureOptions& options = {},
                             std::vector<CommSample>* samples = nullptr);

// The group sizes to measure for a world: `groups` when given (each must divide the world
// and be above 1, else heft::InvalidArgument naming `field`), else every divisor above 1.
// comm_measure's and host_probe's.
std::vector<int> group_sizes(int world, const std::vector<int>& groups, const std::string& field);

// The guess used without a communicator to measure (one process): 50 us latency, 2 GB/s, for
// every collective and groups of 2 to 1024.
CommTable default_comm_table();

// One line per entry: "allreduce   g 4  alpha 38.2 us  beta 3.41 GB/s".
std::string describe(const CommTable& table);

}  // namespace heft::parallel::layout
