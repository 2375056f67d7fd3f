// The web console (`heft console`): an HTTP server over the job database and the jobs'
// directories, serving one page (embedded: profile/console/) and a JSON API it polls:
//
//   POST /api/login                         `Authorization: Bearer TOKEN` -> a session cookie
//                                           (HttpOnly, SameSite=Strict); 401 for a wrong token
//   GET  /api/jobs                          jobs table (heft jobs --json) + tunings
//   GET  /api/jobs/NAME                     heft describe --json, findings included, and
//                                           "log_rank": the rank the page shows logs of first
//   GET  /api/jobs/NAME/metrics             {name: {rank: [[seconds, step, value], ...]}},
//                                           at most 1500 points a series (evenly thinned)
//   GET  /api/jobs/NAME/logs?rank=R&offset=N   {text, offset, size}; offset -1: the tail;
//                                           read through job/job_file.h within
//                                           limits.file_read_s: 409 for a log that is not a
//                                           regular file (a FIFO, a link), 503 past the deadline
//   GET  /api/jobs/NAME/diagnosis           profile/diagnosis.h as JSON
//   GET  /api/tunings/NAME                  the tuning record, each trial with its end time
//   POST /api/(jobs|tunings)/NAME/stop      stops it (403 under no_auth: read-only)
//
// Every /api/ request but the login needs the token, as `Authorization: Bearer TOKEN` or as
// the session cookie got from /api/login (401 otherwise); the page, its script, style and
// Chart.js load without it (they hold no data). Before any route runs, every request is
// checked: its Host must name this console (console_guard.h HostPolicy: 403 otherwise, so a
// page rebound to 127.0.0.1 reads nothing); a POST from another Origin gets 403; a body must
// declare a Content-Length of at most limits.max_body (411, 413 before reading it). Names in
// paths must be valid_console_name() (404). No response holds an environment value: every
// "environment" object is reduced to its names. Every response carries
// Content-Security-Policy (scripts from the console only, no framing), X-Content-Type-Options
// nosniff, X-Frame-Options DENY and Referrer-Policy no-referrer. Connections are bounded as
// console_http.h says.
//
// Chart.js comes from Debian's libjs-chart.js (/usr/share/javascript/chart.js). Every
// request opens its own database connection (readers never wait for writers).
//
// Deliberately left out: users and roles (one token: whoever has it may read and stop),
// writing anything but stops, logging out (the cookie ends with the browser session or when
// the console restarts: each start makes a new session secret).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace heft::profile {

// Bounds on what one client may cost the console (console_http.h applies them).
struct ConsoleLimits {
  size_t max_body = 64 << 10;          // request body bytes (the console's bodies are empty)
  size_t max_header_bytes = 16 << 10;  // request line and headers together
  int max_header_lines = 64;           // request line and headers together
  double request_timeout_s = 10;       // from a worker taking the connection to the request's
                                       // last byte (slow clients are cut off)
  int io_timeout_s = 5;                // each read or write wait
  double file_read_s = 2;              // a request's deadline on reading a job's file (a log):
                                       // past it, 503 (job/job_file.h never waits on a FIFO;
                                       // this bounds a slow disk or network filesystem)
  int workers = 64;                    // threads serving connections, one request each
};

struct ConsoleOptions {
  std::string home;                // $HEFT_HOME
  std::string host = "127.0.0.1";  // never wider than asked
  int port = 8686;                 // 0: any free port
  // The secret of every /api/ request (at least 16 characters). Empty only with no_auth.
  std::string token;
  // Serve without a token, read-only (no stops): refused unless `host` is loopback.
  bool no_auth = false;
  // Host names answered besides localhost, 127.0.0.1, ::1 and `host` (--allow-host).
  std::vector<std::string> allow_hosts;
  // PEM files: both given, the console serves HTTPS (httplib's SSLServer); neither, HTTP.
  std::string tls_cert, tls_key;
  ConsoleLimits limits;
  std::string chart_js = "/usr/share/javascript/chart.js/chart.min.js";
  // The tuning jobs (the tune layer's records), given by the command that starts the console.
  std::function<std::vector<nlohmann::json>()> list_tunings;
  std::function<std::optional<nlohmann::json>(const std::string&)> read_tuning;
  std::function<bool(const std::string&)> stop_tuning;
};

class ConsoleServer {
 public:
  // Throws heft::InvalidArgument (naming the option) for no_auth beyond loopback, a missing
  // or short token, half a TLS pair or TLS files that do not load.
  explicit ConsoleServer(ConsoleOptions options);
  ~ConsoleServer();
  // Binds; throws heft::IoError naming the address when it cannot. Returns the port.
  int bind();
  // The URL to open: scheme, host and port, and `?token=` unless no_auth. After bind().
  std::string url() const;
  // Serves until stop() (from another thread or a signal handler's thread).
  void serve();
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The embedded page files by name ("index.html", "app.js", "style.css"); nullptr if none.
const std::string* console_asset(const std::string& name);

}  // namespace heft::profile
