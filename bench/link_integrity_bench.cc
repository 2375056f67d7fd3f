// What integrity on a TCP link's frames would cost a rank, per byte it sends or receives:
// the MACs OpenSSL offers (HMAC-SHA256, Poly1305, AES-256-GCM's tag over data it does not
// encrypt, i.e. GMAC) and the AEADs that also encrypt (AES-256-GCM, ChaCha20-Poly1305), over
// the chunk sizes a ring allreduce sends, beside a memcpy of the same bytes. Reported as bytes
// processed per second on one core: a rank's link carries about 2 (n-1)/n of the buffer each
// way, so a MAC slower than the link's bytes per second would bound the allreduce
// (bench/link_integrity.sh puts the two side by side; docs/security.md the choice).
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace {

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(a.data(), b.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_HmacSha256(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> data(bytes, 3), key(32, 7), mac(32);
  for (auto _ : state) {
    unsigned int len = 0;
    HMAC(EVP_sha256(), key.data(), 32, data.data(), bytes, mac.data(), &len);
    benchmark::DoNotOptimize(mac.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_Poly1305(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> data(bytes, 3), key(32, 7), mac(16);
  EVP_MAC* m = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
  if (!m) throw std::runtime_error("no POLY1305 in this OpenSSL");
  for (auto _ : state) {
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(m);
    size_t len = 0;
    EVP_MAC_init(ctx, key.data(), key.size(), nullptr);
    EVP_MAC_update(ctx, data.data(), bytes);
    EVP_MAC_final(ctx, mac.data(), &len, mac.size());
    EVP_MAC_CTX_free(ctx);
    benchmark::DoNotOptimize(mac.data());
  }
  EVP_MAC_free(m);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

// encrypt = false: the data goes in as additional authenticated data only (GMAC): integrity
// without confidentiality. encrypt = true: AES-256-GCM or ChaCha20-Poly1305 proper.
void aead(benchmark::State& state, const EVP_CIPHER* cipher, bool encrypt) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> data(bytes, 3), out(bytes + 16), key(32, 7), iv(12, 1), tag(16);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  for (auto _ : state) {
    int len = 0;
    EVP_EncryptInit_ex(ctx, cipher, nullptr, key.data(), iv.data());
    if (encrypt)
      EVP_EncryptUpdate(ctx, out.data(), &len, data.data(), static_cast<int>(bytes));
    else
      EVP_EncryptUpdate(ctx, nullptr, &len, data.data(), static_cast<int>(bytes));
    EVP_EncryptFinal_ex(ctx, out.data() + len, &len);
    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, tag.data());
    benchmark::DoNotOptimize(tag.data());
  }
  EVP_CIPHER_CTX_free(ctx);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_Gmac(benchmark::State& state) { aead(state, EVP_aes_256_gcm(), false); }
void BM_Aes256Gcm(benchmark::State& state) { aead(state, EVP_aes_256_gcm(), true); }
void BM_ChaCha20Poly1305(benchmark::State& state) { aead(state, EVP_chacha20_poly1305(), true); }

// 64 KiB .. 4 MiB: the chunks a ring step sends for 1-64 MiB buffers on 2-16 ranks.
#define HEFT_SIZES ->RangeMultiplier(4)->Range(64 << 10, 4 << 20)
BENCHMARK(BM_Memcpy) HEFT_SIZES;
BENCHMARK(BM_HmacSha256) HEFT_SIZES;
BENCHMARK(BM_Poly1305) HEFT_SIZES;
BENCHMARK(BM_Gmac) HEFT_SIZES;
BENCHMARK(BM_Aes256Gcm) HEFT_SIZES;
BENCHMARK(BM_ChaCha20Poly1305) HEFT_SIZES;

}  // namespace

BENCHMARK_MAIN();
