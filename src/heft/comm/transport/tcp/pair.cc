#include "heft/comm/transport/tcp/pair.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>

#include "heft/comm/auth.h"
#include "heft/comm/refusal_log.h"

namespace heft::comm::tcp {

namespace {

constexpr uint32_t kMagic = 0x50544648;  // "HFTP" little-endian
constexpr uint32_t kVersion = 2;
constexpr uint32_t kMaxGroupBytes = 4096;
constexpr size_t kFixedHello = 12;         // magic, version, group_len
constexpr size_t kHelloTail = 8 + 32 + 32;  // from, to, nonce_c, mac_c

// The proof of one side: "tcp-pair/<side>/<group>/<from>/<to>/<address>" || 0 || nonce_a,
// then nonce_c as the HMAC's nonce.
Mac proof(const std::string& token, const char* side, const std::string& group, int from,
          int to, const std::string& address, const Nonce& nonce_a, const Nonce& nonce_c) {
  std::string context = std::string("tcp-pair/") + side + "/" + group + "/" +
                        std::to_string(from) + "/" + std::to_string(to) + "/" + address;
  context += '\0';
  context.append(reinterpret_cast<const char*>(nonce_a.data()), nonce_a.size());
  return auth_mac(token, context, nonce_c);
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_u32(const uint8_t* b) {
  return b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

// One accepted connection in its handshake: the nonce sent, the connector's hello read as it
// arrives, without blocking.
struct Pending {
  Socket socket;
  std::string from;  // the peer's numeric host, for the log
  Nonce nonce{};
  Deadline until{};
  std::vector<uint8_t> in;

  // Bytes of the whole hello once its group length is known, else of its fixed part.
  size_t wanted() const {
    return in.size() < kFixedHello ? kFixedHello : kFixedHello + get_u32(in.data() + 8) + kHelloTail;
  }
};

// A refused or failed handshake: logged (rate-limited) and closed.
void refuse(const PairIdentity& self, Pending& p, const std::string& why) {
  log_refused("rank " + std::to_string(self.rank) + " (group " + self.group + ")", p.from, why);
  uint8_t refused = 0;
  try {
    write_some(p.socket.fd(), &refused, 1, "refusing");
  } catch (const Error&) {
  }
  p.socket.close();
}

// Checks a complete hello; returns the connector's rank, or nullopt after refusing.
std::optional<int> check_hello(const PairIdentity& self, Pending& p, int world_size) {
  const uint8_t* b = p.in.data();
  const uint32_t group_len = get_u32(b + 8);
  const std::string group(reinterpret_cast<const char*>(b + kFixedHello), group_len);
  const uint8_t* tail = b + kFixedHello + group_len;
  const int from = static_cast<int>(get_u32(tail));
  const int to = static_cast<int>(get_u32(tail + 4));
  Nonce nonce_c;
  Mac mac;
  std::memcpy(nonce_c.data(), tail + 8, nonce_c.size());
  std::memcpy(mac.data(), tail + 8 + nonce_c.size(), mac.size());
  if (group != self.group || to != self.rank || from <= self.rank || from >= world_size) {
    refuse(self, p, "wrong group or rank (group '" + group + "', from " + std::to_string(from) +
                        " to " + std::to_string(to) + ")");
    return std::nullopt;
  }
  if (!mac_equal(mac, proof(self.token, "connect", group, from, to, self.address, p.nonce, nonce_c))) {
    refuse(self, p, "the job token did not match (or the connection was relayed)");
    return std::nullopt;
  }
  std::vector<uint8_t> reply(1, 1);
  const Mac mine = proof(self.token, "accept", group, from, to, self.address, p.nonce, nonce_c);
  reply.insert(reply.end(), mine.begin(), mine.end());
  try {
    write_all(p.socket.fd(), reply.data(), reply.size(),
              Clock::now() + std::chrono::milliseconds(500), "accepting");
  } catch (const Error& e) {
    refuse(self, p, e.what());
    return std::nullopt;
  }
  return from;
}

// Reads what arrived on a pending connection; returns the connector's rank once its hello is
// complete and checked, nullopt while more is due or after refusing (socket closed).
std::optional<int> advance(const PairIdentity& self, Pending& p, int world_size) {
  try {
    for (;;) {
      if (p.in.size() >= kFixedHello) {
        if (get_u32(p.in.data()) != kMagic || get_u32(p.in.data() + 4) != kVersion ||
            get_u32(p.in.data() + 8) > kMaxGroupBytes) {
          refuse(self, p, "not a heft peer of link protocol version " + std::to_string(kVersion));
          return std::nullopt;
        }
      }
      const size_t want = p.wanted();
      if (p.in.size() == want) {
        return check_hello(self, p, world_size);
      }
      const size_t have = p.in.size();
      p.in.resize(want);
      const size_t n = read_some(p.socket.fd(), p.in.data() + have, want - have, "handshake");
      p.in.resize(have + n);
      if (n == 0) return std::nullopt;
    }
  } catch (const Error& e) {
    refuse(self, p, e.what());
    return std::nullopt;
  }
}

}  // namespace

Pair connect_pair(const PairIdentity& self, int peer, const std::string& address,
                  Deadline deadline) {
  const std::string what = "rank " + std::to_string(self.rank) + ": connecting to rank " +
                           std::to_string(peer) + " at " + address;
  const HostPort hp = parse_host_port(address, "peer address");
  Socket s = connect_until(hp.host, hp.port, deadline, what);
  Nonce nonce_a;
  read_exact(s.fd(), nonce_a.data(), nonce_a.size(), deadline, what);
  const Nonce nonce_c = random_nonce();
  std::vector<uint8_t> hello;
  put_u32(hello, kMagic);
  put_u32(hello, kVersion);
  put_u32(hello, static_cast<uint32_t>(self.group.size()));
  hello.insert(hello.end(), self.group.begin(), self.group.end());
  put_u32(hello, static_cast<uint32_t>(self.rank));
  put_u32(hello, static_cast<uint32_t>(peer));
  hello.insert(hello.end(), nonce_c.begin(), nonce_c.end());
  const Mac mac = proof(self.token, "connect", self.group, self.rank, peer, address, nonce_a, nonce_c);
  hello.insert(hello.end(), mac.begin(), mac.end());
  write_all(s.fd(), hello.data(), hello.size(), deadline, what);
  uint8_t status = 0;
  read_exact(s.fd(), &status, 1, deadline, what);
  if (status != 1)
    throw IoError(what + ": the peer refused the connection (job token or group mismatch)");
  Mac theirs;
  read_exact(s.fd(), theirs.data(), theirs.size(), deadline, what);
  if (!mac_equal(theirs, proof(self.token, "accept", self.group, self.rank, peer, address, nonce_a, nonce_c)))
    throw IoError(what + ": the peer did not prove the job token: it is not rank " +
                  std::to_string(peer) + " of this job (an impersonation or a relay; see "
                  "docs/security.md)");
  return Pair(peer, std::move(s));
}

std::vector<Pair> accept_peers(const PairIdentity& self, const Socket& listener, int world_size,
                               Deadline deadline) {
  std::vector<Pair> pairs(static_cast<size_t>(world_size));
  int missing = world_size - 1 - self.rank;
  std::deque<Pending> pending;
  std::vector<pollfd> fds;
  while (missing > 0) {
    // Expired handshakes go; the rest wait together with the listener.
    const Deadline now = Clock::now();
    for (Pending& p : pending)
      if (p.socket.valid() && now >= p.until)
        refuse(self, p, "no handshake within " + std::to_string(kHandshakeWait.count()) + " s");
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Pending& p) { return !p.socket.valid(); }),
                  pending.end());
    fds.assign(1, pollfd{listener.fd(), POLLIN, 0});
    Deadline wake = deadline;
    for (const Pending& p : pending) {
      fds.push_back(pollfd{p.socket.fd(), POLLIN, 0});
      wake = std::min(wake, p.until);
    }
    const int left = millis_left(deadline);
    if (left == 0) {
      std::string ranks;
      for (int r = self.rank + 1; r < world_size; ++r)
        if (!pairs[static_cast<size_t>(r)].connected()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      throw Timeout("rank " + std::to_string(self.rank) + ": rank(s) " + ranks +
                    " did not connect before the deadline (group " + self.group + ")");
    }
    if (::poll(fds.data(), fds.size(), std::max(1, millis_left(wake))) < 0 && errno != EINTR)
      throw IoError("rank " + std::to_string(self.rank) + ": poll: " + std::strerror(errno));
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL))
      throw IoError("rank " + std::to_string(self.rank) + ": the peer listener was closed");
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Pending& p = pending[i - 1];
      const std::optional<int> from = advance(self, p, world_size);
      if (!from) continue;
      Pair& slot = pairs[static_cast<size_t>(*from)];
      if (slot.connected()) {
        refuse(self, p, "rank " + std::to_string(*from) + " is connected already");
        continue;
      }
      slot = Pair(*from, std::move(p.socket));
      --missing;
    }
    if (!(fds[0].revents & POLLIN)) continue;
    // Every connection waiting in the backlog, each sent its nonce at once.
    for (;;) {
      const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) break;
        throw IoError("rank " + std::to_string(self.rank) + ": accept: " + std::strerror(errno));
      }
      set_nodelay(fd);
      Pending p;
      p.socket = Socket(fd);
      p.from = peer_host(p.socket);
      p.nonce = random_nonce();
      p.until = Clock::now() + kHandshakeWait;
      pending.push_back(std::move(p));
      Pending& q = pending.back();
      try {
        if (write_some(q.socket.fd(), q.nonce.data(), q.nonce.size(), "handshake") != q.nonce.size())
          refuse(self, q, "cannot send the nonce at once");
      } catch (const Error& e) {
        refuse(self, q, e.what());
      }
      if (pending.size() > kMaxPendingHandshakes) {
        refuse(self, pending.front(), "more than " + std::to_string(kMaxPendingHandshakes) +
                                          " handshakes at once");
        pending.pop_front();
      }
    }
  }
  return pairs;
}

}  // namespace heft::comm::tcp
