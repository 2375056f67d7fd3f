// The console's HTTP server: cpp-httplib's Server with bounds on what one connection may cost
// (console_server.cc registers the routes; this file only carries bytes).
//
// Debian's cpp-httplib (0.11) reads request headers without a count limit, waits on each
// byte for its read timeout only (a client sending one byte every 4 s holds a worker for
// ever), and reads a body over the payload limit to the end before refusing it. So
// BoundedServer reads each connection through its own Stream, which refuses:
//   - a request line plus headers longer than ConsoleLimits::max_header_bytes (console_server.h) or with more
//     than max_header_lines lines;
//   - a request (line, headers and body) not complete within request_timeout_s of a worker
//     taking the connection (slow clients);
//   - a body beyond max_body bytes (the routes' pre-check refuses a larger Content-Length
//     before reading any of it; this bound catches chunked bodies);
//   - any read or write that waits longer than io_timeout_s.
// Each connection serves one request (Connection: close), so a connection never holds a
// worker between requests, and `workers` threads serve connections (a queue beyond that).
//
// Left out: the same bounds over TLS. console_server.cc serves --tls-cert through httplib's
// SSLServer, which keeps the payload limit, timeouts and workers but not the header bounds,
// the request deadline or the wider backlog (this stream cannot wrap OpenSSL without linking
// libssl itself).
#pragma once

#include <httplib.h>

#include "heft/profile/console_server.h"

namespace heft::profile {

// A cpp-httplib Server that applies `limits` to every connection (see above). Routes,
// handlers and binding are httplib's. Thread-safe as httplib::Server is.
class BoundedServer : public httplib::Server {
 public:
  explicit BoundedServer(const ConsoleLimits& limits);
  // After a bind: widens the listen backlog from httplib's 5 to twice `workers` (at least
  // 128), so that a burst of connections (64 page polls at once) is queued rather than
  // dropped and retried by the clients a second or more later.
  void widen_backlog();

 private:
  bool process_and_close_socket(socket_t sock) override;
  ConsoleLimits limits_;
};

// Applies the limits httplib can enforce itself (payload, timeouts, workers, one request a
// connection) to any httplib::Server, BoundedServer or SSLServer.
void apply_limits(httplib::Server& server, const ConsoleLimits& limits);

}  // namespace heft::profile
