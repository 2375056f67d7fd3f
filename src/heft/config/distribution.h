// The spec's `distribution` block as a type, parsed and validated once, torch-free: `heft
// train` checks it before any worker starts (exit 2 naming the field), and heft-train reads
// the same type from HEFT_DISTRIBUTION; both resolve heft-train's hyperparameters into it
// once (with_overrides), so each knob has one source, one default and one rule.
//
//   distribution:
//     dataparallel: {enabled: true}
//     modelparallel:
//       enabled: true
//       parameters: {partitions: 2, microbatches: 4, pipeline: interleaved, optimize: speed,
//                    tensor_parallel_degree: 2, sharded_data_parallel_degree: 2, ...}
//
// Parameter names and defaults follow the cloud model-parallel library they come from.
// Deliberately left out: running any of it (parallel/ does), the launcher's settings.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "heft/config/hyperparameters.h"
#include "heft/config/sdk_distribution.h"
#include "heft/result.h"

namespace heft::config {

// The pipeline schedules (ModelParallel::pipeline): the block's rule and the
// hyperparameter's.
inline const std::vector<std::string> kPipelineKinds = {"simple", "interleaved"};

struct ModelParallel {
  bool enabled = false;
  int partitions = 1;                      // pipeline stages (pp)
  int microbatches = 1;                    // per mini-batch
  std::string pipeline = "interleaved";    // simple | interleaved
  std::string optimize = "speed";          // speed | memory
  double memory_weight = 0.2;              // default: 0.2 for speed, 0.8 for memory
  std::string placement_strategy = "cluster";  // cluster | spread | order of D, P, T
  bool auto_partition = true;
  // auto_partition false: the first layer of each stage after the first (partitions x
  // virtual_stages - 1 of them); empty: layers split evenly by count, the remainder of the
  // division on stage default_partition.
  std::vector<int> partition_boundaries;
  int default_partition = 0;               // the stage of the layers an even split leaves
  int virtual_stages = 1;                  // model chunks per stage (interleaved only)
  int active_microbatches = 0;             // 0: partitions + 2 (with_overrides resolves it)
  bool activation_checkpointing = false;
  bool bf16 = false;
  // DDP across the model replicas (the library's `ddp`): heft always reduces gradients across
  // data-parallel replicas, so given false it is refused when there are several (check_world);
  // not given: heft's choice, the same.
  std::optional<bool> ddp;
  int tensor_parallel_degree = 1;          // tp
  int sharded_data_parallel_degree = 1;    // sdp: 1 = no sharding
  // The layout search chooses partitions, microbatches, virtual_stages,
  // tensor_parallel_degree, sharded_data_parallel_degree and activation_checkpointing
  // (heft-train, docs/auto-layout.md): any of them given another value than its default
  // beside it is an error naming both, as is gradient_accumulation > 1 or pipeline: simple.
  bool auto_layout = false;
  double memory_limit_gb = 0;              // auto_layout: per rank; 0: the host's (heft-train)
  // auto_layout: the search's first layouts (at most this many, each predicted within
  // 1.3x of the first) run a few steps each before training, and the fastest measured
  // one trains (heft-train, docs/auto-layout.md); 0 or 1: the prediction's first, no trials.
  int auto_layout_trials = 6;
};

struct Distribution {
  bool dataparallel = false;
  ModelParallel modelparallel;
  // The knobs whose values came from heft-train's hyperparameters (with_overrides), by name
  // ("partitions"): messages about them name the hyperparameter, not the spec's block.
  std::vector<std::string> overridden;
  // What the cloud SDK's dicts (sdk_distribution.h) asked of the launch; empty for heft's form.
  SdkLaunch launch;
  // Where the modelparallel parameters were written, for messages:
  // "distribution.modelparallel.parameters" or
  // "distribution.smdistributed.modelparallel.parameters".
  std::string parameters_field = "distribution.modelparallel.parameters";

  // The spec's block (JSON; null or an empty object is no distribution), in heft's form or as
  // the cloud SDK's dicts (sdk_distribution.h). The error has one line per problem, led by its
  // field ("distribution.modelparallel.parameters.partitions: expected an integer from 1 to
  // 1024, found 0"); an unknown key names the nearest known. Parameters of a modelparallel
  // block that is not enabled are refused (they would not be used).
  static Result<Distribution> parse(const nlohmann::json& block);

  // The block in heft's form, every knob with its value (active_microbatches when set, ddp
  // when given, partition_boundaries when given): what HEFT_DISTRIBUTION carries and
  // `heft train --print-spec` shows. parse(to_json()) gives the same knobs (not `launch`).
  // {"dataparallel": {"enabled": true}} stays exactly that; no distribution is {}.
  nlohmann::json to_json() const;

  // The distribution a run uses: this one with heft-train's hyperparameters that name a
  // knob (partitions, microbatches, pipeline, virtual_stages, partition_boundaries,
  // tensor_parallel_degree, sharded_data_parallel_degree: when not 0 or empty;
  // activation_checkpointing, bf16: when true) put over it, each checked by the same rule
  // as in the block (errors led by "hyperparameters.<name>"). A given knob enables
  // modelparallel; the parameters of a block that stays disabled are the defaults, and
  // active_microbatches 0 becomes partitions + 2, so a resolved distribution is read
  // without looking at `enabled`. heft-train's main and `heft train`'s spec check both
  // resolve it here, once; train/ reads only the result for these knobs.
  Result<Distribution> with_overrides(const Hyperparameters& hp) const;

  // Running on `world` ranks: tensor x pipeline must divide the world and
  // sharded_data_parallel_degree the data-parallel degree that is left; ddp given false
  // needs a data-parallel degree of 1. The error names the spec's block, or the
  // hyperparameters where the degrees came from them.
  Status check_world(int world) const;
  // What a script's workers get in SM_HP_MP_PARAMETERS when modelparallel is enabled: the
  // library's parameters as the SDK's dict gave them, else the block's in heft's form
  // (to_json's); null when modelparallel is not enabled.
  nlohmann::json script_parameters() const;
  // The data-parallel degree on `world` ranks: world / (tensor x pipeline).
  int data_parallel_degree(int world) const;
};

}  // namespace heft::config
