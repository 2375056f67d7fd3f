// TcpStoreServer and TcpStore: the store over TCP. The bytes are in docs/store-protocol.md.
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
// client that is slow or stops reading only stalls itself.
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
#include <utility>

#include "heft/comm/auth.h"
#include "heft/comm/store/memory_store.h"
#include "heft/comm/transport/tcp/socket.h"
#include "heft/error.h"

namespace heft::comm {

namespace {

using tcp::Clock;
using tcp::Deadline;

constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxValueBytes = size_t{64} << 20;
constexpr size_t kMaxBodyBytes = kMaxValueBytes + 64 * 1024;
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

Deadline after(Millis t) { return Clock::now() + std::clamp(t, Millis(0), kMaxWait); }

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

uint32_t body_length(const uint8_t* header) { return Decoder(header + 1, 4).u32(); }

std::string quoted(const std::vector<std::string>& keys) {
  std::string s = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  return s;
}

}  // namespace

// ---- server --------------------------------------------------------------------------

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions options);
  ~Impl();
  int port() const { return port_; }
  const std::string& address() const { return address_; }
  int refused() const { return refused_.load(); }

 private:
  enum class State { kHello, kServing, kClosing, kDead };
  struct Parked {
    uint8_t op;
    std::vector<std::string> keys;
    Deadline deadline;
  };
  struct Conn {
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
  std::thread thread_;  // last: starts once everything above exists
};

TcpStoreServer::Impl::Impl(TcpStoreServerOptions options)
    : token_(std::move(options.token)),
      listener_(tcp::listen_on(options.bind_address, options.port)),
      wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
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
    spdlog::warn(
        "store server: closing connection from {}: not a heft store client of "
        "protocol version {}",
        c.peer, kVersion);
    c.out.assign(1, kBadRequest);
    c.state = State::kClosing;
    return;
  }
  if (!mac_equal(mac, auth_mac(token_, kClientContext, c.nonce))) {
    ++refused_;
    spdlog::warn("store server: refused connection from {}: wrong job token", c.peer);
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
        data_.set(key, value);
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
        Encoder e;
        e.u64(static_cast<uint64_t>(data_.add(key, delta)));
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

void TcpStoreServer::Impl::park_or_answer(Conn& c, Parked p) {
  c.parked = std::move(p);
  try_answer(c);
}

// Answers c's parked request if all its keys exist now; returns whether it did.
bool TcpStoreServer::Impl::try_answer(Conn& c) {
  if (!c.parked || !data_.missing(c.parked->keys).empty()) return false;
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
      spdlog::warn("store server: dropping connection from {}: no hello within {} s", c->peer,
                   kHelloTimeout.count() / 1000);
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

// ---- client --------------------------------------------------------------------------

namespace {

void check_key(const std::string& key, const char* verb) {
  if (key.empty()) throw InvalidArgument(std::string("store ") + verb + ": empty key");
  if (key.size() > kMaxKeyBytes)
    throw InvalidArgument(std::string("store ") + verb + ": key of " + std::to_string(key.size()) +
                          " bytes, at most 4096 allowed");
}

void check_keys(const std::vector<std::string>& keys, const char* verb) {
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
