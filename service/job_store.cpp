// service/job_store.cpp — SQLite persistence of jobs (see job_store.h).
#include "service/job_store.h"

#include <sqlite3.h>

#include <chrono>
#include <random>

namespace tapp::service {
using nlohmann::json;

bool is_known_status(const std::string& s) {
  return s == kQueued || s == kProfiling || s == kOptimizing || s == kSucceeded || s == kFailed ||
         s == kCancelled;
}
bool is_running_status(const std::string& s) { return s == kProfiling || s == kOptimizing; }
bool is_final_status(const std::string& s) { return s == kSucceeded || s == kFailed || s == kCancelled; }

double now_s() {
  using namespace std::chrono;
  return duration_cast<duration<double>>(system_clock::now().time_since_epoch()).count();
}

namespace {

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  status TEXT NOT NULL,
  model_label TEXT NOT NULL DEFAULT '',
  request TEXT NOT NULL,
  progress TEXT,
  error TEXT NOT NULL DEFAULT '',
  restarts INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL,
  started_at REAL NOT NULL DEFAULT 0,
  finished_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, seq);
CREATE TABLE IF NOT EXISTS uploads (
  job_id TEXT PRIMARY KEY REFERENCES jobs(id),
  bytes BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  at REAL NOT NULL,
  event TEXT NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS results (
  job_id TEXT PRIMARY KEY REFERENCES jobs(id),
  result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS profile_cache (
  key TEXT PRIMARY KEY,
  value BLOB NOT NULL,
  updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policies (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at REAL NOT NULL,
  feature_version INTEGER NOT NULL,
  trained_on TEXT NOT NULL,
  bytes BLOB NOT NULL
);
)sql";

std::string new_job_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^
                                          static_cast<uint64_t>(now_s() * 1e6)};
  static const char* hex = "0123456789abcdef";
  std::string id = "j";
  uint64_t v = rng();
  for (int i = 0; i < 12; ++i, v >>= 4) id += hex[v & 15];
  return id;
}

// A prepared statement that finalizes itself; binds by 1-based index.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) st_ = nullptr;
  }
  ~Stmt() { sqlite3_finalize(st_); }
  bool ok() const { return st_ != nullptr; }
  Stmt& bind(int i, const std::string& s) {
    sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind_blob(int i, const std::string& s) {
    sqlite3_bind_blob(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(st_, i, v);
    return *this;
  }
  int step() { return sqlite3_step(st_); }
  std::string text(int c) const {
    const unsigned char* t = sqlite3_column_text(st_, c);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(st_, c)) : std::string();
  }
  std::string blob(int c) const {
    const void* b = sqlite3_column_blob(st_, c);
    return b ? std::string(static_cast<const char*>(b), sqlite3_column_bytes(st_, c)) : std::string();
  }
  int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
  double dbl(int c) const { return sqlite3_column_double(st_, c); }
  bool is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  Status error(const char* what) const { return Status::error(std::string(what) + ": " + sqlite3_errmsg(db_)); }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

json parse_or_null(const std::string& s) {
  if (s.empty()) return nullptr;
  json j = json::parse(s, nullptr, false);
  return j.is_discarded() ? json() : j;
}

const char* kJobColumns =
    "id, seq, status, model_label, request, progress, error, restarts, created_at, updated_at, started_at, "
    "finished_at";

JobRecord read_job(const Stmt& st) {
  JobRecord r;
  r.id = st.text(0);
  r.seq = st.i64(1);
  r.status = st.text(2);
  r.model_label = st.text(3);
  r.request = parse_or_null(st.text(4));
  r.progress = st.is_null(5) ? json() : parse_or_null(st.text(5));
  r.error = st.text(6);
  r.restarts = static_cast<int>(st.i64(7));
  r.created_at_s = st.dbl(8);
  r.updated_at_s = st.dbl(9);
  r.started_at_s = st.dbl(10);
  r.finished_at_s = st.dbl(11);
  return r;
}

}  // namespace

Result<std::unique_ptr<JobStore>> JobStore::open(const std::string& path) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::error("db: cannot open " + path + ": " + msg);
  }
  std::unique_ptr<JobStore> store(new JobStore(db));
  sqlite3_busy_timeout(db, 5000);
  if (Status s = store->exec("PRAGMA journal_mode=WAL;"); !s) return s;
  if (Status s = store->exec("PRAGMA synchronous=NORMAL;"); !s) return s;
  if (Status s = store->exec("PRAGMA foreign_keys=ON;"); !s) return s;
  if (Status s = store->exec(kSchema); !s) return s;
  Result<std::string> mode = store->journal_mode();
  if (!mode) return mode.status();
  if (*mode != "wal") return Status::error("db: " + path + " is not in WAL mode (" + *mode + ")");
  return store;
}

JobStore::~JobStore() { sqlite3_close_v2(db_); }

Status JobStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Status::error("db: " + msg);
  }
  return Status::ok();
}

Status JobStore::insert(JobRecord& job, const std::string& upload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (job.id.empty()) job.id = new_job_id();
  job.created_at_s = job.updated_at_s = now_s();
  job.status = kQueued;
  if (Status s = exec("BEGIN IMMEDIATE;"); !s) return s;
  Stmt st(db_,
          "INSERT INTO jobs (id, status, model_label, request, created_at, updated_at) VALUES (?,?,?,?,?,?)");
  if (!st.ok()) {
    exec("ROLLBACK;");
    return st.error("db: insert job");
  }
  st.bind(1, job.id).bind(2, job.status).bind(3, job.model_label).bind(4, job.request.dump());
  st.bind(5, job.created_at_s).bind(6, job.updated_at_s);
  if (st.step() != SQLITE_DONE) {
    Status e = st.error("db: insert job");
    exec("ROLLBACK;");
    return e;
  }
  job.seq = sqlite3_last_insert_rowid(db_);
  if (!upload.empty()) {
    Stmt up(db_, "INSERT INTO uploads (job_id, bytes) VALUES (?,?)");
    up.bind(1, job.id).bind_blob(2, upload);
    if (!up.ok() || up.step() != SQLITE_DONE) {
      Status e = up.error("db: insert upload");
      exec("ROLLBACK;");
      return e;
    }
  }
  return exec("COMMIT;");
}

Result<std::optional<JobRecord>> JobStore::get(const std::string& id, bool with_result) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?";
  Stmt st(db_, sql.c_str());
  if (!st.ok()) return st.error("db: get job");
  st.bind(1, id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<JobRecord>();
  if (rc != SQLITE_ROW) return st.error("db: get job");
  JobRecord r = read_job(st);
  if (with_result && r.status == kSucceeded) {
    Stmt rs(db_, "SELECT result FROM results WHERE job_id = ?");
    rs.bind(1, id);
    if (rs.ok() && rs.step() == SQLITE_ROW) r.result = parse_or_null(rs.text(0));
  }
  return std::optional<JobRecord>(std::move(r));
}

Result<JobPage> JobStore::list(const std::string& status_filter, int64_t limit, int64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  JobPage page;
  std::string where = status_filter.empty() ? "" : " WHERE status = ?";
  {
    std::string sql = "SELECT COUNT(*) FROM jobs" + where;
    Stmt st(db_, sql.c_str());
    if (!st.ok()) return st.error("db: count jobs");
    if (!status_filter.empty()) st.bind(1, status_filter);
    if (st.step() != SQLITE_ROW) return st.error("db: count jobs");
    page.total = st.i64(0);
  }
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs" + where + " ORDER BY seq DESC LIMIT ? OFFSET ?";
  Stmt st(db_, sql.c_str());
  if (!st.ok()) return st.error("db: list jobs");
  int i = 1;
  if (!status_filter.empty()) st.bind(i++, status_filter);
  st.bind(i++, limit);
  st.bind(i++, offset);
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) page.jobs.push_back(read_job(st));
  if (rc != SQLITE_DONE) return st.error("db: list jobs");
  return page;
}

Result<std::optional<std::string>> JobStore::upload(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT bytes FROM uploads WHERE job_id = ?");
  if (!st.ok()) return st.error("db: get upload");
  st.bind(1, id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return st.error("db: get upload");
  return std::optional<std::string>(st.blob(0));
}

Result<bool> JobStore::transition(const std::string& id, const std::vector<std::string>& from,
                                  const std::string& to, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string in;
  for (size_t i = 0; i < from.size(); ++i) in += i ? ",?" : "?";
  std::string sql = "UPDATE jobs SET status = ?, updated_at = ?, error = ?";
  if (is_running_status(to)) sql += ", started_at = CASE WHEN started_at = 0 OR status = 'queued' THEN ? ELSE started_at END";
  if (is_final_status(to)) sql += ", finished_at = ?";
  sql += " WHERE id = ? AND status IN (" + in + ")";
  Stmt st(db_, sql.c_str());
  if (!st.ok()) return st.error("db: update job");
  double t = now_s();
  int i = 1;
  st.bind(i++, to);
  st.bind(i++, t);
  st.bind(i++, error);
  if (is_running_status(to) || is_final_status(to)) st.bind(i++, t);
  st.bind(i++, id);
  for (const std::string& f : from) st.bind(i++, f);
  if (st.step() != SQLITE_DONE) return st.error("db: update job");
  return sqlite3_changes(db_) > 0;
}

Result<bool> JobStore::finish_succeeded(const std::string& id, const json& result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status s = exec("BEGIN IMMEDIATE;"); !s) return s;
  double t = now_s();
  Stmt st(db_,
          "UPDATE jobs SET status = 'succeeded', updated_at = ?, finished_at = ? "
          "WHERE id = ? AND status IN ('profiling', 'optimizing')");
  st.bind(1, t).bind(2, t).bind(3, id);
  if (!st.ok() || st.step() != SQLITE_DONE) {
    Status e = st.error("db: finish job");
    exec("ROLLBACK;");
    return e;
  }
  if (sqlite3_changes(db_) == 0) {
    exec("ROLLBACK;");
    return false;
  }
  Stmt rs(db_, "INSERT OR REPLACE INTO results (job_id, result) VALUES (?, ?)");
  rs.bind(1, id).bind(2, result.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!rs.ok() || rs.step() != SQLITE_DONE) {
    Status e = rs.error("db: store result");
    exec("ROLLBACK;");
    return e;
  }
  if (Status s = exec("COMMIT;"); !s) return s;
  return true;
}

Status JobStore::set_progress(const std::string& id, const json& progress) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "UPDATE jobs SET progress = ?, updated_at = ? WHERE id = ?");
  st.bind(1, progress.dump()).bind(2, now_s()).bind(3, id);
  if (!st.ok() || st.step() != SQLITE_DONE) return st.error("db: set progress");
  return Status::ok();
}

Status JobStore::add_event(const std::string& id, const json& event) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "INSERT INTO events (job_id, seq, at, event) "
          "VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?), ?, ?)");
  st.bind(1, id).bind(2, id).bind(3, now_s()).bind(4, event.dump());
  if (!st.ok() || st.step() != SQLITE_DONE) return st.error("db: add event");
  return Status::ok();
}

Result<std::vector<JobEvent>> JobStore::events(const std::string& id, int64_t after_seq, int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT seq, at, event FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?");
  if (!st.ok()) return st.error("db: events");
  st.bind(1, id).bind(2, after_seq).bind(3, limit);
  std::vector<JobEvent> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back({st.i64(0), st.dbl(1), parse_or_null(st.text(2))});
  if (rc != SQLITE_DONE) return st.error("db: events");
  return out;
}

Result<std::vector<std::string>> JobStore::recover() {
  std::vector<std::string> interrupted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "SELECT id FROM jobs WHERE status IN ('profiling', 'optimizing') ORDER BY seq");
    if (!st.ok()) return st.error("db: recover");
    while (st.step() == SQLITE_ROW) interrupted.push_back(st.text(0));
  }
  for (const std::string& id : interrupted) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Status s = exec("BEGIN IMMEDIATE;"); !s) return s;
      Stmt st(db_,
              "UPDATE jobs SET status = 'queued', restarts = restarts + 1, progress = NULL, updated_at = ? "
              "WHERE id = ? AND status IN ('profiling', 'optimizing')");
      st.bind(1, now_s()).bind(2, id);
      bool ok = st.ok() && st.step() == SQLITE_DONE;
      Stmt del(db_, "DELETE FROM events WHERE job_id = ?");
      del.bind(1, id);
      ok = ok && del.ok() && del.step() == SQLITE_DONE;
      if (!ok) {
        exec("ROLLBACK;");
        return Status::error(std::string("db: recover ") + id + ": " + sqlite3_errmsg(db_));
      }
      if (Status s = exec("COMMIT;"); !s) return s;
    }
    add_event(id, json{{"phase", "requeued"}, {"message", "the server stopped while this job ran; it runs again"}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT id FROM jobs WHERE status = 'queued' ORDER BY seq");
  if (!st.ok()) return st.error("db: recover");
  std::vector<std::string> queued;
  while (st.step() == SQLITE_ROW) queued.push_back(st.text(0));
  return queued;
}

Result<std::string> JobStore::integrity_check() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "PRAGMA integrity_check");
  if (!st.ok() || st.step() != SQLITE_ROW) return st.error("db: integrity_check");
  return st.text(0);
}

Result<std::string> JobStore::journal_mode() {
  Stmt st(db_, "PRAGMA journal_mode");
  if (!st.ok() || st.step() != SQLITE_ROW) return st.error("db: journal_mode");
  return st.text(0);
}

Status JobStore::cache_put(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "INSERT OR REPLACE INTO profile_cache (key, value, updated_at) VALUES (?, ?, ?)");
  st.bind(1, key).bind_blob(2, value).bind(3, now_s());
  if (!st.ok() || st.step() != SQLITE_DONE) return st.error("db: cache put");
  return Status::ok();
}

Result<std::optional<std::string>> JobStore::cache_get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT value FROM profile_cache WHERE key = ?");
  if (!st.ok()) return st.error("db: cache get");
  st.bind(1, key);
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return st.error("db: cache get");
  return std::optional<std::string>(st.blob(0));
}

Result<StoredPolicy> JobStore::add_policy(const std::string& bytes, int feature_version, const json& trained_on) {
  std::lock_guard<std::mutex> lock(mu_);
  StoredPolicy p{0, now_s(), feature_version, trained_on, {}, static_cast<int64_t>(bytes.size())};
  Stmt st(db_, "INSERT INTO policies (created_at, feature_version, trained_on, bytes) VALUES (?, ?, ?, ?)");
  st.bind(1, p.created_at_s).bind(2, static_cast<int64_t>(feature_version)).bind(3, trained_on.dump()).bind_blob(4, bytes);
  if (!st.ok() || st.step() != SQLITE_DONE) return st.error("db: add policy");
  p.id = sqlite3_last_insert_rowid(db_);
  return p;
}

Result<std::vector<StoredPolicy>> JobStore::list_policies(int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT id, created_at, feature_version, trained_on, length(bytes) FROM policies ORDER BY id DESC LIMIT ?");
  if (!st.ok()) return st.error("db: list policies");
  st.bind(1, limit);
  std::vector<StoredPolicy> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW)
    out.push_back({st.i64(0), st.dbl(1), static_cast<int>(st.i64(2)), parse_or_null(st.text(3)), {}, st.i64(4)});
  if (rc != SQLITE_DONE) return st.error("db: list policies");
  return out;
}

Result<std::optional<StoredPolicy>> JobStore::latest_policy(int feature_version) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "SELECT id, created_at, feature_version, trained_on, bytes FROM policies WHERE feature_version = ? "
          "ORDER BY id DESC LIMIT 1");
  if (!st.ok()) return st.error("db: latest policy");
  st.bind(1, static_cast<int64_t>(feature_version));
  const int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<StoredPolicy>();
  if (rc != SQLITE_ROW) return st.error("db: latest policy");
  std::string bytes = st.blob(4);
  const auto size = static_cast<int64_t>(bytes.size());
  return std::optional<StoredPolicy>(
      StoredPolicy{st.i64(0), st.dbl(1), static_cast<int>(st.i64(2)), parse_or_null(st.text(3)), std::move(bytes), size});
}

}  // namespace tapp::service
