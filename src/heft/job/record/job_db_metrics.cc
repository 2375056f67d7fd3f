// A job's metric points and profiler findings in the job database (job_db.h): written in
// one transaction a batch, read in the order they were stored.
#include "heft/job/record/job_db.h"

#include <cmath>

#include "heft/job/record/sqlite.h"

namespace heft::job {

void JobDb::add_metrics(int64_t job_id, const std::vector<MetricPoint>& points) {
  if (points.empty()) return;
  SqliteTransaction tx(*db_);
  SqliteStatement s = db_->prepare(
      "INSERT INTO metrics (job_id, name, rank, timestamp, step, value) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  for (const MetricPoint& p : points) {
    s.bind(1, job_id).bind(2, p.name).bind(3, p.rank).bind(4, p.timestamp).bind(5, p.step);
    s.bind(6, p.value).run();
    s.reset();
  }
  tx.commit();
}

std::vector<MetricPoint> JobDb::metrics(int64_t job_id, const std::string& name) {
  SqliteStatement s = db_->prepare(
      "SELECT name, rank, timestamp, step, value FROM metrics WHERE job_id = ?1 " +
      std::string(name.empty() ? "" : "AND name = ?2 ") + "ORDER BY id");
  s.bind(1, job_id);
  if (!name.empty()) s.bind(2, name);
  std::vector<MetricPoint> out;
  while (s.step())
    out.push_back({s.text(0), static_cast<int>(s.int64(1)), s.real(2), s.optional_int64(3),
                   s.real(4)});
  return out;
}

std::optional<double> JobDb::newest_metric_time(int64_t job_id, int64_t* after_id) {
  SqliteStatement s = db_->prepare(
      "SELECT MAX(id), MAX(CASE WHEN name NOT LIKE 'system:%' AND name NOT LIKE 'step:%' "
      "THEN timestamp END) FROM metrics WHERE id > ?2 AND job_id = ?1");
  s.bind(1, job_id).bind(2, *after_id);
  std::optional<double> newest;
  if (s.step()) {
    if (const std::optional<int64_t> last = s.optional_int64(0)) *after_id = *last;
    const double t = s.real(1);
    if (std::isfinite(t)) newest = t;
  }
  return newest;
}

void JobDb::add_finding(int64_t job_id, const Finding& f) {
  SqliteTransaction tx(*db_);
  db_->prepare("INSERT INTO findings (job_id, rule, rank, timestamp, message, evidence, action) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")
      .bind(1, job_id)
      .bind(2, f.rule)
      .bind(3, f.rank)
      .bind(4, f.timestamp)
      .bind(5, f.message)
      .bind(6, f.evidence.dump())
      .bind(7, f.action)
      .run();
  tx.commit();
}

std::vector<Finding> JobDb::findings(int64_t job_id) {
  SqliteStatement s = db_->prepare(
      "SELECT rule, rank, timestamp, message, evidence, action FROM findings WHERE job_id = ?1 "
      "ORDER BY id");
  s.bind(1, job_id);
  std::vector<Finding> out;
  while (s.step()) {
    Finding f;
    f.rule = s.text(0);
    f.rank = static_cast<int>(s.int64(1));
    f.timestamp = s.real(2);
    f.message = s.text(3);
    f.evidence = nlohmann::json::parse(s.text(4), nullptr, false);
    f.action = s.text(5);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<MetricPoint> JobDb::final_metrics(int64_t job_id) {
  // For each name: its lowest reporting rank, then that rank's newest row (one pass: the
  // profiler's series make a correlated subquery per row far too slow).
  SqliteStatement s = db_->prepare(
      "SELECT name, rank, timestamp, step, value FROM ("
      "  SELECT name, rank, timestamp, step, value, ROW_NUMBER() OVER ("
      "    PARTITION BY name ORDER BY rank ASC, id DESC) AS nth "
      "  FROM metrics WHERE job_id = ?1) "
      "WHERE nth = 1 ORDER BY name");
  s.bind(1, job_id);
  std::vector<MetricPoint> out;
  while (s.step())
    out.push_back({s.text(0), static_cast<int>(s.int64(1)), s.real(2), s.optional_int64(3),
                   s.real(4)});
  return out;
}

}  // namespace heft::job
