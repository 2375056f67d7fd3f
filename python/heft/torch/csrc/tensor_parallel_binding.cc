// _c10d.parallel.tensor (bindings.h): heft's C++ tensor-parallel regions, slicing and
// vocab-parallel cross-entropy (src/heft/parallel/tensor/tensor_parallel.h) on torch tensors
// from Python, over a _c10d.parallel.Group. heft.torch.parallel.tensor_parallel
// (_tensor_parallel.py) builds its layers from these; nothing here is reimplemented.
//
// The region functions record the Group's parallel::ProcessGroup in their autograd nodes:
// the caller keeps the Group alive as long as the graph (the Python layers hold it). The
// collectives block, so they run without the GIL (backward runs in torch's engine, which
// released it). A size the ranks cannot split is a ValueError with the C++ message.
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "heft/error.h"
#include "heft/parallel/tensor/tensor_parallel.h"
#include "parallel_group.h"

namespace heft::torch_backend {

namespace py = pybind11;
namespace tp = parallel::tensor;

namespace {

tp::Split split_of(int dim, int parts) {
  if (parts < 1) throw py::value_error("parts=" + std::to_string(parts) + ": expected >= 1");
  return tp::Split{dim, parts};
}

}  // namespace

void bind_tensor_parallel(py::module_& parallel) {
  py::module_ m = parallel.def_submodule(
      "tensor", "heft's C++ tensor-parallel regions and slicing (heft.torch.parallel.tensor_parallel)");
  using G = ParallelGroup;
  m.def("copy_to_region",
        [](const at::Tensor& x, G& g) { return tp::copy_to_region(x, g.tensors()); },
        py::arg("x"), py::arg("group"), py::call_guard<py::gil_scoped_release>(),
        "identity forward, all-reduce (sum) of the gradient backward (Megatron's f)");
  m.def("reduce_from_region",
        [](const at::Tensor& x, G& g) { return tp::reduce_from_region(x, g.tensors()); },
        py::arg("x"), py::arg("group"), py::call_guard<py::gil_scoped_release>(),
        "all-reduce (sum) forward, identity backward (Megatron's g)");
  m.def("gather_from_region",
        [](const at::Tensor& x, G& g) { return tp::gather_from_region(x, g.tensors()); },
        py::arg("x"), py::arg("group"), py::call_guard<py::gil_scoped_release>(),
        "all-gather of the last dimension forward, this rank's slice of the gradient backward");
  m.def("vocab_parallel_cross_entropy_sum",
        [](const at::Tensor& logits, const at::Tensor& targets, int64_t first, G& g) {
          return tp::vocab_parallel_cross_entropy_sum(logits, targets, first, g.tensors());
        },
        py::arg("logits"), py::arg("targets"), py::arg("first"), py::arg("group"),
        py::call_guard<py::gil_scoped_release>(),
        "logits (N, V/T): this rank's vocabulary columns from `first`; targets (N,) int64 in "
        "[0, V): the summed cross-entropy over N, the same on every rank");
  m.def("take_slice",
        [](const at::Tensor& full, int dim, int parts, int rank, int size, const std::string& what) {
          return value_errors([&] { return tp::take_slice(full, split_of(dim, parts), rank, size, what); });
        },
        py::arg("full"), py::arg("dim"), py::arg("parts"), py::arg("rank"), py::arg("size"),
        py::arg("what"),
        "rank's slice of `full` along dim, in `parts` blocks each split over `size` ranks "
        "(dim -1: the whole tensor); ValueError naming `what` when the size does not divide");
  m.def("join_slices",
        [](const std::vector<at::Tensor>& slices, int dim, int parts) {
          return tp::join_slices(slices, split_of(dim, parts));
        },
        py::arg("slices"), py::arg("dim"), py::arg("parts"),
        "the full tensor from every rank's take_slice, in rank order");
  m.def("gather_full",
        [](const at::Tensor& slice, int dim, int parts, G& g) {
          if (dim < 0 || g.size() == 1) return slice;
          // (T, *slice) from every rank of the group, then joined in rank order.
          const at::Tensor all = g.tensors().allgather(slice.detach().contiguous());
          return tp::join_slices(all.unbind(0), split_of(dim, parts));
        },
        py::arg("slice"), py::arg("dim"), py::arg("parts"), py::arg("group"),
        py::call_guard<py::gil_scoped_release>(),
        "collective over the group: the full tensor from every rank's slice (all-gather, "
        "then join_slices)");
  m.def("split_size",
        [](int64_t n, int size, const std::string& what) {
          return value_errors([&] { return tp::split_size(n, size, what); });
        },
        py::arg("n"), py::arg("size"), py::arg("what"),
        "n / size; ValueError naming `what` when size does not divide n");
  m.def("counters",
        [] {
          const tp::TensorParallelCounters& c = tp::counters();
          py::dict d;
          d["forward_allreduces"] = c.forward_allreduces;
          d["backward_allreduces"] = c.backward_allreduces;
          d["allgathers"] = c.allgathers;
          d["seconds"] = c.seconds;
          return d;
        },
        "the collectives the tensor-parallel functions issued in this process (all groups) "
        "and the seconds spent in them");
  m.def("reset_counters", [] { tp::counters() = tp::TensorParallelCounters{}; },
        "sets counters() to zero");
}

}  // namespace heft::torch_backend
