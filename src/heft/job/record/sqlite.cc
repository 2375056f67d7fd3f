// SQLite RAII wrappers (sqlite.h).
#include "heft/job/record/sqlite.h"

#include <sqlite3.h>

#include <cerrno>
#include <cmath>
#include <limits>

#include "heft/error.h"

namespace heft::job {

SqliteDb::SqliteDb(const std::string& path, int busy_timeout_ms) : path_(path) {
  const int rc = sqlite3_open_v2(path.c_str(), &db_,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                     SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw IoError("job database " + path + ": cannot open: " + msg);
  }
  sqlite3_busy_timeout(db_, busy_timeout_ms);
}

SqliteDb::~SqliteDb() { sqlite3_close_v2(db_); }

void SqliteDb::fail(const std::string& while_doing, int code) const {
  std::string msg = db_ ? sqlite3_errmsg(db_) : "";
  if (msg.empty() || msg == "not an error") msg = sqlite3_errstr(code);
  const bool full = code == SQLITE_FULL || (db_ && (sqlite3_extended_errcode(db_) == SQLITE_FULL ||
                                                    sqlite3_system_errno(db_) == ENOSPC));
  if (full) throw NoSpace("job database " + path_ + ": " + msg + " (" + while_doing + ")");
  throw IoError("job database " + path_ + ": " + msg + " (" + while_doing + ")");
}

void SqliteDb::exec(const std::string& sql) {
  if (!exec_unless_busy(sql)) fail(sql.substr(0, 60), SQLITE_BUSY);
}

bool SqliteDb::exec_unless_busy(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc == SQLITE_OK) return true;
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) return false;
  fail(sql.substr(0, 60), rc);
}

SqliteStatement SqliteDb::prepare(const std::string& sql) { return SqliteStatement(*this, sql); }
int64_t SqliteDb::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int SqliteDb::changes() const { return sqlite3_changes(db_); }

SqliteStatement::SqliteStatement(SqliteDb& db, const std::string& sql) : db_(&db), sql_(sql) {
  const int rc = sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &stmt_, nullptr);
  if (rc != SQLITE_OK) db.fail("preparing " + sql.substr(0, 60), rc);
}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), sql_(std::move(other.sql_)) {
  other.stmt_ = nullptr;
}

namespace {
void check_bind(SqliteDb& db, int rc, const std::string& sql) {
  if (rc != SQLITE_OK) db.fail("binding " + sql.substr(0, 60), rc);
}
}  // namespace

SqliteStatement& SqliteStatement::bind(int index, int64_t value) {
  check_bind(*db_, sqlite3_bind_int64(stmt_, index, value), sql_);
  return *this;
}

SqliteStatement& SqliteStatement::bind(int index, double value) {
  if (std::isnan(value)) return bind_null(index);
  check_bind(*db_, sqlite3_bind_double(stmt_, index, value), sql_);
  return *this;
}

SqliteStatement& SqliteStatement::bind(int index, const std::string& value) {
  check_bind(*db_,
             sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                               SQLITE_TRANSIENT),
             sql_);
  return *this;
}

SqliteStatement& SqliteStatement::bind_null(int index) {
  check_bind(*db_, sqlite3_bind_null(stmt_, index), sql_);
  return *this;
}

bool SqliteStatement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_->fail(sql_.substr(0, 60), rc);
}

void SqliteStatement::reset() { sqlite3_reset(stmt_); }

int64_t SqliteStatement::int64(int column) const { return sqlite3_column_int64(stmt_, column); }

double SqliteStatement::real(int column) const {
  if (is_null(column)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, column);
}

std::string SqliteStatement::text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  if (p == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

bool SqliteStatement::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::optional<double> SqliteStatement::optional_real(int column) const {
  if (is_null(column)) return std::nullopt;
  return sqlite3_column_double(stmt_, column);
}

std::optional<int64_t> SqliteStatement::optional_int64(int column) const {
  if (is_null(column)) return std::nullopt;
  return sqlite3_column_int64(stmt_, column);
}

SqliteTransaction::SqliteTransaction(SqliteDb& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

SqliteTransaction::~SqliteTransaction() {
  if (done_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (const std::exception&) {  // the transaction may already be gone with its error
  }
}

void SqliteTransaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace heft::job
