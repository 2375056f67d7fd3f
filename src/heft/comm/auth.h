// Job-token authentication shared by the store and the peer transports: a challenge-response
// with HMAC-SHA256 (OpenSSL), so the token never crosses the wire.
//
// Handshake (see docs/store-protocol.md): the accepting side sends a random 32-byte nonce;
// the connecting side answers hmac(token, context || nonce); the acceptor compares in
// constant time. `context` binds the proof to its use ("store", "tcp-pair/<group>/<from>/<to>").
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace heft::comm {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// A nonce from OpenSSL's CSPRNG. Throws heft::IoError if the generator fails.
Nonce random_nonce();

// A new random job token: 32 random bytes as 64 lowercase hex characters.
std::string random_token();

// HMAC-SHA256(token, context || nonce).
Mac auth_mac(const std::string& token, const std::string& context, const Nonce& nonce);

// Constant-time comparison of two MACs.
bool mac_equal(const Mac& a, const Mac& b);

}  // namespace heft::comm
