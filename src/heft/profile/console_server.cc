#include "heft/profile/console_server.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "heft/error.h"
#include "heft/job/job_db.h"
#include "heft/job/job_report.h"
#include "heft/job/paths.h"
#include "heft/profile/diagnosis.h"
#include "heft/profile/job_profiler.h"

namespace heft::profile {

namespace {

using job::unix_now;

void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

class ConsoleServer::Impl {
 public:
  explicit Impl(ConsoleOptions o) : options_(std::move(o)) {
    chart_js_ = read_file(options_.chart_js);
    routes();
  }

  int bind() {
    if (options_.port == 0) {
      const int port = server_.bind_to_any_port(options_.host);
      if (port < 0) throw IoError("heft console: cannot listen on " + options_.host);
      return port;
    }
    if (!server_.bind_to_port(options_.host, options_.port))
      throw IoError("heft console: cannot listen on " + options_.host + ":" +
                    std::to_string(options_.port) + " (in use? try --port 0 for any free port)");
    return options_.port;
  }
  void serve() { server_.listen_after_bind(); }
  void stop() { server_.stop(); }

 private:
  std::unique_ptr<job::JobDb> db() { return job::open_job_db(options_.home, false); }

  // The job named in the path, or an error response.
  std::optional<job::JobRecord> find(job::JobDb* db, const std::string& name,
                                     httplib::Response& res) {
    if (!db) {
      send_error(res, 404, "no job named '" + name + "' (no job has run yet)");
      return std::nullopt;
    }
    job::Result<job::JobRecord> j = db->find_job(name);
    if (!j.ok()) {
      send_error(res, 404, j.error());
      return std::nullopt;
    }
    return std::move(j).value();
  }

  void asset(const std::string& path, const std::string& name, const char* type) {
    server_.Get(path, [name, type](const httplib::Request&, httplib::Response& res) {
      const std::string* a = console_asset(name);
      if (!a) return send_error(res, 404, "no " + name);
      res.set_content(*a, type);
    });
  }

  void routes() {
    asset("/", "index.html", "text/html; charset=utf-8");
    asset("/app.js", "app.js", "text/javascript");
    asset("/style.css", "style.css", "text/css");
    server_.Get("/chart.js", [this](const httplib::Request&, httplib::Response& res) {
      if (chart_js_.empty())
        return send_error(res, 404, options_.chart_js + " is missing: install libjs-chart.js");
      res.set_header("Cache-Control", "max-age=3600");
      res.set_content(chart_js_, "text/javascript");
    });
    server_.Get("/api/jobs", [this](const httplib::Request&, httplib::Response& res) {
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
      send_json(res, {{"jobs", jobs}, {"tunings", tunings}, {"can_stop", !options_.token.empty()},
                      {"now", unix_now()}});
    });
    server_.Get(R"(/api/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      auto d = db();
      auto j = find(d.get(), req.matches[1], res);
      if (!j) return;
      nlohmann::json out = job::describe_json(*j, d->transitions(j->id), d->final_metrics(j->id),
                                              d->findings(j->id));
      out["can_stop"] = !options_.token.empty();
      send_json(res, out);
    });
    server_.Get(R"(/api/jobs/([^/]+)/metrics)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  auto d = db();
                  auto j = find(d.get(), req.matches[1], res);
                  if (!j) return;
                  const double t0 = j->training_start ? *j->training_start : j->created_at;
                  std::map<std::string, std::map<int, std::vector<const job::MetricPoint*>>> series;
                  const std::vector<job::MetricPoint> points = d->metrics(j->id);
                  for (const job::MetricPoint& p : points)
                    if (std::isfinite(p.value)) series[p.name][p.rank].push_back(&p);
                  // At most kMaxPoints a series (every k-th point and the last): a plot has
                  // no more pixels, and a long job's step series would be megabytes a poll.
                  constexpr size_t kMaxPoints = 1500;
                  nlohmann::json out = nlohmann::json::object();
                  for (const auto& [name, ranks] : series)
                    for (const auto& [rank, ps] : ranks) {
                      const size_t stride = (ps.size() + kMaxPoints - 1) / kMaxPoints;
                      nlohmann::json& v = out[name][std::to_string(rank)];
                      for (size_t i = 0; i < ps.size(); ++i) {
                        if (i % stride != 0 && i + 1 != ps.size()) continue;
                        const job::MetricPoint& p = *ps[i];
                        v.push_back({std::round((p.timestamp - t0) * 1000) / 1000,
                                     p.step ? nlohmann::json(*p.step) : nlohmann::json(nullptr),
                                     p.value});
                      }
                    }
                  send_json(res, out);
                });
    server_.Get(R"(/api/jobs/([^/]+)/logs)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  auto d = db();
                  auto j = find(d.get(), req.matches[1], res);
                  if (!j) return;
                  int rank = 0;
                  long long offset = -1;
                  try {
                    if (req.has_param("rank")) rank = std::stoi(req.get_param_value("rank"));
                    if (req.has_param("offset")) offset = std::stoll(req.get_param_value("offset"));
                  } catch (const std::exception&) {
                    return send_error(res, 400, "rank and offset must be integers");
                  }
                  if (rank < 0 || rank >= j->world_size)
                    return send_error(res, 400, "rank " + std::to_string(rank) + " is not in 0.." +
                                                    std::to_string(j->world_size - 1));
                  const std::string path = job::job_paths(options_.home, j->name).rank_log(rank);
                  std::ifstream in(path, std::ios::binary | std::ios::ate);
                  const long long size = in ? static_cast<long long>(in.tellg()) : 0;
                  constexpr long long kMax = 64 << 10;
                  long long from = offset < 0 ? std::max(0LL, size - 16384) : std::min(offset, size);
                  const long long n = std::min(kMax, size - from);
                  std::string text(static_cast<size_t>(std::max(0LL, n)), '\0');
                  if (in && n > 0) {
                    in.seekg(from);
                    in.read(text.data(), n);
                  }
                  send_json(res, {{"rank", rank}, {"text", text}, {"offset", from + n}, {"size", size}});
                });
    server_.Get(R"(/api/jobs/([^/]+)/diagnosis)",
                [this](const httplib::Request& req, httplib::Response& res) {
                  auto d = db();
                  auto j = find(d.get(), req.matches[1], res);
                  if (!j) return;
                  send_json(res, diagnose(trace_dir(job::job_paths(options_.home, j->name)),
                                          unix_now()).json());
                });
    server_.Get(R"(/api/tunings/([^/]+))", [this](const httplib::Request& req,
                                                  httplib::Response& res) {
      std::optional<nlohmann::json> t =
          options_.read_tuning ? options_.read_tuning(req.matches[1]) : std::nullopt;
      if (!t) return send_error(res, 404, "no tuning job named '" + std::string(req.matches[1]) + "'");
      auto d = db();
      for (nlohmann::json& trial : (*t)["trials"]) {
        if (!d) break;
        job::Result<job::JobRecord> j = d->find_job(trial.value("name", ""));
        if (!j.ok()) continue;
        trial["created_at"] = j.value().created_at;
        trial["end_time"] = j.value().end_time ? nlohmann::json(*j.value().end_time)
                                               : nlohmann::json(nullptr);
      }
      (*t)["can_stop"] = !options_.token.empty();
      send_json(res, *t);
    });
    server_.Post(R"(/api/(jobs|tunings)/([^/]+)/stop)",
                 [this](const httplib::Request& req, httplib::Response& res) {
      if (options_.token.empty())
        return send_error(res, 403, "this console is read-only (start it with --token to allow stops)");
      if (req.get_header_value("Authorization") != "Bearer " + options_.token)
        return send_error(res, 403, "wrong or missing token");
      const std::string name = req.matches[2];
      if (req.matches[1] == "tunings") {
        if (!options_.stop_tuning || !options_.stop_tuning(name))
          return send_error(res, 404, "no tuning job named '" + name + "'");
        return send_json(res, {{"stop", "requested"}});
      }
      auto d = db();
      if (!d) return send_error(res, 404, "no job named '" + name + "'");
      job::Result<job::StopRequest> r = d->request_stop(name);
      if (!r.ok()) return send_error(res, 404, r.error());
      send_json(res, {{"stop", r.value() == job::StopRequest::kAlreadyEnded ? "already ended"
                                                                           : "requested"}});
    });
  }

  ConsoleOptions options_;
  std::string chart_js_;
  httplib::Server server_;
};

ConsoleServer::ConsoleServer(ConsoleOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ConsoleServer::~ConsoleServer() = default;
int ConsoleServer::bind() { return impl_->bind(); }
void ConsoleServer::serve() { impl_->serve(); }
void ConsoleServer::stop() { impl_->stop(); }

}  // namespace heft::profile
