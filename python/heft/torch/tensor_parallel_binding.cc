// _c10d.parallel.tensor (bindings.h).
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "parallel_group.h"

namespace heft::torch_backend {

namespace py = pybind11;

void bind_tensor_parallel(py::module_& parallel) {
  parallel.def_submodule("tensor", "see bindings.h");
}

}  // namespace heft::torch_backend
