// Which path a collective on CUDA memory takes (docs/gpu.md): NCCL where every rank of the group
// has a GPU of its own, else staging through pinned host memory onto heft's own collectives
// (the way Gloo serves CUDA tensors); and per call, NCCL only for the types and operators it
// has. Pure decisions: no device is touched, so they are unit-tested on any machine.
#pragma once

#include <nccl.h>

#include <optional>
#include <string>
#include <vector>

#include "heft/comm/dtype.h"

namespace heft::cuda {

// NCCL's type for heft's: every one but i16 (NCCL has no 16-bit integer).
std::optional<ncclDataType_t> nccl_type(comm::DataType t);
// NCCL's operator for heft's: sum, avg, min, max, product; not the bitwise ones.
std::optional<ncclRedOp_t> nccl_op(comm::ReduceOp op);

enum class CudaPath { kNccl, kStaging };
const char* path_name(CudaPath p);  // "nccl" | "staging"

struct PathChoice {
  CudaPath path = CudaPath::kStaging;
  std::string why;  // one line: what decided it
};

// The group's path from each rank's device (its PCI bus id; empty: the rank has no GPU) and
// whether NCCL is there: NCCL when every rank has a GPU and no two ranks share one (NCCL
// refuses two ranks on one GPU), staging otherwise. Throws heft::InvalidArgument for an empty
// group.
PathChoice choose_group_path(const std::vector<std::string>& device_of_rank, bool nccl_available);

// One call's path within a group whose path is `group`: staging where NCCL lacks the type or
// the operator (a reduction's; nullopt for a collective that reduces nothing).
PathChoice choose_call_path(const PathChoice& group, comm::DataType t,
                            std::optional<comm::ReduceOp> op);

}  // namespace heft::cuda
