// heft.torch's device mesh layout: pybind11 functions over heft::parallel::MeshLayout
// (src/heft/parallel/mesh_layout.h), so that heft.torch.parallel.DeviceMesh lays the ranks
// out with the very code heft-train's mesh uses. Pure: no communication; the Python side
// makes one torch.distributed group per group listed here, in the listed order on every rank.
// heft::InvalidArgument raises ValueError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "heft/error.h"
#include "heft/parallel/mesh_layout.h"

namespace heft::torch_backend {

namespace py = pybind11;
using heft::parallel::Dim;
using heft::parallel::MeshLayout;
using heft::parallel::MeshShape;

namespace {

constexpr Dim kDims[] = {Dim::kData, Dim::kPipeline, Dim::kTensor, Dim::kShard, Dim::kReplicate};

// {"order", "sizes": {dim: n}, "coordinates": {dim: rank's index}, "groups": {dim: [[ranks]]},
//  "describe"}; dimensions by their C++ names (name(Dim)), groups by MeshLayout::groups.
py::dict layout_of(int world, int rank, const MeshShape& shape) {
  const MeshLayout layout(world, shape);
  if (rank < 0 || rank >= world)
    throw heft::InvalidArgument("rank: expected 0 to " + std::to_string(world - 1) +
                                ", found " + std::to_string(rank));
  py::dict sizes, coordinates, groups;
  for (Dim d : kDims) {
    sizes[name(d)] = layout.size(d);
    coordinates[name(d)] = layout.coordinate(rank, d);
    groups[name(d)] = layout.groups(d);
  }
  py::dict out;
  out["order"] = layout.order();
  out["sizes"] = sizes;
  out["coordinates"] = coordinates;
  out["groups"] = groups;
  out["describe"] = layout.describe();
  return out;
}

}  // namespace

void bind_mesh(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "mesh", "the device mesh's layout (src/heft/parallel/mesh_layout.h)");
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const heft::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def(
      "layout",
      [](int world, int rank, int data, int pipeline, int tensor, int shard,
         const std::string& placement) {
        return layout_of(world, rank, MeshShape{data, pipeline, tensor, shard, placement});
      },
      py::arg("world"), py::arg("rank"), py::arg("data"), py::arg("pipeline"),
      py::arg("tensor"), py::arg("shard"), py::arg("placement"),
      "dict: order (letters, slowest first), sizes, rank's coordinates and every group of "
      "each dimension (data, pipeline, tensor, shard, replicate), each group ascending, "
      "groups ordered by their smallest rank; shard 0 = the whole data dimension");
  m.def(
      "placement_order",
      [](const std::string& placement) -> std::optional<std::string> {
        try {
          return heft::parallel::placement_order(placement);
        } catch (const heft::InvalidArgument&) {
          return std::nullopt;
        }
      },
      py::arg("placement"),
      "the placement's letters slowest first (cluster -> DPT, spread -> TPD), or None when "
      "it is neither cluster, spread nor an order of D, P and T");
}

}  // namespace heft::torch_backend
