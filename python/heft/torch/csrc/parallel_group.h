// The C++ parallel layers' view of a heft backend group: heft.torch._c10d.parallel.Group
// wraps a ProcessGroupHeft (what dist.new_group returns on the heft backend) as the
// heft::parallel::ProcessGroup that the tensor layers (parallel/tensor/) and the pipeline
// runtime (parallel/pipeline/) take. The Python strategies (heft.torch.parallel's
// tensor_parallel and Pipeline) run heft's C++ collectives, schedules and partitioner through
// it: no second implementation in Python.
//
// A Group keeps its ProcessGroupHeft alive. Autograd nodes of the tensor layers refer to the
// Group's parallel::ProcessGroup, so the Python objects holding a Group (the parallel layers,
// the Pipeline) must outlive the graphs they build, as any nn.Module's parameters do. Using a
// Group after its heft group was shut down is a RuntimeError from the group.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "heft/parallel/process_group.h"
#include "process_group.h"

namespace heft::torch_backend {

class ParallelGroup {
 public:
  explicit ParallelGroup(c10::intrusive_ptr<ProcessGroupHeft> group)
      : group_(std::move(group)), tensors_(group_->communicator()) {}
  parallel::ProcessGroup& tensors() { return tensors_; }
  ProcessGroupHeft& heft() { return *group_; }
  int rank() const { return tensors_.rank(); }
  int size() const { return tensors_.size(); }

 private:
  c10::intrusive_ptr<ProcessGroupHeft> group_;
  parallel::ProcessGroup tensors_;
};

// _c10d.parallel with its Group class (parallel_group.cc); the submodule the tensor and
// pipeline bindings add their functions to.
pybind11::module_ bind_parallel_group(pybind11::module_& parent);

}  // namespace heft::torch_backend
