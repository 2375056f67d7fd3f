// The device mesh: the world's ranks laid out on named parallel dimensions, each rank's
// coordinates, and one ProcessGroup per dimension (made with Communicator::split), owned by
// the mesh and handed down to the strategies (never a global).
//
// The layout itself (the dimensions, placement orders and a worked example) is
// mesh_layout.h, LibTorch-free so the Python extension shares it.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/parallel/mesh_layout.h"
#include "heft/parallel/process_group.h"

namespace heft::parallel {

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
