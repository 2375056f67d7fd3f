// Tensors as heft's communicator takes them, for the process group (process_group.cc):
// contiguous buffers of a dtype the communicator reduces (parallel/torch_dtype.h: float32,
// float64, float16, bfloat16, int8, uint8, int16, int32, int64), the caller's tensor itself
// when it already is one; bool goes through int32 and is written back as nonzero. And c10d's
// reduce ops as the communicator's. Every check throws c10::Error (RuntimeError in Python)
// naming the operation and what was wrong, before anything is sent.
//
// CUDA tensors (ranks sharing a GPU, or a GPU without NCCL: docs/gpu.md) go through page-locked
// host memory, as Gloo serves them: the caller's tensor is copied to a pinned host buffer when
// staged (on the caller's current stream, which the copy waits for: what the caller queued
// before the collective is in it), the host collective runs on that buffer, and the result is
// copied back before the work completes. Whole tensors, synchronous copies: not yet the
// chunked, overlapped staging of heft/cuda/staging.h. Counted (cuda_staged()).
//
// Deliberately left out: sparse and quantized tensors, devices other than the CPU and CUDA,
// complex (torch hands SUM over as pairs of floats itself), PREMUL_SUM (NCCL's).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "heft/comm/dtype.h"
#include "heft/parallel/torch_dtype.h"

namespace heft::torch_backend {

inline std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

// One tensor staged: the caller's and the buffer the communicator reads and writes.
struct Staged {
  at::Tensor user;  // the caller's tensor
  at::Tensor buf;   // what the communicator reads and writes
  comm::DataType type = comm::DataType::f32;
  size_t count() const { return static_cast<size_t>(buf.numel()); }
  void* data() const { return buf.data_ptr(); }
  // Copies the result back when buf is not the caller's tensor itself.
  void finish() const {
    if (!buf.is_same(user)) user.copy_(buf);
  }
};

// CUDA tensors staged through pinned host memory in this process (tensors and bytes), for the
// tests and the device check to show the path ran.
struct CudaStaged {
  std::atomic<uint64_t> tensors{0}, bytes{0};
};
inline CudaStaged& cuda_staged() {
  static CudaStaged c;
  return c;
}

// Counts `tensors` CUDA tensors staged through a pinned buffer of `bytes`.
inline void count_cuda_staged(uint64_t tensors, uint64_t bytes) {
  cuda_staged().tensors.fetch_add(tensors, std::memory_order_relaxed);
  cuda_staged().bytes.fetch_add(bytes, std::memory_order_relaxed);
}

// A pinned host tensor of `sizes` and `dtype` for a CUDA tensor's collective.
inline at::Tensor pinned_host(at::IntArrayRef sizes, at::ScalarType dtype) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(at::kCPU).pinned_memory(true));
}

// Throws unless `t` is a defined dense CPU or CUDA tensor of a dtype the backend moves.
inline void check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "heft ", op, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "heft ", op,
              ": expected CPU or CUDA tensors, found one on ", t.device());
  TORCH_CHECK(!t.is_sparse(), "heft ", op, ": sparse tensors are not supported");
  const at::ScalarType s = t.scalar_type();
  TORCH_CHECK(parallel::comm_dtype_of(s) || s == at::kBool, "heft ", op,
              ": unsupported dtype ", dtype_name(s),
              " (supported: float32, float64, float16, bfloat16, int8, uint8, int16, int32, "
              "int64, bool)");
}

// `t` staged for `op`; copy_in false: the buffer's contents are not read (an output).
inline Staged stage(const at::Tensor& t, const char* op, bool copy_in = true) {
  check_tensor(t, op);
  Staged s;
  s.user = t;
  if (t.is_cuda()) {  // through pinned host memory (above)
    const std::optional<comm::DataType> d = parallel::comm_dtype_of(t.scalar_type());
    s.type = d ? *d : comm::DataType::i32;  // bool: reduced as int32
    s.buf = pinned_host(t.sizes(), d ? t.scalar_type() : at::kInt);
    if (copy_in) s.buf.copy_(t);  // waits for the caller's stream
    count_cuda_staged(1, static_cast<uint64_t>(s.buf.nbytes()));
    return s;
  }
  if (const std::optional<comm::DataType> d = parallel::comm_dtype_of(t.scalar_type())) {
    s.type = *d;
    s.buf = t.is_contiguous() ? t : (copy_in ? t.contiguous() : at::empty(t.sizes(), t.options()));
  } else {  // bool: reduced as int32
    s.type = comm::DataType::i32;
    s.buf = copy_in ? t.to(at::kInt).contiguous() : at::empty(t.sizes(), t.options().dtype(at::kInt));
  }
  return s;
}

// The communicator's operator of a c10d reduce op on tensors of `dtype`: every op but
// PREMUL_SUM; the bitwise ones (BAND, BOR, BXOR) on integer and bool tensors only, as Gloo.
// bool reduces as int32 of 0 and 1: SUM and MAX are a logical or, PRODUCT and MIN an and;
// AVG of bool is refused.
inline comm::ReduceOp reduce_op(const c10d::ReduceOp& op, const char* name, at::ScalarType dtype) {
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  const char* bitwise = nullptr;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return comm::ReduceOp::sum;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(dtype != at::kBool, "heft ", name, ": reduce op AVG of a Bool tensor has no ",
                  "bool result (use SUM, or convert to a number type first)");
      return comm::ReduceOp::avg;
    case c10d::ReduceOp::MIN: return comm::ReduceOp::min;
    case c10d::ReduceOp::MAX: return comm::ReduceOp::max;
    case c10d::ReduceOp::PRODUCT: return comm::ReduceOp::product;
    case c10d::ReduceOp::BAND: bitwise = "BAND"; break;
    case c10d::ReduceOp::BOR: bitwise = "BOR"; break;
    case c10d::ReduceOp::BXOR: bitwise = "BXOR"; break;
    default:
      TORCH_CHECK(false, "heft ", name, ": unsupported reduce op ",
                  op.op_ == c10d::ReduceOp::PREMUL_SUM ? "PREMUL_SUM" : "(unknown)",
                  " (supported: SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR)");
  }
  TORCH_CHECK(integral, "heft ", name, ": reduce op ", bitwise,
              " needs an integer or bool tensor, found ", dtype_name(dtype));
  return op.op_ == c10d::ReduceOp::BAND  ? comm::ReduceOp::band
         : op.op_ == c10d::ReduceOp::BOR ? comm::ReduceOp::bor
                                         : comm::ReduceOp::bxor;
}

// One flat staged buffer holding several tensors of one dtype back to back.
struct Flat {
  at::Tensor buf;
  comm::DataType type = comm::DataType::f32;
  std::vector<at::Tensor> parts;  // the caller's tensors
};

// `ts` (at least one, all of one dtype) in one buffer; copy_in false: not read (outputs).
inline Flat flatten(const std::vector<at::Tensor>& ts, const char* op, bool copy_in) {
  TORCH_CHECK(!ts.empty(), "heft ", op, ": no tensors");
  for (const at::Tensor& t : ts) {
    check_tensor(t, op);
    TORCH_CHECK(t.scalar_type() == ts[0].scalar_type(), "heft ", op,
                ": tensors of different dtypes (", dtype_name(ts[0].scalar_type()), " and ",
                dtype_name(t.scalar_type()), ")");
    TORCH_CHECK(t.device() == ts[0].device(), "heft ", op, ": tensors on different devices (",
                ts[0].device(), " and ", t.device(), ")");
  }
  Flat f;
  at::ScalarType st = ts[0].scalar_type();
  if (const std::optional<comm::DataType> d = parallel::comm_dtype_of(st)) {
    f.type = *d;
  } else {  // bool: reduced as int32
    f.type = comm::DataType::i32;
    st = at::kInt;
  }
  int64_t n = 0;
  for (const at::Tensor& t : ts) n += t.numel();
  const bool cuda = ts[0].is_cuda();
  f.buf = cuda ? pinned_host({n}, st) : at::empty({n}, ts[0].options().dtype(st));
  if (cuda) count_cuda_staged(ts.size(), static_cast<uint64_t>(f.buf.nbytes()));
  if (copy_in) {
    int64_t o = 0;
    for (const at::Tensor& t : ts) {
      f.buf.narrow(0, o, t.numel()).copy_(t.reshape({-1}));
      o += t.numel();
    }
  }
  f.parts = ts;
  return f;
}

// Copies the flat buffer back into the caller's tensors.
inline void unflatten(const Flat& f) {
  int64_t o = 0;
  for (const at::Tensor& t : f.parts) {
    t.copy_(f.buf.narrow(0, o, t.numel()).view(t.sizes()));
    o += t.numel();
  }
}

}  // namespace heft::torch_backend
