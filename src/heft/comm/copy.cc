#include "heft/comm/copy.h"

#include <cstdint>
#include <cstring>

#include "heft/comm/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace heft::comm {

namespace {

constexpr size_t kSmall = 128;

#if defined(__x86_64__)

// Terms: the *head* is the bytes before dst reaches vector alignment (written with one
// unaligned vector that may overlap the body); the *body* moves groups of four vectors with
// aligned stores; the *tail* is the last vector, unaligned and ending exactly at dst+bytes
// (it may rewrite bytes the body wrote, with the same values).
//
// 4K aliasing: a load whose address matches an older store still in the store buffer in
// bits 11:0 waits for it. A plain body (load a group, store it, next group) with dst a few
// bytes past src modulo 4 KiB (most alignments of a malloc'd buffer and a slot) has each
// group's loads match the stores just issued: on AMD Zen 5 at 256 KiB, 0.78-0.84x of the
// speed at offset 0, at every other offset. So the body loads two groups ahead of its
// stores: no load follows a store it aliases while dst is less than two groups (AVX2: 256
// bytes, SSE2: 128) past src modulo 4 KiB (measured: 0.88x or better at all 64 offsets; the
// rest is loads split across cache lines).

// AVX2: 32-byte vectors; kStream picks non-temporal stores for the body.
template <bool kStream>
__attribute__((target("avx2"))) void copy_avx2(uint8_t* d, const uint8_t* s, size_t n) {
  using V = __m256i;
  constexpr size_t W = 32, G = 4 * W;
  const V first = _mm256_loadu_si256(reinterpret_cast<const V*>(s));
  const V last = _mm256_loadu_si256(reinterpret_cast<const V*>(s + n - W));
  _mm256_storeu_si256(reinterpret_cast<V*>(d), first);
  size_t i = (W - (reinterpret_cast<uintptr_t>(d) & (W - 1))) & (W - 1);
  if (i + 2 * G <= n) {
    V a[4], b[4], c[4];
    for (size_t k = 0; k < 4; ++k) {
      a[k] = _mm256_loadu_si256(reinterpret_cast<const V*>(s + i + k * W));
      b[k] = _mm256_loadu_si256(reinterpret_cast<const V*>(s + i + G + k * W));
    }
    auto put = [](uint8_t* at, const V* g) __attribute__((target("avx2"))) {
      for (size_t k = 0; k < 4; ++k) {
        if constexpr (kStream) _mm256_stream_si256(reinterpret_cast<V*>(at + k * W), g[k]);
        else _mm256_store_si256(reinterpret_cast<V*>(at + k * W), g[k]);
      }
    };
    for (; i + 3 * G <= n; i += G) {
      for (size_t k = 0; k < 4; ++k)
        c[k] = _mm256_loadu_si256(reinterpret_cast<const V*>(s + i + 2 * G + k * W));
      put(d + i, a);
      for (size_t k = 0; k < 4; ++k) a[k] = b[k], b[k] = c[k];
    }
    put(d + i, a);
    put(d + i + G, b);
    i += 2 * G;
  }
  if constexpr (kStream) _mm_sfence();
  for (; i + W <= n; i += W)
    _mm256_store_si256(reinterpret_cast<V*>(d + i),
                       _mm256_loadu_si256(reinterpret_cast<const V*>(s + i)));
  _mm256_storeu_si256(reinterpret_cast<V*>(d + n - W), last);
}

// The same with SSE2 (every x86-64 has it) and 16-byte vectors.
template <bool kStream>
void copy_sse2(uint8_t* d, const uint8_t* s, size_t n) {
  using V = __m128i;
  constexpr size_t W = 16, G = 4 * W;
  const V first = _mm_loadu_si128(reinterpret_cast<const V*>(s));
  const V last = _mm_loadu_si128(reinterpret_cast<const V*>(s + n - W));
  _mm_storeu_si128(reinterpret_cast<V*>(d), first);
  size_t i = (W - (reinterpret_cast<uintptr_t>(d) & (W - 1))) & (W - 1);
  if (i + 2 * G <= n) {
    V a[4], b[4], c[4];
    for (size_t k = 0; k < 4; ++k) {
      a[k] = _mm_loadu_si128(reinterpret_cast<const V*>(s + i + k * W));
      b[k] = _mm_loadu_si128(reinterpret_cast<const V*>(s + i + G + k * W));
    }
    auto put = [](uint8_t* at, const V* g) {
      for (size_t k = 0; k < 4; ++k) {
        if constexpr (kStream) _mm_stream_si128(reinterpret_cast<V*>(at + k * W), g[k]);
        else _mm_store_si128(reinterpret_cast<V*>(at + k * W), g[k]);
      }
    };
    for (; i + 3 * G <= n; i += G) {
      for (size_t k = 0; k < 4; ++k)
        c[k] = _mm_loadu_si128(reinterpret_cast<const V*>(s + i + 2 * G + k * W));
      put(d + i, a);
      for (size_t k = 0; k < 4; ++k) a[k] = b[k], b[k] = c[k];
    }
    put(d + i, a);
    put(d + i + G, b);
    i += 2 * G;
  }
  if constexpr (kStream) _mm_sfence();
  for (; i + W <= n; i += W)
    _mm_store_si128(reinterpret_cast<V*>(d + i), _mm_loadu_si128(reinterpret_cast<const V*>(s + i)));
  _mm_storeu_si128(reinterpret_cast<V*>(d + n - W), last);
}

#endif

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes, StoreHint hint) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (bytes < kSmall) {
    if (bytes) std::memcpy(d, s, bytes);
    return;
  }
#if defined(__x86_64__)
  const bool stream = hint == StoreHint::kStreaming;
  if (kernel_isa() == KernelIsa::kAvx2)
    return stream ? copy_avx2<true>(d, s, bytes) : copy_avx2<false>(d, s, bytes);
  return stream ? copy_sse2<true>(d, s, bytes) : copy_sse2<false>(d, s, bytes);
#else
  (void)hint;
  std::memcpy(d, s, bytes);
#endif
}

StoreHint hint_for_output(size_t total_bytes) {
  // Below 1 MiB no cache is smaller: answer without asking (the first ask reads /sys).
  if (total_bytes < (size_t{1} << 20)) return StoreHint::kCached;
  return total_bytes > last_level_cache_bytes() ? StoreHint::kStreaming : StoreHint::kCached;
}

}  // namespace heft::comm
