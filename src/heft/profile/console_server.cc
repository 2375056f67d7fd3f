#include "heft/profile/console_server.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/stat.h>

#include "heft/error.h"
#include "heft/job/job_file.h"
#include "heft/job/record/job_db.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"
#include "heft/profile/console_guard.h"
#include "heft/profile/console_http.h"
#include "heft/profile/diagnosis.h"
#include "heft/profile/job_profiler.h"

namespace heft::profile {

namespace {

using job::unix_now;

void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  // Environment values may hold keys: no response carries one, whichever route built it.
  res.set_content(without_environment_values(j).dump(-1, ' ', false,
                                                     nlohmann::json::error_handler_t::replace),
                  "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

using Handled = httplib::Server::HandlerResponse;

// Sent with every response, errors included (httplib adds default headers to each).
httplib::Headers security_headers() {
  return {{"Content-Security-Policy",
           "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
          {"X-Content-Type-Options", "nosniff"},
          {"X-Frame-Options", "DENY"},
          {"Referrer-Policy", "no-referrer"},
          {"Cross-Origin-Resource-Policy", "same-origin"}};
}

std::unique_ptr<httplib::Server> make_server(const ConsoleOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty())
    throw InvalidArgument("heft console: --tls-cert and --tls-key go together (got only " +
                          std::string(o.tls_cert.empty() ? "--tls-key" : "--tls-cert") + ")");
  if (o.tls_cert.empty()) return std::make_unique<BoundedServer>(o.limits);
  auto server = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
  if (!server->is_valid())
    throw InvalidArgument("heft console: cannot load the TLS certificate " + o.tls_cert +
                          " and key " + o.tls_key + " (PEM files, the key unencrypted)");
  apply_limits(*server, o.limits);
  return server;
}

void check_options(const ConsoleOptions& o) {
  if (o.no_auth && !is_loopback_host(o.host))
    throw InvalidArgument("heft console: --no-auth is for a loopback address only (127.0.0.1, "
                          "::1, localhost), not --host " + o.host +
                          ": beyond this machine the console needs its token");
  if (!o.no_auth && o.token.size() < 16)
    throw InvalidArgument("heft console: the token must be at least 16 characters (got " +
                          std::to_string(o.token.size()) + ")");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// GET /api/jobs/NAME/metrics: {name: {rank: [[seconds since t0, step, value], ...]}} of the
// finite points, at most kMaxPoints a series (every k-th point and the last): a plot has no
// more pixels, and a long job's step series would be megabytes a poll.
nlohmann::json metric_series_json(const std::vector<job::MetricPoint>& points, double t0) {
  constexpr size_t kMaxPoints = 1500;
  std::map<std::string, std::map<int, std::vector<const job::MetricPoint*>>> series;
  for (const job::MetricPoint& p : points)
    if (std::isfinite(p.value)) series[p.name][p.rank].push_back(&p);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, ranks] : series)
    for (const auto& [rank, ps] : ranks) {
      const size_t stride = (ps.size() + kMaxPoints - 1) / kMaxPoints;
      nlohmann::json& v = out[name][std::to_string(rank)];
      for (size_t i = 0; i < ps.size(); ++i) {
        if (i % stride != 0 && i + 1 != ps.size()) continue;
        const job::MetricPoint& p = *ps[i];
        v.push_back({std::round((p.timestamp - t0) * 1000) / 1000,
                     p.step ? nlohmann::json(*p.step) : nlohmann::json(nullptr), p.value});
      }
    }
  return out;
}

// GET /api/jobs/NAME/logs: {text, offset, size} of the log at `path`, at most 64 KiB from
// `offset` (its last 16 KiB when offset < 0); offset is where the next read starts. Read
// through job/job_file.h by `deadline`; a missing log is an empty one.
job::JobFileRead log_window(const std::string& path, long long offset,
                            job::JobFileClock::time_point deadline) {
  constexpr size_t kMax = 64 << 10;
  constexpr size_t kTail = 16 << 10;
  job::JobFileRead read = offset < 0 ? job::read_job_file_tail(path, kTail, deadline)
                                     : job::read_job_file_range(path, static_cast<uint64_t>(offset),
                                                                kMax, deadline);
  if (read.status == job::JobFileStatus::kMissing) return job::JobFileRead{};
  return read;
}

// The HTTP status of a job file that could not be read: 409 for one that is not a regular
// file (the job's folder is not as heft left it), 503 for a read past its deadline.
int unread_status(const job::JobFileRead& read) {
  switch (read.status) {
    case job::JobFileStatus::kNotRegular: return 409;
    case job::JobFileStatus::kTimedOut: return 503;
    default: return 500;
  }
}

}  // namespace

class ConsoleServer::Impl {
 public:
  explicit Impl(ConsoleOptions o)
      : options_((check_options(o), std::move(o))),
        hosts_(options_.host, options_.allow_hosts),
        session_(random_token()),
        server_(make_server(options_)) {
    chart_js_ = read_file(options_.chart_js);
    server_->set_default_headers(security_headers());
    server_->set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return guard(req, res); });
    routes();
  }

  int bind() {
    if (options_.port == 0) {
      port_ = server_->bind_to_any_port(options_.host);
      if (port_ < 0) throw IoError("heft console: cannot listen on " + options_.host);
    } else if (server_->bind_to_port(options_.host, options_.port)) {
      port_ = options_.port;
    } else {
      throw IoError("heft console: cannot listen on " + options_.host + ":" +
                    std::to_string(options_.port) + " (in use? try --port 0 for any free port)");
    }
    if (auto* bounded = dynamic_cast<BoundedServer*>(server_.get())) bounded->widen_backlog();
    cookie_ = "heft_console_" + std::to_string(port_);  // cookies are shared across ports
    return port_;
  }
  std::string url() const {
    const std::string host = is_wildcard_host(options_.host) ? "localhost"
                             : options_.host.find(':') != std::string::npos
                                 ? "[" + options_.host + "]"
                                 : options_.host;
    return (options_.tls_cert.empty() ? "http://" : "https://") + host + ":" +
           std::to_string(port_) + "/" + (options_.no_auth ? "" : "?token=" + options_.token);
  }
  void serve() { server_->listen_after_bind(); }
  void stop() { server_->stop(); }

 private:
  bool authorized(const httplib::Request& req) const {
    if (options_.no_auth) return true;
    if (auto t = bearer_token(req.get_header_value("Authorization")))
      return secrets_equal(*t, options_.token);
    if (auto c = cookie_value(req.get_header_value("Cookie"), cookie_))
      return secrets_equal(*c, session_);
    return false;
  }

  // Runs before any route: Host, body size, Origin, then the token for /api/.
  Handled guard(const httplib::Request& req, httplib::Response& res) {
    const std::string host = req.get_header_value("Host");
    if (!hosts_.allows(host)) {
      send_error(res, 403, "Host '" + host.substr(0, 200) + "' is not a name of this console " +
                               "(start it with --allow-host NAME to answer NAME)");
      return Handled::Handled;
    }
    const bool reads = req.method == "GET" || req.method == "HEAD";
    const std::string length = req.get_header_value("Content-Length");
    if (req.has_header("Transfer-Encoding") || (!reads && length.empty())) {
      send_error(res, 411, "a request needs a Content-Length header (0 for no body), no "
                           "Transfer-Encoding");
      return Handled::Handled;
    }
    if (!length.empty() && (length.size() > 12 || length.find_first_not_of("0123456789") !=
                                                      std::string::npos ||
                            std::stoull(length) > options_.limits.max_body)) {
      send_error(res, 413, "a request body may hold at most " +
                               std::to_string(options_.limits.max_body) + " bytes");
      return Handled::Handled;
    }
    const std::string origin = req.get_header_value("Origin");
    if (!reads && ((!origin.empty() && !hosts_.allows_origin(origin, port_)) ||
                   req.get_header_value("Sec-Fetch-Site") == "cross-site")) {
      send_error(res, 403, "a request from another site (Origin '" + origin.substr(0, 200) +
                               "') may not change anything here");
      return Handled::Handled;
    }
    if (req.path.rfind("/api/", 0) == 0 && req.path != "/api/login" && !authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, 401, "the console needs its token: open the URL heft console printed, or "
                           "send Authorization: Bearer TOKEN");
      return Handled::Handled;
    }
    return Handled::Unhandled;
  }

  std::unique_ptr<job::JobDb> db() { return job::open_job_db(options_.home, false); }

  // The job named in the path, or an error response.
  std::optional<job::JobRecord> find(job::JobDb* db, const std::string& name,
                                     httplib::Response& res) {
    if (!valid_console_name(name)) {
      send_error(res, 404, "no job named '" + name.substr(0, 200) + "'");
      return std::nullopt;
    }
    if (!db) {
      send_error(res, 404, "no job named '" + name + "' (no job has run yet)");
      return std::nullopt;
    }
    heft::Result<job::JobRecord> j = db->find_job(name);
    if (!j.ok()) {
      send_error(res, 404, j.error());
      return std::nullopt;
    }
    return std::move(j).value();
  }

  void asset(const std::string& path, const std::string& name, const char* type) {
    server_->Get(path, [name, type](const httplib::Request&, httplib::Response& res) {
      const std::string* a = console_asset(name);
      if (!a) return send_error(res, 404, "no " + name);
      res.set_content(*a, type);
    });
  }

  using Handler = httplib::Server::Handler;
  using Answer = void (Impl::*)(const httplib::Request&, httplib::Response&);
  // An answer about the job the path's first group names, found in the open database `d`.
  using JobAnswer = void (Impl::*)(job::JobDb& d, const job::JobRecord& j,
                                   const httplib::Request&, httplib::Response&);

  Handler on(Answer a) {
    return [this, a](const httplib::Request& req, httplib::Response& res) { (this->*a)(req, res); };
  }
  // GET `pattern` answered by `a` for the job its first group names; 404 when there is none.
  void get_job(const std::string& pattern, JobAnswer a) {
    server_->Get(pattern, [this, a](const httplib::Request& req, httplib::Response& res) {
      auto d = db();
      if (auto j = find(d.get(), req.matches[1], res)) (this->*a)(*d, *j, req, res);
    });
  }

  void routes() {
    server_->Post("/api/login", on(&Impl::login));
    asset("/", "index.html", "text/html; charset=utf-8");
    asset("/app.js", "app.js", "text/javascript");
    asset("/style.css", "style.css", "text/css");
    server_->Get("/chart.js", on(&Impl::chart));
    server_->Get("/api/jobs", on(&Impl::job_list));
    get_job(R"(/api/jobs/([^/]+))", &Impl::job_details);
    get_job(R"(/api/jobs/([^/]+)/metrics)", &Impl::metrics);
    get_job(R"(/api/jobs/([^/]+)/logs)", &Impl::logs);
    get_job(R"(/api/jobs/([^/]+)/diagnosis)", &Impl::diagnosis);
    server_->Get(R"(/api/tunings/([^/]+))", on(&Impl::tuning));
    server_->Post(R"(/api/(jobs|tunings)/([^/]+)/stop)", on(&Impl::stop_request));
  }

  void login(const httplib::Request& req, httplib::Response& res) {
    auto t = bearer_token(req.get_header_value("Authorization"));
    if (options_.no_auth) return send_json(res, {{"login", "not needed"}});
    if (!t || !secrets_equal(*t, options_.token)) return send_error(res, 401, "wrong token");
    res.set_header("Set-Cookie", cookie_ + "=" + session_ + "; Path=/; HttpOnly; SameSite=Strict" +
                                     (options_.tls_cert.empty() ? "" : "; Secure"));
    send_json(res, {{"login", "ok"}});
  }

  void chart(const httplib::Request&, httplib::Response& res) {
    if (chart_js_.empty())
      return send_error(res, 404, options_.chart_js + " is missing: install libjs-chart.js");
    res.set_header("Cache-Control", "max-age=3600");
    res.set_content(chart_js_, "text/javascript");
  }

  void job_list(const httplib::Request&, httplib::Response& res) {
    auto d = db();
    nlohmann::json jobs = nlohmann::json::array();
    if (d) {
      d->fail_orphaned_jobs();
      jobs = job::jobs_json(d->list_jobs());
    }
    nlohmann::json tunings = nlohmann::json::array();
    if (options_.list_tunings)
      for (nlohmann::json t : options_.list_tunings()) {
        t.erase("trials");
        tunings.push_back(std::move(t));
      }
    send_json(res, {{"jobs", jobs}, {"tunings", tunings}, {"can_stop", !options_.no_auth},
                    {"now", unix_now()}});
  }

  void job_details(job::JobDb& d, const job::JobRecord& j, const httplib::Request&,
                   httplib::Response& res) {
    nlohmann::json out =
        job::describe_json(j, d.transitions(j.id), d.final_metrics(j.id), d.findings(j.id));
    out["can_stop"] = !options_.no_auth;
    out["log_rank"] = log_rank(j, out["final_metrics"]);
    send_json(res, out);
  }

  void metrics(job::JobDb& d, const job::JobRecord& j, const httplib::Request&,
               httplib::Response& res) {
    const double t0 = j.training_start ? *j.training_start : j.created_at;
    send_json(res, metric_series_json(d.metrics(j.id), t0));
  }

  void logs(job::JobDb&, const job::JobRecord& j, const httplib::Request& req,
            httplib::Response& res) {
    int rank = 0;
    long long offset = -1;
    try {
      if (req.has_param("rank")) rank = std::stoi(req.get_param_value("rank"));
      if (req.has_param("offset")) offset = std::stoll(req.get_param_value("offset"));
    } catch (const std::exception&) {
      return send_error(res, 400, "rank and offset must be integers");
    }
    if (rank < 0 || rank >= j.world_size)
      return send_error(res, 400, "rank " + std::to_string(rank) + " is not in 0.." +
                                      std::to_string(j.world_size - 1));
    const auto deadline = job::JobFileClock::now() + std::chrono::milliseconds(std::llround(
                                                         options_.limits.file_read_s * 1000));
    const job::JobFileRead read =
        log_window(job::job_paths(options_.home, j.name).rank_log(rank), offset, deadline);
    if (!read.ok()) return send_error(res, unread_status(read), read.error);
    send_json(res, {{"text", read.bytes}, {"offset", read.offset + read.bytes.size()},
                    {"size", read.size}, {"rank", rank}});
  }

  void diagnosis(job::JobDb&, const job::JobRecord& j, const httplib::Request&,
                 httplib::Response& res) {
    send_json(res, diagnose(trace_dir(job::job_paths(options_.home, j.name)), unix_now()).json());
  }

  void tuning(const httplib::Request& req, httplib::Response& res) {
    std::optional<nlohmann::json> t;
    if (options_.read_tuning && valid_console_name(req.matches[1]))
      t = options_.read_tuning(req.matches[1]);
    if (!t)
      return send_error(res, 404, "no tuning job named '" +
                                      std::string(req.matches[1]).substr(0, 200) + "'");
    auto d = db();
    for (nlohmann::json& trial : (*t)["trials"]) {
      if (!d) break;
      heft::Result<job::JobRecord> j = d->find_job(trial.value("name", ""));
      if (!j.ok()) continue;
      trial["created_at"] = j.value().created_at;
      trial["end_time"] =
          j.value().end_time ? nlohmann::json(*j.value().end_time) : nlohmann::json(nullptr);
    }
    (*t)["can_stop"] = !options_.no_auth;
    send_json(res, *t);
  }

  void stop_request(const httplib::Request& req, httplib::Response& res) {
    if (options_.no_auth)
      return send_error(res, 403, "this console runs with --no-auth and is read-only: start "
                                  "it with its token (the default) to stop jobs");
    const std::string name = req.matches[2];
    if (!valid_console_name(name))
      return send_error(res, 404, "no job or tuning named '" + name.substr(0, 200) + "'");
    if (req.matches[1] == "tunings") {
      if (!options_.stop_tuning || !options_.stop_tuning(name))
        return send_error(res, 404, "no tuning job named '" + name + "'");
      return send_json(res, {{"stop", "requested"}});
    }
    auto d = db();
    if (!d) return send_error(res, 404, "no job named '" + name + "'");
    heft::Result<job::StopRequest> r = d->request_stop(name);
    if (!r.ok()) return send_error(res, 404, r.error());
    send_json(res, {{"stop", r.value() == job::StopRequest::kAlreadyEnded ? "already ended"
                                                                         : "requested"}});
  }

  // The rank whose log the page opens on: the lowest rank that reported a training metric
  // (a pipeline's last stage, say), else the rank with the longest log, else 0.
  int log_rank(const job::JobRecord& j, const nlohmann::json& final_metrics) const {
    int best = -1;
    for (const nlohmann::json& m : final_metrics) {
      const int r = m.value("rank", -1);
      if (r >= 0 && r < j.world_size && (best < 0 || r < best)) best = r;
    }
    if (best >= 0) return best;
    const job::JobPaths paths = job::job_paths(options_.home, j.name);
    long long longest = 0;
    for (int r = 0; r < j.world_size && r < 1024; ++r) {
      struct stat st {};  // lstat: a link is not a log (never followed, never opened)
      if (::lstat(paths.rank_log(r).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          st.st_size > longest) {
        longest = st.st_size;
        best = r;
      }
    }
    return std::max(best, 0);
  }

  ConsoleOptions options_;
  HostPolicy hosts_;
  std::string session_;  // the session cookie's value, new at each start
  std::string cookie_;   // the session cookie's name (has the port)
  int port_ = 0;
  std::string chart_js_;
  std::unique_ptr<httplib::Server> server_;
};

ConsoleServer::ConsoleServer(ConsoleOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ConsoleServer::~ConsoleServer() = default;
int ConsoleServer::bind() { return impl_->bind(); }
std::string ConsoleServer::url() const { return impl_->url(); }
void ConsoleServer::serve() { impl_->serve(); }
void ConsoleServer::stop() { impl_->stop(); }

}  // namespace heft::profile
