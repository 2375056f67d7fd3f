// _c10d.parallel.Group (parallel_group.h).
#include "parallel_group.h"

#include <torch/csrc/utils/pybind.h>

namespace heft::torch_backend {

namespace py = pybind11;

py::module_ bind_parallel_group(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "parallel", "heft's C++ tensor layers, pipeline schedules and partitioner (heft.torch.parallel)");
  py::class_<ParallelGroup, std::shared_ptr<ParallelGroup>>(m, "Group")
      .def(py::init([](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
             return std::make_shared<ParallelGroup>(backend_of(group));
           }),
           py::arg("group"), "a torch process group on backend heft as heft's C++ parallel layers see it")
      .def_property_readonly("rank", &ParallelGroup::rank)
      .def_property_readonly("size", &ParallelGroup::size);
  return m;
}

}  // namespace heft::torch_backend
