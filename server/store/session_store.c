/*
 * session_store.c: the store front: one store thread, its FIFO of operations, group commit,
 * the async-save delay, rebuilding sessions from a snapshot and its deltas, compaction (rebuilt
 * and encoded on a compaction thread, which also writes it in pieces and swaps it in where the
 * backend has pieces; otherwise swapped in whole by the store thread between batches), and
 * completions back to the loop thread (see session_store.h).
 * Threads: submit/poll/start/shutdown/free on the loop thread; compaction_main on the
 * compaction thread; the rest on the store thread.
 */
#include "session_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "metrics.h"
#include "record_mem.h"
#include "session_codec.h"
#include "util.h"
#include "xlog.h"

/* A compaction's new snapshot, built on the compaction thread, waiting for the store thread
 * to swap it in. */
typedef struct compaction {
  store_row row;       /* key, metadata, the snapshot (meta/state point at the owned buffers) */
  uint64_t old_snap_id; /* the snapshot it was built from */
  uint8_t *meta, *state;
  struct compaction *next;
} compaction;

struct session_store {
  store_backend *b;
  store_conn *conn;
  const xl_model *model;
  store_opts o;
  pthread_t th;
  int started;
  pthread_mutex_t mu; /* the queue, and the compaction state below */
  /* held around every write transaction, the store thread's and the compaction thread's
   * (pieces, swap, collection), so they take turns on the database's one writer lock without
   * SQLite's busy polling; taken before mu, never while holding it */
  pthread_mutex_t wlock;
  /* the store thread goes first: while it waits for wlock (store_waits, under wait_mu), the
   * compaction thread, between two pieces, waits on wait_cv (bounded) before taking wlock,
   * since a mutex is not fair */
  pthread_mutex_t wait_mu;
  pthread_cond_t wait_cv;
  int store_waits;
  pthread_cond_t cv;
  store_op *head, *tail;
  long n_sync; /* queued ops other than async saves */
  int stop;
  double deadline;
  pthread_mutex_t done_mu;
  store_op *done_head, *done_tail;
  void (*notify)(void *);
  void *notify_arg;
  atomic_long count;
  atomic_long compactions;
  atomic_ullong bytes_written;
  /* compaction (under mu): rows whose deltas outgrew their snapshot, waiting for the
   * compaction thread (which rebuilds and encodes them on its own connection); the row it is
   * building (in_flight, until the store thread swapped it in or dropped it; again: a delta
   * asked for it meanwhile); the built snapshots waiting for the store thread's swap */
  pthread_t cth;
  int c_started;
  store_conn *cconn;
  pthread_cond_t ccv;
  atomic_int cstop;
  store_key *to_compact;
  int n_compact, cap_compact;
  store_key in_flight;
  int busy, again;
  compaction *ready;
  /* backpressure (under mu): a row whose deltas went far past its bound while its compaction
   * was queued or running: the store thread writes nothing more until that compaction is
   * swapped in, so a row's size stays bounded when turns come faster than compactions */
  store_key held_back;
  int holding;
  record_mem *mem; /* no backend: the keyed records (store thread) */
};

/* deltas above COMPACT_RATIO x the snapshot: compact. Each byte reaches the disk twice (WAL,
 * then its checkpoint), so a turn writes about 2 x (1 + 1 / ratio) x its delta: 1.2 keeps
 * that near 3.7 x (1.0: 4 x) for a row of at most 2.2 states at rest */
#define COMPACT_RATIO 1.2
/* deltas above (compact_ratio + COMPACT_HOLD_MARGIN) x the snapshot: hold writes back */
#define COMPACT_HOLD_MARGIN 0.3
#define COMPACT_MIN_BYTES (64L << 10)
#define COMPACT_MAX_DELTAS 256
#define COMPACT_QUEUE 1024

store_op *store_op_new(sop_kind kind, store_done_fn done, void *ctx) {
  store_op *op = xcalloc(1, sizeof *op);
  op->kind = kind;
  op->done = done;
  op->ctx = ctx;
  return op;
}

void store_op_free(store_op *op) {
  if (!op) return;
  free(op->meta);
  free(op->state);
  free(op->delta);
  free(op->in);
  free(op->bytes);
  free(op->keys);
  free(op->rows);
  free(op->rec_value);
  session_free(op->out);
  if (op->free_sess) session_free(op->sess);
  free(op);
}

int store_record_valid(const char *ns, const char *key) {
  size_t n = strlen(ns), k = strlen(key);
  if (!n || n >= STORE_NS_CAP || !k || k >= STORE_RKEY_CAP) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((ns[i] >= 'a' && ns[i] <= 'z') || (ns[i] >= '0' && ns[i] <= '9') || ns[i] == '_'))
      return 0;
  for (size_t i = 0; i < k; i++)
    if (key[i] < 0x21 || key[i] > 0x7e) return 0;
  return 1;
}

int store_op_record(store_op *op, const char *ns, const uint8_t owner[32], const char *key,
                    uint8_t *value, size_t len, double ttl_s) {
  if (!store_record_valid(ns, key)) {
    free(value);
    return -1;
  }
  memset(&op->rec, 0, sizeof op->rec);
  snprintf(op->rec.ns, sizeof op->rec.ns, "%s", ns);
  memcpy(op->rec.owner, owner, 32);
  snprintf(op->rec.key, sizeof op->rec.key, "%s", key);
  free(op->rec_value);
  op->rec_value = value;
  op->rec.value = value;
  op->rec.len = value ? len : 0;
  op->rec.expires = now_wall() + ttl_s;
  return 0;
}

session_store *store_new(store_backend *backend, const store_opts *o, void (*notify)(void *),
                         void *arg) {
  session_store *st = xcalloc(1, sizeof *st);
  st->b = backend;
  if (!backend) st->mem = record_mem_new(o->mem_records, o->mem_record_bytes);
  st->o = *o;
  if (st->o.max_batch < 1) st->o.max_batch = 64;
  if (st->o.compact_ratio <= 0) st->o.compact_ratio = COMPACT_RATIO;
  if (st->o.compact_min_bytes <= 0) st->o.compact_min_bytes = COMPACT_MIN_BYTES;
  if (st->o.compact_max_deltas <= 0) st->o.compact_max_deltas = COMPACT_MAX_DELTAS;
  if (st->o.snap_piece_bytes == 0) st->o.snap_piece_bytes = STORE_PIECE_BYTES;
  pthread_mutex_init(&st->mu, NULL);
  pthread_mutex_init(&st->wlock, NULL);
  pthread_mutex_init(&st->wait_mu, NULL);
  pthread_cond_init(&st->wait_cv, NULL);
  pthread_cond_init(&st->cv, NULL);
  pthread_cond_init(&st->ccv, NULL);
  pthread_mutex_init(&st->done_mu, NULL);
  atomic_init(&st->cstop, 0);
  st->notify = notify;
  st->notify_arg = arg;
  atomic_init(&st->count, 0);
  atomic_init(&st->compactions, 0);
  atomic_init(&st->bytes_written, 0);
  return st;
}

int store_persistent(const session_store *st) { return st && st->b; }
int store_shared(const session_store *st) { return st && st->b && st->b->ops->shared; }
long store_count(const session_store *st) {
  return st ? atomic_load_explicit(&st->count, memory_order_relaxed) : 0;
}
long store_compactions(const session_store *st) {
  return st ? atomic_load_explicit(&st->compactions, memory_order_relaxed) : 0;
}
uint64_t store_bytes_written(const session_store *st) {
  return st ? atomic_load_explicit(&st->bytes_written, memory_order_relaxed) : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* store thread */

void store_row_fill(store_row *row, const session *s, const char *id, const uint8_t owner[32],
                    uint64_t fp) {
  snprintf(row->id, sizeof row->id, "%s", id);
  memcpy(row->owner, owner, 32);
  row->fingerprint = fp;
  row->created = s->created;
  row->last_used = s->last_used;
  row->tokens = session_tokens(s);
  row->turns = s->turns;
  row->mode = (int)s->chat;
  row->messages = s->n_msgs;
  row->positions = xl_state_mem_length(s->state);
}

/* A turn's write under durability async (a whole state or a delta): it may wait for company. */
static int waits_for_company(const store_op *op) {
  return (op->kind == SOP_SAVE || op->kind == SOP_APPEND) && op->async;
}

static int is_write(const store_op *op) {
  return op->kind == SOP_SAVE || op->kind == SOP_APPEND || op->kind == SOP_REMOVE ||
         op->kind == SOP_EXPIRE || op->kind == SOP_REC_PUT || op->kind == SOP_REC_DEL;
}

/* Without a backend: an op's record (REC_PUT, or a SAVE/APPEND carrying one) goes to the
 * in-memory table. */
static void mem_put(session_store *st, store_op *op) {
  if (op->rec.ns[0] && record_mem_put(st->mem, &op->rec, now_wall())) {
    snprintf(op->err, sizeof op->err, "the record is bigger than the in-memory table");
    op->status = STORE_ERROR;
  }
}

static store_status from_codec(codec_status c) {
  return c == CODEC_OK ? STORE_OK : c == CODEC_MISMATCH ? STORE_MISMATCH : STORE_INVALID;
}

static uint64_t new_snap_id(void) {
  uint64_t v;
  random_bytes(&v, sizeof v);
  return v;
}

/* Whether a row's deltas outgrew its snapshot: their bytes above compact_ratio x the
 * snapshot's (and above compact_min_bytes), or compact_max_deltas of them. */
static int outgrown(const session_store *st, const store_row *r) {
  return r->n_deltas >= st->o.compact_max_deltas ||
         ((double)r->delta_bytes > st->o.compact_ratio * (double)r->snap_bytes &&
          r->delta_bytes > (uint64_t)st->o.compact_min_bytes);
}

/* A stored row rebuilt on connection c (the store thread's, or the compaction thread's): its
 * snapshot decoded and its deltas applied in order (they must run from the snapshot's version
 * to the row's, without a gap). *row gets the row's metadata (its blobs are no longer valid).
 * for_compaction: a row whose deltas no longer outgrow its snapshot is not rebuilt (answered
 * STORE_ABSENT), and a shutdown stops the rebuild (STORE_ERROR). */
static store_status load_row(session_store *st, store_conn *c, const char *id,
                             const uint8_t owner[32], int for_compaction, session **out,
                             store_row *row, char *err, size_t cap) {
  const store_backend_ops *B = st->b->ops;
  *out = NULL;
  memset(row, 0, sizeof *row);
  int rc = B->get(c, id, owner, row, err, cap);
  if (rc < 0) return STORE_ERROR;
  if (rc == 1) return STORE_ABSENT;
  if (for_compaction && (row->n_deltas == 0 || !outgrown(st, row))) {
    B->release(c);
    row->meta = row->state = NULL;
    return STORE_ABSENT;
  }
  session *s = NULL;
  store_status status = from_codec(
      sess_decode(st->model, row->meta, row->meta_len, row->state, row->state_len, &s, err, cap));
  uint64_t expect = row->snap_seq;
  store_delta d;
  while (status == STORE_OK && (rc = B->next_delta(c, &d, err, cap)) == 0) {
    if (for_compaction && atomic_load(&st->cstop)) {
      snprintf(err, cap, "stopped by the shutdown");
      status = STORE_ERROR;
      break;
    }
    if (d.seq != expect + 1) {
      snprintf(err, cap, "session log: delta %llu follows version %llu (a delta is missing)",
               (unsigned long long)d.seq, (unsigned long long)expect);
      status = STORE_INVALID;
      break;
    }
    expect = d.seq;
    status = from_codec(
        sess_apply_delta(st->model, s, d.meta, d.meta_len, d.delta, d.delta_len, err, cap));
  }
  if (status == STORE_OK && rc < 0) status = STORE_ERROR;
  if (status == STORE_OK && expect != row->seq) {
    snprintf(err, cap, "session log: ends at version %llu, the row is at %llu",
             (unsigned long long)expect, (unsigned long long)row->seq);
    status = STORE_INVALID;
  }
  B->release(c);
  row->meta = row->state = NULL;
  if (status != STORE_OK) {
    session_free(s);
    return status;
  }
  s->store_seq = row->seq;
  s->delta_ok = 1;
  s->delta_base = xl_state_tokens_fed(s->state);
  *out = s;
  return STORE_OK;
}


/* The backend's operations, or NULL when the store keeps sessions in memory only. */
static const store_backend_ops *backend_of(const session_store *st) {
  return st->b ? st->b->ops : NULL;
}

/* The status a failed backend write leaves: -2 means the write may or may not have landed. */
static store_status write_failure(int rc) {
  return rc == -2 ? STORE_UNKNOWN : STORE_ERROR;
}

/* SOP_LOAD: reads and decodes one session row; times the read when a row was there. */
static int op_load(session_store *st, store_op *op) {
  if (!backend_of(st)) {
    op->status = STORE_ABSENT;
    return 0;
  }
  double t0 = now_mono();
  store_row row;
  op->status =
    load_row(st, st->conn, op->id, op->owner, 0, &op->out, &row, op->err, sizeof op->err);
  if (op->status != STORE_ABSENT) hist_observe(&g_metrics.store_read, now_mono() - t0);
  return 0;
}

/* Encodes op->sess into op->meta/op->state and fills op->row from it (frees the session when
 * the op owns it). Returns -1 when encoding failed (op->status is set). */
static int encode_save(session_store *st, store_op *op) {
  int failed = sess_encode(op->sess, st->model, &op->meta, &op->row.meta_len, &op->state,
                           &op->row.state_len, op->err, sizeof op->err);
  if (failed) {
    op->status = STORE_ERROR;
  } else {
    store_row_fill(&op->row, op->sess, op->id, op->owner, xl_model_fingerprint(st->model));
    op->row.meta = op->meta;
    op->row.state = op->state;
  }
  if (op->free_sess) {
    session_free(op->sess);
    op->sess = NULL;
  }
  return failed ? -1 : 0;
}

/* SOP_SAVE: writes a whole snapshot row (a compare-and-set on a shared store). */
static int op_save(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  char *err = op->err;
  size_t cap = sizeof op->err;
  if (op->sess && encode_save(st, op) < 0) return 0; /* nothing was written: the batch is intact */
  if (!B) {
    mem_put(st, op);
    return 0;
  }
  op->row.snap_id = new_snap_id();
  op->row.rec = op->rec.ns[0] ? &op->rec : NULL;
  int rc = B->put(st->conn, &op->row, &op->created, err, cap);
  if (rc < 0) {
    op->status = write_failure(rc);
    return -1;
  }
  if (rc == 1) { /* a shared store's compare-and-set: nothing written */
    snprintf(err, cap, "the stored session is no longer at version %llu: another replica "
             "wrote it", (unsigned long long)(op->row.seq - 1));
    op->status = STORE_CONFLICT;
    return 0;
  }
  atomic_fetch_add_explicit(&st->bytes_written, op->row.meta_len + op->row.state_len,
                            memory_order_relaxed);
  return 0;
}

/* SOP_APPEND: appends one turn's delta to the row's log; the row must be at the version before. */
static int op_append(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  char *err = op->err;
  size_t cap = sizeof op->err;
  if (!B) {
    mem_put(st, op);
    return 0;
  }
  store_delta d = {op->row.seq, op->meta, op->row.meta_len, op->delta, op->delta_len};
  op->row.rec = op->rec.ns[0] ? &op->rec : NULL;
  int rc = B->append(st->conn, &op->row, &d, &op->after, err, cap);
  if (rc < 0) {
    op->status = write_failure(rc);
    return -1;
  }
  if (rc == 1) { /* nothing written: the batch is intact */
    snprintf(err, cap, "the stored session is not at version %llu (a write before this "
             "turn's failed or the row changed): the turn's delta does not continue it",
             (unsigned long long)(op->row.seq - 1));
    op->status = B->shared ? STORE_CONFLICT : STORE_ERROR;
    return 0;
  }
  atomic_fetch_add_explicit(&st->bytes_written, op->row.meta_len + op->delta_len,
                            memory_order_relaxed);
  return 0;
}

/* SOP_REMOVE: deletes one session row. */
static int op_remove(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  if (!B) {
    op->status = STORE_ABSENT;
    return 0;
  }
  int rc = B->del(st->conn, op->id, op->owner, op->err, sizeof op->err);
  if (rc < 0) {
    op->status = STORE_ERROR;
    return -1;
  }
  op->status = rc == 1 ? STORE_ABSENT : STORE_OK;
  return 0;
}

/* SOP_EXPIRE: deletes up to op->max rows last used before op->before; their keys go to op->keys. */
static int op_expire(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  if (!B || op->max <= 0) return 0;
  op->keys = xcalloc((size_t)op->max, sizeof *op->keys);
  int n = B->expire(st->conn, op->before, op->max, op->keys, op->err, sizeof op->err);
  if (n < 0) {
    op->status = STORE_ERROR;
    return -1;
  }
  op->n = n;
  return 0;
}

/* SOP_LIST: lists up to op->max of an owner's rows into op->rows (a read: never rolls back). */
static int op_list(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  if (!B || op->max <= 0) return 0;
  op->rows = xcalloc((size_t)op->max, sizeof *op->rows);
  int n = B->list(st->conn, op->owner, op->max, op->rows, op->err, sizeof op->err);
  if (n < 0) {
    op->status = STORE_ERROR;
    return 0;
  }
  op->n = n;
  return 0;
}

/* SOP_EXPORT: encodes op->sess into one buffer, meta then core (op->bytes, op->n_bytes). */
static int op_export(session_store *st, store_op *op) {
  uint8_t *meta, *core;
  size_t ml, cl;
  if (sess_encode(op->sess, st->model, &meta, &ml, &core, &cl, op->err, sizeof op->err)) {
    op->status = STORE_ERROR;
    return 0;
  }
  op->bytes = xmalloc(ml + cl);
  memcpy(op->bytes, meta, ml);
  memcpy(op->bytes + ml, core, cl);
  op->n_bytes = ml + cl;
  free(meta);
  free(core);
  return 0;
}

/* SOP_VERSION: reads the stored version of one row into op->row.seq. */
static int op_version(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  if (!B || !B->version) {
    op->status = STORE_ABSENT;
    return 0;
  }
  int rc = B->version(st->conn, op->id, op->owner, &op->row.seq, op->err, sizeof op->err);
  op->status = rc < 0 ? STORE_ERROR : rc == 1 ? STORE_ABSENT : STORE_OK;
  return 0;
}

/* SOP_REC_PUT: writes one record (an idempotency entry or the like). */
static int op_rec_put(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  if (!B) {
    mem_put(st, op);
    return 0;
  }
  int rc = B->rec_put(st->conn, &op->rec, op->err, sizeof op->err);
  if (rc < 0) {
    op->status = write_failure(rc);
    return -1;
  }
  return 0;
}

/* SOP_REC_GET: reads one record and copies its value into op->rec_value, which op->rec.value
 * then points at; on a miss or an error op->rec.value is NULL. */
static int op_rec_get(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  int rc = B ? B->rec_get(st->conn, &op->rec, op->err, sizeof op->err)
             : record_mem_get(st->mem, &op->rec, now_wall());
  if (rc < 0 || rc == 1) {
    op->status = rc < 0 ? STORE_ERROR : STORE_ABSENT;
    op->rec.value = NULL;
    op->rec.len = 0;
    return 0;
  }
  free(op->rec_value);
  op->rec_value = xmalloc(op->rec.len ? op->rec.len : 1);
  if (op->rec.len) memcpy(op->rec_value, op->rec.value, op->rec.len);
  op->rec.value = op->rec_value;
  if (B) B->release(st->conn); /* the loan (and any read transaction) ends here */
  return 0;
}

/* SOP_REC_DEL: deletes one record. */
static int op_rec_del(session_store *st, store_op *op) {
  const store_backend_ops *B = backend_of(st);
  int rc = B ? B->rec_del(st->conn, &op->rec, op->err, sizeof op->err)
             : record_mem_del(st->mem, &op->rec);
  if (rc < 0) {
    op->status = STORE_ERROR;
    return -1;
  }
  op->status = rc == 1 ? STORE_ABSENT : STORE_OK;
  return 0;
}

/* SOP_DECODE: decodes an imported buffer into op->out; its values must be ones this model
 * makes, or the import is STORE_INVALID. */
static int op_decode(session_store *st, store_op *op) {
  char *err = op->err;
  size_t cap = sizeof op->err;
  size_t ml;
  codec_status c = sess_split(op->in, op->in_len, &ml, err, cap);
  if (c == CODEC_OK)
    c = sess_decode(st->model, op->in, ml, op->in + ml, op->in_len - ml, &op->out, err, cap);
  op->status = from_codec(c);
  if (op->status == STORE_OK) {
    xl_error xe;
    if (xl_state_check_range(op->out->state, &xe) != XL_OK) {
      snprintf(err, cap, "%.300s", xe.message);
      session_free(op->out);
      op->out = NULL;
      op->status = STORE_INVALID;
    }
  }
  return 0;
}

/* Runs one op; writes join the open transaction. Returns -1 when a write failed (the batch
 * must roll back). */
static int exec_op(session_store *st, store_op *op) {
  switch (op->kind) {
    case SOP_LOAD: return op_load(st, op);
    case SOP_SAVE: return op_save(st, op);
    case SOP_APPEND: return op_append(st, op);
    case SOP_REMOVE: return op_remove(st, op);
    case SOP_EXPIRE: return op_expire(st, op);
    case SOP_LIST: return op_list(st, op);
    case SOP_EXPORT: return op_export(st, op);
    case SOP_VERSION: return op_version(st, op);
    case SOP_REC_PUT: return op_rec_put(st, op);
    case SOP_REC_GET: return op_rec_get(st, op);
    case SOP_REC_DEL: return op_rec_del(st, op);
    case SOP_DECODE: return op_decode(st, op);
  }
  return 0;
}

static int same_key(const store_key *k, const char *id, const uint8_t owner[32]) {
  return !strcmp(k->id, id) && !memcmp(k->owner, owner, 32);
}

/* Queues a row for the compaction thread (mu held). A row already queued is not queued twice;
 * the row being built is marked to be looked at again after its swap (the deltas appended
 * meanwhile may outgrow the new snapshot too). */
static void queue_compaction(session_store *st, const char *id, const uint8_t owner[32]) {
  if (st->busy && same_key(&st->in_flight, id, owner)) {
    st->again = 1;
    return;
  }
  for (int i = 0; i < st->n_compact; i++)
    if (same_key(&st->to_compact[i], id, owner)) return;
  if (st->n_compact == COMPACT_QUEUE) return; /* its next delta asks again */
  if (st->n_compact == st->cap_compact) {
    st->cap_compact = st->cap_compact ? 2 * st->cap_compact : 16;
    st->to_compact = xrealloc(st->to_compact, sizeof *st->to_compact * (size_t)st->cap_compact);
  }
  store_key *k = &st->to_compact[st->n_compact++];
  snprintf(k->id, sizeof k->id, "%s", id);
  memcpy(k->owner, owner, 32);
  pthread_cond_signal(&st->ccv);
}

/* Whether the row of key k has a compaction queued, being built or waiting for its swap (mu
 * held). */
static int compaction_pending(const session_store *st, const store_key *k) {
  if (st->busy && same_key(&st->in_flight, k->id, k->owner)) return 1;
  for (int i = 0; i < st->n_compact; i++)
    if (same_key(&st->to_compact[i], k->id, k->owner)) return 1;
  return 0; /* a built one is in_flight until its swap */
}

/* After a delta's commit (store thread): its row goes to the compaction thread when its deltas
 * outgrew the bound; when they are far past it (the compaction has not kept up), the store
 * thread holds further writes back until that compaction is swapped in. */
static void want_compaction(session_store *st, const store_op *op) {
  if (!outgrown(st, &op->after)) return;
  pthread_mutex_lock(&st->mu);
  queue_compaction(st, op->id, op->owner);
  const store_row *r = &op->after;
  if (!st->holding && r->delta_bytes > (uint64_t)st->o.compact_min_bytes &&
      (double)r->delta_bytes >
          (st->o.compact_ratio + COMPACT_HOLD_MARGIN) * (double)r->snap_bytes) {
    snprintf(st->held_back.id, sizeof st->held_back.id, "%s", op->id);
    memcpy(st->held_back.owner, op->owner, 32);
    st->holding = compaction_pending(st, &st->held_back);
  }
  pthread_mutex_unlock(&st->mu);
}

static void compaction_free(compaction *c) {
  if (!c) return;
  free(c->meta);
  free(c->state);
  free(c);
}

/* wlock for the store thread, announced so that the compaction thread lets it go first. */
static void store_wlock(session_store *st) {
  pthread_mutex_lock(&st->wait_mu);
  st->store_waits++;
  pthread_mutex_unlock(&st->wait_mu);
  pthread_mutex_lock(&st->wlock);
  pthread_mutex_lock(&st->wait_mu);
  if (--st->store_waits == 0) pthread_cond_broadcast(&st->wait_cv);
  pthread_mutex_unlock(&st->wait_mu);
}

/* The compaction thread's wait, before it takes wlock, until the store thread has it (at most
 * COMPACTION_YIELD_S: a store thread that announced itself and then stalled cannot hold a
 * compaction back for longer). */
#define COMPACTION_YIELD_S 0.1
static void compaction_yield(session_store *st) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)(COMPACTION_YIELD_S * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&st->wait_mu);
  while (st->store_waits > 0 && pthread_cond_timedwait(&st->wait_cv, &st->wait_mu, &ts) == 0) {
  }
  pthread_mutex_unlock(&st->wait_mu);
}

/* One write of the compaction thread (a piece, the swap, or a collection), in a transaction of
 * its own on its connection, under wlock. The backend's answer: 0 ok, 1 stale (the swap), 2
 * more to do (a collection), -1 error (rolled back). */
typedef struct {
  int kind; /* 0 a piece, 1 the swap, 2 a collection */
  const compaction *c;
  int part, n_pieces;
  const uint8_t *bytes;
  size_t len;
} cwrite;

static int compaction_write(session_store *st, const cwrite *w, char *err, size_t cap) {
  const store_backend_ops *B = st->b->ops;
  const store_row *r = &w->c->row;
  compaction_yield(st); /* the store thread first when it waits */
  pthread_mutex_lock(&st->wlock);
  int rc = B->begin(st->cconn, err, cap);
  if (rc == 0) {
    if (w->kind == 0)
      rc = B->put_piece(st->cconn, r->id, r->owner, r->snap_id, w->part, w->bytes, w->len, err,
                        cap);
    else if (w->kind == 1)
      rc = B->swap(st->cconn, r, w->c->old_snap_id, w->n_pieces, err, cap);
    else
      rc = B->collect(st->cconn, r->id, r->owner, err, cap);
    if (rc < 0 || B->commit(st->cconn, err, cap)) {
      B->rollback(st->cconn);
      rc = -1;
    }
  }
  pthread_mutex_unlock(&st->wlock);
  return rc;
}

/* The short swap (backends with put_piece; compaction thread): the new snapshot is written in
 * pieces of snap_piece_bytes, each a transaction of its own (the store thread's turns commit
 * between them), then a swap that only repoints the row at it (conditional on the snapshot it
 * was built from, the version it reached and every piece being there), then the dead data
 * (the old snapshot and the folded deltas, or this snapshot's pieces when the swap found the
 * row changed) is deleted in small transactions. A shutdown or a failure between pieces leaves
 * pieces no row points at: never read, collected by the next compaction of that row or at the
 * next open. */
static void short_swap(session_store *st, compaction *c) {
  char err[400] = "";
  size_t piece = st->o.snap_piece_bytes, sl = c->row.state_len;
  int n_pieces = 1 + (int)((sl + piece - 1) / piece);
  int rc = 0;
  for (int part = 0; part < n_pieces && rc == 0; part++) {
    if (atomic_load(&st->cstop)) {
      rc = -1;
      break;
    }
    size_t off = part ? (size_t)(part - 1) * piece : 0;
    cwrite w = {.kind = 0, .c = c, .part = part,
                .bytes = part ? c->state + off : c->meta,
                .len = part ? (sl - off < piece ? sl - off : piece) : c->row.meta_len};
    rc = compaction_write(st, &w, err, sizeof err);
    if (rc == 0) {
      atomic_fetch_add_explicit(&st->bytes_written, w.len, memory_order_relaxed);
      if (st->o.piece_hook) st->o.piece_hook(st->o.compact_hook_arg, c->row.id, part);
    }
  }
  if (rc == 0 && st->o.compact_hook)
    st->o.compact_hook(st->o.compact_hook_arg, c->row.id, c->row.seq);
  if (rc == 0 && atomic_load(&st->cstop)) rc = -1;
  if (rc == 0) {
    cwrite w = {.kind = 1, .c = c, .n_pieces = n_pieces};
    double t0 = now_mono();
    rc = compaction_write(st, &w, err, sizeof err);
    if (rc == 0) {
      atomic_fetch_add_explicit(&st->compactions, 1, memory_order_relaxed);
      hist_observe(&g_metrics.store_swap, now_mono() - t0);
    }
  }
  if (rc < 0 && !atomic_load(&st->cstop))
    xlog_msg("error", "store_error", "compacting session %s: %s", c->row.id, err);
  pthread_mutex_lock(&st->mu);
  st->busy = 0;
  if (st->again) queue_compaction(st, c->row.id, c->row.owner);
  pthread_cond_signal(&st->cv); /* a store thread holding writes back for it looks again */
  pthread_mutex_unlock(&st->mu);
  cwrite g = {.kind = 2, .c = c};
  while (!atomic_load(&st->cstop) && (rc = compaction_write(st, &g, err, sizeof err)) == 2) {
  }
  if (rc < 0 && !atomic_load(&st->cstop))
    xlog_msg("error", "store_error", "collecting session %s's dead data: %s", c->row.id, err);
}

/* The compaction thread, on its own connection: takes a queued row, rebuilds it from its
 * snapshot and deltas (a read; the store thread keeps committing meanwhile), encodes the new
 * snapshot, and writes it in pieces and swaps it in itself (short_swap), or, with a backend
 * without pieces, hands it to the store thread, whose swap writes it whole. The next row waits until
 * that swap is done. A row that changed meanwhile (deleted, replaced) is left as it is by the
 * swap; a failure leaves the row as it was (its deltas still rebuild it). */
static void *compaction_main(void *arg) {
  session_store *st = arg;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    while (!atomic_load(&st->cstop) && (st->n_compact == 0 || st->busy))
      pthread_cond_wait(&st->ccv, &st->mu);
    if (atomic_load(&st->cstop)) break;
    store_key k = st->to_compact[0];
    memmove(st->to_compact, st->to_compact + 1, sizeof k * (size_t)--st->n_compact);
    st->in_flight = k;
    st->busy = 1;
    st->again = 0;
    pthread_mutex_unlock(&st->mu);

    char err[400] = "";
    session *s = NULL;
    compaction *c = xcalloc(1, sizeof *c);
    store_status status = load_row(st, st->cconn, k.id, k.owner, 1, &s, &c->row, err, sizeof err);
    snprintf(c->row.id, sizeof c->row.id, "%s", k.id); /* the swap's key */
    memcpy(c->row.owner, k.owner, 32);
    int ok = status == STORE_OK;
    if (ok) {
      size_t ml = 0, cl = 0;
      ok = sess_encode(s, st->model, &c->meta, &ml, &c->state, &cl, err, sizeof err) == 0;
      session_free(s);
      s = NULL;
      c->old_snap_id = c->row.snap_id;
      c->row.meta = c->meta, c->row.meta_len = ml, c->row.state = c->state, c->row.state_len = cl;
      c->row.snap_id = new_snap_id();
      if (!ok) status = STORE_ERROR;
    }
    if (status == STORE_ERROR && !atomic_load(&st->cstop))
      xlog_msg("error", "store_error", "compacting session %s: %s", k.id, err);
    if (ok && st->b->ops->put_piece) { /* written here in pieces; the swap only repoints */
      short_swap(st, c);
      compaction_free(c);
      pthread_mutex_lock(&st->mu);
      continue;
    }
    if (ok && st->o.compact_hook) st->o.compact_hook(st->o.compact_hook_arg, k.id, c->row.seq);

    pthread_mutex_lock(&st->mu);
    if (ok && !st->stop) { /* the store thread swaps it in, then clears busy */
      c->next = st->ready;
      st->ready = c;
      pthread_cond_signal(&st->cv);
    } else {
      compaction_free(c);
      st->busy = 0;
      pthread_cond_signal(&st->cv); /* a store thread holding writes back for it looks again */
    }
  }
  pthread_mutex_unlock(&st->mu);
  return NULL;
}

/* The swap (store thread, a transaction of its own): the new snapshot replaces the old one and
 * the deltas it folded, only if the row's snapshot is still the one it was built from and the
 * row has reached its version; deltas appended meanwhile stay and continue it. */
static void swap_in(session_store *st, compaction *c) {
  const store_backend_ops *B = st->b->ops;
  char err[400] = "";
  int rc;
  store_wlock(st);
  double t0 = now_mono();
  if (B->begin(st->conn, err, sizeof err)) {
    rc = -1;
  } else if ((rc = B->compact(st->conn, &c->row, c->old_snap_id, err, sizeof err)) < 0 ||
             B->commit(st->conn, err, sizeof err)) {
    B->rollback(st->conn);
    rc = -1;
  } else if (rc == 0) {
    atomic_fetch_add_explicit(&st->compactions, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->bytes_written, c->row.meta_len + c->row.state_len,
                              memory_order_relaxed);
    hist_observe(&g_metrics.store_swap, now_mono() - t0);
  }
  pthread_mutex_unlock(&st->wlock);
  if (rc < 0) xlog_msg("error", "store_error", "compacting session %s: %s", c->row.id, err);
  pthread_mutex_lock(&st->mu);
  st->busy = 0;
  if (st->again) queue_compaction(st, c->row.id, c->row.owner);
  pthread_cond_signal(&st->ccv);
  pthread_mutex_unlock(&st->mu);
  compaction_free(c);
}

/* The batch's writes that had succeeded get `status` (STORE_ERROR: rolled back; STORE_UNKNOWN:
 * the commit's outcome is unknown). */
static void fail_writes_as(store_op **ops, int n, const char *why, store_status status) {
  for (int i = 0; i < n; i++)
    if (is_write(ops[i]) && ops[i]->status == STORE_OK) {
      ops[i]->status = status;
      snprintf(ops[i]->err, sizeof ops[i]->err, "%s", why);
      ops[i]->n = 0;
    }
}

static void fail_writes(store_op **ops, int n, const char *why) {
  fail_writes_as(ops, n, why, STORE_ERROR);
}

static int same_session(const store_op *a, const store_op *b) {
  return !strcmp(a->id, b->id) && !memcmp(a->owner, b->owner, 32);
}

/* A save or a delta followed in the same batch by a (whole) save of the same session, with no
 * other op on that session in between, is superseded: only the newer state is written (async
 * saves of a busy session pile up this way). A delta is never skipped for a later delta: that
 * one continues it. */
static int superseded(store_op **ops, int n, int i) {
  if (ops[i]->kind != SOP_SAVE && ops[i]->kind != SOP_APPEND) return 0;
  if (ops[i]->rec.ns[0]) return 0; /* its record is written with it */
  for (int j = i + 1; j < n; j++)
    if (same_session(ops[j], ops[i])) return ops[j]->kind == SOP_SAVE;
  return 0;
}

static void run_batch_locked(session_store *st, store_op **ops, int n, int writes);

static void run_batch(session_store *st, store_op **ops, int n) {
  int writes = 0;
  for (int i = 0; i < n; i++) writes += is_write(ops[i]);
  if (writes) store_wlock(st);
  run_batch_locked(st, ops, n, writes);
  if (writes) pthread_mutex_unlock(&st->wlock);
}

/* A batch; with writes, under wlock. */
static void run_batch_locked(session_store *st, store_op **ops, int n, int writes) {
  const store_backend_ops *B = st->b ? st->b->ops : NULL;
  int in_txn = 0;
  double t0 = now_mono();
  char why[400] = "";
  if (B && writes) {
    if (B->begin(st->conn, why, sizeof why)) {
      fail_writes(ops, n, why);
      for (int i = 0; i < n; i++)
        if (!is_write(ops[i])) exec_op(st, ops[i]);
      goto out;
    }
    in_txn = 1;
  }
  for (int i = 0; i < n; i++) {
    if (is_write(ops[i]) && !in_txn && B && writes) continue; /* the batch rolled back */
    if (B && superseded(ops, n, i)) {
      if (ops[i]->free_sess) { /* a session handed over: the newer save has its state */
        session_free(ops[i]->sess);
        ops[i]->sess = NULL;
      }
      continue;
    }
    if (exec_op(st, ops[i]) && in_txn && !B->shared) {
      snprintf(why, sizeof why, "%.340s (the batch was rolled back)", ops[i]->err);
      B->rollback(st->conn);
      in_txn = 0;
      fail_writes(ops, n, why);
    }
  }
  if (in_txn) {
    int crc = B->commit(st->conn, why, sizeof why);
    if (crc) {
      B->rollback(st->conn);
      fail_writes_as(ops, n, why, crc == -2 ? STORE_UNKNOWN : STORE_ERROR);
    } else {
      double dt = now_mono() - t0;
      long delta = 0;
      for (int i = 0; i < n; i++) {
        store_op *op = ops[i];
        if (!is_write(op)) continue;
        hist_observe(&g_metrics.store_write, dt);
        if (op->kind == SOP_SAVE && op->status == STORE_OK) {
          delta += op->created;
          ctr_add(&g_metrics.store_saves, 1);
        } else if (op->kind == SOP_APPEND && op->status == STORE_OK) {
          ctr_add(&g_metrics.store_saves, 1);
          want_compaction(st, op);
        } else if (op->kind == SOP_REMOVE && op->status == STORE_OK) {
          delta -= 1;
        } else if (op->kind == SOP_EXPIRE) {
          delta -= op->n;
        }
      }
      atomic_fetch_add_explicit(&st->count, delta, memory_order_relaxed);
    }
  }
out:
  for (int i = 0; i < n; i++) {
    store_op *op = ops[i];
    if (op->status == STORE_ERROR || op->status == STORE_UNKNOWN)
      ctr_add(&g_metrics.store_errors, 1);
    if (op->status == STORE_UNKNOWN) ctr_add(&g_metrics.store_outcome_unknown, 1);
    if (op->kind == SOP_SAVE || op->kind == SOP_APPEND) { /* not needed any more */
      free(op->meta);
      free(op->state);
      free(op->delta);
      op->meta = op->state = op->delta = NULL;
      op->row.meta = op->row.state = NULL;
    }
  }
}

static void post_done(session_store *st, store_op *first) {
  if (!first) return;
  store_op *last = first;
  while (last->next) last = last->next;
  pthread_mutex_lock(&st->done_mu);
  if (st->done_tail) st->done_tail->next = first;
  else st->done_head = first;
  st->done_tail = last;
  pthread_mutex_unlock(&st->done_mu);
  if (st->notify) st->notify(st->notify_arg);
}

static void *store_main(void *arg) {
  session_store *st = arg;
  store_op **ops = xmalloc(sizeof *ops * (size_t)st->o.max_batch);
  int ran_batch = 0;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    /* writes held back for a row far past its bound: until its compaction is swapped in (or
     * dropped); built snapshots are swapped in meanwhile */
    if (st->holding && (st->stop || atomic_load(&st->cstop) ||
                        !compaction_pending(st, &st->held_back))) {
      st->holding = 0;
      continue;
    }
    if (st->holding && !st->ready) {
      pthread_cond_wait(&st->cv, &st->mu);
      continue;
    }
    /* a compaction's swap (only its write is left to do): when no turn waits, or after a
     * batch (turns queued meanwhile wait for one swap at most), or when writes are held */
    if (st->ready && !st->stop && (st->n_sync == 0 || ran_batch || st->holding)) {
      ran_batch = 0;
      compaction *c = st->ready;
      st->ready = c->next;
      pthread_mutex_unlock(&st->mu);
      swap_in(st, c);
      pthread_mutex_lock(&st->mu);
      continue;
    }
    if (!st->head) {
      if (st->stop) break;
      pthread_cond_wait(&st->cv, &st->mu);
      continue;
    }
    if (!st->stop && st->n_sync == 0) { /* only async turn writes: wait for company, bounded */
      double due = st->head->t_submit + st->o.async_commit_ms / 1000.0;
      double now = now_mono();
      if (now < due) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double w = due - now;
        ts.tv_sec += (time_t)w;
        ts.tv_nsec += (long)((w - (double)(time_t)w) * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&st->cv, &st->mu, &ts);
        continue;
      }
    }
    int n = 0;
    store_op *first = st->head;
    while (st->head && n < st->o.max_batch) {
      store_op *op = st->head;
      st->head = op->next;
      if (!waits_for_company(op)) st->n_sync--;
      ops[n++] = op;
    }
    if (!st->head) st->tail = NULL;
    ops[n - 1]->next = NULL;
    int late = st->stop && st->deadline > 0 && now_mono() > st->deadline;
    pthread_mutex_unlock(&st->mu);
    if (late) {
      for (int i = 0; i < n; i++) {
        ops[i]->status = STORE_ERROR;
        snprintf(ops[i]->err, sizeof ops[i]->err, "not run: the shutdown deadline passed");
        if (ops[i]->kind == SOP_SAVE && ops[i]->free_sess) {
          xlog_msg("error", "session_lost", "session %s was not persisted: the shutdown "
                   "deadline passed", ops[i]->id);
        }
      }
    } else {
      run_batch(st, ops, n);
    }
    post_done(st, first);
    ran_batch = 1;
    pthread_mutex_lock(&st->mu);
  }
  /* compactions still wanted or built at exit are dropped (the deltas rebuild their rows; the
   * next delta of each asks again) */
  pthread_mutex_unlock(&st->mu);
  free(ops);
  return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* loop thread */

int store_start(session_store *st, const xl_model *model, char *err, size_t cap) {
  st->model = model;
  if (st->b) {
    st->conn = st->b->ops->connect(st->b->cfg, err, cap);
    if (!st->conn) return -1;
    long c = st->b->ops->count(st->conn);
    atomic_store(&st->count, c > 0 ? c : 0);
  }
  if (st->b) { /* the compaction thread reads and rebuilds on a connection of its own */
    st->cconn = st->b->ops->connect(st->b->cfg, err, cap);
    if (!st->cconn) {
      st->b->ops->disconnect(st->conn);
      st->conn = NULL;
      return -1;
    }
  }
  int rc = thread_create_nosig(&st->th, store_main, st);
  if (rc) {
    snprintf(err, cap, "cannot create the store thread: %s", strerror(rc));
    return -1;
  }
  st->started = 1;
  if (st->b) {
    rc = thread_create_nosig(&st->cth, compaction_main, st);
    if (rc) {
      snprintf(err, cap, "cannot create the compaction thread: %s", strerror(rc));
      store_shutdown(st, 0);
      return -1;
    }
    st->c_started = 1;
  }
  return 0;
}

void store_submit(session_store *st, store_op *op) {
  op->t_submit = now_mono();
  op->next = NULL;
  op->status = STORE_OK;
  if (!st->started) { /* not started, or already joined: fail it (delivered by store_poll) */
    op->status = STORE_ERROR;
    snprintf(op->err, sizeof op->err, "the session store is not running");
    post_done(st, op);
    return;
  }
  pthread_mutex_lock(&st->mu);
  if (st->tail) st->tail->next = op;
  else st->head = op;
  st->tail = op;
  if (!waits_for_company(op)) st->n_sync++;
  pthread_cond_signal(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

int store_poll(session_store *st) {
  pthread_mutex_lock(&st->done_mu);
  store_op *op = st->done_head;
  st->done_head = st->done_tail = NULL;
  pthread_mutex_unlock(&st->done_mu);
  int n = 0;
  while (op) {
    store_op *next = op->next;
    op->next = NULL;
    if (op->done) op->done(op);
    else store_op_free(op);
    op = next;
    n++;
  }
  return n;
}

void store_shutdown(session_store *st, double deadline) {
  if (!st || !st->started) return;
  pthread_mutex_lock(&st->mu);
  st->stop = 1;
  st->deadline = deadline;
  atomic_store(&st->cstop, 1); /* a rebuild in progress stops at its next delta */
  pthread_cond_broadcast(&st->cv);
  pthread_cond_broadcast(&st->ccv);
  pthread_mutex_unlock(&st->mu);
  pthread_join(st->th, NULL);
  if (st->c_started) pthread_join(st->cth, NULL);
  st->started = st->c_started = 0;
  while (st->ready) { /* built, not swapped in: dropped (the deltas rebuild the row) */
    compaction *c = st->ready;
    st->ready = c->next;
    compaction_free(c);
  }
  st->n_compact = 0;
  st->busy = 0;
  if (st->cconn) {
    st->b->ops->disconnect(st->cconn);
    st->cconn = NULL;
  }
  if (st->conn) {
    st->b->ops->disconnect(st->conn);
    st->conn = NULL;
  }
}

int store_compactions_pending(session_store *st) {
  if (!st) return 0;
  pthread_mutex_lock(&st->mu);
  int n = st->n_compact + st->busy;
  pthread_mutex_unlock(&st->mu);
  return n;
}

int store_holding_writes(session_store *st) {
  if (!st) return 0;
  pthread_mutex_lock(&st->mu);
  int h = st->holding;
  pthread_mutex_unlock(&st->mu);
  return h;
}

void store_free(session_store *st) {
  if (!st) return;
  store_shutdown(st, 0);
  store_poll(st); /* callbacks of ops still listed (none when the caller polled) */
  pthread_mutex_destroy(&st->mu);
  pthread_mutex_destroy(&st->wlock);
  pthread_mutex_destroy(&st->wait_mu);
  pthread_cond_destroy(&st->wait_cv);
  pthread_cond_destroy(&st->cv);
  pthread_cond_destroy(&st->ccv);
  pthread_mutex_destroy(&st->done_mu);
  free(st->to_compact);
  record_mem_free(st->mem);
  free(st);
}

void store_backend_free(store_backend *b) {
  if (!b) return;
  b->ops->destroy(b->cfg);
  free(b);
}
