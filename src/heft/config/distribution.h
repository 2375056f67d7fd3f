// The spec's `distribution` block as a type, parsed and validated once, torch-free: `heft
// train` checks it before any worker starts (exit 2 naming the field), and heft-train reads
// the same type from HEFT_DISTRIBUTION.
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

#include <string>
#include <vector>

namespace heft::config {

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
  int active_microbatches = 0;             // 0: partitions + 2
  bool activation_checkpointing = false;
  bool bf16 = false;
  bool ddp = false;                        // data parallel across pipeline replicas
  int tensor_parallel_degree = 1;          // tp
  int sharded_data_parallel_degree = 1;    // sdp: 1 = no sharding
};

struct Distribution {
  bool dataparallel = false;
  ModelParallel modelparallel;

  // The spec's block (JSON; an empty object is no distribution). Every problem is one line
  // in *errors, led by its field ("distribution.modelparallel.parameters.partitions:
  // expected an integer from 1 to 1024, found 0"); an unknown key names the nearest known.
  static Distribution parse(const nlohmann::json& block, std::vector<std::string>* errors);

  // Problems of running on `world` ranks: tensor x pipeline must divide the world and
  // sharded_data_parallel_degree the data-parallel degree that is left.
  std::vector<std::string> check_world(int world) const;
  // The data-parallel degree on `world` ranks: world / (tensor x pipeline).
  int data_parallel_degree(int world) const;

  // What heft-train cannot run yet, one line each ("... is not supported yet by heft-train
  // (...)"); empty when it can.
  std::vector<std::string> unsupported_by_trainer() const;
};

}  // namespace heft::config
