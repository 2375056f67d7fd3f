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
// unaligned vector that may overlap the body); the *body* moves four vectors per step with
// aligned stores; the *tail* is the last vector, unaligned and ending exactly at dst+bytes
// (it may rewrite bytes the body wrote, with the same values).
__attribute__((target("avx2"))) void copy_avx2(uint8_t* d, const uint8_t* s, size_t n,
                                                bool stream) {
  const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i last = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n - 32));
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), first);
  size_t i = head;
  if (stream) {
    for (; i + 128 <= n; i += 128) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
      const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
    }
    _mm_sfence();
  } else {
    for (; i + 128 <= n; i += 128) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
      const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + i), a);
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
      _mm256_store_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
    }
  }
  for (; i + 32 <= n; i += 32)
    _mm256_store_si256(reinterpret_cast<__m256i*>(d + i),
                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + n - 32), last);
}

// The same with SSE2 (every x86-64 has it) and 16-byte vectors.
void copy_sse2(uint8_t* d, const uint8_t* s, size_t n, bool stream) {
  const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i last = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + n - 16));
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d), first);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    if (stream) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    } else {
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
  }
  if (stream) _mm_sfence();
  for (; i + 16 <= n; i += 16)
    _mm_store_si128(reinterpret_cast<__m128i*>(d + i),
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d + n - 16), last);
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
  if (kernel_isa() == KernelIsa::kAvx2) return copy_avx2(d, s, bytes, stream);
  return copy_sse2(d, s, bytes, stream);
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
