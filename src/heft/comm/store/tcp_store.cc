// TcpStore: the client half of the store over TCP (tcp_store.h). One connection, one
// request at a time under a mutex; the handshake proves the token both ways. The bytes are
// in docs/store-protocol.md and store_wire.h.
// Deliberately left out: reconnecting (a lost server is PeerLost for good), pipelining.

#include "heft/comm/store/tcp_store.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "heft/comm/auth.h"
#include "heft/comm/store/memory_store.h"
#include "heft/comm/store/store_wire.h"
#include "heft/comm/transport/tcp/socket.h"
#include "heft/error.h"

namespace heft::comm {

using namespace wire;

// ---- client --------------------------------------------------------------------------

namespace {

void check_key(const std::string& key, const char* verb) {
  if (key.empty()) throw InvalidArgument(std::string("store ") + verb + ": empty key");
  if (key.size() > kMaxKeyBytes)
    throw InvalidArgument(std::string("store ") + verb + ": key of " + std::to_string(key.size()) +
                          " bytes, at most 4096 allowed");
}

void check_keys(const std::vector<std::string>& keys, const char* verb) {
  if (keys.size() > kMaxKeysPerRequest)
    throw InvalidArgument(std::string("store ") + verb + ": " + std::to_string(keys.size()) +
                          " keys in one request, at most " + std::to_string(kMaxKeysPerRequest) +
                          " allowed");
  for (const auto& k : keys) check_key(k, verb);
}

struct Response {
  uint8_t status = kOk;
  Bytes body;
};

}  // namespace

class TcpStore::Impl {
 public:
  Impl(const std::string& host, int port, const std::string& token, Millis connect_timeout);

  // Sends one request frame and returns the body of its OK response, holding the
  // connection meanwhile. `keys` names what the request is about and `timeout` is the
  // server-side wait, both for error messages. Other statuses throw what they stand for
  // (raise). A lost connection throws heft::PeerLost, no response by `deadline`
  // heft::Timeout; either leaves the connection unusable and every later call PeerLost.
  Bytes request(const char* verb, const Bytes& frame, Deadline deadline, const std::string& keys,
                Millis timeout);

  // The one-byte boolean body of a check or delete response.
  bool flag(const Bytes& body, const char* verb) const;

  const std::string& where() const { return where_; }
  const std::string& local_address() const { return local_address_; }

 private:
  void handshake(const std::string& token, Deadline deadline);
  Response call(const char* verb, const Bytes& frame, Deadline deadline, const std::string& keys);
  [[noreturn]] void raise(const char* verb, const std::string& keys, Millis timeout,
                          const Response& r);

  const std::string where_;  // "host:port" of the server
  std::string local_address_;
  std::mutex mu_;
  tcp::Socket sock_;    // guarded by mu_ after construction
  std::string broken_;  // guarded by mu_: why the connection is unusable; empty while fine
};

TcpStore::Impl::Impl(const std::string& host, int port, const std::string& token,
                     Millis connect_timeout)
    : where_(host + ":" + std::to_string(port)) {
  const Deadline deadline = after(connect_timeout);
  sock_ = tcp::connect_until(host, port, deadline, "store client");
  local_address_ = tcp::local_host(sock_);
  // A server that accepted is up; give the handshake a few seconds even if the connect
  // retries used up most of connect_timeout.
  handshake(token, std::max(deadline, after(std::chrono::seconds(10))));
}

void TcpStore::Impl::handshake(const std::string& token, Deadline deadline) {
  const std::string what = "store at " + where_;
  const int fd = sock_.fd();
  try {
    uint8_t hello[kServerHelloBytes];
    tcp::read_exact(fd, hello, sizeof(hello), deadline, what);
    if (std::memcmp(hello, kServerMagic, 4) != 0)
      throw Error(what + " is not a heft store (unexpected greeting)");
    if (hello[4] != kVersion)
      throw Error(what + " speaks store protocol version " + std::to_string(hello[4]) +
                  ", this client speaks " + std::to_string(kVersion));
    Nonce server_nonce;
    std::memcpy(server_nonce.data(), hello + 5, kNonceBytes);
    const Nonce client_nonce = random_nonce();
    Encoder e;
    e.raw(kClientMagic, 4);
    e.u8(kVersion);
    Mac mac = auth_mac(token, kClientContext, server_nonce);
    e.raw(mac.data(), mac.size());
    e.raw(client_nonce.data(), client_nonce.size());
    Bytes answer = e.take();
    tcp::write_all(fd, answer.data(), answer.size(), deadline, what);
    uint8_t verdict = 0;
    tcp::read_exact(fd, &verdict, 1, deadline, what);
    if (verdict == kRefused) throw Error(what + " refused the job token");
    if (verdict != kOk) throw Error(what + " rejected this client's hello");
    Mac proof;
    tcp::read_exact(fd, proof.data(), proof.size(), deadline, what);
    if (!mac_equal(proof, auth_mac(token, kServerContext, client_nonce)))
      throw Error(what + " could not prove it knows the job token; refusing to use it");
  } catch (const Timeout&) {
    throw Timeout("store connect: no handshake from " + what + " before the deadline");
  } catch (const tcp::ConnectionClosed& e) {
    throw PeerLost(-1, -1, "store connect",
                   what + " closed the connection during the handshake (" + e.what() + ")");
  }
}

Response TcpStore::Impl::call(const char* verb, const Bytes& frame, Deadline deadline,
                              const std::string& keys) {
  const std::string op = std::string("store ") + verb;
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty())
    throw PeerLost(-1, -1, op,
                   "the connection to the store at " + where_ +
                       " is unusable after an earlier failure: " + broken_);
  const std::string what = "connection to the store at " + where_;
  try {
    tcp::write_all(sock_.fd(), frame.data(), frame.size(), deadline, what);
    uint8_t header[kHeaderBytes];
    tcp::read_exact(sock_.fd(), header, sizeof(header), deadline, what);
    uint32_t n = body_length(header);
    if (n > kMaxBodyBytes)
      throw IoError(what + ": a response of " + std::to_string(n) + " bytes, over the limit");
    Response r{header[0], Bytes(n)};
    tcp::read_exact(sock_.fd(), r.body.data(), n, deadline, what);
    if (r.status == kBadRequest) broken_ = "the store rejected a request and hung up";
    return r;
  } catch (const Timeout&) {
    broken_ = "no answer to a " + op + " before its deadline";
    sock_.shutdown();
    throw Timeout(op + " of " + keys + ": no answer from the store at " + where_ +
                  " before the deadline");
  } catch (const IoError& e) {
    broken_ = e.what();
    sock_.shutdown();
    throw PeerLost(-1, -1, op, e.what());
  }
}

Bytes TcpStore::Impl::request(const char* verb, const Bytes& frame, Deadline deadline,
                              const std::string& keys, Millis timeout) {
  Response r = call(verb, frame, deadline, keys);
  if (r.status != kOk) raise(verb, keys, timeout, r);
  return std::move(r.body);
}

bool TcpStore::Impl::flag(const Bytes& body, const char* verb) const {
  if (body.size() != 1)
    throw Error("the store at " + where_ + " sent a malformed " + verb + " response");
  return body[0] != 0;
}

void TcpStore::Impl::raise(const char* verb, const std::string& keys, Millis timeout,
                           const Response& r) {
  const std::string op = std::string("store ") + verb;
  const std::string text(r.body.begin(), r.body.end());
  if (r.status == kTimedOut) {
    std::string missing = keys;
    try {
      Decoder d(r.body.data(), r.body.size());
      missing = quoted(d.keys());
    } catch (const BadFrame&) {
    }
    throw Timeout(op + ": " + missing + " not set within " + std::to_string(timeout.count()) +
                  " ms (store at " + where_ + ")");
  }
  if (r.status == kInvalid) throw InvalidArgument(text);
  if (r.status == kBadRequest)
    throw Error("the store at " + where_ + " rejected a " + op + " request: " + text);
  throw Error("the store at " + where_ + " answered " + op + " with unknown status " +
              std::to_string(r.status));
}

TcpStore::TcpStore(const std::string& host, int port, const std::string& token,
                   Millis connect_timeout)
    : impl_(std::make_unique<Impl>(host, port, token, connect_timeout)) {}

TcpStore::~TcpStore() = default;

std::unique_ptr<TcpStore> TcpStore::connect(const std::string& host_port, const std::string& token,
                                            Millis connect_timeout) {
  tcp::HostPort hp = tcp::parse_host_port(host_port, "store address");
  return std::make_unique<TcpStore>(hp.host, hp.port, token, connect_timeout);
}

std::string TcpStore::local_address() const { return impl_->local_address(); }

void TcpStore::set(const std::string& key, const Bytes& value) {
  check_key(key, "set");
  if (value.size() > kMaxValueBytes)
    throw InvalidArgument("store set: value of " + std::to_string(value.size()) +
                          " bytes for key '" + key + "', at most 64 MiB allowed");
  Encoder e;
  e.begin(kSet);
  e.str(key);
  e.blob(value);
  impl_->request("set", e.finish(), after(timeout()), quoted({key}), timeout());
}

Bytes TcpStore::get(const std::string& key, Millis timeout) {
  check_key(key, "get");
  timeout = std::clamp(timeout, Millis(0), kMaxWait);
  Encoder e;
  e.begin(kGet);
  e.u64(static_cast<uint64_t>(timeout.count()));
  e.str(key);
  return impl_->request("get", e.finish(), after(timeout + kReplyMargin), quoted({key}), timeout);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  check_key(key, "add");
  Encoder e;
  e.begin(kAdd);
  e.str(key);
  e.u64(static_cast<uint64_t>(delta));
  Bytes body = impl_->request("add", e.finish(), after(timeout()), quoted({key}), timeout());
  if (body.size() != 8)
    throw Error("the store at " + impl_->where() + " sent a malformed add response");
  return static_cast<int64_t>(Decoder(body.data(), 8).u64());
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  check_keys(keys, "check");
  Encoder e;
  e.begin(kCheck);
  e.keys(keys);
  return impl_->flag(impl_->request("check", e.finish(), after(timeout()), quoted(keys), timeout()),
                     "check");
}

bool TcpStore::delete_key(const std::string& key) {
  check_key(key, "delete");
  Encoder e;
  e.begin(kDelete);
  e.str(key);
  return impl_->flag(
      impl_->request("delete", e.finish(), after(timeout()), quoted({key}), timeout()), "delete");
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  check_keys(keys, "wait");
  timeout = std::clamp(timeout, Millis(0), kMaxWait);
  Encoder e;
  e.begin(kWait);
  e.u64(static_cast<uint64_t>(timeout.count()));
  e.keys(keys);
  impl_->request("wait", e.finish(), after(timeout + kReplyMargin), quoted(keys), timeout);
}

}  // namespace heft::comm
