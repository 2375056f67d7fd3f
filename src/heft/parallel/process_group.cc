#include "heft/parallel/process_group.h"

#include <optional>
#include <sstream>
#include <string>

#include "heft/error.h"
#include "heft/parallel/torch_dtype.h"
#include "heft/step_profiler/step_profiler.h"

namespace heft::parallel {

Work::Work(std::shared_ptr<comm::Work> work, std::vector<torch::Tensor> tensors)
    : work_(std::move(work)), tensors_(std::move(tensors)) {}

void Work::wait() {
  // Waiting for the communicator is the step's communication phase, whichever strategy
  // waits (taken out of the forward or backward it happens in).
  auto timed = profile::phase(profile::Phase::kCommunication);
  work_->wait();
}

bool Work::test() { return work_->test(); }

comm::DataType to_comm_dtype(torch::ScalarType t) {
  if (const std::optional<comm::DataType> d = comm_dtype_of(t)) return *d;
  throw InvalidArgument(std::string("unsupported tensor dtype ") + c10::toString(t) +
                        ": expected one of Float, Double, Half, BFloat16, Int, Long");
}

namespace {

// Checks the contract of the header; returns the communicator dtype.
comm::DataType check_tensor(const char* op, const char* what, const torch::Tensor& t) {
  const std::string where = std::string("ProcessGroup::") + op + ": " + what;
  if (!t.defined()) throw InvalidArgument(where + " is an undefined tensor");
  if (!t.device().is_cpu())
    throw InvalidArgument(where + " is on device " + t.device().str() +
                          "; only CPU tensors are supported");
  if (t.is_sparse()) throw InvalidArgument(where + " is sparse; only dense tensors are supported");
  if (!t.is_contiguous()) {
    std::ostringstream os;
    os << where << " is not contiguous (sizes " << t.sizes() << ", strides " << t.strides()
       << "); call .contiguous() first";
    throw InvalidArgument(os.str());
  }
  try {
    return to_comm_dtype(t.scalar_type());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where + ": " + e.what());
  }
}

void check_same_dtype(const char* op, const torch::Tensor& input, const torch::Tensor& output) {
  if (input.scalar_type() != output.scalar_type())
    throw InvalidArgument(std::string("ProcessGroup::") + op + ": output dtype " +
                          c10::toString(output.scalar_type()) + " differs from input dtype " +
                          c10::toString(input.scalar_type()));
}

void check_numel(const char* op, const char* what, int64_t found, int64_t expected) {
  if (found != expected)
    throw InvalidArgument(std::string("ProcessGroup::") + op + ": " + what + " has " +
                          std::to_string(found) + " elements, expected " +
                          std::to_string(expected));
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::allreduce_async(torch::Tensor& tensor, comm::ReduceOp op) {
  const comm::DataType t = check_tensor("allreduce", "tensor", tensor);
  void* p = tensor.data_ptr();
  // Compression only when asked (DDP's bf16_compression does its own): HEFT_COMPRESSION,
  // the communicator's default, must not make gradients lossy behind the caller's back.
  auto w = comm_.allreduce_async(p, p, static_cast<size_t>(tensor.numel()), t, op,
                                 comm::Compression::kNone);
  return std::make_shared<Work>(std::move(w), std::vector<torch::Tensor>{tensor});
}

std::shared_ptr<Work> ProcessGroup::broadcast_async(torch::Tensor& tensor, int root) {
  const comm::DataType t = check_tensor("broadcast", "tensor", tensor);
  if (root < 0 || root >= size())
    throw InvalidArgument("ProcessGroup::broadcast: root " + std::to_string(root) +
                          " is outside the group of " + std::to_string(size()));
  auto w = comm_.broadcast_async(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), t, root);
  return std::make_shared<Work>(std::move(w), std::vector<torch::Tensor>{tensor});
}

std::shared_ptr<Work> ProcessGroup::allgather_async(const torch::Tensor& input,
                                                    torch::Tensor& output) {
  const comm::DataType t = check_tensor("allgather", "input", input);
  check_tensor("allgather", "output", output);
  check_same_dtype("allgather", input, output);
  check_numel("allgather", "output", output.numel(), input.numel() * size());
  auto w = comm_.allgather_async(input.data_ptr(), output.data_ptr(),
                                 static_cast<size_t>(input.numel()), t);
  return std::make_shared<Work>(std::move(w), std::vector<torch::Tensor>{input, output});
}

torch::Tensor ProcessGroup::allgather(const torch::Tensor& input) {
  std::vector<int64_t> shape{size()};
  for (int64_t d : input.sizes()) shape.push_back(d);
  torch::Tensor out = torch::empty(shape, input.options());
  allgather(input, out);
  return out;
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const torch::Tensor& input,
                                                         torch::Tensor& output, comm::ReduceOp op) {
  const comm::DataType t = check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  check_same_dtype("reduce_scatter", input, output);
  check_numel("reduce_scatter", "input", input.numel(), output.numel() * size());
  auto w = comm_.reduce_scatter_async(input.data_ptr(), output.data_ptr(),
                                      static_cast<size_t>(output.numel()), t, op);
  return std::make_shared<Work>(std::move(w), std::vector<torch::Tensor>{input, output});
}

std::shared_ptr<Work> ProcessGroup::barrier_async() {
  return std::make_shared<Work>(comm_.barrier_async(), std::vector<torch::Tensor>{});
}

std::shared_ptr<Work> ProcessGroup::exchange_async(const std::vector<TensorP2P>& ops) {
  std::vector<comm::P2POp> raw;
  std::vector<torch::Tensor> keep;
  raw.reserve(ops.size());
  keep.reserve(ops.size());
  for (const TensorP2P& o : ops) {
    const comm::DataType dt = check_tensor(o.send ? "send" : "recv", "tensor", o.tensor);
    const size_t n = static_cast<size_t>(o.tensor.numel());
    raw.push_back(o.send ? comm::P2POp::send(o.tensor.data_ptr(), n, dt, o.peer, o.tag)
                         : comm::P2POp::recv(o.tensor.data_ptr(), n, dt, o.peer, o.tag));
    keep.push_back(o.tensor);
  }
  return std::make_shared<Work>(comm_.exchange_async(std::move(raw)), std::move(keep));
}

std::vector<double> ProcessGroup::sum(std::vector<double> values) {
  torch::Tensor t = torch::tensor(values, torch::kDouble);
  allreduce(t, comm::ReduceOp::sum);
  auto a = t.accessor<double, 1>();
  for (size_t i = 0; i < values.size(); ++i) values[i] = a[static_cast<int64_t>(i)];
  return values;
}

}  // namespace heft::parallel
