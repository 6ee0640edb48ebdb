/*
 * session_store.h: the durable session store, in two layers.
 *
 * 1. The backend (store_backend_ops): synchronous row operations on one connection, called
 *    only by a store thread, each thread with its own connection. The embedded default is
 *    SQLite in WAL mode (store_sqlite.c). The Redis backend (store_redis.c, several replicas
 *    sharing one store) implements the same ops and says `shared`: each write then stands
 *    alone, puts may be compare-and-set, and the table checks a RAM copy's stored version
 *    (SOP_VERSION) before serving it (see docs/sessions.md, "The store seam").
 *
 * 2. The front (session_store): one store thread with its own FIFO queue of operations
 *    (store_op). The loop thread submits; the store thread runs the ops in order, writes in
 *    group-committed transactions (a write's op completes only after its COMMIT), and posts
 *    the finished ops to a locked list plus a notification (the daemon passes uv_async_send),
 *    exactly like the scheduler; the loop thread runs their `done` callbacks in store_poll.
 *    FIFO order is what makes eviction safe: a save queued before a load of the same id is
 *    visible to that load. Envelope encoding/decoding (session_codec.h) and state
 *    (de)serialisation of ops that carry a session run on the store thread too, so the loop
 *    thread never does store I/O nor copies a state.
 *    Async turn writes (durability "async": a SAVE or an APPEND with async set) may wait up
 *    to async_commit_ms for company; any other op commits the queue at once.
 *
 * Rows are keyed by (owner, id): session ids are per API key (owner = the SHA-256 of the key),
 * so every op that names a session names its owner too.
 *
 * A row is a snapshot (a session envelope: meta + state blob) plus an ordered log of deltas,
 * one per committed turn (meta + the core's state delta: the positions the turn fed and the
 * ring counters), so a turn writes what it added, not the whole state. Every write gives the
 * row a new version (seq): a snapshot save sets it, a delta appends seq = the row's seq + 1 and
 * only if the row is still at seq - 1 (a conditional commit: a lost or reordered write is a
 * conflict, never a gap). Loading applies the deltas to the snapshot in order. Compaction folds
 * a row's deltas into a new snapshot when they outgrow it (bytes above the snapshot's size, or
 * a count): a compaction thread, on a connection of its own, reads the row, rebuilds and
 * encodes it while the store thread keeps committing turns. With a backend that splits its
 * snapshots (put_piece/swap/collect: SQLite), the compaction thread then writes the new
 * snapshot in pieces, each a transaction of its own (turns commit between them), and swaps it
 * in with a transaction that only repoints the row, conditional on the snapshot it was built
 * from being still the row's (snap_id); the old snapshot and the folded deltas are deleted
 * afterwards in small transactions. Otherwise (Redis) the store thread swaps the new snapshot
 * in whole (backend `compact`), with the same condition. Either way the deltas appended
 * meanwhile stay and continue it. A backend keeps, per row: the snapshot, the deltas after it
 * (seq snap_seq + 1 .. seq), and the counters below; it must allow a read on one connection
 * while another connection writes.
 *
 * Threads: store_new/start/shutdown/free and store_submit/store_poll on the loop (main)
 * thread; the compaction thread (rebuild and encode; with pieces: the pieces, the swap and the
 * collection) and the store thread (every other write) run the rest, each write transaction
 * under one mutex; store_count and the counters from any thread.
 * A session passed in an op (SAVE/EXPORT with `sess`) is held for the op (busy, or owned with
 * free_sess): the store thread is then its only user until the op completes.
 */
#ifndef XLS_SESSION_STORE_H
#define XLS_SESSION_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

/* ------------------------------------------------------------------------------------------ */
/* Backend */

typedef struct store_row {
  char id[129];
  uint8_t owner[32];
  uint64_t fingerprint;
  double created, last_used; /* unix seconds */
  uint64_t tokens, turns;
  int mode, messages, positions;
  /* get: borrowed from the backend until the next call on the connection; put: the caller's */
  const uint8_t *meta;
  size_t meta_len;
  const uint8_t *state;
  size_t state_len;
  /* versions. put: seq and snap_id are the caller's (the snapshot stands for seq); get: all */
  uint64_t seq;         /* the last write's version */
  uint64_t snap_seq;    /* the version the snapshot stands for (deltas follow it) */
  uint64_t snap_id;     /* identity of the snapshot (random per snapshot written) */
  /* get, append (after it): sizes */
  uint64_t snap_bytes;  /* the snapshot's meta + state */
  uint64_t delta_bytes; /* the deltas' metas + deltas */
  int n_deltas;
  /* put: a compare-and-set: only if the row is at version seq - 1 (absent counts as 0) */
  int cas;
  /* put, append: a record written with the row, atomically (NULL: none) */
  const struct store_record *rec;
} store_row;

/* One delta of a row's log. */
typedef struct store_delta {
  uint64_t seq;
  const uint8_t *meta; /* the session's record after the turn (its core fields: the delta's) */
  size_t meta_len;
  const uint8_t *delta; /* xl_state_delta_encode's blob */
  size_t delta_len;
} store_delta;

typedef struct store_key {
  char id[129];
  uint8_t owner[32];
} store_key;

/* A keyed record: (ns, owner, key) -> value bytes, until `expires`. A small generic table
 * beside the sessions, for what must outlive a request and be found again by a key: the
 * answers kept for Idempotency-Key retries (ns "idem", key "SESSION/KEY"), Responses API
 * objects (response id -> session, version, output). The value is opaque to the store.
 *   SQLite: table `records` (ns, owner, key, expires, value); an expired record reads as
 *     absent and is deleted by later puts (a few at a time).
 *   Redis: key P:r:NS:{OWNERHEX:K1}REST, where K1 is the key up to its first '/' (the whole
 *     key without one) and REST the rest: the hash tag of a key "SESSION/..." is the one of
 *     the session's own keys (same Cluster slot: the turn's script may write both); the
 *     value is a string with PEXPIRE (Redis deletes it when it expires).
 *   No store: a bounded in-memory LRU (record_mem.c; lost at exit).
 * A record can also be written by a turn's commit (store_row.rec): then it is kept if and only
 * if the turn is (the same SQLite transaction; the same Redis script). */
#define STORE_NS_CAP 32   /* ns: 1..31 bytes of [a-z0-9_] */
#define STORE_RKEY_CAP 400 /* key: 1..399 printable ASCII bytes (0x21..0x7e) */
typedef struct store_record {
  char ns[STORE_NS_CAP];
  uint8_t owner[32];
  char key[STORE_RKEY_CAP];
  const uint8_t *value; /* put: the caller's; get: borrowed until the next call */
  size_t len;
  double expires; /* unix seconds */
} store_record;

/* Whether ns and key are valid as above (any thread). */
int store_record_valid(const char *ns, const char *key);

typedef struct store_conn store_conn;

typedef struct store_backend_ops {
  const char *name;
  /* 1: several daemons share the store (Redis). Each write is then atomic and durable on its
   * own (begin/commit only bound a batch: a failed write fails alone), put honours row->cas,
   * and the table checks a session's stored version before it serves its RAM copy. */
  int shared;
  /* A connection for the calling thread. NULL with a message on failure. */
  store_conn *(*connect)(void *cfg, char *err, size_t cap);
  void (*disconnect)(store_conn *c);
  /* A batch of writes (and reads) that commits atomically. 0 ok, -1 error (nothing of the
   * batch is kept). commit: -2 when its outcome is unknown (an I/O error after the batch
   * reached the disk: it may be there now or after the next open). */
  int (*begin)(store_conn *c, char *err, size_t cap);
  int (*commit)(store_conn *c, char *err, size_t cap);
  void (*rollback)(store_conn *c);
  /* owner's row id: 0 found (row filled with its snapshot, blobs borrowed), 1 absent,
   * -1 error. */
  int (*get)(store_conn *c, const char *id, const uint8_t owner[32], store_row *row, char *err,
             size_t cap);
  /* After a get that found the row: its deltas in seq order, one per call (blobs borrowed until
   * the next call): 0 one, 1 no more, -1 error. */
  int (*next_delta)(store_conn *c, store_delta *d, char *err, size_t cap);
  /* Ends the loan of a get's blobs (and any read transaction it holds). */
  void (*release)(store_conn *c);
  /* Inserts or replaces the row (row->owner, row->id) with the snapshot row->meta/state at
   * version row->seq (snap_seq = seq, identity row->snap_id), dropping its deltas. *created = 1
   * when the row is new. 0 ok, -1 error (not written), -2 outcome unknown (shared backends:
   * the write was sent and its reply was lost: it may have been applied). */
  int (*put)(store_conn *c, const store_row *row, int *created, char *err, size_t cap);
  /* Appends delta d (d->seq) to the row and updates its metadata columns from row (not its
   * blobs), only if the row is at version d->seq - 1; then the row's seq is d->seq. `after`
   * gets snap_bytes, delta_bytes and n_deltas. 0 ok, 1 conflict (no such row, or another
   * version: nothing written), -1 error (not written), -2 outcome unknown (as put's).
   * Shared backends: put with row->cas set answers 1 the same way. */
  int (*append)(store_conn *c, const store_row *row, const store_delta *d, store_row *after,
                char *err, size_t cap);
  /* Replaces the row's snapshot by row->meta/state standing for version row->seq, with
   * identity row->snap_id, and drops the deltas up to row->seq; only if the row's snapshot is
   * still old_snap_id and the row has reached row->seq. 0 ok, 1 stale (nothing written),
   * -1 error. */
  int (*compact)(store_conn *c, const store_row *row, uint64_t old_snap_id, char *err,
                 size_t cap);
  /* The short swap (optional; NULL: compaction swaps the snapshot in whole with `compact`).
   * put_piece writes one piece of a compaction's new snapshot (identity snap_id) ahead of its
   * swap, each in a transaction of its own: piece 0 is the envelope's meta, pieces 1.. the
   * state blob in order. Pieces of a snapshot no row points at are never read. 0 ok, -1. */
  int (*put_piece)(store_conn *c, const char *id, const uint8_t owner[32], uint64_t snap_id,
                   int part, const uint8_t *bytes, size_t len, char *err, size_t cap);
  /* Repoints the row to the snapshot row->snap_id (n_pieces pieces, all written by put_piece)
   * standing for version row->seq, of row->meta_len + row->state_len bytes (the blobs are not
   * passed); only if the row's snapshot is still old_snap_id, the row has reached row->seq and
   * every piece is there. The deltas it folded (up to row->seq) and the old snapshot are dead
   * from then on (never read; `collect` deletes them). 0 ok, 1 stale (nothing written), -1. */
  int (*swap)(store_conn *c, const store_row *row, uint64_t old_snap_id, int n_pieces,
              char *err, size_t cap);
  /* Deletes a bounded batch of the row's dead data (pieces of snapshots the row does not point
   * at, or of a row that is gone; deltas its snapshot folded), in the caller's transaction.
   * 0 nothing left, 2 more to do, -1 error. */
  int (*collect)(store_conn *c, const char *id, const uint8_t owner[32], char *err,
                 size_t cap);
  /* Shared backends: owner's row id's version (seq): 0 found, 1 absent, -1 error. */
  int (*version)(store_conn *c, const char *id, const uint8_t owner[32], uint64_t *seq,
                 char *err, size_t cap);
  /* Deletes owner's row id. 0 deleted, 1 absent, -1 error. */
  int (*del)(store_conn *c, const char *id, const uint8_t owner[32], char *err, size_t cap);
  /* Deletes up to max rows last used before `before`, least recent first; their keys go to
   * out. Returns how many, or -1. */
  int (*expire)(store_conn *c, double before, int max, store_key *out, char *err, size_t cap);
  /* owner's rows, most recent first, without blobs (meta/state NULL). Returns how many, or -1. */
  int (*list)(store_conn *c, const uint8_t owner[32], int max, store_row *out, char *err,
              size_t cap);
  /* Rows in the store (for the gauge), -1 on error. */
  long (*count)(store_conn *c);
  /* Keyed records (see store_record). rec_put inserts or replaces r: 0 ok, -1 error (not
   * written), -2 outcome unknown (shared backends: the reply was lost). rec_get reads the
   * record r->ns/owner/key into r (value borrowed until `release` or the next call):
   * 0 found, 1 absent or expired, -1 error. rec_del: 0 deleted, 1 absent, -1 error.
   * In a batch like the other writes. */
  int (*rec_put)(store_conn *c, const store_record *r, char *err, size_t cap);
  int (*rec_get)(store_conn *c, store_record *r, char *err, size_t cap);
  int (*rec_del)(store_conn *c, const store_record *r, char *err, size_t cap);
  /* Frees the backend (after every connection was closed). */
  void (*destroy)(void *cfg);
} store_backend_ops;

typedef struct store_backend {
  const store_backend_ops *ops;
  void *cfg;
} store_backend;

/* SQLite in dir/sessions.db (WAL). Creates dir (0700) and the schema, takes an exclusive lock
 * on dir/xlserve.lock (one daemon per directory). fsync: synchronous=FULL (a commit survives
 * power loss) instead of NORMAL (survives a crash of the process). Main thread, at start. */
store_backend *store_sqlite_open(const char *dir, int fsync, char *err, size_t cap);
/* Tests only: hold (1) or let go (0) the SQLite backend's checkpoint thread, as if it never got
 * a core; the writers' own checkpoints still run. Any thread. */
void store_sqlite_hold_checkpoints(store_backend *b, int hold);
void store_backend_free(store_backend *b);

/* ------------------------------------------------------------------------------------------ */
/* Front */

typedef struct session_store session_store;

typedef enum {
  SOP_LOAD,   /* id + owner -> out (a rebuilt session) */
  SOP_SAVE,   /* row (pre-encoded meta + state, owned by the op), or sess to encode; a
                 snapshot at version row.seq */
  SOP_APPEND, /* row (metadata + meta, owned) and delta (owned): a turn's delta, version row.seq */
  SOP_REMOVE, /* id + owner */
  SOP_EXPIRE, /* before, max -> keys[n] */
  SOP_LIST,   /* owner, max -> rows[n] (metadata) */
  SOP_EXPORT, /* sess -> bytes (meta || core); no backend needed */
  SOP_DECODE, /* in (an exported envelope) -> out; no backend needed */
  SOP_VERSION, /* id + owner -> row.seq: the stored version (shared backends; ABSENT: no row) */
  /* keyed records (store_op_record sets rec): without a backend, the in-memory table */
  SOP_REC_PUT, /* rec (value owned by the op) */
  SOP_REC_GET, /* rec.ns/owner/key -> rec.value/len/expires (owned by the op); ABSENT */
  SOP_REC_DEL  /* rec.ns/owner/key; ABSENT: there was none */
} sop_kind;

typedef enum {
  STORE_OK = 0,
  STORE_ABSENT,   /* LOAD: no such row; REMOVE: none of this owner */
  STORE_INVALID,  /* LOAD/DECODE: corrupted envelope (message says what) */
  STORE_MISMATCH, /* LOAD/DECODE: another model or format version */
  STORE_ERROR,    /* backend failure, or not run (shutdown deadline) */
  STORE_CONFLICT, /* APPEND, SAVE with row.cas: the row is at another version (another replica
                     wrote it): nothing written */
  STORE_UNKNOWN   /* SAVE/APPEND: the outcome is unknown (the write's reply was lost, or an I/O
                     error after the commit reached the disk): the store may hold it or not;
                     whoever holds the session must re-read it from the store */
} store_status;

typedef struct store_op store_op;
typedef void (*store_done_fn)(store_op *op); /* loop thread; the callback frees op */

struct store_op {
  sop_kind kind;
  char id[129];
  uint8_t owner[32];
  int async;      /* SAVE/APPEND: may wait up to async_commit_ms before its commit */
  session *sess;  /* SAVE/EXPORT: encoded on the store thread (held for the op) */
  int free_sess;  /* SAVE: the op owns sess and frees it afterwards (eviction) */
  store_row row;  /* SAVE: the row (metadata filled by the submitter unless sess is given) */
  uint8_t *meta, *state; /* SAVE: owned encodings (row.meta/state point here); APPEND: meta */
  uint8_t *delta;        /* APPEND: owned xl_state_delta_encode blob */
  size_t delta_len;
  uint8_t *in;    /* DECODE: owned input */
  size_t in_len;
  /* REC_*: the record; SAVE/APPEND: a record written in the same commit as the row when
   * rec.ns[0] (the backend's row.rec; without a backend, the in-memory table after the op) */
  store_record rec;
  uint8_t *rec_value; /* owned: rec.value points here */
  double before;  /* EXPIRE */
  int max;        /* EXPIRE, LIST */
  /* results */
  store_status status;
  char err[400];
  int created;           /* SAVE: a new row */
  store_row after;       /* APPEND: the row's sizes after it (compaction's trigger) */
  session *out;          /* LOAD/DECODE: not in any table; id/owner unset */
  uint8_t *bytes;        /* EXPORT */
  size_t n_bytes;
  store_key *keys;       /* EXPIRE */
  store_row *rows;       /* LIST */
  int n;
  double t_submit;       /* monotonic, set by store_submit */
  store_done_fn done;
  void *ctx;
  struct store_op *next;
};

store_op *store_op_new(sop_kind kind, store_done_fn done, void *ctx);
/* The row's metadata (not its blobs) from a session (the session's holder). */
void store_row_fill(store_row *row, const session *s, const char *id, const uint8_t owner[32],
                    uint64_t fingerprint);
void store_op_free(store_op *op); /* frees owned buffers, out, and sess when free_sess */
/* Sets op->rec to (ns, owner, key) with value (owned by the op from now on; NULL for a get or
 * a delete), expiring ttl_s seconds from now. -1 (nothing set, value freed) when ns or key is
 * not valid. */
int store_op_record(store_op *op, const char *ns, const uint8_t owner[32], const char *key,
                    uint8_t *value, size_t len, double ttl_s);

/* A snapshot's state is stored in pieces of this many bytes (the last one shorter): a whole
 * save's by the backend, a compaction's by the compaction thread (store_opts.snap_piece_bytes
 * 0), so both kinds of snapshot are laid out alike. */
#define STORE_PIECE_BYTES ((size_t)4 << 20)

typedef struct store_opts {
  int async_commit_ms; /* longest wait of an async save */
  int max_batch;       /* ops per transaction */
  /* compaction: a row's deltas are folded into a new snapshot when their bytes exceed
   * compact_ratio x the snapshot's (and compact_min_bytes), or they number compact_max_deltas.
   * 0: the defaults (1.2, 64 KiB, 256). */
  double compact_ratio;
  long compact_min_bytes;
  int compact_max_deltas;
  /* a compaction's new snapshot is written in pieces of this many bytes of state (backends
   * with put_piece; 0: STORE_PIECE_BYTES) */
  size_t snap_piece_bytes;
  /* tests: called on the compaction thread between a compaction's rebuild (snapshot + deltas
   * up to version seq, encoded; with put_piece: and its pieces written) and its swap; may
   * block (NULL: none) */
  void (*compact_hook)(void *arg, const char *id, uint64_t seq);
  void *compact_hook_arg;
  /* tests: called on the compaction thread after piece `part` of a compaction's new snapshot
   * was committed (backends with put_piece); may block (NULL: none) */
  void (*piece_hook)(void *arg, const char *id, int part);
  /* no backend: the in-memory record table's bounds, in records and in bytes of keys and
   * values (0: 65536 and 64 MiB); the least recently used record goes first */
  long mem_records;
  size_t mem_record_bytes;
} store_opts;

/* backend NULL: no persistence (only EXPORT and DECODE are meaningful; the others answer
 * STORE_ABSENT / STORE_OK without effect), except keyed records, kept in a bounded in-memory
 * LRU (store_opts.mem_records / mem_record_bytes). */
session_store *store_new(store_backend *backend, const store_opts *o, void (*notify)(void *),
                         void *arg);
/* Connects and starts the store thread (signals blocked); the model is needed to encode and
 * decode sessions. 0, or -1 with a message. */
int store_start(session_store *st, const xl_model *model, char *err, size_t cap);
void store_submit(session_store *st, store_op *op);
/* Runs the done callbacks of finished ops; returns how many. */
int store_poll(session_store *st);
/* Runs what is queued until deadline (monotonic seconds), fails the rest with STORE_ERROR,
 * joins the thread. Then store_poll delivers them. */
void store_shutdown(session_store *st, double deadline);
void store_free(session_store *st); /* after store_shutdown + store_poll */
int store_persistent(const session_store *st);
int store_shared(const session_store *st); /* the backend is shared by several daemons */
long store_count(const session_store *st); /* rows, as of the last operation (any thread) */
/* Compactions done and bytes handed to the backend (snapshots + deltas), for tests and the
 * store's measurements (any thread). */
long store_compactions(const session_store *st);
/* Compactions queued or in progress (tests; any thread). */
int store_compactions_pending(session_store *st);
/* Whether the store thread holds writes back behind a compaction that did not keep up (tests;
 * any thread): set when the commit that went past the bound is done, before its callback. */
int store_holding_writes(session_store *st);
uint64_t store_bytes_written(const session_store *st);

#endif
