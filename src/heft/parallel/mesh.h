// The device mesh: the world's ranks laid out on named parallel dimensions, each rank's
// coordinates, and one ProcessGroup per dimension (made with Communicator::split), owned by
// the mesh and handed down to the strategies (never a global).
//
// Dimensions (the only place the abbreviations are defined):
//   data (dp)     ranks holding replicas of the same model part, averaging gradients;
//                 itself replicate x shard for hybrid sharding: `shard` (sdp, the
//                 sharded_data_parallel_degree) ranks shard parameters among themselves,
//                 `replicate` = dp / sdp such groups hold replicas of the shards;
//   pipeline (pp) stages of the model, in order;
//   tensor (tp)   ranks splitting each layer.
// world = dp x pp x tp.
//
// Placement (the spec's placement_strategy): an order of the letters D, P, T, the right-most
// varying fastest over consecutive ranks; `cluster` = DPT (tensor groups on neighbouring
// ranks, so on one host), `spread` = TPD. Inside D, shard varies faster than replicate, so
// a shard group is contiguous in the data index.
//
// Worked example, 16 ranks, tp = 2, pp = 4, dp = 2, placement cluster (DPT):
//   rank = d*8 + p*2 + t
//   tensor groups    {0,1} {2,3} {4,5} {6,7} {8,9} {10,11} {12,13} {14,15}
//   pipeline groups  {0,2,4,6} {1,3,5,7} {8,10,12,14} {9,11,13,15}
//   data groups      {0,8} {1,9} {2,10} {3,11} {4,12} {5,13} {6,14} {7,15}
// With placement spread (TPD): rank = t*8 + p*2 + d; tensor groups {0,8} {1,9} ...,
// pipeline groups {0,2,4,6} {1,3,5,7} {8,10,12,14} {9,11,13,15}, data groups {0,1} {2,3} ...
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/parallel/process_group.h"

namespace heft::parallel {

enum class Dim { kData = 0, kPipeline = 1, kTensor = 2, kReplicate = 3, kShard = 4 };
const char* name(Dim d);  // "data", "pipeline", "tensor", "replicate", "shard"

struct MeshShape {
  int data = 1;       // dp
  int pipeline = 1;   // pp
  int tensor = 1;     // tp
  int shard = 0;      // sdp: divides data; 0 = data (shard over the whole data dimension)
  std::string placement = "cluster";  // cluster | spread | a permutation of D, P, T
};

// The pure layout: coordinates and group members, no communication.
class MeshLayout {
 public:
  // Throws heft::InvalidArgument naming the field: a size < 1, shard not dividing data,
  // world != data * pipeline * tensor, an unknown placement.
  MeshLayout(int world, MeshShape shape);

  int world() const { return world_; }
  const MeshShape& shape() const { return shape_; }
  // The placement as letters, slowest first ("DPT").
  const std::string& order() const { return order_; }
  int size(Dim d) const;
  // rank's index along d.
  int coordinate(int rank, Dim d) const;
  // The ranks of rank's group along d, ascending by their index along d.
  std::vector<int> group(int rank, Dim d) const;
  // The rank at (data, pipeline, tensor).
  int rank_at(int data, int pipeline, int tensor) const;
  // One line per dimension with its groups, for logs:
  // "tensor (2): {0,1} {2,3} ...".
  std::string describe() const;

 private:
  int world_;
  MeshShape shape_;
  std::string order_;
  std::array<int, 3> stride_{};  // of D, P, T
};

// The layout plus a ProcessGroup per dimension of this rank. Collective over `world`:
// every rank of it must construct the mesh with the same shape, in the same order relative to
// its other collectives. A dimension whose group is the whole world uses `world` itself
// rather than a split of it (so `world` must outlive the mesh; operations on it and on that
// group are ordered as any two calls on one communicator).
//
// Group labels for the hang diagnosis: a split communicator is named
// "<world group>/split<n>/<color>" (comm::Communicator::split), which says nothing of its
// dimension. When collective tracing is on (HEFT_TRACE_DIR, comm/trace.h), the constructor
// also writes <HEFT_TRACE_DIR>/rank-<world rank>.groups.json, which profile/diagnosis.h
// reads to name each group by its dimension:
//   {"world_rank": 3, "groups": [{"group": "job/world/split2/2", "dimension": "tensor",
//                                 "ranks": [2, 3]}, ...]}
// one entry per dimension (the world group appears once for each dimension it serves);
// "ranks" are the group's members as ranks of `world`, in group-rank order. Written to a
// temporary file and renamed, so a reader sees the whole file or none. Throws
// heft::IoError when it cannot be written.
class DeviceMesh {
 public:
  DeviceMesh(comm::Communicator& world, MeshShape shape);
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int coordinate(Dim d) const { return layout_.coordinate(rank_, d); }
  int size(Dim d) const { return layout_.size(d); }
  // This rank's group along d (valid while the mesh lives).
  ProcessGroup& group(Dim d);
  // The communicator name of this rank's group along d (comm::Communicator::group()).
  const std::string& group_name(Dim d) const { return names_[static_cast<int>(d)]; }

 private:
  MeshLayout layout_;
  int rank_;
  std::array<std::unique_ptr<comm::Communicator>, 5> comms_;
  std::array<std::unique_ptr<ProcessGroup>, 5> groups_;
  std::array<std::string, 5> names_;
};

// The JSON text of this rank's group labels (the format above). Pure; for tests and the
// constructor. `names[d]` is the communicator name of dimension d's group.
std::string group_labels_json(const MeshLayout& layout, int rank,
                              const std::array<std::string, 5>& names);

}  // namespace heft::parallel
