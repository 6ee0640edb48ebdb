/*
 * store_sqlite.c: the embedded session store backend: SQLite in WAL mode, one file
 * (state_dir/sessions.db), one row per session (see session_store.h for the ops).
 * Beside it: xlserve.lock (one daemon per directory) and xlserve.reserve (room kept for a full
 * disk: see "a full disk" below).
 * store_sqlite_open runs on the main thread at start (directory, lock, schema); every other
 * function runs on the thread that owns the connection (one connection per thread, opened
 * with SQLITE_OPEN_NOMUTEX): the store thread (turns, saves, deletions) and the compaction
 * thread (reads: get, next_delta, release, which WAL lets run while the store thread commits;
 * writes: put_piece, swap, collect, in transactions the front serialises with the store
 * thread's).
 *
 * Schema (PRAGMA user_version = 5):
 *   sessions(owner BLOB(32), id TEXT, fingerprint INTEGER, created REAL, last_used REAL,
 *            tokens INTEGER, turns INTEGER, mode INTEGER, messages INTEGER, positions INTEGER,
 *            seq INTEGER, snap_seq INTEGER, snap_id INTEGER, snap_bytes INTEGER,
 *            n_deltas INTEGER, delta_bytes INTEGER, PRIMARY KEY (owner, id))
 *     one small row per session: its metadata and versions (a turn updates it; no blob here,
 *     so the update never rewrites a state);
 *   snap_pieces(owner, id, snap_id INTEGER, part INTEGER, bytes BLOB,
 *               PRIMARY KEY (owner, id, snap_id, part))
 *     the snapshots in pieces: piece 0 the envelope's meta, pieces 1.. its state blob in
 *     STORE_PIECE_BYTES pieces; the session's snapshot (as of version snap_seq) is the one its
 *     row's snap_id names, any other snap_id is dead (a compaction's pieces before its swap,
 *     or what a crash or a stale compaction left) and never read;
 *   deltas(owner, id, seq INTEGER, meta BLOB, delta BLOB, PRIMARY KEY (owner, id, seq)):
 *     the turns since, in seq order (snap_seq + 1 .. seq); deltas at or below snap_seq (folded
 *     by a swap, not yet collected) are dead. A rowid table: its key lives in an index of its
 *     own, so finding a new delta's place compares small keys (in a WITHOUT ROWID table the
 *     key is the whole record, and every comparison on the way down read an earlier delta's
 *     MiBs back: at a large model most of a turn's commit);
 *   indexes on sessions (owner, last_used) for listing and (last_used) for TTL expiry; a
 *   trigger deletes a session's pieces and deltas with its row.
 * Dead pieces and deltas are deleted by `collect` after each compaction and at every open (a
 * compaction killed between its pieces and its swap).
 * Session ids are per API key: (owner, id) is the key, so two keys may each have a session of
 * the same id. Older files are migrated at open, one transaction per version: version 1 (id
 * alone the primary key) to 2 ((owner, id), one row holding meta + state), 2 to 3 (the row's
 * meta + state become its snapshot at version 1, with no deltas), 3 to 4 (a snapshots row
 * becomes two pieces, meta and state, under the row's snap_id), 4 to 5 (the deltas move from a
 * WITHOUT ROWID table to a rowid one).
 * The envelope and the deltas are authoritative; the other columns are for queries, operators
 * (sqlite3 sessions.db 'select id, tokens, n_deltas from sessions') and compaction's trigger.
 *
 * Pages of 16 KiB (see PAGE_SIZE). Checkpoints (copying the WAL back into the database) do
 * not run inside a turn's commit: SQLite's automatic checkpoint is off and a checkpoint thread
 * with its own connection runs them (PASSIVE: the writer never waits for it) when the WAL
 * passes CKPT_SOFT bytes (the writer's WAL hook wakes it) and every 2 s; a WAL past CKPT_HARD
 * (a checkpointer that has not kept up: 16 MiB behind) is checkpointed by the writer itself.
 * After a checkpoint the WAL file is cut back to WAL_KEEP bytes (journal_size_limit), so a
 * compaction's big write does not leave a big WAL behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "buf.h"
#include "session_store.h"
#include "util.h"
#include "xlog.h"

#define SCHEMA_VERSION 5
/* dead pieces / deltas deleted per `collect` call (one transaction of the compaction thread) */
#define COLLECT_BATCH 4
#define WAL_KEEP "33554432" /* bytes (32 MiB): keep in step with CKPT_HARD */
/* A new file's page size: a turn dirties a few pages besides its delta's (the session's row,
 * its two index entries, the log's b-tree), so small pages keep a small model's turn small;
 * 16 KiB still keeps a big state's overflow chain short. (Files of schema 2 keep theirs.) */
#define PAGE_SIZE "16384"

/* The checkpoint thread is woken past CKPT_SOFT of WAL; past CKPT_HARD (it fell 16 MiB behind)
 * the writer checkpoints itself after its commit, so the WAL file stays within CKPT_HARD plus
 * one transaction however slow the checkpoint thread is scheduled (a reader still inside an
 * older version can hold a checkpoint back until it ends). */
#define CKPT_SOFT ((int64_t)16 << 20)
#define CKPT_HARD ((int64_t)32 << 20)

typedef struct sqlite_cfg {
  char *path;
  int fsync;
  int lock_fd;
  /* the checkpoint thread */
  pthread_t ckpt;
  int ckpt_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop, kick;
  int held; /* tests: the checkpoint thread skips its checkpoints */
  /* a full disk (store thread): the reserve file (dir/xlserve.reserve, reserve_bytes) is
   * given up at the first SQLITE_FULL so that deletes and checkpoints find room, and made
   * again once the space is back; `tight`: the filesystem is nearly full (see check_space) */
  char *reserve;
  int64_t reserve_bytes;
  int reserve_held, tight;
} sqlite_cfg;

struct store_conn {
  sqlite3 *db;
  sqlite_cfg *cfg;
  int64_t page_size;
  sqlite3_stmt *get, *update, *insert, *del, *expire, *list, *count, *begin, *commit, *rollback;
  sqlite3_stmt *piece_put, *meta_get, *pieces_get, *pieces_clear, *deltas_clear, *deltas_get, *append_row,
      *append_delta, *swap_row, *swap_sizes, *collect_pieces, *collect_deltas;
  sqlite3_stmt *rec_put, *rec_get, *rec_del, *rec_sweep;
  int in_deltas; /* deltas_get is bound to the row of the last get */
  int freed;     /* the open transaction deletes rows (del, expire) */
  int tight;     /* this connection's journal_size_limit is the tight one (0) */
  uint8_t *snap;  /* the last get's state, its pieces joined (when it has more than one) */
};

static const char *COLS =
    "owner, fingerprint, created, last_used, tokens, turns, mode, messages, positions";

static __thread int saw_full; /* this thread's last failure was SQLITE_FULL */

static int fail(char *err, size_t cap, sqlite3 *db, const char *what) {
  snprintf(err, cap, "sqlite: %s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
  if (db && (sqlite3_extended_errcode(db) & 0xff) == SQLITE_FULL) saw_full = 1;
  return -1;
}

static int exec(sqlite3 *db, const char *sql, char *err, size_t cap) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    /* the statement's start names it (a whole schema would not fit) */
    snprintf(err, cap, "sqlite: %.120s: %s", sql, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return -1;
  }
  return 0;
}

static int mkdirs(const char *dir) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0700) && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0700) && errno != EEXIST) return -1;
  return 0;
}

static void sq_disconnect(store_conn *c) {
  if (!c) return;
  sqlite3_stmt *all[] = {c->get,          c->update,         c->insert,       c->del,
                         c->expire,       c->list,           c->count,        c->begin,
                         c->commit,       c->rollback,       c->piece_put,    c->pieces_get,
                         c->pieces_clear, c->deltas_clear,   c->deltas_get,   c->append_row,
                         c->append_delta, c->swap_row,       c->swap_sizes,   c->collect_pieces,
                         c->collect_deltas, c->meta_get,  c->rec_put,      c->rec_get,
                         c->rec_del,      c->rec_sweep};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) sqlite3_finalize(all[i]);
  free(c->snap);
  sqlite3_close(c->db);
  free(c);
}

/* After each commit (store thread): wakes the checkpoint thread, or checkpoints itself. */
static int on_wal(void *arg, sqlite3 *db, const char *name, int frames) {
  store_conn *c = arg;
  int64_t bytes = (int64_t)frames * c->page_size;
  if (bytes > CKPT_HARD) {
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  } else if (bytes > CKPT_SOFT) {
    pthread_mutex_lock(&c->cfg->mu);
    c->cfg->kick = 1;
    pthread_cond_signal(&c->cfg->cv);
    pthread_mutex_unlock(&c->cfg->mu);
  }
  return SQLITE_OK;
}

static void *ckpt_main(void *arg) {
  sqlite_cfg *cfg = arg;
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(cfg->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
      SQLITE_OK) {
    sqlite3_close(db);
    return NULL;
  }
  sqlite3_busy_timeout(db, 1000);
  sqlite3_exec(db, cfg->fsync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", NULL,
               NULL, NULL);
  pthread_mutex_lock(&cfg->mu);
  while (!cfg->stop) {
    if (!cfg->kick) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 2;
      pthread_cond_timedwait(&cfg->cv, &cfg->mu, &ts);
      if (cfg->stop) break;
    }
    cfg->kick = 0;
    if (cfg->held) continue;
    pthread_mutex_unlock(&cfg->mu);
    sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    pthread_mutex_lock(&cfg->mu);
  }
  pthread_mutex_unlock(&cfg->mu);
  sqlite3_close(db); /* the last connection: checkpoints everything and removes the WAL */
  return NULL;
}

void store_sqlite_hold_checkpoints(store_backend *b, int hold) {
  sqlite_cfg *cfg = b->cfg;
  pthread_mutex_lock(&cfg->mu);
  cfg->held = hold;
  pthread_cond_signal(&cfg->cv);
  pthread_mutex_unlock(&cfg->mu);
}

static store_conn *sq_connect(void *cfgp, char *err, size_t cap) {
  sqlite_cfg *cfg = cfgp;
  store_conn *c = xcalloc(1, sizeof *c);
  int rc = sqlite3_open_v2(cfg->path, &c->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    fail(err, cap, c->db, cfg->path);
    sq_disconnect(c);
    return NULL;
  }
  sqlite3_busy_timeout(c->db, 10000);
  if (exec(c->db, "PRAGMA journal_mode=WAL", err, cap) ||
      exec(c->db, cfg->fsync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", err, cap) ||
      exec(c->db, "PRAGMA wal_autocheckpoint=0", err, cap) ||
      exec(c->db, "PRAGMA journal_size_limit=" WAL_KEEP, err, cap) ||
      /* builds with SQLITE_SECURE_DELETE (Debian's) zero every freed page: a compaction would
       * write the old snapshot's and the folded deltas' pages once more, as zeros. FAST zeroes
       * only what costs no extra I/O; freed content stays in free pages of this private file
       * (0600 in a 0700 directory) until they are reused. */
      exec(c->db, "PRAGMA secure_delete=FAST", err, cap)) {
    sq_disconnect(c);
    return NULL;
  }
  c->cfg = cfg;
  c->page_size = 4096;
  sqlite3_stmt *ps;
  if (sqlite3_prepare_v2(c->db, "PRAGMA page_size", -1, &ps, NULL) == SQLITE_OK) {
    if (sqlite3_step(ps) == SQLITE_ROW) c->page_size = sqlite3_column_int64(ps, 0);
    sqlite3_finalize(ps);
  }
  sqlite3_wal_hook(c->db, on_wal, c);
  char sql[1024];
  struct {
    sqlite3_stmt **st;
    const char *sql;
  } prep[] = {
      {&c->get, NULL},
      {&c->update, NULL},
      {&c->insert, NULL},
      {&c->del, "DELETE FROM sessions WHERE owner = ?2 AND id = ?1"},
      {&c->expire,
       "DELETE FROM sessions WHERE rowid IN (SELECT rowid FROM sessions WHERE last_used < ?1 "
       "ORDER BY last_used LIMIT ?2) RETURNING id, owner"},
      {&c->list, NULL},
      {&c->count, "SELECT count(*) FROM sessions"},
      {&c->piece_put, "INSERT OR REPLACE INTO snap_pieces (owner, id, snap_id, part, bytes) "
                      "VALUES (?2, ?1, ?3, ?4, ?5)"},
      {&c->meta_get, "SELECT bytes FROM snap_pieces WHERE owner = ?2 AND id = ?1 AND "
                     "snap_id = ?3 AND part = 0"},
      {&c->pieces_get, "SELECT bytes FROM snap_pieces WHERE owner = ?2 AND id = ?1 AND "
                       "snap_id = ?3 AND part > 0 ORDER BY part"},
      {&c->pieces_clear, "DELETE FROM snap_pieces WHERE owner = ?2 AND id = ?1"},
      {&c->deltas_clear, "DELETE FROM deltas WHERE owner = ?2 AND id = ?1"},
      {&c->deltas_get, "SELECT seq, meta, delta FROM deltas WHERE owner = ?2 AND id = ?1 AND "
                       "seq > ?3 ORDER BY seq"},
      {&c->append_row,
       "UPDATE sessions SET fingerprint = ?3, created = ?4, last_used = ?5, tokens = ?6, "
       "turns = ?7, mode = ?8, messages = ?9, positions = ?10, seq = ?11, n_deltas = n_deltas "
       "+ 1, delta_bytes = delta_bytes + ?12 WHERE owner = ?2 AND id = ?1 AND seq = ?11 - 1 "
       "RETURNING snap_bytes, delta_bytes, n_deltas"},
      {&c->append_delta, "INSERT INTO deltas (owner, id, seq, meta, delta) VALUES "
                         "(?2, ?1, ?3, ?4, ?5)"},
      {&c->swap_row,
       "UPDATE sessions SET snap_id = ?3, snap_seq = ?4, snap_bytes = ?5 WHERE owner = ?2 AND "
       "id = ?1 AND snap_id = ?6 AND seq >= ?4 AND (SELECT count(*) FROM snap_pieces p WHERE "
       "p.owner = ?2 AND p.id = ?1 AND p.snap_id = ?3) = ?7 RETURNING 1"},
      /* length() of a blob column reads no overflow page */
      {&c->swap_sizes,
       "UPDATE sessions SET n_deltas = (SELECT count(*) FROM deltas d WHERE d.owner = ?2 AND "
       "d.id = ?1 AND d.seq > sessions.snap_seq), delta_bytes = (SELECT "
       "coalesce(sum(length(d.meta) + length(d.delta)), 0) FROM deltas d WHERE d.owner = ?2 AND "
       "d.id = ?1 AND d.seq > sessions.snap_seq) WHERE owner = ?2 AND id = ?1"},
      {&c->collect_pieces,
       "DELETE FROM snap_pieces WHERE rowid IN (SELECT p.rowid FROM snap_pieces p WHERE "
       "p.owner = ?2 AND p.id = ?1 AND p.snap_id IS NOT (SELECT s.snap_id FROM sessions s WHERE "
       "s.owner = ?2 AND s.id = ?1) LIMIT ?3)"},
      {&c->collect_deltas,
       "DELETE FROM deltas WHERE owner = ?2 AND id = ?1 AND seq IN (SELECT d.seq FROM deltas d "
       "WHERE d.owner = ?2 AND d.id = ?1 AND d.seq <= coalesce((SELECT s.snap_seq FROM sessions "
       "s WHERE s.owner = ?2 AND s.id = ?1), d.seq) ORDER BY d.seq LIMIT ?3)"},
      {&c->rec_put, "INSERT OR REPLACE INTO records (ns, owner, key, expires, value) VALUES "
                    "(?1, ?2, ?3, ?4, ?5)"},
      {&c->rec_get, "SELECT value, expires FROM records WHERE ns = ?1 AND owner = ?2 AND key = ?3 "
                    "AND expires > ?4"},
      {&c->rec_del, "DELETE FROM records WHERE ns = ?1 AND owner = ?2 AND key = ?3"},
      {&c->rec_sweep, "DELETE FROM records WHERE rowid IN (SELECT rowid FROM records WHERE "
                      "expires <= ?1 ORDER BY expires LIMIT 8)"},
      {&c->begin, "BEGIN IMMEDIATE"},
      {&c->commit, "COMMIT"},
      {&c->rollback, "ROLLBACK"},
  };
  for (size_t i = 0; i < sizeof prep / sizeof *prep; i++) {
    const char *q = prep[i].sql;
    if (prep[i].st == &c->get) {
      q = "SELECT s.owner, s.fingerprint, s.created, s.last_used, s.tokens, s.turns, s.mode, "
          "s.messages, s.positions, NULL, NULL, s.seq, s.snap_seq, s.snap_id, s.snap_bytes, "
          "s.n_deltas, s.delta_bytes FROM sessions s WHERE s.owner = ?2 AND s.id = ?1";
    } else if (prep[i].st == &c->update) {
      q = "UPDATE sessions SET fingerprint = ?3, created = ?4, last_used = ?5, tokens = ?6, "
          "turns = ?7, mode = ?8, messages = ?9, positions = ?10, seq = ?11, snap_seq = ?11, "
          "snap_id = ?12, snap_bytes = ?13, n_deltas = 0, delta_bytes = 0 "
          "WHERE owner = ?2 AND id = ?1";
    } else if (prep[i].st == &c->insert) {
      snprintf(sql, sizeof sql,
               "INSERT INTO sessions (id, %s, seq, snap_seq, snap_id, snap_bytes, n_deltas, "
               "delta_bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12, "
               "?13, 0, 0)",
               COLS);
      q = sql;
    } else if (prep[i].st == &c->list) {
      snprintf(sql, sizeof sql,
               "SELECT %s, id FROM sessions WHERE owner = ?1 ORDER BY last_used DESC LIMIT ?2",
               COLS);
      q = sql;
    }
    if (sqlite3_prepare_v3(c->db, q, -1, SQLITE_PREPARE_PERSISTENT, prep[i].st, NULL) !=
        SQLITE_OK) {
      fail(err, cap, c->db, q);
      sq_disconnect(c);
      return NULL;
    }
  }
  return c;
}

/* Releases the blobs a previous get lent (and its read transaction). */
static void settle(store_conn *c) {
  sqlite3_reset(c->rec_get);
  sqlite3_reset(c->get);
  sqlite3_reset(c->meta_get);
  sqlite3_reset(c->pieces_get);
  free(c->snap);
  c->snap = NULL;
  if (c->in_deltas) {
    sqlite3_reset(c->deltas_get);
    c->in_deltas = 0;
  }
}

static int step_done(store_conn *c, sqlite3_stmt *st, char *err, size_t cap, const char *what) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail(err, cap, c->db, what);
  return 0;
}

/* ---- a full disk ----
 * SQLite in WAL mode needs room to give room back: a delete is a transaction appended to the
 * WAL, and a checkpoint writes the WAL's new pages into the database file before the WAL can
 * be cut. A disk that filled up with both could do neither (every later turn and delete
 * failed until the directory moved to a larger disk). So:
 *   - while the filesystem is nearly full (`tight`: less free than TIGHT_FREE, more than the
 *     WAL can hold before the checkpoint thread copies it), the writer checkpoints after each commit and the WAL is cut back to nothing at
 *     each restart (journal_size_limit 0): the data lives in the database file, not twice;
 *   - a reserve file (a thirty-second of the filesystem, 64 KiB to 8 MiB) is kept beside the
 *     database; the first SQLITE_FULL deletes it, and then (outside the failed transaction) a
 *     TRUNCATE checkpoint empties the WAL, incremental_vacuum gives the database's free pages
 *     back (new files are auto_vacuum=INCREMENTAL) and a second checkpoint cuts the file;
 *   - after a commit that deleted rows while tight, the same vacuum and checkpoint;
 *   - once four reserves' worth is free again the reserve is made again; above TIGHT_FREE the
 *     WAL keeps WAL_KEEP bytes again.
 * The failed turn itself is not kept (SQLITE_FULL leaves no commit frame: sq_commit). */
#define TIGHT_FREE ((int64_t)64 << 20)
#define SHRINK_PAGES "8" /* pages given back per step (a file without auto_vacuum: none) */

static int64_t free_bytes(const char *path, int64_t *total) {
  struct statvfs v;
  if (statvfs(path, &v)) return -1;
  if (total) *total = (int64_t)v.f_blocks * (int64_t)v.f_frsize;
  return (int64_t)v.f_bavail * (int64_t)v.f_frsize;
}

static void reserve_make(sqlite_cfg *cfg) {
  int fd = open(cfg->reserve, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  int rc = posix_fallocate(fd, 0, (off_t)cfg->reserve_bytes);
  close(fd);
  if (rc) {
    unlink(cfg->reserve);
    return;
  }
  cfg->reserve_held = 1;
}

static long freelist(store_conn *c) {
  sqlite3_stmt *st;
  long n = -1;
  if (sqlite3_prepare_v2(c->db, "PRAGMA freelist_count", -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) n = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  return n;
}

/* Cuts the WAL and gives the database's free pages back to the filesystem (store thread, no
 * transaction open): a few pages at a time, each step's moves going through the WAL and its
 * TRUNCATE checkpoint cutting the file, so a nearly full disk has room for the next step. */
static void shrink(store_conn *c) {
  sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
  for (long left = freelist(c), was = -1; left > 0 && (was < 0 || left < was);
       was = left, left = freelist(c)) {
    if (sqlite3_exec(c->db, "PRAGMA incremental_vacuum(" SHRINK_PAGES ")", NULL, NULL, NULL) !=
            SQLITE_OK ||
        sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) !=
            SQLITE_OK)
      break;
  }
}

/* cfg->tight and the reserve are shared by the connections of the store and compaction
 * threads, whose commits the front serialises (one write transaction at a time); the WAL's
 * size limit is each connection's own. */
static void set_tight(store_conn *c, int tight) {
  c->cfg->tight = tight;
  if (c->tight == tight) return;
  c->tight = tight;
  sqlite3_exec(c->db, tight ? "PRAGMA journal_size_limit=0"
                            : "PRAGMA journal_size_limit=" WAL_KEEP, NULL, NULL, NULL);
}

/* After a commit (store thread): the free space decides tight, and the reserve comes back. */
static void check_space(store_conn *c) {
  sqlite_cfg *cfg = c->cfg;
  if (!cfg->reserve) return;
  int64_t total = 0, avail = free_bytes(cfg->path, &total);
  if (avail < 0) return;
  (void)total;
  int tight = avail < TIGHT_FREE;
  if (!cfg->reserve_held && avail >= 4 * cfg->reserve_bytes) {
    reserve_make(cfg);
    if (cfg->reserve_held)
      xlog_msg("info", "store_space_back", "the state directory's filesystem has room again "
               "(%lld bytes free); the store's reserve is made again", (long long)avail);
  }
  set_tight(c, tight);
  if (cfg->tight) sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
}

/* After a write failed with SQLITE_FULL and its transaction is gone (store thread). */
static void on_full(store_conn *c) {
  sqlite_cfg *cfg = c->cfg;
  set_tight(c, 1);
  if (cfg->reserve_held) {
    unlink(cfg->reserve);
    cfg->reserve_held = 0;
  }
  shrink(c);
  int64_t avail = free_bytes(cfg->path, NULL);
  xlog_msg("error", "store_disk_full", "the state directory's filesystem is full: turns are "
           "not kept until sessions are deleted or space is freed (%lld bytes free after the "
           "store gave back what it could)", (long long)avail);
}

static int sq_begin(store_conn *c, char *err, size_t cap) {
  settle(c);
  return step_done(c, c->begin, err, cap, "BEGIN");
}

/* COMMIT in WAL mode appends the transaction's pages to the WAL, its last frame marking the
 * commit, syncs the WAL (synchronous=FULL), then publishes the new version in the WAL index.
 * A failure while the frames are written (SQLITE_FULL: no room; BUSY, NOMEM) leaves no commit
 * frame: nothing is kept (-1). An I/O error (SQLITE_IOERR_*: a failed write or fsync, what a
 * dying disk or a full one under a cache answer) may come after the commit frame reached the
 * file: the version is not published, so this process reads the old row, but a reopen's WAL
 * recovery may find the frame valid and keep the transaction: the outcome is unknown (-2). */
static int sq_commit(store_conn *c, char *err, size_t cap) {
  settle(c);
  int rc = sqlite3_step(c->commit);
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) {
    sqlite3_reset(c->commit);
    if (c->freed && c->cfg->tight) shrink(c);
    c->freed = 0;
    if (c->cfg->reserve) check_space(c);
    return 0;
  }
  c->freed = 0;
  int ext = sqlite3_extended_errcode(c->db);
  fail(err, cap, c->db, "COMMIT");
  sqlite3_reset(c->commit);
  return (ext & 0xff) == SQLITE_IOERR && ext != SQLITE_IOERR_NOMEM ? -2 : -1;
}

static void sq_rollback(store_conn *c) {
  settle(c);
  c->freed = 0;
  if (!sqlite3_get_autocommit(c->db)) { /* else SQLite already rolled back (e.g. SQLITE_FULL) */
    sqlite3_step(c->rollback);
    sqlite3_reset(c->rollback);
  }
  if (saw_full && c->cfg->reserve) {
    saw_full = 0;
    on_full(c);
  }
}

static void read_meta(sqlite3_stmt *st, store_row *row) {
  const void *o = sqlite3_column_blob(st, 0);
  memset(row->owner, 0, 32);
  if (o && sqlite3_column_bytes(st, 0) == 32) memcpy(row->owner, o, 32);
  row->fingerprint = (uint64_t)sqlite3_column_int64(st, 1);
  row->created = sqlite3_column_double(st, 2);
  row->last_used = sqlite3_column_double(st, 3);
  row->tokens = (uint64_t)sqlite3_column_int64(st, 4);
  row->turns = (uint64_t)sqlite3_column_int64(st, 5);
  row->mode = sqlite3_column_int(st, 6);
  row->messages = sqlite3_column_int(st, 7);
  row->positions = sqlite3_column_int(st, 8);
}

static void bind_key(sqlite3_stmt *st, const char *id, const uint8_t owner[32]);

/* The row's snapshot (snap_id read): row->meta is piece 0 and row->state the pieces after it,
 * lent by SQLite (the statements stay open until the next call on this connection) when the
 * state is one piece (any state up to STORE_PIECE_BYTES), else joined into c->snap. Only
 * SQLite's failures are errors here: pieces that are missing, short or damaged make an envelope the
 * decoder refuses (sizes, checksums), like a damaged blob. */
static int read_snapshot(store_conn *c, const char *id, const uint8_t owner[32], store_row *row,
                         char *err, size_t cap) {
  sqlite3_stmt *m = c->meta_get, *p = c->pieces_get;
  bind_key(m, id, owner);
  sqlite3_bind_int64(m, 3, (sqlite3_int64)row->snap_id);
  bind_key(p, id, owner);
  sqlite3_bind_int64(p, 3, (sqlite3_int64)row->snap_id);
  row->meta = (const uint8_t *)"";
  row->meta_len = 0;
  row->state = (const uint8_t *)"";
  row->state_len = 0;
  int rc = sqlite3_step(m);
  if (rc == SQLITE_ROW) {
    row->meta_len = (size_t)sqlite3_column_bytes(m, 0);
    if (row->meta_len) row->meta = sqlite3_column_blob(m, 0);
  } else if (rc != SQLITE_DONE) {
    return fail(err, cap, c->db, "reading a session's snapshot");
  }
  size_t want = row->snap_bytes > row->meta_len ? (size_t)row->snap_bytes - row->meta_len : 0;
  size_t room = 0, have = 0;
  while ((rc = sqlite3_step(p)) == SQLITE_ROW) {
    size_t n = (size_t)sqlite3_column_bytes(p, 0);
    const uint8_t *b = sqlite3_column_blob(p, 0);
    if (!c->snap && n == want) { /* the whole state in one piece: lent as it is */
      row->state = n ? b : (const uint8_t *)"";
      row->state_len = n;
      return 0;
    }
    if (n > room - have) {
      if (!room) room = want > n ? want : n;
      while (n > room - have) room *= 2;
      c->snap = xrealloc(c->snap, room);
    }
    if (n) memcpy(c->snap + have, b, n);
    have += n;
  }
  if (rc != SQLITE_DONE) return fail(err, cap, c->db, "reading a session's snapshot");
  if (c->snap) row->state = c->snap;
  row->state_len = have;
  return 0;
}

static int sq_get(store_conn *c, const char *id, const uint8_t owner[32], store_row *row,
                  char *err, size_t cap) {
  settle(c);
  sqlite3_bind_text(c->get, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_blob(c->get, 2, owner, 32, SQLITE_STATIC);
  int rc = sqlite3_step(c->get);
  if (rc == SQLITE_DONE) {
    sqlite3_reset(c->get);
    return 1;
  }
  if (rc != SQLITE_ROW) {
    fail(err, cap, c->db, "reading a session");
    sqlite3_reset(c->get);
    return -1;
  }
  snprintf(row->id, sizeof row->id, "%s", id);
  read_meta(c->get, row);
  row->seq = (uint64_t)sqlite3_column_int64(c->get, 11);
  row->snap_seq = (uint64_t)sqlite3_column_int64(c->get, 12);
  row->snap_id = (uint64_t)sqlite3_column_int64(c->get, 13);
  row->snap_bytes = (uint64_t)sqlite3_column_int64(c->get, 14);
  row->n_deltas = sqlite3_column_int(c->get, 15);
  row->delta_bytes = (uint64_t)sqlite3_column_int64(c->get, 16);
  /* the snapshot's pieces and the deltas are read in the same read transaction (the get
   * statement holds it until the next call on this connection) */
  if (read_snapshot(c, id, owner, row, err, cap)) {
    settle(c);
    return -1;
  }
  sqlite3_bind_text(c->deltas_get, 1, id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_blob(c->deltas_get, 2, owner, 32, SQLITE_TRANSIENT);
  sqlite3_bind_int64(c->deltas_get, 3, (sqlite3_int64)row->snap_seq);
  c->in_deltas = 1;
  return 0;
}

static int sq_next_delta(store_conn *c, store_delta *d, char *err, size_t cap) {
  if (!c->in_deltas) return 1;
  int rc = sqlite3_step(c->deltas_get);
  if (rc == SQLITE_DONE) return 1;
  if (rc != SQLITE_ROW) return fail(err, cap, c->db, "reading a session's deltas");
  d->seq = (uint64_t)sqlite3_column_int64(c->deltas_get, 0);
  d->meta = sqlite3_column_blob(c->deltas_get, 1);
  d->meta_len = (size_t)sqlite3_column_bytes(c->deltas_get, 1);
  d->delta = sqlite3_column_blob(c->deltas_get, 2);
  d->delta_len = (size_t)sqlite3_column_bytes(c->deltas_get, 2);
  return 0;
}

static void bind_row(sqlite3_stmt *st, const store_row *r) {
  sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, r->owner, 32, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)r->fingerprint);
  sqlite3_bind_double(st, 4, r->created);
  sqlite3_bind_double(st, 5, r->last_used);
  sqlite3_bind_int64(st, 6, (sqlite3_int64)r->tokens);
  sqlite3_bind_int64(st, 7, (sqlite3_int64)r->turns);
  sqlite3_bind_int(st, 8, r->mode);
  sqlite3_bind_int(st, 9, r->messages);
  sqlite3_bind_int(st, 10, r->positions);
}

static void bind_key(sqlite3_stmt *st, const char *id, const uint8_t owner[32]) {
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, owner, 32, SQLITE_STATIC);
}

/* Steps a write statement once (its RETURNING row, if any, is read by `got`): 0 done, -1. */
static int run_write(store_conn *c, sqlite3_stmt *st, int *got_row, char *err, size_t cap,
                     const char *what) {
  int rc = sqlite3_step(st);
  if (got_row) *got_row = rc == SQLITE_ROW;
  if (rc == SQLITE_ROW) rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_DONE : SQLITE_ERROR;
  sqlite3_clear_bindings(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE ? 0 : fail(err, cap, c->db, what);
}

static int sq_put_piece(store_conn *c, const char *id, const uint8_t owner[32],
                        uint64_t snap_id, int part, const uint8_t *bytes, size_t len, char *err,
                        size_t cap) {
  settle(c);
  bind_key(c->piece_put, id, owner);
  sqlite3_bind_int64(c->piece_put, 3, (sqlite3_int64)snap_id);
  sqlite3_bind_int(c->piece_put, 4, part);
  sqlite3_bind_blob64(c->piece_put, 5, len ? (const void *)bytes : "", len, SQLITE_STATIC);
  return run_write(c, c->piece_put, NULL, err, cap, "writing a piece of a session's snapshot");
}

/* A whole snapshot in the caller's transaction: the row's pieces replaced by r's. */
static int put_snapshot(store_conn *c, const store_row *r, char *err, size_t cap) {
  bind_key(c->pieces_clear, r->id, r->owner);
  if (run_write(c, c->pieces_clear, NULL, err, cap, "dropping a session's snapshot")) return -1;
  if (sq_put_piece(c, r->id, r->owner, r->snap_id, 0, r->meta, r->meta_len, err, cap))
    return -1;
  for (size_t off = 0, part = 1; off < r->state_len; off += STORE_PIECE_BYTES, part++) {
    size_t n = r->state_len - off;
    if (n > STORE_PIECE_BYTES) n = STORE_PIECE_BYTES;
    if (sq_put_piece(c, r->id, r->owner, r->snap_id, (int)part, r->state + off, n, err, cap))
      return -1;
  }
  return 0;
}

static void bind_versions(sqlite3_stmt *st, const store_row *r) {
  sqlite3_bind_int64(st, 11, (sqlite3_int64)r->seq);
  sqlite3_bind_int64(st, 12, (sqlite3_int64)r->snap_id);
  sqlite3_bind_int64(st, 13, (sqlite3_int64)(r->meta_len + r->state_len));
}

static int sq_rec_put(store_conn *c, const store_record *r, char *err, size_t cap);

static int sq_put(store_conn *c, const store_row *r, int *created, char *err, size_t cap) {
  settle(c);
  if (r->rec && sq_rec_put(c, r->rec, err, cap)) return -1;
  *created = 0;
  bind_row(c->update, r);
  bind_versions(c->update, r);
  if (run_write(c, c->update, NULL, err, cap, "updating a session")) return -1;
  if (sqlite3_changes(c->db) > 0) {
    bind_key(c->deltas_clear, r->id, r->owner);
    if (run_write(c, c->deltas_clear, NULL, err, cap, "dropping a session's deltas")) return -1;
  } else {
    bind_row(c->insert, r);
    bind_versions(c->insert, r);
    if (run_write(c, c->insert, NULL, err, cap, "inserting a session")) return -1;
    *created = 1;
  }
  return put_snapshot(c, r, err, cap);
}

static int sq_append(store_conn *c, const store_row *r, const store_delta *d, store_row *after,
                     char *err, size_t cap) {
  settle(c);
  bind_row(c->append_row, r);
  sqlite3_bind_int64(c->append_row, 11, (sqlite3_int64)d->seq);
  sqlite3_bind_int64(c->append_row, 12, (sqlite3_int64)(d->meta_len + d->delta_len));
  int rc = sqlite3_step(c->append_row);
  int found = rc == SQLITE_ROW;
  if (found) {
    after->snap_bytes = (uint64_t)sqlite3_column_int64(c->append_row, 0);
    after->delta_bytes = (uint64_t)sqlite3_column_int64(c->append_row, 1);
    after->n_deltas = sqlite3_column_int(c->append_row, 2);
    rc = sqlite3_step(c->append_row);
  }
  sqlite3_clear_bindings(c->append_row);
  sqlite3_reset(c->append_row);
  if (rc != SQLITE_DONE) return fail(err, cap, c->db, "updating a session");
  if (!found) return 1; /* absent, or at another version: nothing written */
  if (r->rec && sq_rec_put(c, r->rec, err, cap)) return -1;
  bind_key(c->append_delta, r->id, r->owner);
  sqlite3_bind_int64(c->append_delta, 3, (sqlite3_int64)d->seq);
  sqlite3_bind_blob64(c->append_delta, 4, d->meta, d->meta_len, SQLITE_STATIC);
  sqlite3_bind_blob64(c->append_delta, 5, d->delta, d->delta_len, SQLITE_STATIC);
  return run_write(c, c->append_delta, NULL, err, cap, "appending a session's delta");
}

static int sq_swap(store_conn *c, const store_row *r, uint64_t old_snap_id, int n_pieces,
                   char *err, size_t cap) {
  settle(c);
  bind_key(c->swap_row, r->id, r->owner);
  sqlite3_bind_int64(c->swap_row, 3, (sqlite3_int64)r->snap_id);
  sqlite3_bind_int64(c->swap_row, 4, (sqlite3_int64)r->seq);
  sqlite3_bind_int64(c->swap_row, 5, (sqlite3_int64)(r->meta_len + r->state_len));
  sqlite3_bind_int64(c->swap_row, 6, (sqlite3_int64)old_snap_id);
  sqlite3_bind_int(c->swap_row, 7, n_pieces);
  int found = 0;
  if (run_write(c, c->swap_row, &found, err, cap, "swapping a session's snapshot")) return -1;
  if (!found) return 1; /* deleted, replaced, or re-created since it was read */
  bind_key(c->swap_sizes, r->id, r->owner);
  return run_write(c, c->swap_sizes, NULL, err, cap, "swapping a session's snapshot");
}

static int sq_collect(store_conn *c, const char *id, const uint8_t owner[32], char *err,
                      size_t cap) {
  settle(c);
  int more = 0;
  sqlite3_stmt *both[] = {c->collect_pieces, c->collect_deltas};
  for (int i = 0; i < 2; i++) {
    bind_key(both[i], id, owner);
    sqlite3_bind_int(both[i], 3, COLLECT_BATCH);
    if (run_write(c, both[i], NULL, err, cap, "deleting a session's dead snapshot or deltas"))
      return -1;
    more |= sqlite3_changes(c->db) >= COLLECT_BATCH;
  }
  return more ? 2 : 0;
}

static int sq_del(store_conn *c, const char *id, const uint8_t owner[32], char *err, size_t cap) {
  settle(c);
  sqlite3_bind_text(c->del, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_blob(c->del, 2, owner, 32, SQLITE_STATIC);
  int rc = sqlite3_step(c->del);
  sqlite3_reset(c->del);
  if (rc != SQLITE_DONE) return fail(err, cap, c->db, "deleting a session");
  c->freed = 1;
  return sqlite3_changes(c->db) > 0 ? 0 : 1;
}

static int sq_expire(store_conn *c, double before, int max, store_key *out, char *err,
                     size_t cap) {
  settle(c);
  sqlite3_bind_double(c->expire, 1, before);
  sqlite3_bind_int(c->expire, 2, max);
  int n = 0, rc;
  while ((rc = sqlite3_step(c->expire)) == SQLITE_ROW) {
    if (n >= max) continue;
    const unsigned char *id = sqlite3_column_text(c->expire, 0);
    const void *o = sqlite3_column_blob(c->expire, 1);
    snprintf(out[n].id, sizeof out[n].id, "%s", id ? (const char *)id : "");
    memset(out[n].owner, 0, 32);
    if (o && sqlite3_column_bytes(c->expire, 1) == 32) memcpy(out[n].owner, o, 32);
    n++;
  }
  sqlite3_reset(c->expire);
  if (rc != SQLITE_DONE) return fail(err, cap, c->db, "expiring sessions");
  if (n > 0) c->freed = 1;
  return n;
}

static int sq_list(store_conn *c, const uint8_t owner[32], int max, store_row *out, char *err,
                   size_t cap) {
  settle(c);
  sqlite3_bind_blob(c->list, 1, owner, 32, SQLITE_STATIC);
  sqlite3_bind_int(c->list, 2, max);
  int n = 0, rc;
  while ((rc = sqlite3_step(c->list)) == SQLITE_ROW) {
    if (n >= max) continue;
    read_meta(c->list, &out[n]);
    const unsigned char *id = sqlite3_column_text(c->list, 9);
    snprintf(out[n].id, sizeof out[n].id, "%s", id ? (const char *)id : "");
    out[n].meta = out[n].state = NULL;
    n++;
  }
  sqlite3_reset(c->list);
  if (rc != SQLITE_DONE) return fail(err, cap, c->db, "listing sessions");
  return n;
}

/* ---- keyed records ---- */

static void bind_rec_key(sqlite3_stmt *st, const store_record *r) {
  sqlite3_bind_text(st, 1, r->ns, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, r->owner, 32, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, r->key, -1, SQLITE_STATIC);
}

/* In the caller's transaction; a few expired records go with it. */
static int sq_rec_put(store_conn *c, const store_record *r, char *err, size_t cap) {
  settle(c);
  sqlite3_bind_double(c->rec_sweep, 1, now_wall());
  if (run_write(c, c->rec_sweep, NULL, err, cap, "deleting expired records")) return -1;
  bind_rec_key(c->rec_put, r);
  sqlite3_bind_double(c->rec_put, 4, r->expires);
  sqlite3_bind_blob64(c->rec_put, 5, r->len ? (const void *)r->value : "", r->len,
                      SQLITE_STATIC);
  return run_write(c, c->rec_put, NULL, err, cap, "writing a record");
}

static int sq_rec_get(store_conn *c, store_record *r, char *err, size_t cap) {
  settle(c);
  bind_rec_key(c->rec_get, r);
  sqlite3_bind_double(c->rec_get, 4, now_wall());
  int rc = sqlite3_step(c->rec_get);
  if (rc == SQLITE_DONE) {
    sqlite3_reset(c->rec_get);
    return 1;
  }
  if (rc != SQLITE_ROW) {
    sqlite3_reset(c->rec_get);
    return fail(err, cap, c->db, "reading a record");
  }
  r->value = sqlite3_column_blob(c->rec_get, 0);
  r->len = (size_t)sqlite3_column_bytes(c->rec_get, 0);
  r->expires = sqlite3_column_double(c->rec_get, 1);
  return 0; /* the row stays stepped (value borrowed) until the next settle */
}

static int sq_rec_del(store_conn *c, const store_record *r, char *err, size_t cap) {
  settle(c);
  bind_rec_key(c->rec_del, r);
  if (run_write(c, c->rec_del, NULL, err, cap, "deleting a record")) return -1;
  return sqlite3_changes(c->db) > 0 ? 0 : 1;
}

static long sq_count(store_conn *c) {
  settle(c);
  long n = -1;
  if (sqlite3_step(c->count) == SQLITE_ROW) n = (long)sqlite3_column_int64(c->count, 0);
  sqlite3_reset(c->count);
  return n;
}

static void sq_destroy(void *cfgp) {
  sqlite_cfg *cfg = cfgp;
  if (!cfg) return;
  if (cfg->ckpt_started) {
    pthread_mutex_lock(&cfg->mu);
    cfg->stop = 1;
    pthread_cond_signal(&cfg->cv);
    pthread_mutex_unlock(&cfg->mu);
    pthread_join(cfg->ckpt, NULL);
  }
  pthread_mutex_destroy(&cfg->mu);
  pthread_cond_destroy(&cfg->cv);
  if (cfg->lock_fd >= 0) close(cfg->lock_fd);
  free(cfg->path);
  free(cfg->reserve);
  free(cfg);
}

static const store_backend_ops SQLITE_OPS = {
    .name = "sqlite",
    .connect = sq_connect,
    .disconnect = sq_disconnect,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .get = sq_get,
    .next_delta = sq_next_delta,
    .release = settle,
    .put = sq_put,
    .append = sq_append,
    .put_piece = sq_put_piece,
    .swap = sq_swap,
    .collect = sq_collect,
    .del = sq_del,
    .expire = sq_expire,
    .list = sq_list,
    .count = sq_count,
    .rec_put = sq_rec_put,
    .rec_get = sq_rec_get,
    .rec_del = sq_rec_del,
    .destroy = sq_destroy,
};

/* The version-2 table as `name` (one row per session holding its whole envelope). */
static int create_table_v2(sqlite3 *db, const char *name, char *err, size_t cap) {
  char sql[1024];
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s (owner BLOB NOT NULL, id TEXT NOT NULL, fingerprint "
           "INTEGER NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL, tokens INTEGER NOT "
           "NULL, turns INTEGER NOT NULL, mode INTEGER NOT NULL, messages INTEGER NOT NULL, "
           "positions INTEGER NOT NULL, meta BLOB NOT NULL, state BLOB NOT NULL, "
           "PRIMARY KEY (owner, id))",
           name);
  return exec(db, sql, err, cap);
}

/* The sessions table as `name`, in the shape it has had since version 3 (one row per session:
 * its counters and where its snapshot and deltas are). */
static int create_sessions_table(sqlite3 *db, const char *name, char *err, size_t cap) {
  char sql[1024];
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s (owner BLOB NOT NULL, id TEXT NOT NULL, fingerprint "
           "INTEGER NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL, tokens INTEGER NOT "
           "NULL, turns INTEGER NOT NULL, mode INTEGER NOT NULL, messages INTEGER NOT NULL, "
           "positions INTEGER NOT NULL, seq INTEGER NOT NULL, snap_seq INTEGER NOT NULL, "
           "snap_id INTEGER NOT NULL, snap_bytes INTEGER NOT NULL, n_deltas INTEGER NOT NULL, "
           "delta_bytes INTEGER NOT NULL, PRIMARY KEY (owner, id))",
           name);
  return exec(db, sql, err, cap);
}

/* The version-3 tables: sessions as `name`, snapshots (whole), deltas (WITHOUT ROWID). */
static int create_tables_v3(sqlite3 *db, const char *name, char *err, size_t cap) {
  return create_sessions_table(db, name, err, cap) ||
         exec(db,
              "CREATE TABLE IF NOT EXISTS snapshots (owner BLOB NOT NULL, id TEXT NOT NULL, "
              "meta BLOB NOT NULL, state BLOB NOT NULL, PRIMARY KEY (owner, id));"
              "CREATE TABLE IF NOT EXISTS deltas (owner BLOB NOT NULL, id TEXT NOT NULL, seq "
              "INTEGER NOT NULL, meta BLOB NOT NULL, delta BLOB NOT NULL, PRIMARY KEY (owner, id, "
              "seq)) WITHOUT ROWID;",
              err, cap);
}

static int create_indexes_v3(sqlite3 *db, char *err, size_t cap) {
  return exec(db,
              "CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, last_used);"
              "CREATE INDEX IF NOT EXISTS sessions_by_last_used ON sessions (last_used);"
              "CREATE TRIGGER IF NOT EXISTS sessions_drop AFTER DELETE ON sessions BEGIN "
              "DELETE FROM snapshots WHERE owner = old.owner AND id = old.id; "
              "DELETE FROM deltas WHERE owner = old.owner AND id = old.id; END;",
              err, cap);
}

/* Version 4: the snapshots in pieces (snap_pieces), keyed by the snapshot's identity, so a
 * compaction writes its new snapshot ahead of the swap that makes it the row's. */
static int create_pieces_v4(sqlite3 *db, char *err, size_t cap) {
  return exec(db,
              "CREATE TABLE IF NOT EXISTS snap_pieces (owner BLOB NOT NULL, id TEXT NOT NULL, "
              "snap_id INTEGER NOT NULL, part INTEGER NOT NULL, bytes BLOB NOT NULL, "
              "PRIMARY KEY (owner, id, snap_id, part));"
              "CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, last_used);"
              "CREATE INDEX IF NOT EXISTS sessions_by_last_used ON sessions (last_used);"
              "DROP TRIGGER IF EXISTS sessions_drop;"
              "CREATE TRIGGER sessions_drop AFTER DELETE ON sessions BEGIN "
              "DELETE FROM snap_pieces WHERE owner = old.owner AND id = old.id; "
              "DELETE FROM deltas WHERE owner = old.owner AND id = old.id; END;",
              err, cap);
}

/* Version 5's deltas as `name`: a rowid table, its primary key an index of its own. */
static int create_deltas_v5(sqlite3 *db, const char *name, char *err, size_t cap) {
  char sql[512];
  snprintf(sql, sizeof sql,
           "CREATE TABLE IF NOT EXISTS %s (owner BLOB NOT NULL, id TEXT NOT NULL, seq INTEGER "
           "NOT NULL, meta BLOB NOT NULL, delta BLOB NOT NULL, PRIMARY KEY (owner, id, seq))",
           name);
  return exec(db, sql, err, cap);
}

/* A new file: version 5 (sessions, deltas as a rowid table, snapshots in pieces). */
/* The keyed records (any schema version: a table older builds leave alone). */
static int create_records(sqlite3 *db, char *err, size_t cap) {
  return exec(db,
              "CREATE TABLE IF NOT EXISTS records (ns TEXT NOT NULL, owner BLOB NOT NULL, key "
              "TEXT NOT NULL, expires REAL NOT NULL, value BLOB NOT NULL, UNIQUE (ns, owner, "
              "key));"
              "CREATE INDEX IF NOT EXISTS records_by_expiry ON records (expires);",
              err, cap);
}

static int create_schema(sqlite3 *db, char *err, size_t cap) {
  return create_sessions_table(db, "sessions", err, cap) ||
         create_deltas_v5(db, "deltas", err, cap) || create_pieces_v4(db, err, cap) ||
         exec(db, "PRAGMA user_version = 5", err, cap);
}

/* What a crash (or a failed compaction) left behind: the pieces of snapshots no row points at
 * (a compaction killed between its pieces and its swap) and the deltas a swap folded before
 * they were deleted. One transaction at open; the daemon holds the directory's lock. */
static int collect_garbage(sqlite3 *db, char *err, size_t cap) {
  return exec(db,
              "BEGIN IMMEDIATE;"
              "DELETE FROM snap_pieces WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE "
              "s.owner = snap_pieces.owner AND s.id = snap_pieces.id AND s.snap_id = "
              "snap_pieces.snap_id);"
              "DELETE FROM deltas WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.owner = "
              "deltas.owner AND s.id = deltas.id AND s.snap_seq < deltas.seq);"
              "COMMIT;",
              err, cap);
}

/* Runs `steps` in one transaction; a failure rolls back and names the migration. */
static int migrate(sqlite3 *db, int from, int (*steps)(sqlite3 *, char *, size_t), char *err,
                   size_t cap) {
  if (exec(db, "BEGIN IMMEDIATE", err, cap)) return -1;
  int rc = steps(db, err, cap) || exec(db, "COMMIT", err, cap);
  if (rc) {
    char ignored[64];
    if (!sqlite3_get_autocommit(db)) exec(db, "ROLLBACK", ignored, sizeof ignored);
    size_t n = strlen(err);
    if (n < cap)
      snprintf(err + n, cap - n, " (migrating the store from schema version %d)", from);
  }
  return rc;
}

/* Version 1 keyed rows by id alone; version 2 by (owner, id). The rows move to a table of the
 * new shape: they keep their owner and id. */
static int steps_v1(sqlite3 *db, char *err, size_t cap) {
  return exec(db, "DROP TABLE IF EXISTS sessions_v2", err, cap) ||
         create_table_v2(db, "sessions_v2", err, cap) ||
         exec(db,
              "INSERT INTO sessions_v2 (owner, id, fingerprint, created, last_used, tokens, "
              "turns, mode, messages, positions, meta, state) SELECT owner, id, fingerprint, "
              "created, last_used, tokens, turns, mode, messages, positions, meta, state FROM "
              "sessions;"
              "DROP TABLE sessions;"
              "ALTER TABLE sessions_v2 RENAME TO sessions;",
              err, cap) ||
         exec(db,
              "CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, last_used);"
              "CREATE INDEX IF NOT EXISTS sessions_by_last_used ON sessions (last_used);",
              err, cap) ||
         exec(db, "PRAGMA user_version = 2", err, cap);
}

/* Version 2 held a session's envelope in its row; version 3 keeps it as the session's snapshot
 * (version 1, no deltas) and leaves the row small. */
static int steps_v2(sqlite3 *db, char *err, size_t cap) {
  return exec(db, "DROP TABLE IF EXISTS sessions_v3; DROP TABLE IF EXISTS snapshots; DROP "
                  "TABLE IF EXISTS deltas;", err, cap) ||
         create_tables_v3(db, "sessions_v3", err, cap) ||
         exec(db,
              "INSERT INTO snapshots (owner, id, meta, state) SELECT owner, id, meta, state FROM "
              "sessions;"
              "INSERT INTO sessions_v3 (owner, id, fingerprint, created, last_used, tokens, "
              "turns, mode, messages, positions, seq, snap_seq, snap_id, snap_bytes, n_deltas, "
              "delta_bytes) SELECT owner, id, fingerprint, created, last_used, tokens, turns, "
              "mode, messages, positions, 1, 1, random(), length(meta) + length(state), 0, 0 "
              "FROM sessions;"
              "DROP TABLE sessions;"
              "ALTER TABLE sessions_v3 RENAME TO sessions;",
              err, cap) ||
         create_indexes_v3(db, err, cap) || exec(db, "PRAGMA user_version = 3", err, cap);
}

/* Version 3 held a snapshot in one row (meta, state); version 4 keeps it as pieces under the
 * row's snap_id: piece 0 the meta, piece 1 the state (a piece may be any size; new snapshots
 * are cut into STORE_PIECE_BYTES). */
static int steps_v3(sqlite3 *db, char *err, size_t cap) {
  return exec(db, "DROP TABLE IF EXISTS snap_pieces", err, cap) ||
         create_pieces_v4(db, err, cap) ||
         exec(db,
              "INSERT INTO snap_pieces (owner, id, snap_id, part, bytes) SELECT n.owner, n.id, "
              "s.snap_id, 0, n.meta FROM snapshots n JOIN sessions s ON s.owner = n.owner AND "
              "s.id = n.id;"
              "INSERT INTO snap_pieces (owner, id, snap_id, part, bytes) SELECT n.owner, n.id, "
              "s.snap_id, 1, n.state FROM snapshots n JOIN sessions s ON s.owner = n.owner AND "
              "s.id = n.id;"
              "UPDATE sessions SET snap_bytes = (SELECT sum(length(p.bytes)) FROM snap_pieces p "
              "WHERE p.owner = sessions.owner AND p.id = sessions.id);"
              "DROP TABLE snapshots;",
              err, cap) ||
         exec(db, "PRAGMA user_version = 4", err, cap);
}

/* Version 4 kept the deltas in a WITHOUT ROWID table; version 5 in a rowid one (the trigger
 * that names the table is dropped over the rename and made again). */
static int steps_v4(sqlite3 *db, char *err, size_t cap) {
  return exec(db, "DROP TABLE IF EXISTS deltas_v5; DROP TRIGGER IF EXISTS sessions_drop", err,
              cap) ||
         create_deltas_v5(db, "deltas_v5", err, cap) ||
         exec(db,
              "INSERT INTO deltas_v5 (owner, id, seq, meta, delta) SELECT owner, id, seq, meta, "
              "delta FROM deltas ORDER BY owner, id, seq;"
              "DROP TABLE deltas;"
              "ALTER TABLE deltas_v5 RENAME TO deltas;",
              err, cap) ||
         create_pieces_v4(db, err, cap) || exec(db, "PRAGMA user_version = 5", err, cap);
}

store_backend *store_sqlite_open(const char *dir, int fsync, char *err, size_t cap) {
  if (mkdirs(dir)) {
    snprintf(err, cap, "cannot create %s: %s", dir, strerror(errno));
    return NULL;
  }
  sqlite_cfg *cfg = xcalloc(1, sizeof *cfg);
  cfg->fsync = fsync;
  cfg->lock_fd = -1;
  pthread_mutex_init(&cfg->mu, NULL);
  pthread_cond_init(&cfg->cv, NULL);
  buf p;
  buf_init(&p);
  buf_printf(&p, "%s/xlserve.lock", dir);
  cfg->lock_fd = open(p.p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (cfg->lock_fd < 0) {
    snprintf(err, cap, "cannot open %s: %s", p.p, strerror(errno));
    buf_free(&p);
    sq_destroy(cfg);
    return NULL;
  }
  if (flock(cfg->lock_fd, LOCK_EX | LOCK_NB)) {
    snprintf(err, cap, "%s is in use by another xlserve daemon (%s is locked)", dir, p.p);
    buf_free(&p);
    sq_destroy(cfg);
    return NULL;
  }
  buf_clear(&p);
  buf_printf(&p, "%s/sessions.db", dir);
  cfg->path = buf_steal(&p);
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(cfg->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
      SQLITE_OK) {
    fail(err, cap, db, cfg->path);
    sqlite3_close(db);
    sq_destroy(cfg);
    return NULL;
  }
  sqlite3_busy_timeout(db, 10000);
  int version = -1;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
  }
  int rc = 0;
  if (version < 0) {
    rc = fail(err, cap, db, cfg->path);
  } else if (version > SCHEMA_VERSION) {
    snprintf(err, cap, "%s: store schema version %d is newer than this build's (%d)", cfg->path,
             version, SCHEMA_VERSION);
    rc = -1;
  } else {
    char e2[512];
    /* big pages for big blobs (a state is MiBs): fewer pages per row. Only a new file takes it. */
    /* a new file can give its free pages back (incremental_vacuum): set before anything is
     * written to it (the switch to WAL writes its header) */
    rc = exec(db, "PRAGMA page_size=" PAGE_SIZE, e2, sizeof e2) ||
         (version == 0 && exec(db, "PRAGMA auto_vacuum=INCREMENTAL", e2, sizeof e2)) ||
         exec(db, "PRAGMA journal_mode=WAL", e2, sizeof e2) ||
         (version == 1 && migrate(db, 1, steps_v1, e2, sizeof e2)) ||
         (version >= 1 && version <= 2 && migrate(db, 2, steps_v2, e2, sizeof e2)) ||
         (version >= 1 && version <= 3 && migrate(db, 3, steps_v3, e2, sizeof e2)) ||
         (version >= 1 && version <= 4 && migrate(db, 4, steps_v4, e2, sizeof e2)) ||
         (version == 0 && create_schema(db, e2, sizeof e2)) ||
         create_records(db, e2, sizeof e2) || collect_garbage(db, e2, sizeof e2);
    if (rc) snprintf(err, cap, "%s: %s", cfg->path, e2);
  }
  sqlite3_close(db);
  if (rc) {
    sq_destroy(cfg);
    return NULL;
  }
  int prc = thread_create_nosig(&cfg->ckpt, ckpt_main, cfg);
  if (prc) {
    snprintf(err, cap, "cannot create the checkpoint thread: %s", strerror(prc));
    sq_destroy(cfg);
    return NULL;
  }
  cfg->ckpt_started = 1;
  buf_printf(&p, "%s/xlserve.reserve", dir);
  cfg->reserve = buf_steal(&p);
  int64_t total = 0;
  if (free_bytes(cfg->path, &total) >= 0) {
    cfg->reserve_bytes = total / 32;
    if (cfg->reserve_bytes < ((int64_t)64 << 10)) cfg->reserve_bytes = (int64_t)64 << 10;
    if (cfg->reserve_bytes > ((int64_t)8 << 20)) cfg->reserve_bytes = (int64_t)8 << 20;
    struct stat rs;
    if (!stat(cfg->reserve, &rs) && rs.st_size >= cfg->reserve_bytes) cfg->reserve_held = 1;
    else reserve_make(cfg); /* no room for it: made once there is (check_space) */
  }
  store_backend *b = xcalloc(1, sizeof *b);
  b->ops = &SQLITE_OPS;
  b->cfg = cfg;
  return b;
}
