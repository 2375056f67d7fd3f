// The signature of a collective call (CallSignature, transport.h): what each algorithm
// checks against its peers' at its first contact with them, so ranks that call a collective
// with different counts, dtypes, ops or roots (a caller's bug) fail with an error naming the
// collective and both counts instead of going on over buffers of different lengths
// (shared memory: the first sync, shm_links.h; TCP: a header before the first message on
// each link, links.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "heft/comm/dtype.h"
#include "heft/comm/transport/transport.h"

namespace heft::comm::algo {

enum class Call : uint8_t { allreduce, reduce_scatter, allgather, broadcast, reduce, barrier,
                            alltoall, hierarchical_reduce, hierarchical_broadcast };

// Equal for equal arguments; a 64-bit mix, so unequal arguments collide with probability
// 2^-63.
inline CallSignature call_signature(Call call, size_t count, DataType t = DataType::f32,
                                    ReduceOp op = ReduceOp::sum, int root = 0) {
  uint64_t h = (uint64_t{static_cast<uint8_t>(call)} << 56) ^
               (uint64_t{static_cast<uint8_t>(t)} << 48) ^
               (uint64_t{static_cast<uint8_t>(op)} << 40) ^ static_cast<uint32_t>(root);
  h ^= count * 0x9E3779B97F4A7C15ull;  // then splitmix64's finaliser
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return {(h ^ (h >> 31)) | 1, count};
}

}  // namespace heft::comm::algo
