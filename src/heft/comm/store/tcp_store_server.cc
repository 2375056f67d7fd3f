// TcpStoreServer: the server half of the store over TCP (tcp_store.h); the bytes are in
// docs/store-protocol.md and store_wire.h.
//
// Terms. A *frame* is one request (u8 opcode, u32 body length, body) or one response (u8
// status, u32 body length, body); integers are little-endian. The server runs one *event
// loop* on its thread: poll() over a wake eventfd, the listener and every *connection*. A
// connection starts in *hello* (nonces and MACs are exchanged; nothing is served) and moves
// to *serving* once the client proved the token, or to *closing* (flush the last reply,
// then close). A get or wait whose keys are missing is *parked* on its connection with the
// deadline the client sent; every set and add re-checks the parked requests, and the loop
// answers those whose deadline passed with status TIMEOUT, so the client stays in sync.
// A connection reads and answers one frame at a time and holds at most one reply, so a
// client that is slow or stops reading only stalls itself. Each stored key is *charged* to
// the connection that last wrote it (key and value bytes); a write that would take its
// writer's charge over max_client_bytes, or all charges over max_total_bytes, is refused.
// Deliberately left out: TLS, request pipelining, a limit on the number of connections.

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
#include <unordered_map>
#include <utility>

#include "heft/comm/auth.h"
#include "heft/comm/refusal_log.h"
#include "heft/comm/store/memory_store.h"
#include "heft/comm/store/store_wire.h"
#include "heft/comm/transport/tcp/socket.h"
#include "heft/error.h"

namespace heft::comm {

using namespace wire;

// ---- server --------------------------------------------------------------------------

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions options);
  ~Impl();
  int port() const { return port_; }
  const std::string& address() const { return address_; }
  int refused() const { return refused_.load(); }
  std::optional<std::string> peek(const std::string& key) {
    std::optional<Bytes> v = data_.try_get(key);
    if (!v) return std::nullopt;
    return std::string(v->begin(), v->end());
  }

 private:
  enum class State { kHello, kServing, kClosing, kDead };
  struct Parked {
    uint8_t op;
    std::vector<std::string> keys;
    Deadline deadline;
    // keys[0, present) existed when last looked at: each set or add looks at one key of a
    // parked request, so a request of many keys costs the others O(1) per change, not
    // O(keys) (a deleted key is caught by the full check before answering).
    size_t present = 0;
  };
  struct Conn {
    uint64_t id = 0;  // charges_ and held_ name connections by it
    tcp::Socket sock;
    std::string peer;
    State state = State::kHello;
    Nonce nonce{};
    Deadline hello_deadline;
    Bytes in;   // received, not yet handled
    Bytes out;  // the reply being sent
    size_t out_sent = 0;
    std::optional<Parked> parked;
  };

  void run();
  void loop_once();
  int poll_timeout_ms() const;
  void accept_new();
  void read_from(Conn& c);
  void flush(Conn& c);
  void serve(Conn& c);
  void finish_hello(Conn& c);
  void handle_frame(Conn& c, uint8_t op, Decoder& d);
  void park_or_answer(Conn& c, Parked p);
  bool try_answer(Conn& c);
  void wake_parked();
  void expire(Deadline now);
  void reply(Conn& c, uint8_t status, const uint8_t* body, size_t n);
  void reply(Conn& c, uint8_t status, const Bytes& body) {
    reply(c, status, body.data(), body.size());
  }
  void reply_text(Conn& c, uint8_t status, const std::string& text) {
    reply(c, status, reinterpret_cast<const uint8_t*>(text.data()), text.size());
  }
  bool has_ready_frame(const Conn& c) const;
  // Throws InvalidArgument where charging `key` (`bytes` of key and value) to c would pass a
  // limit; charge() then moves the key's charge to c from its previous writer.
  void check_charge(const Conn& c, const std::string& key, size_t bytes);
  void charge(const Conn& c, const std::string& key, size_t bytes);
  void refund(const std::string& key);
  void release(uint64_t conn, size_t bytes);  // conn holds `bytes` fewer

  const std::string token_;
  tcp::Socket listener_;
  tcp::Socket wake_;  // eventfd; the destructor writes it to end the loop
  int port_ = 0;
  std::string address_;
  std::atomic<int> refused_{0};
  std::atomic<bool> stop_{false};
  // Touched by the loop thread only.
  MemoryStore data_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<pollfd> fds_;
  Deadline accept_paused_until_{};
  const size_t max_client_bytes_;
  const size_t max_total_bytes_;
  struct Charge {
    uint64_t conn = 0;
    size_t bytes = 0;
  };
  std::unordered_map<std::string, Charge> charges_;  // by key
  std::unordered_map<uint64_t, size_t> held_;        // by connection id: bytes it is charged
  size_t total_bytes_ = 0;
  uint64_t next_conn_id_ = 1;
  std::thread thread_;  // last: starts once everything above exists
};

TcpStoreServer::Impl::Impl(TcpStoreServerOptions options)
    : token_(std::move(options.token)),
      listener_(tcp::listen_on(options.bind_address, options.port)),
      wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      max_client_bytes_(options.max_client_bytes),
      max_total_bytes_(options.max_total_bytes) {
  if (!wake_.valid()) throw IoError("store server: eventfd: " + errno_string(errno));
  port_ = tcp::local_port(listener_);
  address_ = tcp::local_host(listener_);
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::Impl::~Impl() {
  stop_ = true;
  uint64_t one = 1;
  ssize_t rc = ::write(wake_.fd(), &one, sizeof(one));
  (void)rc;  // a full eventfd counter already wakes the loop
  thread_.join();
}

void TcpStoreServer::Impl::run() {
  try {
    while (!stop_) loop_once();
  } catch (const std::exception& e) {
    spdlog::error("store server on {}:{} stopped serving: {}", address_, port_, e.what());
  }
  conns_.clear();  // closes every connection: their clients see PeerLost
}

void TcpStoreServer::Impl::loop_once() {
  fds_.assign({{wake_.fd(), POLLIN, 0}, {listener_.fd(), 0, 0}});
  if (Clock::now() >= accept_paused_until_) fds_[1].events = POLLIN;
  for (const auto& c : conns_) {
    short ev = 0;
    if (c->state == State::kHello) ev = c->in.size() < kClientHelloBytes ? POLLIN : 0;
    if (c->state == State::kServing && c->in.size() < kHeaderBytes + kMaxBodyBytes) ev = POLLIN;
    if (c->out_sent < c->out.size()) ev |= POLLOUT;
    fds_.push_back({c->sock.fd(), ev, 0});
  }
  int n = ::poll(fds_.data(), fds_.size(), poll_timeout_ms());
  if (n < 0 && errno != EINTR) throw IoError("poll: " + errno_string(errno));
  if (stop_) return;
  const size_t known = conns_.size();  // accept_new appends after these
  if (n > 0 && (fds_[1].revents & POLLIN)) accept_new();
  for (size_t i = 0; i < known; ++i) {
    Conn& c = *conns_[i];
    short rev = n > 0 ? fds_[2 + i].revents : 0;
    try {
      if (rev & (POLLIN | POLLHUP | POLLERR)) read_from(c);
      if (rev & POLLOUT) flush(c);
    } catch (const IoError&) {
      c.state = State::kDead;  // closed, reset or failed: nothing more to say to it
    }
  }
  expire(Clock::now());
  for (auto& c : conns_) serve(*c);
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                              [](const auto& c) { return c->state == State::kDead; }),
               conns_.end());
}

int TcpStoreServer::Impl::poll_timeout_ms() const {
  std::optional<Deadline> next;
  auto consider = [&](Deadline d) { next = next ? std::min(*next, d) : d; };
  if (Clock::now() < accept_paused_until_) consider(accept_paused_until_);
  for (const auto& c : conns_) {
    if (has_ready_frame(*c)) return 0;
    if (c->state == State::kHello) consider(c->hello_deadline);
    if (c->parked) consider(c->parked->deadline);
  }
  if (!next) return -1;
  // Round up so that the loop does not spin through the last fraction of a millisecond.
  return tcp::millis_left(*next + std::chrono::microseconds(999));
}

void TcpStoreServer::Impl::accept_new() {
  for (;;) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        spdlog::warn("store server: cannot accept ({}); pausing 100 ms", errno_string(errno));
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      }
      return;  // EAGAIN, or nothing useful to do until the pause ends
    }
    auto c = std::make_unique<Conn>();
    c->id = next_conn_id_++;
    c->sock = tcp::Socket(fd);
    tcp::set_nodelay(fd);
    c->peer = tcp::peer_host(c->sock);
    c->nonce = random_nonce();
    c->hello_deadline = Clock::now() + kHelloTimeout;
    Encoder hello;
    hello.raw(kServerMagic, 4);
    hello.u8(kVersion);
    hello.raw(c->nonce.data(), c->nonce.size());
    c->out = hello.take();
    conns_.push_back(std::move(c));
  }
}

void TcpStoreServer::Impl::read_from(Conn& c) {
  // Bounded per event so that one busy client cannot starve the loop.
  for (size_t total = 0; total < (size_t{1} << 20);) {
    size_t want = c.state == State::kHello ? kClientHelloBytes - c.in.size() : 64 * 1024;
    if (c.state == State::kClosing || c.state == State::kDead || want == 0) return;
    const size_t old = c.in.size();
    c.in.resize(old + want);
    size_t got = tcp::read_some(c.sock.fd(), c.in.data() + old, want, "store server");
    c.in.resize(old + got);
    if (got < want) return;
    total += got;
  }
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (c.out_sent < c.out.size()) {
    size_t n = tcp::write_some(c.sock.fd(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                               "store server");
    if (n == 0) return;  // POLLOUT will bring us back
    c.out_sent += n;
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.state == State::kClosing) c.state = State::kDead;
}

bool TcpStoreServer::Impl::has_ready_frame(const Conn& c) const {
  if (!c.out.empty()) return false;  // one reply at a time, the server hello included
  if (c.state == State::kHello) return c.in.size() == kClientHelloBytes;
  if (c.state != State::kServing || c.parked) return false;
  if (c.in.size() < kHeaderBytes) return false;
  uint32_t n = body_length(c.in.data());
  return n > kMaxBodyBytes || c.in.size() >= kHeaderBytes + n;
}

void TcpStoreServer::Impl::serve(Conn& c) {
  try {
    while (has_ready_frame(c)) {
      if (c.state == State::kHello) {
        finish_hello(c);
        continue;
      }
      uint32_t n = body_length(c.in.data());
      if (n > kMaxBodyBytes)
        throw BadFrame("frame body of " + std::to_string(n) + " bytes exceeds the limit");
      Decoder d(c.in.data() + kHeaderBytes, n);
      handle_frame(c, c.in[0], d);
      c.in.erase(c.in.begin(), c.in.begin() + kHeaderBytes + n);
    }
    flush(c);
  } catch (const BadFrame& e) {
    spdlog::warn("store server: closing connection from {}: malformed request ({})", c.peer,
                 e.what());
    c.in.clear();
    c.parked.reset();
    reply_text(c, kBadRequest, e.what());
    c.state = State::kClosing;  // the loop flushes the reply, then closes
  } catch (const IoError&) {
    c.state = State::kDead;
  } catch (const std::exception& e) {
    spdlog::error("store server: dropping connection from {}: {}", c.peer, e.what());
    c.state = State::kDead;
  }
}

void TcpStoreServer::Impl::finish_hello(Conn& c) {
  const uint8_t* hello = c.in.data();  // magic[4] version mac[32] nonce[32]
  const bool greeting_ok = std::memcmp(hello, kClientMagic, 4) == 0 && hello[4] == kVersion;
  Mac mac;
  Nonce client_nonce;
  std::memcpy(mac.data(), hello + 5, kMacBytes);
  std::memcpy(client_nonce.data(), hello + 5 + kMacBytes, kNonceBytes);
  c.in.clear();
  if (!greeting_ok) {
    log_refused("store server", c.peer,
                "not a heft store client of protocol version " + std::to_string(kVersion));
    c.out.assign(1, kBadRequest);
    c.state = State::kClosing;
    return;
  }
  if (!mac_equal(mac, auth_mac(token_, kClientContext, c.nonce))) {
    ++refused_;
    log_refused("store server", c.peer, "wrong job token");
    c.out.assign(1, kRefused);
    c.state = State::kClosing;
    return;
  }
  Mac proof = auth_mac(token_, kServerContext, client_nonce);
  c.out.assign(1, kOk);
  c.out.insert(c.out.end(), proof.begin(), proof.end());
  c.state = State::kServing;
}

void TcpStoreServer::Impl::handle_frame(Conn& c, uint8_t op, Decoder& d) {
  try {
    switch (op) {
      case kSet: {
        std::string key = d.str();
        Bytes value = d.blob();
        d.finish();
        check_charge(c, key, key.size() + value.size());
        data_.set(key, value);
        charge(c, key, key.size() + value.size());
        reply(c, kOk, nullptr, 0);
        wake_parked();
        return;
      }
      case kGet:
      case kWait: {
        uint64_t ms = d.u64();
        std::vector<std::string> keys = op == kGet ? std::vector<std::string>{d.str()} : d.keys();
        d.finish();
        data_.missing(keys);  // validates the keys before parking
        Millis t(static_cast<int64_t>(std::min<uint64_t>(ms, kMaxWait.count())));
        park_or_answer(c, Parked{op, std::move(keys), after(t)});
        return;
      }
      case kAdd: {
        std::string key = d.str();
        int64_t delta = static_cast<int64_t>(d.u64());
        d.finish();
        constexpr size_t kCounterBytes = 20;  // the decimal text of any int64
        check_charge(c, key, key.size() + kCounterBytes);
        Encoder e;
        e.u64(static_cast<uint64_t>(data_.add(key, delta)));
        charge(c, key, key.size() + kCounterBytes);
        reply(c, kOk, e.take());
        wake_parked();
        return;
      }
      case kCheck: {
        std::vector<std::string> keys = d.keys();
        d.finish();
        uint8_t all = data_.check(keys) ? 1 : 0;
        reply(c, kOk, &all, 1);
        return;
      }
      case kDelete: {
        std::string key = d.str();
        d.finish();
        uint8_t existed = data_.delete_key(key) ? 1 : 0;
        if (existed) refund(key);
        reply(c, kOk, &existed, 1);
        return;
      }
      default:
        throw BadFrame("unknown opcode " + std::to_string(op));
    }
  } catch (const InvalidArgument& e) {
    reply_text(c, kInvalid, e.what());
  }
}

void TcpStoreServer::Impl::check_charge(const Conn& c, const std::string& key, size_t bytes) {
  auto it = charges_.find(key);
  const Charge old = it == charges_.end() ? Charge{} : it->second;
  auto held = held_.find(c.id);
  const size_t mine = (held == held_.end() ? 0 : held->second) -
                      (old.conn == c.id ? old.bytes : 0) + bytes;
  const size_t total = total_bytes_ - old.bytes + bytes;
  auto mib = [](size_t b) { return std::to_string(b >> 20) + " MiB"; };
  if (mine > max_client_bytes_)
    throw InvalidArgument("store: writing key '" + key + "' would take the values this client wrote to " +
                          std::to_string(mine) + " bytes, over the server's limit of " +
                          mib(max_client_bytes_) + " a client (TcpStoreServerOptions::max_client_bytes)");
  if (total > max_total_bytes_)
    throw InvalidArgument("store: writing key '" + key + "' would take the store to " +
                          std::to_string(total) + " bytes, over the server's limit of " +
                          mib(max_total_bytes_) + " (TcpStoreServerOptions::max_total_bytes)");
}

void TcpStoreServer::Impl::charge(const Conn& c, const std::string& key, size_t bytes) {
  Charge& slot = charges_[key];
  if (slot.conn) release(slot.conn, slot.bytes);
  total_bytes_ = total_bytes_ - slot.bytes + bytes;
  held_[c.id] += bytes;
  slot = Charge{c.id, bytes};
}

void TcpStoreServer::Impl::release(uint64_t conn, size_t bytes) {
  auto it = held_.find(conn);
  if ((it->second -= bytes) == 0) held_.erase(it);  // a connection that holds nothing: no entry
}

void TcpStoreServer::Impl::refund(const std::string& key) {
  auto it = charges_.find(key);
  if (it == charges_.end()) return;
  release(it->second.conn, it->second.bytes);
  total_bytes_ -= it->second.bytes;
  charges_.erase(it);
}

void TcpStoreServer::Impl::park_or_answer(Conn& c, Parked p) {
  c.parked = std::move(p);
  try_answer(c);
}

// Answers c's parked request if all its keys exist now; returns whether it did.
bool TcpStoreServer::Impl::try_answer(Conn& c) {
  if (!c.parked) return false;
  Parked& p = *c.parked;
  while (p.present < p.keys.size() && data_.check({p.keys[p.present]})) ++p.present;
  if (p.present < p.keys.size()) return false;
  if (!data_.missing(p.keys).empty()) {  // one was deleted meanwhile: look again from the start
    p.present = 0;
    return false;
  }
  if (c.parked->op == kGet)
    reply(c, kOk, *data_.try_get(c.parked->keys[0]));
  else
    reply(c, kOk, nullptr, 0);
  c.parked.reset();
  return true;
}

// The replies go out when the loop serves each connection, later in this same pass or
// (for connections served earlier in it) on the next one, which POLLOUT makes immediate.
void TcpStoreServer::Impl::wake_parked() {
  for (auto& c : conns_)
    if (c->state == State::kServing) try_answer(*c);
}

void TcpStoreServer::Impl::expire(Deadline now) {
  for (auto& c : conns_) {
    if (c->state == State::kHello && now >= c->hello_deadline) {
      log_refused("store server", c->peer,
                  "no hello within " + std::to_string(kHelloTimeout.count() / 1000) + " s");
      c->state = State::kDead;
    }
    if (c->state != State::kServing || !c->parked || now < c->parked->deadline) continue;
    Encoder e;
    e.keys(data_.missing(c->parked->keys));
    c->parked.reset();
    reply(*c, kTimedOut, e.take());
  }
}

void TcpStoreServer::Impl::reply(Conn& c, uint8_t status, const uint8_t* body, size_t n) {
  Encoder e;
  e.begin(status);
  e.raw(body, n);
  c.out = e.finish();
  c.out_sent = 0;
}

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) {
  if (options.token.empty()) throw InvalidArgument("store server: the job token must not be empty");
  impl_ = std::make_unique<Impl>(std::move(options));
}

TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return impl_->port(); }
const std::string& TcpStoreServer::address() const { return impl_->address(); }
int TcpStoreServer::refused_connections() const { return impl_->refused(); }

std::optional<std::string> TcpStoreServer::peek(const std::string& key) const {
  return impl_->peek(key);
}

}  // namespace heft::comm
