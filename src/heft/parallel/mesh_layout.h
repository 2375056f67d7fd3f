// The device mesh's pure layout: the world's ranks laid out on named parallel dimensions,
// each rank's coordinates and the members of each group. No communication and no LibTorch,
// so the Python extension (python/heft/torch/csrc/mesh_binding.cc, heft.torch.parallel.DeviceMesh)
// uses this very code; the communicating mesh is mesh.h.
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
#include <string>
#include <vector>

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

// The placement as letters, slowest first: "cluster" -> "DPT", "spread" -> "TPD", an order
// of D, P and T as given. Throws heft::InvalidArgument naming placement_strategy otherwise.
std::string placement_order(const std::string& placement);

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
  // The ranks of rank's group along d, ascending by their index along d (which is also
  // ascending by rank).
  std::vector<int> group(int rank, Dim d) const;
  // Every group along d, each once, ordered by its smallest rank.
  std::vector<std::vector<int>> groups(Dim d) const;
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

}  // namespace heft::parallel
