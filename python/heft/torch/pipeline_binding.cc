// _c10d.parallel.pipeline (bindings.h).
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "parallel_group.h"

namespace heft::torch_backend {

namespace py = pybind11;

void bind_pipeline(py::module_& parallel) {
  parallel.def_submodule("pipeline", "see bindings.h");
}

}  // namespace heft::torch_backend
