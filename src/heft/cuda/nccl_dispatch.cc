#include "heft/cuda/nccl_dispatch.h"

#include <map>

#include "heft/error.h"

namespace heft::cuda {

using comm::DataType;
using comm::ReduceOp;

std::optional<ncclDataType_t> nccl_type(DataType t) {
  switch (t) {
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::f16: return ncclFloat16;
    case DataType::bf16: return ncclBfloat16;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
    case DataType::i8: return ncclInt8;
    case DataType::u8: return ncclUint8;
    case DataType::i16: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<ncclRedOp_t> nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::product: return ncclProd;
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor: return std::nullopt;
  }
  return std::nullopt;
}

const char* path_name(CudaPath p) { return p == CudaPath::kNccl ? "nccl" : "staging"; }

PathChoice choose_group_path(const std::vector<std::string>& device_of_rank, bool nccl_available) {
  if (device_of_rank.empty()) throw InvalidArgument("cuda path: a group of no ranks");
  if (!nccl_available) return {CudaPath::kStaging, "NCCL is not available"};
  std::map<std::string, size_t> first_rank_of;
  for (size_t r = 0; r < device_of_rank.size(); ++r) {
    const std::string& d = device_of_rank[r];
    if (d.empty()) return {CudaPath::kStaging, "rank " + std::to_string(r) + " has no GPU"};
    const auto [it, fresh] = first_rank_of.emplace(d, r);
    if (!fresh)
      return {CudaPath::kStaging, "ranks " + std::to_string(it->second) + " and " +
                                      std::to_string(r) + " share GPU " + d +
                                      " (NCCL refuses two ranks on one GPU)"};
  }
  return {CudaPath::kNccl, "every rank has a GPU of its own"};
}

PathChoice choose_call_path(const PathChoice& group, DataType t, std::optional<ReduceOp> op) {
  if (group.path != CudaPath::kNccl) return group;
  if (!nccl_type(t))
    return {CudaPath::kStaging, std::string("NCCL has no type ") + comm::name(t)};
  if (op && !nccl_op(*op))
    return {CudaPath::kStaging, std::string("NCCL has no operator ") + comm::name(*op)};
  return group;
}

}  // namespace heft::cuda
