// heft-train's automatic layout (auto_layout: true; docs/auto-layout.md): the model's layers
// profiled on world rank 0 (profile_pipeline_layers, the partitioner's profiler, plus the
// bytes each layer's forward keeps for its backward), the communicator's collectives measured
// (parallel/layout/comm_measure.h), the layout search run (parallel/layout/layout_search.h)
// and its fastest layout put into the distribution the run trains with:
//   data x sharded    -> the data-parallel degree, sharded_data_parallel_degree = sharded
//   tensor, pipeline  -> tensor_parallel_degree, partitions (pipeline interleaved, 1F1B)
//   micro-batches     -> microbatches with a pipeline, else gradient_accumulation
//   virtual stages    -> virtual_stages; the search's split -> partition_boundaries
//   checkpointing     -> activation_checkpointing
// Every rank gets rank 0's profile, memory figures and comm samples, so every rank runs the
// same search on the same numbers and takes the same layout.
//
// Time: the profile's CPU seconds x max(1, (ranks on the host x threads x busy share + the
// host's other runnable threads as the job starts) / cores), since the host's ranks share its
// cores with each other and whatever else runs there (SearchOptions::host_cores), with the
// host terms every rank measures at the start (parallel/layout/host_probe.h: a GPT block's MLP
// and the step's gradient norm and optimizer on every rank at once against rank 0 alone, and a
// synchronisation probe). Memory: the search's model plus the process's resident bytes
// before the model (LibTorch's own), against memory_limit_gb, else the host's available
// memory (host/host.h) / its ranks (LOCAL_WORLD_SIZE).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "heft/comm/communicator.h"
#include "heft/config/distribution.h"
#include "heft/parallel/layout/layout_search.h"
#include "heft/train/hyperparameters.h"

namespace heft::train {

// What the search was given, as every rank holds it.
struct LayoutInputs {
  parallel::layout::ModelCost model;
  parallel::layout::SearchOptions options;
  parallel::layout::CommTable comm;
  bool comm_measured = false;   // false: default_comm_table() (one process)
  std::string memory_source;    // "memory_limit_gb", "MemAvailable / 4 ranks", ...
  double contention = 1;        // the compute's factor with every rank busy (search: per layout)
  double host_probe_s = 0;      // wall seconds the host terms took to measure (0: not measured)
};

struct LayoutChoice {
  config::Distribution distribution;  // resolved, the chosen layout in modelparallel
  int64_t gradient_accumulation = 1;
  parallel::layout::Prediction prediction;
  parallel::layout::SearchResult result;
  LayoutInputs inputs;
  // Set by run_layout_trials (layout_trials.h): the chosen layout's trial (from 1) of the
  // `trials` run; 0 and 0: none ran (the prediction's first).
  int trial = 0;
  int trials = 0;
  double calibration = 0;  // measured / predicted step the trials fitted (layout_trials.h); 0: none
};

// The search's inputs for `world_size` ranks: profiled and measured on `comm` (collective
// over it: world rank 0 profiles while the others wait; comm_measure runs when comm has
// several ranks). hp is the resolved run's (its model must be cut into layers: gpt). Throws
// heft::InvalidArgument naming auto_layout for a model without layers.
LayoutInputs layout_inputs(const Hyperparameters& hp, const config::Distribution& distribution,
                           comm::Communicator& comm, int world_size);

// What the inputs are and where they came from (the profile's scale, the runtime's memory,
// the limit and its source, the comm table and whether it was measured), a few lines.
std::string describe_inputs(const LayoutInputs& inputs);

// The layout the run trains with (collective over world), logged to `out` on world rank 0:
// the comm table, the top candidates and a line
//   layout: data=2 sharded=1 tensor=2 pipeline=1 microbatches=1 virtual_stages=1
//     checkpointing=0 predicted_step_s=0.3100 predicted_memory_gb=1.234 memory_limit_gb=4.000
// Throws heft::InvalidArgument naming memory_limit with the smallest memory any layout needs
// when none fits.
LayoutChoice choose_layout(const Hyperparameters& hp, const config::Distribution& distribution,
                           comm::Communicator& world, std::ostream& out);

// The distribution and gradient accumulation that run `prediction`'s layout.
config::Distribution layout_distribution(const config::Distribution& base,
                                         const parallel::layout::Prediction& prediction,
                                         int64_t* gradient_accumulation);

// The "layout: ..." line's fields for a prediction (without measured_step_s).
std::string layout_fields(const parallel::layout::Prediction& p, double memory_limit_bytes);

}  // namespace heft::train
