// The web console (`heft console`): an HTTP server over the job database and the jobs'
// directories, serving one page (embedded: profile/console/) and a JSON API it polls:
//
//   GET  /api/jobs                          jobs table (heft jobs --json) + tunings
//   GET  /api/jobs/NAME                     heft describe --json, findings included
//   GET  /api/jobs/NAME/metrics             {name: {rank: [[seconds, step, value], ...]}},
//                                           at most 1500 points a series (evenly thinned)
//   GET  /api/jobs/NAME/logs?rank=R&offset=N   {text, offset, size}; offset -1: the tail
//   GET  /api/jobs/NAME/diagnosis           profile/diagnosis.h as JSON
//   GET  /api/tunings/NAME                  the tuning record, each trial with its end time
//   POST /api/jobs/NAME/stop                only with `Authorization: Bearer TOKEN` when the
//                                           console was given a token; 403 otherwise
//
// Chart.js comes from Debian's libjs-chart.js (/usr/share/javascript/chart.js). Every
// request opens its own database connection (readers never wait for writers).
//
// Deliberately left out: TLS, users and sessions (one token), writing anything but stops.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace heft::profile {

struct ConsoleOptions {
  std::string home;                // $HEFT_HOME
  std::string host = "127.0.0.1";  // never wider than asked
  int port = 8686;                 // 0: any free port
  std::string token;               // empty: read-only
  std::string chart_js = "/usr/share/javascript/chart.js/chart.min.js";
  // The tuning jobs (the tune layer's records), given by the command that starts the console.
  std::function<std::vector<nlohmann::json>()> list_tunings;
  std::function<std::optional<nlohmann::json>(const std::string&)> read_tuning;
  std::function<bool(const std::string&)> stop_tuning;
};

class ConsoleServer {
 public:
  explicit ConsoleServer(ConsoleOptions options);
  ~ConsoleServer();
  // Binds; throws heft::IoError naming the address when it cannot. Returns the port.
  int bind();
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
