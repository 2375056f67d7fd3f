// A thin RAII layer over SQLite's C API for the job database (job_db.h): a connection, a
// prepared statement with typed binds and reads, and an IMMEDIATE transaction. Every
// failure throws heft::IoError naming the database file and SQLite's message (NoSpace when
// the disk is full).
//
// Deliberately left out: an ORM, statement caching, anything job-specific.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "heft/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace heft::job {

// A write failed because the file system holding it is full (SQLite's "database or disk is
// full", ENOSPC). The message names the file.
class NoSpace : public IoError {
 public:
  explicit NoSpace(const std::string& msg) : IoError(msg) {}
};

class SqliteStatement;

// One connection. Not thread-safe: one per thread (or per process) that uses the database.
class SqliteDb {
 public:
  // Opens (creating) the file; sets a busy timeout so that a writer waits for another
  // process's transaction instead of failing at once.
  SqliteDb(const std::string& path, int busy_timeout_ms);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs statements that return no rows.
  void exec(const std::string& sql);
  // As exec, but returns false instead of throwing when SQLite answers SQLITE_BUSY or
  // SQLITE_LOCKED (another connection holds a lock the statement needs).
  bool exec_unless_busy(const std::string& sql);
  SqliteStatement prepare(const std::string& sql);
  int64_t last_insert_rowid() const;
  int changes() const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }
  // Throws IoError with the connection's last message.
  [[noreturn]] void fail(const std::string& while_doing, int code) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class SqliteStatement {
 public:
  SqliteStatement(SqliteDb& db, const std::string& sql);
  ~SqliteStatement();
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  // Parameters are 1-based, as in SQL's ?1.
  SqliteStatement& bind(int index, int64_t value);
  SqliteStatement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  SqliteStatement& bind(int index, double value);  // NaN is stored as NULL
  SqliteStatement& bind(int index, const std::string& value);
  SqliteStatement& bind(int index, const char* value) { return bind(index, std::string(value)); }
  SqliteStatement& bind_null(int index);
  template <class T>
  SqliteStatement& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind_null(index);
  }

  // Advances; true while a row is available.
  bool step();
  // Runs a statement that returns no rows.
  void run() {
    while (step()) {
    }
  }
  // Makes the statement ready to run again (new binds replace the old ones).
  void reset();
  // Columns are 0-based.
  int64_t int64(int column) const;
  double real(int column) const;  // NULL reads as NaN
  std::string text(int column) const;
  bool is_null(int column) const;
  std::optional<double> optional_real(int column) const;
  std::optional<int64_t> optional_int64(int column) const;

 private:
  SqliteDb* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// BEGIN IMMEDIATE (takes the write lock at once, waiting up to the busy timeout, so two
// writers never deadlock upgrading read locks); ROLLBACK unless commit() was called.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDb& db);
  ~SqliteTransaction();
  void commit();

 private:
  SqliteDb& db_;
  bool done_ = false;
};

}  // namespace heft::job
