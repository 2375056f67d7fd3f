// heft's copy kernel for the shared-memory paths. glibc copies 2 KiB up to about the L2
// size with `rep movsb`, which on AMD Zen 3/4 runs 10-16x slower when (dst - src) mod 64 is
// between 4 and 28 (a malloc'd buffer starts 16 bytes into a page, so a copy between one
// and a page-aligned slot hits it). This kernel is an explicit vector loop (AVX2 where
// cpu.h allows, SSE2 otherwise) with aligned stores and its loads two steps ahead of them
// (against 4K aliasing, copy.cc): the same speed at every alignment.
//
// Deliberately left out: overlapping buffers (use memmove), tiny copies (below 128 bytes it
// calls memcpy, whose small-copy code has no cliff).
#pragma once

#include <cstddef>

namespace heft::comm {

// Where the written data goes. kCached: normal stores (the data is read again soon, e.g. by
// a peer from a slot). kStreaming: non-temporal stores that bypass the caches, for output
// larger than the last-level cache that nobody reads back within the operation; they save
// the read-for-ownership traffic. Kernels end a streaming call with a store fence.
enum class StoreHint { kCached, kStreaming };

// dst[0, bytes) = src[0, bytes). The ranges must not overlap. Any alignment.
void copy_bytes(void* dst, const void* src, size_t bytes, StoreHint hint = StoreHint::kCached);

// kStreaming when an operation writing `total_bytes` to its output should stream (more than
// the last-level cache), else kCached.
StoreHint hint_for_output(size_t total_bytes);

}  // namespace heft::comm
