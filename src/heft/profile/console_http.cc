#include "heft/profile/console_http.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace heft::profile {

namespace {

using Clock = std::chrono::steady_clock;

// A socket read through a buffer, counting what it hands out: the request line and headers
// (up to the first empty line) against their size and line bounds, then the body against
// its size bound, all of it within the request's time bound. Any bound crossed makes read() fail, which httplib answers with
// 400 (headers) or by closing the connection.
class BoundedStream : public httplib::Stream {
 public:
  BoundedStream(int fd, const ConsoleLimits& limits)
      : fd_(fd), limits_(limits),
        deadline_(Clock::now() + std::chrono::milliseconds(
                                     static_cast<long>(limits.request_timeout_s * 1000))) {}

  bool is_readable() const override { return pos_ < len_ || wait(POLLIN, io_ms()); }
  bool is_writable() const override { return wait(POLLOUT, io_ms()); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (pos_ == len_) {
      if (!fill()) return -1;
      if (len_ == 0) return 0;  // the peer closed
    }
    size_t n = std::min(size, len_ - pos_);
    if (in_headers_) {
      for (size_t i = 0; i < n; ++i) {
        const char c = buf_[pos_ + i];
        tail_ = (tail_ << 8) | static_cast<unsigned char>(c);
        if (c == '\n') ++lines_;
        if (++header_bytes_ > limits_.max_header_bytes ||
            lines_ > static_cast<size_t>(limits_.max_header_lines) + 1)
          return -1;
        if (tail_ == 0x0d0a0d0a) {  // "\r\n\r\n": the headers end here
          in_headers_ = false;
          n = i + 1;
          break;
        }
      }
    } else {
      if (body_bytes_ + n > limits_.max_body) return -1;
      body_bytes_ += n;
    }
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!wait(POLLOUT, io_ms())) return -1;
      const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return -1;
      }
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(&getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(&getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  int io_ms() const { return limits_.io_timeout_s * 1000; }

  bool wait(short events, int ms) const {
    pollfd p{fd_, events, 0};
    int r;
    do r = ::poll(&p, 1, ms);
    while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
  }

  // Refills the buffer: false on an error or when a wait runs past its bound.
  bool fill() {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - Clock::now()).count();
    if (left <= 0) return false;
    if (!wait(POLLIN, static_cast<int>(std::min<long long>(io_ms(), left)))) return false;
    ssize_t n;
    do n = ::recv(fd_, buf_, sizeof buf_, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) return false;
    pos_ = 0;
    len_ = static_cast<size_t>(n);
    return true;
  }

  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  int fd_;
  const ConsoleLimits& limits_;
  Clock::time_point deadline_;  // the whole request is read by then
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  bool in_headers_ = true;
  uint32_t tail_ = 0;
  size_t header_bytes_ = 0, lines_ = 0, body_bytes_ = 0;
};

}  // namespace

BoundedServer::BoundedServer(const ConsoleLimits& limits) : limits_(limits) {
  apply_limits(*this, limits);
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  bool ok = false;
  {
    BoundedStream stream(sock, limits_);
    bool closed = false;
    if (svr_sock_ != INVALID_SOCKET) ok = process_request(stream, true, closed, nullptr);
  }
  // Half-close, then discard what the client still sends for a moment (a refused body's
  // bytes; at most 64 KiB and 1 s): closing with unread input would reset the connection
  // and could lose the answer.
  ::shutdown(sock, SHUT_WR);
  char sink[4096];
  size_t drained = 0;
  pollfd p{sock, POLLIN, 0};
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (drained < (64u << 10) && Clock::now() < until && ::poll(&p, 1, 100) > 0) {
    const ssize_t n = ::recv(sock, sink, sizeof sink, 0);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  ::close(sock);
  return ok;
}

void BoundedServer::widen_backlog() {
  if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, std::max(128, 2 * limits_.workers));
}

void apply_limits(httplib::Server& server, const ConsoleLimits& limits) {
  server.set_payload_max_length(limits.max_body);
  server.set_read_timeout(limits.io_timeout_s, 0);
  server.set_write_timeout(limits.io_timeout_s, 0);
  server.set_keep_alive_max_count(1);
  const size_t workers = static_cast<size_t>(std::max(1, limits.workers));
  server.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
}

}  // namespace heft::profile
