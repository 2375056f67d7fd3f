#include "heft/comm/transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <thread>

namespace heft::comm::tcp {

int millis_left(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > INT_MAX ? INT_MAX : static_cast<int>(left.count());
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

HostPort parse_host_port(const std::string& text, const std::string& what) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw InvalidArgument(what + ": expected host:port, found '" + text + "'");
  HostPort hp;
  hp.host = text.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 0 || p > 65535)
    throw InvalidArgument(what + ": expected a port 0..65535 after ':', found '" + port + "'");
  hp.port = static_cast<int>(p);
  return hp;
}

namespace {

struct AddrInfo {
  addrinfo* head = nullptr;
  ~AddrInfo() {
    if (head) freeaddrinfo(head);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.head);
  if (rc != 0)
    throw IoError("cannot resolve '" + host + "': " + gai_strerror(rc));
}

std::string numeric_host(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "?";
  return host;
}

bool is_closed_errno(int e) { return e == ECONNRESET || e == EPIPE || e == ENOTCONN; }

}  // namespace

Socket listen_on(const std::string& host, int port, int backlog) {
  AddrInfo ai;
  resolve(host, port, true, ai);
  int last_errno = 0;
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), backlog) == 0)
      return s;
    last_errno = errno;
  }
  throw IoError("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                errno_string(last_errno));
}

int local_port(const Socket& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw IoError("getsockname: " + errno_string(errno));
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

std::string local_host(const Socket& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw IoError("getsockname: " + errno_string(errno));
  return numeric_host(ss, len);
}

std::string peer_host(const Socket& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return numeric_host(ss, len) + ":" +
         std::to_string(ss.ss_family == AF_INET
                            ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                            : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port));
}

Socket accept_until(const Socket& listener, Deadline deadline, const std::string& what) {
  for (;;) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return Socket(fd);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      throw IoError(what + ": accept: " + errno_string(errno));
    pollfd p{listener.fd(), POLLIN, 0};
    int left = millis_left(deadline);
    if (left == 0) throw Timeout(what + ": no connection arrived before the deadline");
    ::poll(&p, 1, left);
  }
}

Socket connect_until(const std::string& host, int port, Deadline deadline,
                     const std::string& what) {
  const std::string addr = host + ":" + std::to_string(port);
  std::string last = "no address";
  for (int attempt = 0;; ++attempt) {
    AddrInfo ai;
    resolve(host, port, false, ai);
    for (addrinfo* a = ai.head; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!s.valid()) continue;
      int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s.fd(), POLLOUT, 0};
        int n = ::poll(&p, 1, std::max(1, millis_left(deadline)));
        if (n <= 0) {
          last = "connect timed out";
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        set_nodelay(s.fd());
        return s;
      }
      last = errno_string(errno);
    }
    if (millis_left(deadline) == 0)
      throw Timeout(what + ": cannot connect to " + addr + " before the deadline (" + last + ")");
    // Back off gently: 2, 4, ... up to 100 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, 2 << std::min(attempt, 6))));
  }
}

size_t write_some(int fd, const void* data, size_t n, const std::string& what) {
  if (n == 0) return 0;
  for (;;) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return static_cast<size_t>(w);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (is_closed_errno(errno)) throw ConnectionClosed(what + ": connection closed by peer");
    throw IoError(what + ": send: " + errno_string(errno));
  }
}

size_t read_some(int fd, void* data, size_t n, const std::string& what) {
  if (n == 0) return 0;
  for (;;) {
    ssize_t r = ::recv(fd, data, n, MSG_DONTWAIT);
    if (r > 0) return static_cast<size_t>(r);
    if (r == 0) throw ConnectionClosed(what + ": connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (is_closed_errno(errno)) throw ConnectionClosed(what + ": connection reset by peer");
    throw IoError(what + ": recv: " + errno_string(errno));
  }
}

namespace {
void wait_fd(int fd, short events, Deadline deadline, const std::string& what) {
  pollfd p{fd, events, 0};
  int left = millis_left(deadline);
  if (left == 0) throw Timeout(what + ": timed out");
  int rc = ::poll(&p, 1, left);
  if (rc < 0 && errno != EINTR) throw IoError(what + ": poll: " + errno_string(errno));
}
}  // namespace

void write_all(int fd, const void* data, size_t n, Deadline deadline, const std::string& what) {
  auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    size_t w = write_some(fd, p, n, what);
    p += w;
    n -= w;
    if (n > 0 && w == 0) wait_fd(fd, POLLOUT, deadline, what);
  }
}

void read_exact(int fd, void* data, size_t n, Deadline deadline, const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    size_t r = read_some(fd, p, n, what);
    p += r;
    n -= r;
    if (n > 0 && r == 0) wait_fd(fd, POLLIN, deadline, what);
  }
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_buffer_sizes(int fd, int bytes) {
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

}  // namespace heft::comm::tcp
