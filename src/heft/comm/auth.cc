#include "heft/comm/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <vector>

#include "heft/error.h"

namespace heft::comm {

Nonce random_nonce() {
  Nonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw IoError("auth: OpenSSL RAND_bytes failed to produce a nonce");
  return n;
}

std::string random_token() {
  Nonce n = random_nonce();
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : n) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

Mac auth_mac(const std::string& token, const std::string& context, const Nonce& nonce) {
  std::vector<uint8_t> msg(context.begin(), context.end());
  msg.insert(msg.end(), nonce.begin(), nonce.end());
  Mac mac{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), msg.data(),
            msg.size(), mac.data(), &len) ||
      len != mac.size())
    throw IoError("auth: OpenSSL HMAC-SHA256 failed");
  return mac;
}

bool mac_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace heft::comm
