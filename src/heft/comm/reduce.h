// Element-wise reduction kernels used by every collective algorithm. Each is compiled twice,
// portable and AVX2, and picked at run time (cpu.h); both give bit-identical results (the
// same operations in the same order per element, no reassociation; f16 converts with F16C
// in the AVX2 form, to the same bits), except which sign a NaN result keeps when both inputs
// are NaN (the compiler's operand order).
// Deliberately left out: threading (a rank reduces its own slice; parallelism comes from
// the algorithm giving each rank a different slice).
#pragma once

#include <cstddef>

#include "heft/comm/copy.h"
#include "heft/comm/dtype.h"

namespace heft::comm {

// dst[i] = a[i] (op) b[i] for i < count, in one pass (the copy fused into the reduce: an
// algorithm that would copy a and then reduce b into it reads and writes each byte once).
// For ReduceOp::avg this is a sum; call finish_average once on the fully reduced data. dst
// may equal a or b; other overlaps are not allowed. Any alignment. `hint` as in copy.h.
// Integer sum and product wrap modulo 2^bits (Gloo's results); f16 / bf16 compute in f32 and
// round once per call. Throws heft::InvalidArgument (require_op_applies, dtype.h) for a
// bitwise op on a floating-point type or a value outside the enums, before touching dst.
void reduce_to(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceOp op,
               StoreHint hint = StoreHint::kCached);

// dst[i] = dst2[i] = a[i] (op) b[i] for i < count: reduce_to with two outputs, for a caller
// that needs the result in two places (the direct allreduce: the user's buffer and the
// area its peers read). In one pass (each result stored twice, read once) when
// explicit_sum_applies(t, op), or when the dtype is native (not f16 / bf16) and every
// output is outside 1-256 bytes past every input modulo 4 KiB (reduce_order: kForward for
// both); else reduce_to(dst2, ...) and a copy to dst. Returns whether it took the one pass.
// dst and dst2 may each equal a or b; the two outputs must not overlap, nor overlap an input
// they are not equal to. For ReduceOp::avg a sum, as reduce_to. Same results, bit for bit,
// as reduce_to. Throws as reduce_to.
bool reduce_to_both(void* dst, void* dst2, const void* a, const void* b, size_t count,
                    DataType t, ReduceOp op);

// reduce_to_both with dst2 written by non-temporal stores (copy.h's kStreaming), dst by
// normal ones: for a second output that another core reads next and this one does not (the
// direct allreduce's out area when its ranks sit on far cores), so its lines go to memory
// instead of staying modified in this core's cache. One pass when explicit_sum_applies(t, op)
// and dst2 is aligned to the element size; else reduce_to(dst, ...) and a streaming copy of
// dst into dst2. Returns whether it took the one pass. Ends with a store fence. Overlaps,
// results and errors as reduce_to_both.
bool reduce_to_both_streaming(void* dst, void* dst2, const void* a, const void* b, size_t count,
                              DataType t, ReduceOp op);

// dst[i] = dst[i] (op) src[i] for i < count: reduce_to(dst, dst, src, ...).
inline void reduce_into(void* dst, const void* src, size_t count, DataType t, ReduceOp op) {
  reduce_to(dst, dst, src, count, t, op);
}

// Whether reduce_to (kCached) and reduce_to_both run the explicit AVX2 sum body for (t, op)
// with the kernels in use (kernel_isa, cpu.h): sum and avg of the native types (all but f16
// and bf16) under AVX2. That body goes forward at every placement with its loads two groups
// (256 bytes) ahead of its stores, so 4K aliasing does not stall it (reduce_order does not
// apply), and aligns the stream whose alignment the most others share (reduce.cc). Never
// throws.
bool explicit_sum_applies(DataType t, ReduceOp op);

// The order reduce_to (kCached; explicit_sum_applies false) goes through memory for these
// addresses and `bytes` of output, chosen against 4K aliasing (a store whose address matches
// a later load's modulo 4 KiB stalls it; see reduce.cc): kForward when dst is not 1-256
// bytes past a or b modulo 4 KiB (or bytes < 1 KiB); kBackward when it is past them but not
// 1-256 bytes before either; kThroughBlock otherwise (a page at a time into an L1 block
// placed away from all three, then copied to dst). The result is the same in every order.
// Never throws.
enum class ReduceOrder { kForward, kBackward, kThroughBlock };
ReduceOrder reduce_order(const void* dst, const void* a, const void* b, size_t bytes);

// For ReduceOp::avg: data[i] /= world_size (integer types: truncating division of the
// wrapped sum).
// A no-op for the other ops.
void finish_average(void* data, size_t count, DataType t, ReduceOp op, int world_size);

}  // namespace heft::comm
