// The submodules of heft.torch._c10d, each bound in its own file and registered by the
// module definition (module.cc). Called once, with the GIL held, while the module loads.
#pragma once

#include <pybind11/pybind11.h>

#include "heft/error.h"

namespace heft::torch_backend {

// f(), with C++'s heft::InvalidArgument (a size that does not divide, a bad argument) raised as
// Python's ValueError carrying the C++ message.
template <typename F>
auto value_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const InvalidArgument& e) {
    throw pybind11::value_error(e.what());
  }
}

// _c10d.checkpoint: heft's multi-writer checkpoint directory (checkpoint_binding.cc).
void bind_checkpoint(pybind11::module_& parent);

// _c10d.data: heft-train's text corpus and batches (data_binding.cc).
void bind_data(pybind11::module_& parent);

// _c10d.step_profiler: heft's step profiler, behind heft.torch.profile
// (step_profiler_binding.cc).
void bind_step_profiler(pybind11::module_& parent);

// _c10d.mesh: the device mesh's layout, behind heft.torch.parallel.DeviceMesh (mesh_binding.cc).
void bind_mesh(pybind11::module_& parent);

// _c10d.parallel.tensor: heft's C++ tensor layers' collectives and slicing, behind
// heft.torch.parallel.tensor_parallel (tensor_parallel_binding.cc). `parallel` is the
// submodule bind_parallel_group made (parallel_group.h).
void bind_tensor_parallel(pybind11::module_& parallel);

// _c10d.parallel.pipeline: heft's C++ schedules, simulator, partitioner and stage runtime,
// behind heft.torch.parallel.Pipeline (pipeline_binding.cc).
void bind_pipeline(pybind11::module_& parallel);

// _c10d.parallel.sharded: the sharded data path (parallel/sharded/flat_engine.h), behind
// heft.torch.parallel.ShardedDataParallel (sharded_binding.cc).
void bind_sharded(pybind11::module_& parallel);

// _c10d.parallel.layout: the layout search (layout_binding.cc), behind
// heft.torch.parallel.auto_layout.
void bind_layout(pybind11::module_& parallel);

}  // namespace heft::torch_backend
