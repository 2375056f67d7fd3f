#include "heft/comm/transport/tcp/pair.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "heft/comm/auth.h"

namespace heft::comm::tcp {

namespace {

constexpr uint32_t kMagic = 0x50544648;  // "HFTP" little-endian
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxGroupBytes = 4096;

std::string context_of(const std::string& group, int from, int to) {
  return "tcp-pair/" + group + "/" + std::to_string(from) + "/" + std::to_string(to);
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t read_u32(int fd, Deadline deadline, const std::string& what) {
  uint8_t b[4];
  read_exact(fd, b, 4, deadline, what);
  return b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

}  // namespace

Pair connect_pair(const PairIdentity& self, int peer, const std::string& host, int port,
                  Deadline deadline) {
  const std::string what = "rank " + std::to_string(self.rank) + ": connecting to rank " +
                           std::to_string(peer) + " at " + host + ":" + std::to_string(port);
  Socket s = connect_until(host, port, deadline, what);
  Nonce nonce;
  read_exact(s.fd(), nonce.data(), nonce.size(), deadline, what);
  std::vector<uint8_t> hello;
  put_u32(hello, kMagic);
  put_u32(hello, kVersion);
  put_u32(hello, static_cast<uint32_t>(self.group.size()));
  hello.insert(hello.end(), self.group.begin(), self.group.end());
  put_u32(hello, static_cast<uint32_t>(self.rank));
  put_u32(hello, static_cast<uint32_t>(peer));
  Mac mac = auth_mac(self.token, context_of(self.group, self.rank, peer), nonce);
  hello.insert(hello.end(), mac.begin(), mac.end());
  write_all(s.fd(), hello.data(), hello.size(), deadline, what);
  uint8_t status = 0;
  read_exact(s.fd(), &status, 1, deadline, what);
  if (status != 1)
    throw IoError(what + ": the peer refused the connection (job token or group mismatch)");
  return Pair(peer, std::move(s));
}

Pair accept_pair(const PairIdentity& self, const Socket& listener, int world_size,
                 Deadline deadline) {
  const std::string what = "rank " + std::to_string(self.rank) + ": accepting peers";
  Socket s = accept_until(listener, deadline, what);
  const std::string from_addr = peer_host(s);
  // A connection that stalls mid-handshake is refused without using up the whole deadline.
  deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
  try {
    Nonce nonce = random_nonce();
    write_all(s.fd(), nonce.data(), nonce.size(), deadline, what);
    uint32_t magic = read_u32(s.fd(), deadline, what);
    uint32_t version = read_u32(s.fd(), deadline, what);
    uint32_t group_len = read_u32(s.fd(), deadline, what);
    if (magic != kMagic || version != kVersion || group_len > kMaxGroupBytes)
      throw IoError("not a heft peer (bad magic, version or length)");
    std::string group(group_len, '\0');
    read_exact(s.fd(), group.data(), group_len, deadline, what);
    int from = static_cast<int>(read_u32(s.fd(), deadline, what));
    int to = static_cast<int>(read_u32(s.fd(), deadline, what));
    Mac mac;
    read_exact(s.fd(), mac.data(), mac.size(), deadline, what);
    if (group != self.group || to != self.rank || from <= self.rank || from >= world_size)
      throw IoError("wrong group or rank (group '" + group + "', from " + std::to_string(from) +
                    " to " + std::to_string(to) + ")");
    if (!mac_equal(mac, auth_mac(self.token, context_of(group, from, to), nonce)))
      throw IoError("the job token did not match");
    uint8_t ok = 1;
    write_all(s.fd(), &ok, 1, deadline, what);
    return Pair(from, std::move(s));
  } catch (const Error& e) {
    spdlog::warn("rank {}: refused a peer connection from {}: {}", self.rank, from_addr, e.what());
    uint8_t refused = 0;
    try {
      write_all(s.fd(), &refused, 1, Clock::now() + std::chrono::milliseconds(100), what);
    } catch (const Error&) {
    }
    return Pair();
  }
}

}  // namespace heft::comm::tcp
