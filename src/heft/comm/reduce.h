// Element-wise reduction kernels used by every collective algorithm.
// Deliberately left out: threading (a rank reduces its own slice; parallelism comes from
// the algorithm giving each rank a different slice).
#pragma once

#include <cstddef>

#include "heft/comm/dtype.h"

namespace heft::comm {

// dst[i] = dst[i] (op) src[i] for i < count. For ReduceOp::avg this is a sum; call
// finish_average once on the fully reduced data. dst and src may be equal, not overlap
// partially.
void reduce_into(void* dst, const void* src, size_t count, DataType t, ReduceOp op);

// For ReduceOp::avg: data[i] /= world_size (integer types: truncating division).
// A no-op for the other ops.
void finish_average(void* data, size_t count, DataType t, ReduceOp op, int world_size);

}  // namespace heft::comm
