// The TCP store's wire format, shared by its server (tcp_store_server.cc) and client
// (tcp_store.cc): frame layout, opcodes, statuses, limits, and the little-endian encoder and
// decoder of frame bodies. docs/store-protocol.md documents the same bytes for people.
// Deliberately left out: anything that touches a socket.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "heft/comm/auth.h"
#include "heft/comm/store/store.h"
#include "heft/comm/transport/tcp/socket.h"

namespace heft::comm::wire {


using tcp::Clock;
using tcp::Deadline;

constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxValueBytes = size_t{64} << 20;
constexpr size_t kMaxBodyBytes = kMaxValueBytes + 64 * 1024;
// Keys in one WAIT or CHECK: a frame of 13.4 M empty-ish keys once took the server from 12 MB
// to 1 GB and stalled every other client for seconds while it decoded them.
constexpr size_t kMaxKeysPerRequest = 65536;
constexpr size_t kHeaderBytes = 5;  // u8 opcode or status, u32 body length
constexpr uint8_t kVersion = 1;
constexpr char kServerMagic[4] = {'H', 'F', 'S', 'S'};
constexpr char kClientMagic[4] = {'H', 'F', 'S', 'C'};
constexpr size_t kServerHelloBytes = 4 + 1 + kNonceBytes;
constexpr size_t kClientHelloBytes = 4 + 1 + kMacBytes + kNonceBytes;
const char* const kClientContext = "heft-store";         // what the client proves
const char* const kServerContext = "heft-store-server";  // what the server proves
// How long a new connection may take to prove the token before the server drops it.
constexpr Millis kHelloTimeout = std::chrono::seconds(30);
// How much longer than the server's deadline a client waits for a get/wait answer.
constexpr Millis kReplyMargin = std::chrono::seconds(5);
// Longest wait either side accepts: keeps time_point arithmetic far from overflow.
constexpr Millis kMaxWait = std::chrono::hours(24 * 365);

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kDelete = 5, kWait = 6 };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kInvalid = 2, kRefused = 3, kBadRequest = 4 };

inline Deadline after(Millis t) { return Clock::now() + std::clamp(t, Millis(0), kMaxWait); }

// Appends little-endian fields; begin() / finish() wrap them in a frame header.
class Encoder {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void u32(uint32_t v) { fixed(v, 4); }
  void u64(uint64_t v) { fixed(v, 8); }
  void raw(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void blob(const Bytes& b) {
    u32(static_cast<uint32_t>(b.size()));
    raw(b.data(), b.size());
  }
  void keys(const std::vector<std::string>& ks) {
    u32(static_cast<uint32_t>(ks.size()));
    for (const auto& k : ks) str(k);
  }
  void begin(uint8_t kind) {
    u8(kind);
    u32(0);
  }
  // The fields alone, without a frame header.
  Bytes take() { return std::move(buf_); }
  // The frame begun by begin(), its body length filled in.
  Bytes finish() {
    uint32_t body = static_cast<uint32_t>(buf_.size() - kHeaderBytes);
    for (int i = 0; i < 4; ++i) buf_[1 + i] = static_cast<uint8_t>(body >> (8 * i));
    return std::move(buf_);
  }

 private:
  void fixed(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  Bytes buf_;
};

// A body that does not parse as its opcode says.
struct BadFrame : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads little-endian fields from a body; throws BadFrame past its end.
class Decoder {
 public:
  Decoder(const uint8_t* p, size_t n) : p_(p), left_(n) {}
  uint8_t u8() { return static_cast<uint8_t>(fixed(1)); }
  uint32_t u32() { return static_cast<uint32_t>(fixed(4)); }
  uint64_t u64() { return fixed(8); }
  std::string str() {
    size_t n = u32();
    return std::string(reinterpret_cast<const char*>(bytes(n)), n);
  }
  Bytes blob() {
    size_t n = u32();
    const uint8_t* p = bytes(n);
    return Bytes(p, p + n);
  }
  std::vector<std::string> keys() {
    uint32_t n = u32();
    if (n > kMaxKeysPerRequest)
      throw BadFrame(std::to_string(n) + " keys in one request exceed the limit of " +
                     std::to_string(kMaxKeysPerRequest));
    need(size_t{n} * 4);  // every key costs at least its length field
    std::vector<std::string> ks;
    for (uint32_t i = 0; i < n; ++i) ks.push_back(str());
    return ks;
  }
  void finish() const {
    if (left_ != 0) throw BadFrame(std::to_string(left_) + " unexpected trailing bytes");
  }

 private:
  void need(size_t n) const {
    if (n > left_) throw BadFrame("body ends early");
  }
  // The next n bytes, consumed.
  const uint8_t* bytes(size_t n) {
    need(n);
    const uint8_t* p = p_;
    p_ += n;
    left_ -= n;
    return p;
  }
  uint64_t fixed(size_t n) {
    const uint8_t* p = bytes(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
    return v;
  }
  const uint8_t* p_;
  size_t left_;
};

inline uint32_t body_length(const uint8_t* header) { return Decoder(header + 1, 4).u32(); }

inline std::string quoted(const std::vector<std::string>& keys) {
  std::string s = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s;
}


}  // namespace heft::comm::wire
