#include "catalog/internal/pg_store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <libpq-fe.h>

#include <poll.h>

#include <atomic>
#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "catalog/internal/codec.h"

namespace gfrep::catalog::internal {
namespace {

// Session advisory lock of the one catalog process serving a database, and the transaction
// lock migrations run under: fixed keys ("gfrepcat", "gfrepmig" in ASCII).
constexpr std::int64_t kServeLockKey = 0x6766726570636174;
constexpr std::int64_t kMigrateLockKey = 0x67667265706d6967;
// The leadership of shared stores ("gfreplea").
constexpr std::int64_t kLeaderLockKey = 0x67667265706c6561;
// The write lock of shared stores ("gfrepwrl").
constexpr std::int64_t kWriteLockKey = 0x676672657077726c;
// The channel shared writes notify and WatchWrites listens on.
constexpr char kNotifyChannel[] = "gfrep_catalog";

constexpr int kScanPageRows = 512;
constexpr Oid kByteaOid = 17;

// The schema, one numbered step at a time. A step runs once, in the open's transaction, on a
// database whose schema_version is below its number; then schema_version becomes the
// number. Add version 2 by appending {2, {...}}; never change a step that has shipped.
struct Migration {
  int version;
  std::vector<std::string> statements;
};

const char* PgTableName(Table t) { return t == kMeta ? "meta" : kTableNames[t]; }

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration>* const migrations = [] {
    auto* m = new std::vector<Migration>;
    Migration v1{1, {}};
    for (int t = 0; t <= kEvents; ++t) {
      v1.statements.push_back(fmt::format("CREATE TABLE {} (k bytea PRIMARY KEY, v bytea NOT NULL)",
                                          PgTableName(static_cast<Table>(t))));
    }
    m->push_back(std::move(v1));
    // The serving epoch: each open takes the next one, and every write checks (FOR SHARE)
    // that it is still the current one, so a process that lost the database to another never
    // writes again, even if its advisory-lock connection only looks alive.
    m->push_back({2,
                  {"CREATE TABLE serve_epoch (one boolean PRIMARY KEY DEFAULT true CHECK (one), "
                   "epoch bigint NOT NULL)",
                   "INSERT INTO serve_epoch (epoch) VALUES (0)"}});
    // A request's files, followed by the catalog (issue 39).
    Migration v3{3, {}};
    for (Table t : {kRequestFiles, kRequestWanted}) {
      v3.statements.push_back(
          fmt::format("CREATE TABLE {} (k bytea PRIMARY KEY, v bytea NOT NULL)", PgTableName(t)));
    }
    m->push_back(std::move(v3));
    return m;
  }();
  return *migrations;
}

int ProgramSchemaVersion() { return Migrations().back().version; }

struct ConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnCloser>;

struct ResultClearer {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultClearer>;

std::string TrimMessage(const char* m) {
  std::string_view s = m == nullptr ? "" : m;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return std::string(s);
}

bool Broken(PGconn* c) { return c == nullptr || PQstatus(c) != CONNECTION_OK; }

// The one place libpq errors become absl::Status (STYLE rule 7). `r` may be null (an error
// of the connection rather than of a statement).
absl::Status PgError(PGconn* c, const PGresult* r, std::string_view context) {
  std::string message = TrimMessage(r != nullptr ? PQresultErrorMessage(r) : nullptr);
  if (message.empty()) message = TrimMessage(c != nullptr ? PQerrorMessage(c) : nullptr);
  if (message.empty()) message = "unexpected reply from the server";
  const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  std::string_view sqlstate = state == nullptr ? "" : state;
  std::string msg = sqlstate.empty() ? fmt::format("{}: postgresql: {}", context, message)
                                     : fmt::format("{}: postgresql: {} (SQLSTATE {})", context,
                                                   message, sqlstate);
  // A lost connection is retryable whatever the statement said last (a server shutting down
  // sends 57P01 and closes).
  if (Broken(c) || sqlstate.starts_with("08") || sqlstate.starts_with("57P")) {
    return absl::UnavailableError(msg);
  }
  if (sqlstate == "53100") return absl::ResourceExhaustedError(msg);
  if (sqlstate == "40001" || sqlstate == "40P01") return absl::AbortedError(msg);
  if (sqlstate == "XX001" || sqlstate == "XX002") return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

// Runs a parameterless text-mode statement; the result if it succeeded.
absl::StatusOr<ResultPtr> Exec(PGconn* c, const std::string& sql, std::string_view context) {
  ResultPtr r(PQexec(c, sql.c_str()));
  ExecStatusType st = r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return PgError(c, r.get(), context);
  return r;
}

// A statement with bytea parameters, binary results.
absl::StatusOr<ResultPtr> ExecBytes(PGconn* c, const std::string& sql,
                                    const std::vector<std::string_view>& params,
                                    std::string_view context) {
  std::vector<Oid> types(params.size(), kByteaOid);
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats(params.size(), 1);
  for (std::string_view p : params) {
    values.push_back(p.data());
    lengths.push_back(static_cast<int>(p.size()));
  }
  ResultPtr r(PQexecParams(c, sql.c_str(), static_cast<int>(params.size()), types.data(),
                           values.data(), lengths.data(), formats.data(), /*resultFormat=*/1));
  ExecStatusType st = r == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(r.get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return PgError(c, r.get(), context);
  return r;
}

// Queues a statement with bytea parameters (pipeline mode); false if libpq refused it.
bool SendBytes(PGconn* c, const std::string& sql, const std::vector<std::string_view>& params) {
  std::vector<Oid> types(params.size(), kByteaOid);
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats(params.size(), 1);
  for (std::string_view p : params) {
    values.push_back(p.data());
    lengths.push_back(static_cast<int>(p.size()));
  }
  return PQsendQueryParams(c, sql.c_str(), static_cast<int>(params.size()), types.data(),
                           values.data(), lengths.data(), formats.data(), 1) == 1;
}

void IgnoreNotice(void*, const char*) {}

absl::StatusOr<ConnPtr> Connect(const std::string& conninfo) {
  // expand_dbname: the "dbname" value is the whole conninfo (URI or key=value text).
  const char* keys[] = {"dbname", "fallback_application_name", nullptr};
  const char* values[] = {conninfo.c_str(), "gfcatalogd", nullptr};
  ConnPtr c(PQconnectdbParams(keys, values, /*expand_dbname=*/1));
  if (c == nullptr) return absl::UnavailableError("connect: postgresql: out of memory");
  if (PQstatus(c.get()) != CONNECTION_OK) {
    return absl::UnavailableError(
        fmt::format("connect: postgresql: {}", TrimMessage(PQerrorMessage(c.get()))));
  }
  // Notices (e.g. "relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(c.get(), IgnoreNotice, nullptr);
  return c;
}

// True if an idle connection still looks usable: reads whatever the server sent meanwhile
// (the socket is non-blocking inside libpq), which notices a server that closed it.
bool IdleConnectionAlive(PGconn* c) {
  return PQconsumeInput(c) == 1 && PQstatus(c) == CONNECTION_OK &&
         PQtransactionStatus(c) == PQTRANS_IDLE;
}

// Strips the "postgresql:" of the key=value form; URIs go to libpq as they are.
std::string LibpqConninfo(std::string_view location) {
  if (location.starts_with("postgresql://") || location.starts_with("postgres://")) {
    return std::string(location);
  }
  if (location.starts_with("postgresql:"))
    location.remove_prefix(std::string_view("postgresql:").size());
  return std::string(location);
}

// "postgresql host=... dbname=..." from the parsed conninfo, without password; an error
// for text libpq cannot parse.
absl::StatusOr<std::string> DescribeConninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (opts == nullptr) {
    std::string why = err != nullptr ? TrimMessage(err) : "out of memory";
    PQfreemem(err);
    return absl::InvalidArgumentError(fmt::format("postgresql conninfo: {}", why));
  }
  std::vector<std::string> parts;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || *o->val == '\0') continue;
    std::string_view key = o->keyword;
    if (key == "password" || std::string_view(o->dispchar) == "*") continue;
    std::string value = o->val;
    if (value.find_first_of(" '\\") != std::string::npos) {
      std::string quoted = "'";
      for (char ch : value) {
        if (ch == '\'' || ch == '\\') quoted += '\\';
        quoted += ch;
      }
      value = quoted + "'";
    }
    parts.push_back(fmt::format("{}={}", key, value));
  }
  PQconninfoFree(opts);
  return fmt::format("postgresql {}", fmt::join(parts, " "));
}

// Takes the session advisory lock of the process serving the database alone, or (shared)
// the same lock in share mode, on `c`.
absl::Status TakeServeLock(PGconn* c, bool shared) {
  absl::StatusOr<ResultPtr> r =
      Exec(c, fmt::format("SELECT pg_try_advisory_lock{}({})", shared ? "_shared" : "", kServeLockKey),
           "lock database");
  if (!r.ok()) return r.status();
  if (std::string_view(PQgetvalue(r->get(), 0, 0)) != "t") {
    return absl::FailedPreconditionError(
        shared ? "another gfcatalogd is serving this database alone (started without --shared); "
                 "start every front end of one database with --shared"
               : "another gfcatalogd is serving this database (to run several front ends on one "
                 "database, start each with --shared)");
  }
  return absl::OkStatus();
}

// The connection holding a shared store's write lock on this thread (PgStore::LockWrites).
struct WritePin {
  const void* store = nullptr;
  PGconn* conn = nullptr;
  int depth = 0;
};
thread_local WritePin t_write_pin;

class PgStore;

// A pooled connection, returned to the pool (or discarded if it broke) when destroyed.
class Lease {
 public:
  Lease(PgStore* store, ConnPtr conn) : store_(store), conn_(std::move(conn)) {}
  Lease(Lease&& other) noexcept
      : store_(std::exchange(other.store_, nullptr)), conn_(std::move(other.conn_)) {}
  Lease& operator=(Lease&&) = delete;
  ~Lease() { Release(); }
  PGconn* get() const { return conn_.get(); }
  // Returns the connection now (before calling out to the caller's fn).
  void Release();
  // Closes the connection instead of returning it (it may hold a session lock).
  void Discard();

 private:
  PgStore* store_;
  ConnPtr conn_;
};

class PgSnapshot : public KvSnapshot {
 public:
  PgSnapshot(absl::Status status, std::unique_ptr<Lease> lease)
      : status_(std::move(status)), lease_(std::move(lease)) {}
  ~PgSnapshot() override {
    if (lease_ != nullptr && !Broken(lease_->get())) {
      // A read-only transaction: ending it either way is the same; a failure breaks the
      // connection, which the pool then discards.
      absl::StatusOr<ResultPtr> r = Exec(lease_->get(), "COMMIT", "end snapshot");
      (void)r;  // ignored: the pool checks the connection's state
    }
  }
  // The connection of the snapshot, or why there is none.
  absl::StatusOr<PGconn*> conn() const {
    if (!status_.ok()) return status_;
    return lease_->get();
  }

 private:
  absl::Status status_;
  std::unique_ptr<Lease> lease_;
};

class PgStore : public KvStore {
 public:
  PgStore(const PgStoreOptions& options, std::string conninfo, std::string description,
          ConnPtr lock_conn, std::int64_t epoch)
      : conninfo_(std::move(conninfo)),
        description_(std::move(description)),
        max_connections_(options.max_connections),
        shared_(options.shared),
        fence_sql_(fmt::format(
            "SELECT 1 / (CASE WHEN epoch = {} THEN 1 ELSE 0 END) FROM serve_epoch FOR SHARE",
            epoch)),
        lock_conn_(std::move(lock_conn)) {
    for (int t = 0; t < kNumTables; ++t) {
      const char* name = PgTableName(static_cast<Table>(t));
      get_sql_[t] = fmt::format("SELECT v FROM {} WHERE k = $1", name);
      put_sql_[t] = fmt::format(
          "INSERT INTO {} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
          name);
      delete_sql_[t] = fmt::format("DELETE FROM {} WHERE k = $1", name);
      delete_range_sql_[t] = fmt::format("DELETE FROM {} WHERE k >= $1 AND k < $2", name);
    }
  }

  // REQUIRES: no snapshot of this store is alive and no call is in progress.
  ~PgStore() override {
    {
      absl::MutexLock l(&mu_);
      assert(open_ == idle_.size());
      idle_.clear();
    }
    // The server frees a closed session's advisory locks only when its backend exits, a
    // moment after the close: an open right after this one (a restart, the next front end)
    // could still find the database taken. Unlocking first is answered once they are free.
    absl::MutexLock serve(&lock_mu_);
    absl::MutexLock lead(&leader_mu_);
    for (PGconn* c : {lock_conn_.get(), leader_conn_.get()}) {
      if (c == nullptr || Broken(c)) continue;
      absl::StatusOr<ResultPtr> r = Exec(c, "SELECT pg_advisory_unlock_all()", "close");
      (void)r;  // ignored: closing the connection next releases them anyway, a moment later
    }
  }

  absl::StatusOr<std::string> Get(Table t, std::string_view key, std::string_view what,
                                  const KvSnapshot* snapshot) override {
    absl::StatusOr<ResultPtr> r;
    if (snapshot != nullptr) {
      absl::StatusOr<PGconn*> c = static_cast<const PgSnapshot*>(snapshot)->conn();
      if (!c.ok()) return Context(c.status(), what);
      r = ExecBytes(*c, get_sql_[t], {key}, what);
    } else {
      absl::StatusOr<Lease> lease = Acquire();
      if (!lease.ok()) return Context(lease.status(), what);
      r = ExecBytes(lease->get(), get_sql_[t], {key}, what);
      if (!r.ok()) DiscardIdleIfBroken(lease->get());
    }
    if (!r.ok()) return r.status();
    PGresult* res = r->get();
    if (PQntuples(res) == 0) return absl::NotFoundError(fmt::format("{}: not found", what));
    return std::string(PQgetvalue(res, 0, 0), static_cast<std::size_t>(PQgetlength(res, 0, 0)));
  }

  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> MultiGet(
      Table t, const std::vector<std::string>& keys, std::string_view what,
      const KvSnapshot* snapshot) override {
    std::vector<absl::StatusOr<std::string>> out;
    out.reserve(keys.size());
    std::optional<Lease> lease;
    PGconn* c = nullptr;
    if (snapshot != nullptr) {
      absl::StatusOr<PGconn*> sc = static_cast<const PgSnapshot*>(snapshot)->conn();
      if (!sc.ok()) return Context(sc.status(), what);
      c = *sc;
    } else {
      absl::StatusOr<Lease> l = Acquire();
      if (!l.ok()) return Context(l.status(), what);
      lease.emplace(std::move(*l));
      c = lease->get();
    }
    // Pages of statements, each page one round trip.
    constexpr std::size_t kPage = 1024;
    for (std::size_t first = 0; first < keys.size(); first += kPage) {
      const std::size_t n = std::min(kPage, keys.size() - first);
      absl::Status s = GetPipelined(c, t, keys.data() + first, n, what, out);
      if (!s.ok()) {
        DiscardIdleIfBroken(c);
        return s;
      }
    }
    return out;
  }

  absl::Status Scan(Table t, std::string_view prefix, std::string_view start, const KvScanFn& fn,
                    const KvSnapshot* snapshot, bool reverse) override {
    const std::string context = fmt::format("scan {}", PgTableName(t));
    if (reverse && !start.empty()) {
      return absl::InvalidArgumentError(fmt::format("{}: a reverse scan has no start", context));
    }
    const std::string upper = PrefixSuccessor(prefix);  // empty: no upper bound
    // Forward: [max(prefix, start), upper), then (last, upper). Reverse: [prefix, upper),
    // then [prefix, last), descending.
    std::string lower(start.empty() || start < prefix ? prefix : start);
    bool lower_inclusive = true;
    std::string high = upper;
    bool has_high = !upper.empty();
    while (true) {
      std::string sql =
          fmt::format("SELECT k, v FROM {} WHERE k {} $1{} ORDER BY k{} LIMIT {}", PgTableName(t),
                      lower_inclusive ? ">=" : ">", has_high ? " AND k < $2" : "",
                      reverse ? " DESC" : "", kScanPageRows);
      std::vector<std::string_view> params = {lower};
      if (has_high) params.push_back(high);
      absl::StatusOr<ResultPtr> page;
      if (snapshot != nullptr) {
        absl::StatusOr<PGconn*> c = static_cast<const PgSnapshot*>(snapshot)->conn();
        if (!c.ok()) return Context(c.status(), context);
        page = ExecBytes(*c, sql, params, context);
      } else {
        absl::StatusOr<Lease> lease = Acquire();
        if (!lease.ok()) return Context(lease.status(), context);
        page = ExecBytes(lease->get(), sql, params, context);
        if (!page.ok()) DiscardIdleIfBroken(lease->get());
        // Back to the pool before fn runs: fn may use the store (and the pool) itself.
        lease->Release();
      }
      if (!page.ok()) return page.status();
      PGresult* res = page->get();
      const int rows = PQntuples(res);
      for (int i = 0; i < rows; ++i) {
        std::string_view k(PQgetvalue(res, i, 0), static_cast<std::size_t>(PQgetlength(res, i, 0)));
        std::string_view v(PQgetvalue(res, i, 1), static_cast<std::size_t>(PQgetlength(res, i, 1)));
        if (!fn(k, v)) return absl::OkStatus();
      }
      if (rows < kScanPageRows) return absl::OkStatus();
      std::string last(PQgetvalue(res, rows - 1, 0),
                       static_cast<std::size_t>(PQgetlength(res, rows - 1, 0)));
      if (reverse) {
        high = std::move(last);
        has_high = true;
      } else {
        lower = std::move(last);
        lower_inclusive = false;
      }
    }
  }

  absl::Status Write(const KvBatch& batch, bool sync, std::string_view what) override {
    if (batch.Count() == 0) return absl::OkStatus();
    if (shared_) {
      // Only on the connection holding the write lock: if its session is gone, so is the
      // lock, and the write fails rather than commit unserialized.
      if (t_write_pin.store != this) {
        return absl::InternalError(fmt::format(
            "{}: not written: a shared catalog database is written only under its write lock",
            what));
      }
      return WritePipelined(t_write_pin.conn, batch, sync, what);
    }
    if (absl::Status s = CheckServeLock(); !s.ok()) return Context(s, what);
    absl::StatusOr<Lease> lease = Acquire();
    if (!lease.ok()) return Context(lease.status(), what);
    PGconn* c = lease->get();
    absl::Status s = WritePipelined(c, batch, sync, what);
    if (!s.ok()) DiscardIdleIfBroken(c);
    return s;
  }

  std::unique_ptr<KvSnapshot> Snapshot() override {
    absl::StatusOr<Lease> lease = Acquire();
    if (!lease.ok()) {
      return std::make_unique<PgSnapshot>(Context(lease.status(), "snapshot"), nullptr);
    }
    auto held = std::make_unique<Lease>(std::move(*lease));
    // REPEATABLE READ takes its snapshot at the first statement, so make one now: the
    // snapshot is this point in time, not the time of its first read.
    absl::StatusOr<ResultPtr> begin =
        Exec(held->get(), "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "snapshot");
    absl::StatusOr<ResultPtr> first =
        begin.ok() ? Exec(held->get(), "SELECT 1", "snapshot") : std::move(begin);
    if (!first.ok()) {
      DiscardIdleIfBroken(held->get());
      if (PQtransactionStatus(held->get()) != PQTRANS_IDLE) {
        absl::StatusOr<ResultPtr> r = Exec(held->get(), "ROLLBACK", "snapshot");
        (void)r;  // ignored: a connection left inside a transaction is discarded by the pool
      }
      return std::make_unique<PgSnapshot>(first.status(), nullptr);
    }
    return std::make_unique<PgSnapshot>(absl::OkStatus(), std::move(held));
  }

  absl::StatusOr<std::map<std::string, std::uint64_t>> Stats() override {
    std::vector<std::string> tables;
    for (int t = 0; t < kNumTables; ++t) {
      tables.push_back(fmt::format("to_regclass('{}')", PgTableName(static_cast<Table>(t))));
    }
    // reltuples is the planner's estimate (-1: never analyzed); counting rows would scan.
    const std::string sql = fmt::format(
        "SELECT 'db_bytes'::text, pg_database_size(current_database())::float8 UNION ALL "
        "SELECT relname::text || '_rows', greatest(reltuples, 0)::float8 FROM pg_class "
        "WHERE oid IN ({})",
        fmt::join(tables, ", "));
    absl::StatusOr<Lease> lease = Acquire();
    if (!lease.ok()) return Context(lease.status(), "stats");
    absl::StatusOr<ResultPtr> r = Exec(lease->get(), sql, "stats");
    if (!r.ok()) {
      DiscardIdleIfBroken(lease->get());
      return r.status();
    }
    std::map<std::string, std::uint64_t> stats;
    for (int i = 0; i < PQntuples(r->get()); ++i) {
      double v = 0;
      if (!absl::SimpleAtod(PQgetvalue(r->get(), i, 1), &v) || !(v >= 0)) v = 0;
      stats[PQgetvalue(r->get(), i, 0)] = static_cast<std::uint64_t>(std::llround(v));
    }
    return stats;
  }

  absl::StatusOr<std::string> Property(std::string_view name) override {
    if (name != "pg.server_version") {
      return absl::NotFoundError(fmt::format("property {}: not found", name));
    }
    absl::StatusOr<Lease> lease = Acquire();
    if (!lease.ok()) return Context(lease.status(), name);
    const char* v = PQparameterStatus(lease->get(), "server_version");
    if (v == nullptr) return absl::NotFoundError(fmt::format("property {}: not found", name));
    return std::string(v);
  }

  std::string Describe() const override { return description_; }

  bool shared() const override { return shared_; }

  bool HoldLeadership() override {
    if (!shared_) return true;
    absl::MutexLock l(&leader_mu_);
    if (leader_conn_ != nullptr && leading_) {
      // Still ours only while the session lives: ask the server (a dead peer or a server
      // restart shows here), not only the socket.
      if (Exec(leader_conn_.get(), "SELECT 1", "leadership").ok()) return true;
      leader_conn_.reset();
      leading_ = false;
    }
    if (leader_conn_ == nullptr || Broken(leader_conn_.get())) {
      absl::StatusOr<ConnPtr> c = Connect(conninfo_);
      if (!c.ok()) return false;
      leader_conn_ = std::move(*c);
    }
    absl::StatusOr<ResultPtr> r = Exec(
        leader_conn_.get(), fmt::format("SELECT pg_try_advisory_lock({})", kLeaderLockKey),
        "leadership");
    if (!r.ok()) {
      leader_conn_.reset();
      return false;
    }
    leading_ = std::string_view(PQgetvalue(r->get(), 0, 0)) == "t";
    return leading_;
  }

  absl::StatusOr<std::unique_ptr<KvWriteLock>> LockWrites() override;

  std::unique_ptr<KvWatch> WatchWrites(std::function<void()> on_change) override;

  // A connection from the pool, or a new one while fewer than max_connections are open;
  // waits for one to come back otherwise. kUnavailable if connecting fails.
  absl::StatusOr<Lease> Acquire() {
    std::vector<ConnPtr> dead;  // closed outside mu_
    {
      absl::MutexLock l(&mu_);
      while (true) {
        while (!idle_.empty()) {
          ConnPtr c = std::move(idle_.back());
          idle_.pop_back();
          if (IdleConnectionAlive(c.get())) return Lease(this, std::move(c));
          dead.push_back(std::move(c));
          --open_;
        }
        if (open_ < max_connections_) break;
        mu_.Await(absl::Condition(this, &PgStore::CanAcquire));
      }
      ++open_;
    }
    dead.clear();
    absl::StatusOr<ConnPtr> c = Connect(conninfo_);
    if (!c.ok()) {
      absl::MutexLock l(&mu_);
      --open_;
      return c.status();
    }
    return Lease(this, std::move(*c));
  }

  // Closes a leased connection.
  void Drop(ConnPtr c) {
    {
      absl::MutexLock l(&mu_);
      --open_;
    }
    c.reset();
  }

  // Ends this thread's write lock (PgWriteLock's destructor).
  void UnlockWrites(std::unique_ptr<Lease> lease) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    t_write_pin = WritePin{};
    PGconn* c = lease->get();
    bool unlocked = false;
    if (!Broken(c) && PQtransactionStatus(c) == PQTRANS_IDLE) {
      absl::StatusOr<ResultPtr> r =
          Exec(c, fmt::format("SELECT pg_advisory_unlock({})", kWriteLockKey), "unlock writes");
      unlocked = r.ok() && std::string_view(PQgetvalue(r->get(), 0, 0)) == "t";
    }
    // A session that may still hold the lock is closed: that releases it.
    if (!unlocked) lease->Discard();
    lease.reset();
    write_mu_.Unlock();
  }

  // Back to the pool, unless it broke or was left inside a transaction.
  void Release(ConnPtr c) {
    if (c == nullptr) return;
    const bool reusable = !Broken(c.get()) && PQtransactionStatus(c.get()) == PQTRANS_IDLE &&
                          PQpipelineStatus(c.get()) == PQ_PIPELINE_OFF;
    absl::MutexLock l(&mu_);
    if (reusable) {
      idle_.push_back(std::move(c));
    } else {
      --open_;  // c closes when it goes out of scope, after mu_ is released
    }
  }

 private:
  bool CanAcquire() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < max_connections_;
  }

  // A broken connection usually means the server went away, and with it every idle
  // connection: drop them, so the next operation connects afresh.
  void DiscardIdleIfBroken(PGconn* c) {
    if (!Broken(c)) return;
    std::vector<ConnPtr> dead;
    {
      absl::MutexLock l(&mu_);
      open_ -= idle_.size();
      dead = std::move(idle_);
      idle_.clear();
    }
  }

  static absl::Status Context(const absl::Status& s, std::string_view what) {
    return absl::Status(s.code(), fmt::format("{}: {}", what, std::string(s.message())));
  }

  // The session advisory lock is held by lock_conn_; a lost connection lost it. Takes it
  // again on a new connection, unless another process took it meanwhile.
  absl::Status CheckServeLock() {
    absl::MutexLock l(&lock_mu_);
    if (lock_conn_ != nullptr && IdleConnectionAlive(lock_conn_.get())) return absl::OkStatus();
    lock_conn_.reset();
    absl::StatusOr<ConnPtr> c = Connect(conninfo_);
    if (!c.ok()) return c.status();
    absl::Status s = TakeServeLock(c->get(), shared_);
    if (!s.ok()) return s;
    lock_conn_ = std::move(*c);
    return absl::OkStatus();
  }

  // Sends n point reads at once and appends their values (or kNotFound) to `out`.
  absl::Status GetPipelined(PGconn* c, Table t, const std::string* keys, std::size_t n,
                            std::string_view what, std::vector<absl::StatusOr<std::string>>& out) {
    if (PQenterPipelineMode(c) != 1) return PgError(c, nullptr, what);
    std::size_t sent = 0;
    absl::Status first_error;
    for (; sent < n; ++sent) {
      if (!SendBytes(c, get_sql_[t], {keys[sent]})) {
        first_error = PgError(c, nullptr, what);
        break;
      }
    }
    if (PQpipelineSync(c) != 1) {
      if (first_error.ok()) first_error = PgError(c, nullptr, what);
      return first_error;  // nothing can be read back: Release's check closes the connection
    }
    for (std::size_t i = 0; i < sent; ++i) {
      ResultPtr r(PQgetResult(c));
      if (r == nullptr) {
        if (first_error.ok()) first_error = PgError(c, nullptr, what);
        return first_error;
      }
      ExecStatusType st = PQresultStatus(r.get());
      if (st == PGRES_TUPLES_OK) {
        if (PQntuples(r.get()) == 0) {
          out.push_back(absl::NotFoundError(fmt::format("{}: not found", what)));
        } else {
          out.push_back(std::string(PQgetvalue(r.get(), 0, 0),
                                    static_cast<std::size_t>(PQgetlength(r.get(), 0, 0))));
        }
      } else if (st != PGRES_PIPELINE_ABORTED && first_error.ok()) {
        first_error = PgError(c, r.get(), what);
      }
      ResultPtr end(PQgetResult(c));  // null after each statement's result
      if (end != nullptr && first_error.ok()) first_error = PgError(c, end.get(), what);
    }
    bool synced = false;
    return EndPipeline(c, what, std::move(first_error), synced);
  }

  // Reads a pipeline's Sync and leaves pipeline mode. Returns `first_error`, or this step's
  // error if there was none before. `synced` is false if the Sync never came back (the
  // connection is then unusable; Release's check closes it).
  static absl::Status EndPipeline(PGconn* c, std::string_view what, absl::Status first_error,
                                  bool& synced) {
    ResultPtr sync_result(PQgetResult(c));
    synced = sync_result != nullptr && PQresultStatus(sync_result.get()) == PGRES_PIPELINE_SYNC;
    if (!synced) {
      if (first_error.ok()) first_error = PgError(c, sync_result.get(), what);
      return first_error;
    }
    if (PQexitPipelineMode(c) != 1 && first_error.ok()) first_error = PgError(c, nullptr, what);
    return first_error;
  }

  absl::Status WritePipelined(PGconn* c, const KvBatch& batch, bool sync, std::string_view what) {
    if (PQenterPipelineMode(c) != 1) return PgError(c, nullptr, what);
    // BEGIN [SET LOCAL] ops... COMMIT, then one Sync: a single round trip. After an error
    // the server skips the rest up to the Sync, so COMMIT never runs.
    std::size_t sent = 0;
    bool queued = SendBytes(c, "BEGIN", {});
    sent += queued ? 1 : 0;
    if (queued) {
      // Explicit either way: a database or role configured with synchronous_commit = off
      // must not make a synced write return before its commit record is on disk.
      queued = SendBytes(c,
                         sync ? "SET LOCAL synchronous_commit = on"
                              : "SET LOCAL synchronous_commit = off",
                         {});
      sent += queued ? 1 : 0;
    }
    const std::size_t fence_index = sent;
    if (queued) {
      queued = SendBytes(c, fence_sql_, {});
      sent += queued ? 1 : 0;
    }
    for (const KvBatch::Op& op : batch.ops()) {
      if (!queued) break;
      queued = op.put     ? SendBytes(c, put_sql_[op.table], {op.key, op.value})
               : op.range ? SendBytes(c, delete_range_sql_[op.table], {op.key, op.value})
                          : SendBytes(c, delete_sql_[op.table], {op.key});
      sent += queued ? 1 : 0;
    }
    if (queued && shared_) {
      // Delivered at commit to every front end's WatchWrites.
      queued = SendBytes(c, fmt::format("NOTIFY {}", kNotifyChannel), {});
      sent += queued ? 1 : 0;
    }
    const std::size_t commit_index = sent;
    if (queued) {
      queued = SendBytes(c, "COMMIT", {});
      sent += queued ? 1 : 0;
    }
    absl::Status first_error;
    if (!queued) first_error = PgError(c, nullptr, what);
    if (PQpipelineSync(c) != 1) {
      // Nothing can be read back reliably: the connection is closed by Release's check.
      if (first_error.ok()) first_error = PgError(c, nullptr, what);
      return first_error;
    }
    bool committed = false;
    for (std::size_t i = 0; i < sent; ++i) {
      ResultPtr r(PQgetResult(c));
      if (r == nullptr) {
        if (first_error.ok()) first_error = PgError(c, nullptr, what);
        return first_error;  // connection lost: libpq has nothing more
      }
      ExecStatusType st = PQresultStatus(r.get());
      if (st == PGRES_COMMAND_OK) {
        if (i == commit_index) committed = std::string_view(PQcmdStatus(r.get())) == "COMMIT";
      } else if (st == PGRES_TUPLES_OK && i == fence_index) {
        // the epoch is still ours
      } else if (st != PGRES_PIPELINE_ABORTED && first_error.ok()) {
        const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
        first_error = i == fence_index && state != nullptr && std::string_view(state) == "22012"
                          ? absl::FailedPreconditionError(fmt::format(
                                "{}: another gfcatalogd opened this database after this one: "
                                "this process no longer writes to it (restart it)",
                                what))
                          : PgError(c, r.get(), what);
      }
      ResultPtr end(PQgetResult(c));  // null after each statement's result
      if (end != nullptr && first_error.ok()) first_error = PgError(c, end.get(), what);
    }
    bool synced = false;
    first_error = EndPipeline(c, what, std::move(first_error), synced);
    if (!synced) return first_error;
    if (PQtransactionStatus(c) == PQTRANS_INERROR) {
      // The failed transaction block stays open after the Sync; end it so the connection can
      // go back to the pool.
      absl::StatusOr<ResultPtr> r = Exec(c, "ROLLBACK", what);
      (void)r;  // ignored: Release discards a connection still inside a transaction
    }
    if (!first_error.ok()) return first_error;
    if (!committed) return absl::InternalError(fmt::format("{}: postgresql: not committed", what));
    return absl::OkStatus();
  }

  // Constant after construction
  const std::string conninfo_;
  const std::string description_;
  const std::size_t max_connections_;
  const bool shared_;
  // Fails (division by zero, SQLSTATE 22012) once another open took a newer epoch.
  const std::string fence_sql_;
  std::string get_sql_[kNumTables];
  std::string put_sql_[kNumTables];
  std::string delete_sql_[kNumTables];
  std::string delete_range_sql_[kNumTables];

  absl::Mutex lock_mu_;
  ConnPtr lock_conn_ ABSL_GUARDED_BY(lock_mu_);

  absl::Mutex leader_mu_;
  ConnPtr leader_conn_ ABSL_GUARDED_BY(leader_mu_);
  bool leading_ ABSL_GUARDED_BY(leader_mu_) = false;

  // Held by the thread holding the write lock (shared stores): the threads of one process
  // queue here, not each on a pooled connection waiting in the database (which could take
  // every connection of the pool while the holder needs one for its reads).
  absl::Mutex write_mu_;

  absl::Mutex mu_;
  std::vector<ConnPtr> idle_ ABSL_GUARDED_BY(mu_);
  std::size_t open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + leased
};

void Lease::Release() {
  if (store_ != nullptr && conn_ != nullptr) store_->Release(std::move(conn_));
  store_ = nullptr;
}

void Lease::Discard() {
  if (store_ != nullptr && conn_ != nullptr) store_->Drop(std::move(conn_));
  store_ = nullptr;
}

// The write lock of a shared store. The outermost one on a thread holds the connection with
// the advisory lock; inner ones (re-entry) only count.
class PgWriteLock : public KvWriteLock {
 public:
  PgWriteLock(PgStore* store, std::unique_ptr<Lease> lease)
      : store_(store), lease_(std::move(lease)) {}
  ~PgWriteLock() override {
    if (--t_write_pin.depth > 0) return;
    store_->UnlockWrites(std::move(lease_));
  }

 private:
  PgStore* store_;
  std::unique_ptr<Lease> lease_;  // null for an inner one
};

absl::StatusOr<std::unique_ptr<KvWriteLock>> PgStore::LockWrites() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (!shared_) return std::make_unique<KvWriteLock>();
  if (t_write_pin.store == this) {
    ++t_write_pin.depth;
    return std::make_unique<PgWriteLock>(this, nullptr);
  }
  if (t_write_pin.store != nullptr) {
    return absl::InternalError("write lock: this thread holds another database's write lock");
  }
  write_mu_.Lock();
  auto fail = [this](absl::Status s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    write_mu_.Unlock();
    return Context(s, "write lock");
  };
  if (absl::Status s = CheckServeLock(); !s.ok()) return fail(s);
  absl::StatusOr<Lease> lease = Acquire();
  if (!lease.ok()) return fail(lease.status());
  auto held = std::make_unique<Lease>(std::move(*lease));
  absl::StatusOr<ResultPtr> r =
      Exec(held->get(), fmt::format("SELECT pg_advisory_lock({})", kWriteLockKey), "write lock");
  if (!r.ok()) {
    DiscardIdleIfBroken(held->get());
    held->Discard();
    return fail(r.status());
  }
  t_write_pin = WritePin{this, held->get(), 1};
  return std::make_unique<PgWriteLock>(this, std::move(held));
}

// Listens for shared writes' notices on a connection of its own, on its own thread.
class PgWatch : public KvWatch {
 public:
  PgWatch(std::string conninfo, std::function<void()> on_change)
      : conninfo_(std::move(conninfo)), on_change_(std::move(on_change)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~PgWatch() override {
    stop_.store(true);
    thread_.join();
  }

 private:
  void Run() {
    ConnPtr c;
    while (!stop_.load()) {
      if (c == nullptr) {
        absl::StatusOr<ConnPtr> fresh = Connect(conninfo_);
        if (fresh.ok() &&
            Exec(fresh->get(), fmt::format("LISTEN {}", kNotifyChannel), "listen").ok()) {
          c = std::move(*fresh);
          on_change_();  // whatever was written while no one listened
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        continue;
      }
      pollfd p{PQsocket(c.get()), POLLIN, 0};
      if (poll(&p, 1, /*ms=*/100) < 0 && errno != EINTR) {
        c.reset();
        continue;
      }
      if (PQconsumeInput(c.get()) != 1 || Broken(c.get())) {
        c.reset();
        continue;
      }
      bool any = false;
      while (PGnotify* n = PQnotifies(c.get())) {
        PQfreemem(n);
        any = true;
      }
      if (any) on_change_();
    }
  }

  const std::string conninfo_;
  const std::function<void()> on_change_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::unique_ptr<KvWatch> PgStore::WatchWrites(std::function<void()> on_change) {
  if (!shared_) return nullptr;
  return std::make_unique<PgWatch>(conninfo_, std::move(on_change));
}

// Brings the schema to ProgramSchemaVersion() in one transaction, under a transaction-scoped
// advisory lock (so two opens cannot both apply a step).
absl::Status Migrate(PGconn* c) {
  absl::StatusOr<ResultPtr> r = Exec(c, "BEGIN", "schema");
  if (!r.ok()) return r.status();
  auto fail = [c](absl::Status s) {
    absl::StatusOr<ResultPtr> rb = Exec(c, "ROLLBACK", "schema");
    (void)rb;  // ignored: the error being returned is the one that matters
    return s;
  };
  for (const std::string& sql :
       {fmt::format("SELECT pg_advisory_xact_lock({})", kMigrateLockKey),
        std::string("CREATE TABLE IF NOT EXISTS schema_version (one boolean PRIMARY KEY DEFAULT "
                    "true CHECK (one), version integer NOT NULL)")}) {
    if (r = Exec(c, sql, "schema"); !r.ok()) return fail(r.status());
  }
  r = Exec(c, "SELECT version FROM schema_version", "schema");
  if (!r.ok()) return fail(r.status());
  int version = 0;
  if (PQntuples(r->get()) > 0 && !absl::SimpleAtoi(PQgetvalue(r->get(), 0, 0), &version)) {
    return fail(absl::DataLossError("schema: unreadable schema_version"));
  }
  const int program = ProgramSchemaVersion();
  if (version > program) {
    return fail(absl::FailedPreconditionError(
        fmt::format("database schema version {} is newer than this program ({}): upgrade "
                    "gfcatalogd",
                    version, program)));
  }
  for (const Migration& m : Migrations()) {
    if (m.version <= version) continue;
    for (const std::string& sql : m.statements) {
      if (r = Exec(c, sql, fmt::format("schema version {}", m.version)); !r.ok()) {
        return fail(r.status());
      }
    }
  }
  if (version < program) {
    r = Exec(c,
             fmt::format("INSERT INTO schema_version (version) VALUES ({}) ON CONFLICT (one) DO "
                         "UPDATE SET version = EXCLUDED.version",
                         program),
             "schema");
    if (!r.ok()) return fail(r.status());
  }
  r = Exec(c, "COMMIT", "schema");
  if (!r.ok()) return r.status();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvStore>> OpenPgStore(const PgStoreOptions& options) {
  if (options.max_connections == 0) {
    return absl::InvalidArgumentError("postgresql: max_connections must be at least 1");
  }
  const std::string conninfo = LibpqConninfo(options.conninfo);
  absl::StatusOr<std::string> description = DescribeConninfo(conninfo);
  if (!description.ok()) return description.status();
  absl::StatusOr<ConnPtr> lock_conn = Connect(conninfo);
  if (!lock_conn.ok()) {
    return absl::Status(
        lock_conn.status().code(),
        fmt::format("{}: {}", *description, std::string(lock_conn.status().message())));
  }
  if (absl::Status s = TakeServeLock(lock_conn->get(), options.shared); !s.ok()) return s;
  if (options.must_exist) {
    absl::StatusOr<ResultPtr> r =
        Exec(lock_conn->get(), "SELECT to_regclass('schema_version') IS NOT NULL", "open");
    if (!r.ok()) return r.status();
    if (std::string_view(PQgetvalue(r->get(), 0, 0)) != "t") {
      return absl::NotFoundError(
          fmt::format("{}: no gfrep catalog in this database (no schema_version table)",
                      *description));
    }
  }
  if (absl::Status s = Migrate(lock_conn->get()); !s.ok()) return s;
  // A lone process takes a new epoch (fencing every earlier process); shared front ends
  // take the current one (they fence one another with the write lock instead).
  absl::StatusOr<ResultPtr> epoch =
      Exec(lock_conn->get(),
           options.shared ? "SELECT epoch FROM serve_epoch"
                          : "UPDATE serve_epoch SET epoch = epoch + 1 RETURNING epoch",
           "open");
  if (!epoch.ok()) return epoch.status();
  std::int64_t mine = 0;
  if (PQntuples(epoch->get()) != 1 || !absl::SimpleAtoi(PQgetvalue(epoch->get(), 0, 0), &mine)) {
    return absl::DataLossError("open: unreadable serve_epoch");
  }
  return std::make_unique<PgStore>(options, conninfo, *std::move(description),
                                   *std::move(lock_conn), mine);
}

}  // namespace gfrep::catalog::internal
