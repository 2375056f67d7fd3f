// TCP socket plumbing shared by the store and the TCP transport: an owning fd, listening,
// connecting with retry, and whole-buffer reads and writes bounded by a deadline.
// All sockets are non-blocking and close-on-exec; writes never raise SIGPIPE.
// Deliberately left out: IPv6 name resolution beyond what getaddrinfo gives, TLS.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "heft/error.h"

namespace heft::comm::tcp {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Milliseconds left until `deadline` (0 when past), capped to fit poll()'s int.
int millis_left(Deadline deadline);

// The peer closed or reset the connection (EOF, ECONNRESET, EPIPE). Callers that know
// ranks turn it into heft::PeerLost.
class ConnectionClosed : public IoError {
 public:
  explicit ConnectionClosed(const std::string& msg) : IoError(msg) {}
};

// Owns a file descriptor; closes it on destruction. Movable, not copyable.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // shutdown(SHUT_RDWR): wakes a peer blocked on this connection without freeing the fd.
  void shutdown();

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  int port = 0;
};

// Parses "host:port" (port 0..65535). Throws heft::InvalidArgument naming `what` and the text.
HostPort parse_host_port(const std::string& text, const std::string& what);

// Binds and listens on host:port (port 0 = any free port). Throws heft::IoError naming the
// address.
Socket listen_on(const std::string& host, int port, int backlog = 256);

// The port / numeric host a bound or connected socket has locally.
int local_port(const Socket& s);
std::string local_host(const Socket& s);
std::string peer_host(const Socket& s);

// Accepts one connection, waiting until `deadline` (heft::Timeout naming `what`).
Socket accept_until(const Socket& listener, Deadline deadline, const std::string& what);

// Connects to host:port, retrying refused connections every few ms until `deadline`
// (then heft::Timeout naming `what` and the address). Sets TCP_NODELAY.
Socket connect_until(const std::string& host, int port, Deadline deadline,
                     const std::string& what);

// Writes / reads exactly n bytes, waiting with poll() up to `deadline`. Throws
// ConnectionClosed when the peer goes away, heft::Timeout at the deadline, heft::IoError on
// other failures; `what` is put in the message.
void write_all(int fd, const void* data, size_t n, Deadline deadline, const std::string& what);
void read_exact(int fd, void* data, size_t n, Deadline deadline, const std::string& what);

// One non-blocking attempt; returns bytes moved (0 when the call would block). Throws as
// above on EOF or error.
size_t write_some(int fd, const void* data, size_t n, const std::string& what);
size_t read_some(int fd, void* data, size_t n, const std::string& what);

void set_nodelay(int fd);
// Socket buffer sizes in bytes (the kernel may clamp or double them).
void set_buffer_sizes(int fd, int bytes);

}  // namespace heft::comm::tcp
