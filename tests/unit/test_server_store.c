/*
 * test_server_store.c: the durable session store below the HTTP layer: the session envelope
 * (round trip continues bit for bit; every kind of damage is refused with the right class),
 * the SQLite backend's row operations and directory lock, the store thread's FIFO order and
 * async delay, and the session table in front of it (eviction saves what the store lacks,
 * a miss restores, ownership holds). Test thread = the "loop thread" + the store thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "metrics.h"
#include "session.h"
#include "session_codec.h"
#include "session_store.h"
#include "session_table.h"
#include "testlib.h"
#include "store_records_check.h"
#include "util.h"

static xl_model *M, *M2;
static xl_workspace *WS;

/* ---- helpers ---- */

static void feed(session *s, int n, int seed, float *lp_out) {
  int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
  for (int i = 0; i < n; i++) t[i] = (int32_t)((seed * 31 + i * 7) % 256);
  xl_feed f;
  memset(&f, 0, sizeof f);
  f.state = s->state;
  f.tokens = t;
  f.n_tokens = n;
  f.last_logprobs = lp_out;
  xl_error err;
  CHECK(xl_forward(M, WS, &f, 1, &err) == XL_OK);
  session_digest_tokens(s, t, n);
  free(t);
}

static session *busy_session(int seed) {
  xl_error err;
  session *s = session_new(M, &err);
  feed(s, 37 + seed % 5, seed, NULL);
  s->pending = 65 + seed % 20;
  s->turns = 3;
  s->chat = CHAT_MESSAGES;
  session_push_msg(s, ROLE_SYSTEM, 0x1111 + (uint64_t)seed);
  session_push_msg(s, ROLE_USER, 0x2222);
  session_push_msg(s, ROLE_ASSISTANT, 0x3333);
  session_set_tail(s, "\nUser:", 6);
  xl_rng_seed(&s->rng, 1000 + (uint64_t)seed);
  return s;
}

/* Both sessions continue with the same tokens: bit-identical log-probs. */
static int continues_identically(session *a, session *b) {
  int V = xl_model_config(M)->vocab_size;
  float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
  feed(a, 9, 77, la);
  feed(b, 9, 77, lb);
  int same = !memcmp(la, lb, sizeof(float) * (size_t)V) && a->digest == b->digest;
  free(la);
  free(lb);
  return same;
}

static int same_msgs(const session *a, const session *b) {
  if (a->n_msgs != b->n_msgs) return 0;
  for (int i = 0; i < a->n_msgs; i++) /* field by field: the struct has padding */
    if (a->msgs[i].role != b->msgs[i].role || a->msgs[i].hash != b->msgs[i].hash) return 0;
  return 1;
}

static int same_record(const session *a, const session *b) {
  return same_msgs(a, b) && a->pending == b->pending && a->digest == b->digest && a->turns == b->turns &&
         a->chat == b->chat && a->n_msgs == b->n_msgs &&
         a->tail_len == b->tail_len && (!a->tail_len || !memcmp(a->tail, b->tail, a->tail_len)) &&
         !memcmp(&a->rng, &b->rng, sizeof a->rng) &&
         xl_state_tokens_fed(a->state) == xl_state_tokens_fed(b->state) &&
         xl_state_mem_length(a->state) == xl_state_mem_length(b->state);
}

static uint8_t *envelope(const session *s, const xl_model *m, size_t *n, size_t *meta_len) {
  uint8_t *meta, *core;
  size_t ml, cl;
  char err[256];
  CHECK(sess_encode(s, m, &meta, &ml, &core, &cl, err, sizeof err) == 0);
  uint8_t *b = malloc(ml + cl);
  memcpy(b, meta, ml);
  memcpy(b + ml, core, cl);
  free(meta);
  free(core);
  *n = ml + cl;
  *meta_len = ml;
  return b;
}

static codec_status decode_env(const uint8_t *b, size_t n, session **out, char *err, size_t cap) {
  size_t ml;
  codec_status c = sess_split(b, n, &ml, err, cap);
  if (c) return c;
  return sess_decode(M, b, ml, b + ml, n - ml, out, err, cap);
}

/* ---- envelope ---- */

static void test_codec_round_trip(void) {
  session *s = busy_session(1);
  size_t n, ml;
  uint8_t *b = envelope(s, M, &n, &ml);
  session *r = NULL;
  char err[400];
  CHECK(decode_env(b, n, &r, err, sizeof err) == CODEC_OK);
  if (r) {
    CHECK(same_record(s, r));
    CHECK(session_tokens(r) == session_tokens(s));
    CHECK(continues_identically(s, r));
    session_free(r);
  }
  /* an empty session too */
  xl_error xe;
  session *e = session_new(M, &xe);
  free(b);
  b = envelope(e, M, &n, &ml);
  CHECK(decode_env(b, n, &r, err, sizeof err) == CODEC_OK);
  if (r) CHECK(same_record(e, r));
  session_free(r);
  session_free(e);
  free(b);
  session_free(s);
}

static void put64le(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_codec_refuses_damage(void) {
  session *s = busy_session(2), *r = NULL;
  size_t n, ml;
  uint8_t *b = envelope(s, M, &n, &ml);
  char err[400];
  uint8_t *c = malloc(n);
  /* a flipped byte in the record (a message hash) */
  memcpy(c, b, n);
  c[SESS_META_HEADER + 3] ^= 0x40;
  CHECK(decode_env(c, n, &r, err, sizeof err) == CODEC_INVALID && strstr(err, "checksum"));
  /* a flipped byte in the state payload */
  memcpy(c, b, n);
  c[ml + 200] ^= 0x01;
  CHECK(decode_env(c, n, &r, err, sizeof err) == CODEC_INVALID && strstr(err, "checksum"));
  /* truncated */
  CHECK(decode_env(b, n - 1, &r, err, sizeof err) == CODEC_INVALID && strstr(err, "truncated"));
  CHECK(decode_env(b, ml - 3, &r, err, sizeof err) == CODEC_INVALID);
  CHECK(decode_env(b, 10, &r, err, sizeof err) == CODEC_INVALID);
  CHECK(decode_env((const uint8_t *)"hello world, not a session at all, not at all!!!", 48, &r,
                   err, sizeof err) == CODEC_INVALID);
  /* a record with another save's state */
  session *s2 = busy_session(3);
  size_t n2, ml2;
  uint8_t *b2 = envelope(s2, M, &n2, &ml2);
  CHECK(sess_decode(M, b, ml, b2 + ml2, n2 - ml2, &r, err, sizeof err) == CODEC_INVALID);
  /* times that are not times (NaN, infinite, negative, past 2^40 s), checksum made right */
  double bad_t[4] = {0.0 / 0.0, 1.0 / 0.0, -1.0, 1e300};
  for (int k = 0; k < 4; k++)
    for (int at = 24; at <= 32; at += 8) {
      memcpy(c, b, n);
      uint64_t bits;
      memcpy(&bits, &bad_t[k], 8);
      put64le(c + at, bits);
      put64le(c + ml - 8, fnv1a64(FNV64_INIT, c, ml - 8));
      CHECK(decode_env(c, n, &r, err, sizeof err) == CODEC_INVALID && strstr(err, "not a time"));
    }
  /* a newer envelope version (checksum made right): a mismatch, not corruption */
  memcpy(c, b, n);
  c[8] = 2;
  put64le(c + ml - 8, fnv1a64(FNV64_INIT, c, ml - 8));
  CHECK(decode_env(c, n, &r, err, sizeof err) == CODEC_MISMATCH && strstr(err, "version"));
  /* another model's session */
  size_t n3, ml3;
  xl_error xe;
  session *o = session_new(M2, &xe);
  uint8_t *b3 = envelope(o, M2, &n3, &ml3);
  CHECK(decode_env(b3, n3, &r, err, sizeof err) == CODEC_MISMATCH && strstr(err, "another model"));
  CHECK(r == NULL);
  free(b3);
  session_free(o);
  free(b2);
  session_free(s2);
  free(c);
  free(b);
  session_free(s);
}

/* ---- SQLite backend ---- */

static void row_of(store_row *w, const char *id, uint8_t owner_byte, double last_used,
                   const uint8_t *meta, size_t ml, const uint8_t *st, size_t sl) {
  memset(w, 0, sizeof *w);
  snprintf(w->id, sizeof w->id, "%s", id);
  memset(w->owner, owner_byte, 32);
  w->fingerprint = 42;
  w->created = 1.0;
  w->last_used = last_used;
  w->tokens = 10;
  w->turns = 2;
  w->mode = 1;
  w->messages = 3;
  w->positions = 9;
  w->meta = meta;
  w->meta_len = ml;
  w->state = st;
  w->state_len = sl;
}

static void test_sqlite_backend(void) {
  const char *dir = tl_tmpdir("store_sqlite");
  char sub[1100], err[512];
  snprintf(sub, sizeof sub, "%s/a/b", dir);
  store_backend *b = store_sqlite_open(sub, 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  CHECK(store_sqlite_open(sub, 0, err, sizeof err) == NULL && strstr(err, "in use"));
  const store_backend_ops *B = b->ops;
  store_conn *c = B->connect(b->cfg, err, sizeof err);
  CHECK(c != NULL);
  uint8_t big[70000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 13);
  store_row w;
  int created = -1;
  CHECK(B->begin(c, err, sizeof err) == 0);
  row_of(&w, "s1", 1, 100, (const uint8_t *)"meta1", 5, big, sizeof big);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  row_of(&w, "s2", 1, 300, (const uint8_t *)"meta2", 5, big, 10);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  row_of(&w, "s3", 2, 200, (const uint8_t *)"meta3", 5, big, 10);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  row_of(&w, "s1", 1, 150, (const uint8_t *)"meta1b", 6, big, sizeof big);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 0); /* replaced */
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(B->count(c) == 3);
  store_row g;
  memset(&g, 0, sizeof g);
  uint8_t o1[32], o2[32];
  memset(o1, 1, 32);
  memset(o2, 2, 32);
  CHECK(B->get(c, "s1", o1, &g, err, sizeof err) == 0);
  CHECK(g.meta_len == 6 && !memcmp(g.meta, "meta1b", 6) && g.state_len == sizeof big &&
        !memcmp(g.state, big, sizeof big) && g.owner[0] == 1 && g.last_used == 150 &&
        g.fingerprint == 42 && g.tokens == 10 && g.turns == 2 && g.mode == 1 && g.messages == 3 &&
        g.positions == 9);
  B->release(c);
  CHECK(B->get(c, "nope", o1, &g, err, sizeof err) == 1);
  CHECK(B->get(c, "s1", o2, &g, err, sizeof err) == 1); /* ids are per owner */
  store_row rows[4];
  CHECK(B->list(c, o1, 4, rows, err, sizeof err) == 2);
  CHECK(!strcmp(rows[0].id, "s2") && !strcmp(rows[1].id, "s1") && !rows[0].meta);
  CHECK(B->del(c, "s3", o1, err, sizeof err) == 1); /* another owner's */
  CHECK(B->del(c, "s3", o2, err, sizeof err) == 0);
  /* owner 2's own s1: a second row, the first one untouched */
  CHECK(B->begin(c, err, sizeof err) == 0);
  row_of(&w, "s1", 2, 50, (const uint8_t *)"meta-o2", 7, big, 3);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(B->get(c, "s1", o2, &g, err, sizeof err) == 0 && g.meta_len == 7 && g.state_len == 3 &&
        g.owner[0] == 2);
  CHECK(B->get(c, "s1", o1, &g, err, sizeof err) == 0 && g.meta_len == 6 &&
        g.state_len == sizeof big && g.owner[0] == 1);
  B->release(c);
  CHECK(B->del(c, "s1", o2, err, sizeof err) == 0);
  CHECK(B->get(c, "s1", o1, &g, err, sizeof err) == 0 && g.meta_len == 6);
  B->release(c);
  store_key keys[4];
  CHECK(B->begin(c, err, sizeof err) == 0);
  CHECK(B->expire(c, 200, 4, keys, err, sizeof err) == 1 && !strcmp(keys[0].id, "s1") &&
        keys[0].owner[0] == 1);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(B->count(c) == 1);
  B->disconnect(c);
  store_backend_free(b);
  /* the lock went with the backend: the directory opens again, its rows still there */
  b = store_sqlite_open(sub, 1, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  c = b->ops->connect(b->cfg, err, sizeof err);
  CHECK(b->ops->count(c) == 1);
  b->ops->disconnect(c);
  store_backend_free(b);
}

static void test_sqlite_records(void) {
  char err[512];
  store_backend *b = store_sqlite_open(tl_tmpdir("store_records"), 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  store_conn *c = b->ops->connect(b->cfg, err, sizeof err);
  CHECK(c != NULL);
  if (c) {
    check_backend_records(b->ops, c, "rs1");
    b->ops->disconnect(c);
  }
  store_backend_free(b);
}

/* The WAL's checkpoint sequence number (bytes 12..15 of its header, big-endian): SQLite adds
 * one each time a writer starts the WAL over after a complete checkpoint. -1: no header. */
static long wal_restarts(const char *wal) {
  uint8_t h[16];
  FILE *f = fopen(wal, "rb");
  size_t n = f ? fread(h, 1, sizeof h, f) : 0;
  if (f) fclose(f);
  if (n != sizeof h) return -1;
  return (long)((uint32_t)h[12] << 24 | (uint32_t)h[13] << 16 | (uint32_t)h[14] << 8 | h[15]);
}

/* With the checkpoint thread held (as if starved of a core), 96 MiB of 1 MiB snapshots go
 * through the WAL: the writer checkpoints after its own commits once the WAL passes 32 MiB, so
 * the file stays within 32 MiB plus a transaction and is started over again and again. */
static void test_wal_bounded_without_the_checkpoint_thread(void) {
  const char *dir = tl_tmpdir("store_wal");
  char err[512], wal[1100];
  snprintf(wal, sizeof wal, "%s/sessions.db-wal", dir);
  store_backend *b = store_sqlite_open(dir, 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  store_sqlite_hold_checkpoints(b, 1);
  store_conn *c = b->ops->connect(b->cfg, err, sizeof err);
  CHECK(c != NULL);
  size_t len = (size_t)1 << 20;
  uint8_t *state = malloc(len);
  for (size_t i = 0; i < len; i++) state[i] = (uint8_t)(i * 29 + (i >> 11));
  long long largest = 0;
  int ok = 1;
  for (int i = 0; c && i < 96 && ok; i++) {
    store_row w;
    int created;
    row_of(&w, "wal", 1, 100 + i, (const uint8_t *)"meta", 4, state, len);
    w.seq = (uint64_t)i + 1;
    w.snap_id = (uint64_t)i + 7;
    ok = b->ops->begin(c, err, sizeof err) == 0 && b->ops->put(c, &w, &created, err, sizeof err) == 0 &&
         b->ops->commit(c, err, sizeof err) == 0;
    struct stat sb;
    if (ok && stat(wal, &sb) == 0 && sb.st_size > largest) largest = sb.st_size;
  }
  CHECK(ok);
  long long bound = ((long long)32 << 20) + (2 << 20);
  if (largest > bound) fprintf(stderr, "  the WAL reached %lld bytes\n", largest);
  CHECK(largest > ((long long)16 << 20) && largest <= bound);
  CHECK(wal_restarts(wal) >= 2);
  free(state);
  if (c) b->ops->disconnect(c);
  store_sqlite_hold_checkpoints(b, 0);
  store_backend_free(b);
}

/* ---- the store thread and the table ---- */

static pthread_mutex_t NMU = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t NCV = PTHREAD_COND_INITIALIZER;
static int SIGNALLED;

static void notify(void *arg) {
  (void)arg;
  pthread_mutex_lock(&NMU);
  SIGNALLED = 1;
  pthread_cond_signal(&NCV);
  pthread_mutex_unlock(&NMU);
}

/* Waits for completions (up to 5 s) and runs them. */
static int pump(session_store *st) {
  pthread_mutex_lock(&NMU);
  while (!SIGNALLED) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    if (pthread_cond_timedwait(&NCV, &NMU, &ts)) break;
  }
  SIGNALLED = 0;
  pthread_mutex_unlock(&NMU);
  return store_poll(st);
}

typedef struct {
  int calls, status;
  st_status found;
  double t;
} cb_state;

static void on_done(void *ctx, int status, const char *msg) {
  (void)msg;
  cb_state *c = ctx;
  c->calls++;
  c->status = status;
  c->t = now_mono();
}

static void on_import_done(void *ctx, st_import_result r, const char *msg) {
  (void)msg;
  cb_state *c = ctx;
  c->calls++;
  c->status = (int)r;
}

static void on_found(void *ctx, const st_answer *a) {
  cb_state *c = ctx;
  c->calls++;
  c->found = a->status;
}

static session_store *new_store(const char *tag, int async_ms, store_backend **bp) {
  char err[512];
  *bp = store_sqlite_open(tl_tmpdir(tag), 0, err, sizeof err);
  CHECK(*bp != NULL);
  store_opts o = {.async_commit_ms = async_ms, .max_batch = 64};
  session_store *st = store_new(*bp, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  return st;
}

static void end_store(session_store *st, store_backend *b, session_table *t) {
  store_shutdown(st, now_mono() + 5);
  while (store_poll(st) > 0) {
  }
  st_free(t);
  store_free(st);
  store_backend_free(b);
}

typedef struct {
  int calls;
  store_status status;
  char value[64];
} rec_state;

static void on_rec_op(store_op *op) {
  rec_state *r = op->ctx;
  r->calls++;
  r->status = op->status;
  snprintf(r->value, sizeof r->value, "%.*s", (int)op->rec.len,
           op->rec.value ? (const char *)op->rec.value : "");
  store_op_free(op);
}

/* One record op through the front, waited for. */
static rec_state rec_op(session_store *st, sop_kind kind, uint8_t owner_byte, const char *key,
                        const char *value) {
  rec_state r = {0};
  store_op *op = store_op_new(kind, on_rec_op, &r);
  uint8_t owner[32];
  memset(owner, owner_byte, 32);
  uint8_t *v = value ? (uint8_t *)xstrdup(value) : NULL;
  CHECK(store_op_record(op, "resp", owner, key, v, value ? strlen(value) : 0, 60) == 0);
  store_submit(st, op);
  while (!r.calls) pump(st);
  return r;
}

/* Keyed records through the front: on SQLite, and without a backend in the bounded in-memory
 * table (the least recently used record leaves first). */
static void test_front_records(void) {
  uint8_t o[32] = {0};
  store_op *bad = store_op_new(SOP_REC_PUT, NULL, NULL);
  CHECK(store_op_record(bad, "Bad NS", o, "k", NULL, 0, 1) == -1);
  CHECK(store_op_record(bad, "ns", o, "with space", NULL, 0, 1) == -1);
  CHECK(store_op_record(bad, "ns", o, "", NULL, 0, 1) == -1);
  store_op_free(bad);
  for (int with_backend = 1; with_backend >= 0; with_backend--) {
    char err[512];
    store_backend *b = NULL;
    session_store *st;
    if (with_backend) {
      st = new_store("front_records", 0, &b);
    } else {
      store_opts o2 = {.max_batch = 64, .mem_records = 3};
      st = store_new(NULL, &o2, notify, NULL);
      CHECK(store_start(st, M, err, sizeof err) == 0);
    }
    CHECK(rec_op(st, SOP_REC_PUT, 1, "a", "A").status == STORE_OK);
    CHECK(rec_op(st, SOP_REC_PUT, 2, "a", "A2").status == STORE_OK);
    CHECK(rec_op(st, SOP_REC_PUT, 1, "b", "B").status == STORE_OK);
    rec_state g = rec_op(st, SOP_REC_GET, 1, "a", NULL);
    CHECK(g.status == STORE_OK && !strcmp(g.value, "A"));
    g = rec_op(st, SOP_REC_GET, 2, "a", NULL);
    CHECK(g.status == STORE_OK && !strcmp(g.value, "A2"));
    CHECK(rec_op(st, SOP_REC_GET, 1, "c", NULL).status == STORE_ABSENT);
    /* a fourth record: without a backend (3 at most) the least recently used (1/b) leaves */
    CHECK(rec_op(st, SOP_REC_PUT, 1, "d", "D").status == STORE_OK);
    CHECK(rec_op(st, SOP_REC_GET, 1, "b", NULL).status ==
          (with_backend ? STORE_OK : STORE_ABSENT));
    CHECK(rec_op(st, SOP_REC_GET, 1, "d", NULL).status == STORE_OK);
    CHECK(rec_op(st, SOP_REC_DEL, 1, "a", NULL).status == STORE_OK);
    CHECK(rec_op(st, SOP_REC_DEL, 1, "a", NULL).status == STORE_ABSENT);
    CHECK(rec_op(st, SOP_REC_GET, 1, "a", NULL).status == STORE_ABSENT);
    store_shutdown(st, now_mono() + 5);
    while (store_poll(st) > 0) {
    }
    store_free(st);
    store_backend_free(b);
  }
}

static void test_table_evicts_saves_and_restores(void) {
  store_backend *b;
  session_store *st = new_store("store_table", 1000, &b);
  uint8_t owner[32], other[32];
  memset(owner, 7, 32);
  memset(other, 8, 32);
  session *probe = busy_session(0);
  size_t per = session_ram(probe);
  session_table *t = st_new(M, per * 5 / 2, 0, 100, st, DUR_TURN);
  CHECK(st_persistent(t));
  xl_error xe;
  xl_state *ref[6];
  char id[32];
  cb_state saved = {0};
  for (int i = 0; i < 6; i++) {
    snprintf(id, sizeof id, "t%d", i);
    session *s = st_create(t, id, owner, &xe);
    st_acquire(t, s);
    feed(s, 20 + i, i, NULL);
    s->pending = 100 + i;
    xl_error e2;
    CHECK(xl_state_clone(s->state, &ref[i] , &e2) == XL_OK);
    if (i < 4) { /* a turn's end: the worker's snapshot goes to the store, the caller waits */
      uint8_t *core;
      size_t cl;
      CHECK(xl_state_serialize(s->state, &core, &cl, &e2) == XL_OK);
      CHECK(st_turn_end(t, s, core, cl, 1, NULL, on_done, &saved) == 1);
      CHECK(s->busy); /* held until its commit */
    } else { /* t4, t5: never given to the store (unsaved): eviction must hand them over */
      st_release(t, s);
    }
  }
  PUMP_UNTIL(saved.calls >= 4, 60, CHECK(pump(st) > 0));
  CHECK(saved.status == 0);
  CHECK(st_count(t) <= 3); /* the budget holds about 2.5 sessions */
  /* every session comes back, equal to what it was */
  for (int i = 0; i < 6; i++) {
    snprintf(id, sizeof id, "t%d", i);
    session *s = NULL;
    cb_state f = {0};
    st_status r = st_find(t, id, owner, &s, on_found, &f);
    if (r == ST_PENDING) {
      PUMP_UNTIL(f.calls, 60, pump(st));
      CHECK(f.found == ST_FOUND);
      r = st_lookup(t, id, owner, &s);
    }
    CHECK(r == ST_FOUND);
    if (r != ST_FOUND) continue;
    CHECK(s->pending == 100 + i && xl_state_tokens_fed(s->state) == (uint64_t)(20 + i));
    session tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.state = ref[i];
    tmp.digest = s->digest;
    st_acquire(t, s);
    CHECK(continues_identically(s, &tmp));
    st_release(t, s);
    xl_state_free(ref[i]);
  }
  /* ids are per key: another key's t0 is missing (its own, never created) */
  session *s = NULL;
  cb_state f = {0};
  st_status r = st_find(t, "t0", other, &s, on_found, &f);
  if (r == ST_PENDING) {
    PUMP_UNTIL(f.calls, 60, pump(st));
    r = f.found == ST_FOUND ? st_lookup(t, "t0", other, &s) : f.found;
  }
  CHECK(r == ST_MISSING);
  memset(&f, 0, sizeof f);
  CHECK(st_find(t, "never", owner, &s, on_found, &f) == ST_PENDING);
  PUMP_UNTIL(f.calls, 60, pump(st));
  CHECK(f.found == ST_MISSING);
  /* delete: gone from RAM and store */
  CHECK(st_lookup(t, "t5", owner, &s) == ST_FOUND);
  cb_state d = {0};
  CHECK(st_delete(t, s, on_done, &d) == 1);
  PUMP_UNTIL(d.calls, 60, pump(st));
  memset(&f, 0, sizeof f);
  CHECK(st_find(t, "t5", owner, &s, on_found, &f) == ST_PENDING);
  PUMP_UNTIL(f.calls, 60, pump(st));
  CHECK(f.found == ST_MISSING);
  CHECK(store_count(st) == 5);
  session_free(probe);
  end_store(st, b, t);
}

/* An async save waits for company at most async_commit_ms (300 ms here), then is written with
 * no other op to carry it; a sync op flushes a waiting async save at once (a second store
 * whose delay is a minute, so that only the sync op can have written it). The waits are on
 * the store's count, bounded generously: only the lower bound (the save waited) is exact. */
static void test_async_saves_wait_bounded(void) {
  store_backend *b;
  session_store *st = new_store("store_async", 300, &b);
  uint8_t owner[32];
  memset(owner, 3, 32);
  session_table *t = st_new(M, 1 << 30, 0, 100, st, DUR_ASYNC);
  xl_error xe;
  session *s = st_create(t, "a1", owner, &xe);
  feed(s, 10, 5, NULL);
  uint8_t *core;
  size_t cl;
  CHECK(xl_state_serialize(s->state, &core, &cl, &xe) == XL_OK);
  double t0 = now_mono();
  st_acquire(t, s);
  CHECK(st_turn_end(t, s, core, cl, 1, NULL, on_done, NULL) == 0); /* async: nothing to wait for */
  CHECK(!s->busy);
  CHECK(store_count(st) == 0);
  while (store_count(st) == 0 && now_mono() - t0 < 60) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  double dt = now_mono() - t0;
  CHECK(store_count(st) == 1);
  CHECK(dt >= 0.25); /* waited for company, async_commit_ms */
  CHECK(dt < 30); /* and no longer than that, give or take a busy machine */
  end_store(st, b, t);

  /* a sync op flushes a waiting async save at once (FIFO: the removal finds the row) */
  st = new_store("store_async_flush", 60000, &b);
  t = st_new(M, 1 << 30, 0, 100, st, DUR_ASYNC);
  s = st_create(t, "a2", owner, &xe);
  feed(s, 10, 6, NULL);
  CHECK(xl_state_serialize(s->state, &core, &cl, &xe) == XL_OK);
  st_acquire(t, s);
  CHECK(st_turn_end(t, s, core, cl, 1, NULL, NULL, NULL) == 0);
  cb_state d = {0};
  t0 = now_mono();
  st_remove_stored(t, "a2", owner, on_done, &d);
  PUMP_UNTIL(d.calls == 1, 30, pump(st));
  CHECK(d.status == 0 && store_count(st) == 0); /* removed: the save was written before it */
  CHECK(now_mono() - t0 < 30);                  /* by the removal, not the minute's delay */
  CHECK(st_delete(t, s, on_done, &d) == 0); /* async: the caller does not wait */
  end_store(st, b, t);
}

/* ---- a second backend: rows in memory (the seam takes another backend as it is) ---- */

typedef struct mem_delta {
  uint64_t seq;
  uint8_t *meta, *delta;
  size_t meta_len, delta_len;
} mem_delta;

typedef struct mem_row {
  store_row r;
  uint8_t *meta, *state;
  mem_delta *deltas; /* the log after the snapshot, seq order */
  int n_deltas;
  int used;
} mem_row;

static mem_row MEM[64];
static int MEM_FAIL_PUT;
struct store_conn {
  int dummy;
};
static store_conn MEM_CONN;
static mem_row *MEM_READING; /* the row of the last get, and its next delta */
static int MEM_CURSOR;
/* The store thread (turns, compactions) and the test's own checks reach this backend at once:
 * one lock, held from a get to its release (the reader walks the row's deltas) and around every
 * call that changes rows. Recursive: the holder of a read may write. */
static pthread_mutex_t MEM_MU = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static __thread int MEM_HOLDS_READ;

static uint8_t *dup_bytes(const uint8_t *p, size_t n) {
  uint8_t *d = malloc(n ? n : 1);
  if (n) memcpy(d, p, n);
  return d;
}
static void mem_drop_deltas(mem_row *m, uint64_t upto) {
  int keep = 0;
  for (int i = 0; i < m->n_deltas; i++) {
    if (m->deltas[i].seq <= upto) {
      free(m->deltas[i].meta);
      free(m->deltas[i].delta);
    } else {
      m->deltas[keep++] = m->deltas[i];
    }
  }
  m->n_deltas = keep;
  m->r.n_deltas = keep;
  m->r.delta_bytes = 0;
  for (int i = 0; i < keep; i++)
    m->r.delta_bytes += m->deltas[i].meta_len + m->deltas[i].delta_len;
}

static store_conn *mem_connect(void *cfg, char *err, size_t cap) {
  (void)cfg, (void)err, (void)cap;
  return &MEM_CONN;
}
static void mem_disconnect(store_conn *c) { (void)c; }
static int mem_ok(store_conn *c, char *err, size_t cap) {
  (void)c, (void)err, (void)cap;
  return 0;
}
static void mem_void(store_conn *c) { (void)c; }
static mem_row *mem_find(const char *id, const uint8_t owner[32]) {
  for (int i = 0; i < 64; i++)
    if (MEM[i].used && !strcmp(MEM[i].r.id, id) && !memcmp(MEM[i].r.owner, owner, 32))
      return &MEM[i];
  return NULL;
}
static int mem_get(store_conn *c, const char *id, const uint8_t owner[32], store_row *row,
                   char *err, size_t cap) {
  (void)c, (void)err, (void)cap;
  pthread_mutex_lock(&MEM_MU);
  mem_row *m = mem_find(id, owner);
  if (!m) {
    pthread_mutex_unlock(&MEM_MU);
    return 1;
  }
  *row = m->r;
  MEM_READING = m;
  MEM_CURSOR = 0;
  MEM_HOLDS_READ = 1;
  return 0;
}
static int mem_next_delta(store_conn *c, store_delta *d, char *err, size_t cap) {
  (void)c, (void)err, (void)cap;
  if (!MEM_READING || MEM_CURSOR >= MEM_READING->n_deltas) return 1;
  mem_delta *x = &MEM_READING->deltas[MEM_CURSOR++];
  *d = (store_delta){x->seq, x->meta, x->meta_len, x->delta, x->delta_len};
  return 0;
}
static void mem_release(store_conn *c) {
  (void)c;
  if (!MEM_HOLDS_READ) return;
  MEM_READING = NULL;
  MEM_HOLDS_READ = 0;
  pthread_mutex_unlock(&MEM_MU);
}
static int mem_put(store_conn *c, const store_row *row, int *created, char *err, size_t cap) {
  (void)c;
  if (MEM_FAIL_PUT) {
    snprintf(err, cap, "injected failure");
    return -1;
  }
  mem_row *m = mem_find(row->id, row->owner);
  *created = !m;
  for (int i = 0; !m && i < 64; i++)
    if (!MEM[i].used) m = &MEM[i];
  free(m->meta);
  free(m->state);
  mem_drop_deltas(m, UINT64_MAX);
  m->used = 1;
  m->r = *row;
  m->r.snap_seq = row->seq;
  m->r.snap_bytes = row->meta_len + row->state_len;
  m->r.n_deltas = 0;
  m->r.delta_bytes = 0;
  m->meta = dup_bytes(row->meta, row->meta_len);
  m->state = dup_bytes(row->state, row->state_len);
  m->r.meta = m->meta;
  m->r.state = m->state;
  return 0;
}
static int mem_append(store_conn *c, const store_row *row, const store_delta *d,
                      store_row *after, char *err, size_t cap) {
  (void)c;
  if (MEM_FAIL_PUT) {
    snprintf(err, cap, "injected failure");
    return -1;
  }
  mem_row *m = mem_find(row->id, row->owner);
  if (!m || m->r.seq != d->seq - 1) return 1;
  m->deltas = realloc(m->deltas, sizeof *m->deltas * (size_t)(m->n_deltas + 1));
  m->deltas[m->n_deltas++] = (mem_delta){d->seq, dup_bytes(d->meta, d->meta_len),
                                         dup_bytes(d->delta, d->delta_len), d->meta_len,
                                         d->delta_len};
  /* the metadata columns, not the snapshot */
  m->r.last_used = row->last_used;
  m->r.tokens = row->tokens;
  m->r.turns = row->turns;
  m->r.seq = d->seq;
  m->r.n_deltas = m->n_deltas;
  m->r.delta_bytes += d->meta_len + d->delta_len;
  *after = m->r;
  return 0;
}
static int mem_compact(store_conn *c, const store_row *row, uint64_t old_snap_id, char *err,
                       size_t cap) {
  (void)c, (void)err, (void)cap;
  mem_row *m = mem_find(row->id, row->owner);
  if (!m || m->r.snap_id != old_snap_id || m->r.seq < row->seq) return 1;
  free(m->meta);
  free(m->state);
  m->meta = dup_bytes(row->meta, row->meta_len);
  m->state = dup_bytes(row->state, row->state_len);
  m->r.meta = m->meta, m->r.meta_len = row->meta_len;
  m->r.state = m->state, m->r.state_len = row->state_len;
  m->r.snap_id = row->snap_id;
  m->r.snap_seq = row->seq;
  m->r.snap_bytes = row->meta_len + row->state_len;
  mem_drop_deltas(m, row->seq);
  return 0;
}
static int mem_del(store_conn *c, const char *id, const uint8_t owner[32], char *err, size_t cap) {
  (void)c, (void)err, (void)cap;
  mem_row *m = mem_find(id, owner);
  if (!m) return 1;
  free(m->meta);
  free(m->state);
  mem_drop_deltas(m, UINT64_MAX);
  free(m->deltas);
  memset(m, 0, sizeof *m);
  return 0;
}
static int mem_expire(store_conn *c, double before, int max, store_key *out, char *err,
                      size_t cap) {
  (void)c, (void)before, (void)max, (void)out, (void)err, (void)cap;
  return 0;
}
static int mem_list(store_conn *c, const uint8_t owner[32], int max, store_row *out, char *err,
                    size_t cap) {
  (void)c, (void)owner, (void)max, (void)out, (void)err, (void)cap;
  return 0;
}
static long mem_count(store_conn *c) {
  (void)c;
  long n = 0;
  for (int i = 0; i < 64; i++) n += MEM[i].used;
  return n;
}
static void mem_destroy(void *cfg) {
  (void)cfg;
  for (int i = 0; i < 64; i++) {
    free(MEM[i].meta);
    free(MEM[i].state);
    mem_drop_deltas(&MEM[i], UINT64_MAX);
    free(MEM[i].deltas);
  }
  memset(MEM, 0, sizeof MEM);
}
/* the row-changing calls under MEM_MU */
static int mem_put_locked(store_conn *c, const store_row *row, int *created, char *err,
                          size_t cap) {
  pthread_mutex_lock(&MEM_MU);
  int rc = mem_put(c, row, created, err, cap);
  pthread_mutex_unlock(&MEM_MU);
  return rc;
}
static int mem_append_locked(store_conn *c, const store_row *row, const store_delta *d,
                             store_row *after, char *err, size_t cap) {
  pthread_mutex_lock(&MEM_MU);
  int rc = mem_append(c, row, d, after, err, cap);
  pthread_mutex_unlock(&MEM_MU);
  return rc;
}
static int mem_compact_locked(store_conn *c, const store_row *row, uint64_t old_snap_id,
                              char *err, size_t cap) {
  pthread_mutex_lock(&MEM_MU);
  int rc = mem_compact(c, row, old_snap_id, err, cap);
  pthread_mutex_unlock(&MEM_MU);
  return rc;
}
static int mem_del_locked(store_conn *c, const char *id, const uint8_t owner[32], char *err,
                          size_t cap) {
  pthread_mutex_lock(&MEM_MU);
  int rc = mem_del(c, id, owner, err, cap);
  pthread_mutex_unlock(&MEM_MU);
  return rc;
}
static long mem_count_locked(store_conn *c) {
  pthread_mutex_lock(&MEM_MU);
  long n = mem_count(c);
  pthread_mutex_unlock(&MEM_MU);
  return n;
}
static const store_backend_ops MEM_OPS = {
    .name = "memory",
    .connect = mem_connect,
    .disconnect = mem_disconnect,
    .begin = mem_ok,
    .commit = mem_ok,
    .rollback = mem_void,
    .get = mem_get,
    .next_delta = mem_next_delta,
    .release = mem_release,
    .put = mem_put_locked,
    .append = mem_append_locked,
    .compact = mem_compact_locked,
    .del = mem_del_locked,
    .expire = mem_expire,
    .list = mem_list,
    .count = mem_count_locked,
    .destroy = mem_destroy,
};

/* Restores owner's id from the store; ST_FOUND with *out, or what the store answered. */
static st_status restore(session_store *st, session_table *t, const char *id,
                         const uint8_t owner[32], session **out) {
  cb_state f = {0};
  st_status r = st_find(t, id, owner, out, on_found, &f);
  if (r != ST_PENDING) return r;
  PUMP_UNTIL(f.calls, 60, pump(st));
  if (f.found != ST_FOUND) return f.found;
  return st_lookup(t, id, owner, out);
}

/* One turn on s ending with its commit (durability turn): the commit's status. */
static int committed_turn_rec(session_store *st, session_table *t, session *s, int n, int seed,
                              const char *rec_key);
static int committed_turn(session_store *st, session_table *t, session *s, int n, int seed) {
  return committed_turn_rec(st, t, s, n, seed, NULL);
}

/* A turn whose commit carries the record (idem, rec_key) -> "answer" (NULL: none). */
static int committed_turn_rec(session_store *st, session_table *t, session *s, int n, int seed,
                              const char *rec_key) {
  xl_error xe;
  st_acquire(t, s);
  feed(s, n, seed, NULL);
  s->turns++;
  uint8_t *core;
  size_t cl;
  CHECK(session_encode_for_store(s, &core, &cl, &xe) == XL_OK); /* as the worker does */
  cb_state c = {0};
  st_record rec = {"idem", rec_key, (uint8_t *)xstrdup("answer"), 6, 60};
  CHECK(st_turn_end(t, s, core, cl, 1, rec_key ? &rec : NULL, on_done, &c) == 1);
  if (!rec_key) free(rec.value);
  PUMP_UNTIL(c.calls, 60, pump(st));
  return c.status;
}

/* Whether the store holds the record (idem, owner, key). */
static int has_record(session_store *st, const uint8_t owner[32], const char *key) {
  rec_state r = {0};
  store_op *op = store_op_new(SOP_REC_GET, on_rec_op, &r);
  CHECK(store_op_record(op, "idem", owner, key, NULL, 0, 0) == 0);
  store_submit(st, op);
  while (!r.calls) pump(st);
  CHECK(r.status == STORE_OK || r.status == STORE_ABSENT);
  return r.status == STORE_OK && !strcmp(r.value, "answer");
}

/* Durability turn: a turn whose commit fails is not kept. The session leaves RAM without a
 * save and its next use restores the store's row, the state of its last committed turn (so a
 * retry feeds the prompt once); a session whose first commit failed starts afresh; a turn
 * without a snapshot is not kept either; nor a creation or an import whose save failed. Durability async: a failed save keeps the session
 * unsaved in RAM and eviction hands it over. All through a second backend. */
static void test_second_backend_and_failed_commits(void) {
  store_backend *b = calloc(1, sizeof *b);
  b->ops = &MEM_OPS;
  store_opts o = {.async_commit_ms = 1000, .max_batch = 64};
  session_store *st = store_new(b, &o, notify, NULL);
  char err[256];
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  uint8_t owner[32];
  memset(owner, 5, 32);
  xl_error xe;
  session *s = st_create(t, "f1", owner, &xe);
  CHECK(committed_turn(st, t, s, 30, 1) == 0 && !s->busy && store_count(st) == 1);
  xl_state *ref;
  CHECK(xl_state_clone(s->state, &ref, &xe) == XL_OK);
  uint64_t dig = s->digest;
  MEM_FAIL_PUT = 1;
  CHECK(committed_turn(st, t, s, 12, 2) == -1);
  MEM_FAIL_PUT = 0;
  CHECK(st_lookup(t, "f1", owner, &s) == ST_MISSING); /* not in RAM any more */
  CHECK(restore(st, t, "f1", owner, &s) == ST_FOUND);
  if (s) {
    CHECK(s->digest == dig && s->turns == 1 && xl_state_tokens_fed(s->state) == 30);
    session tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.state = ref;
    tmp.digest = dig;
    CHECK(continues_identically(s, &tmp)); /* the retry starts from the committed turn */
  }
  xl_state_free(ref);
  /* the first turn of a new session fails: nothing of it remains */
  session *n = st_create(t, "f0", owner, &xe);
  MEM_FAIL_PUT = 1;
  CHECK(committed_turn(st, t, n, 7, 3) == -1);
  MEM_FAIL_PUT = 0;
  CHECK(st_lookup(t, "f0", owner, &n) == ST_MISSING);
  CHECK(restore(st, t, "f0", owner, &n) == ST_MISSING);
  /* a turn that fed the session but has no snapshot cannot be committed */
  CHECK(st_lookup(t, "f1", owner, &s) == ST_FOUND);
  st_acquire(t, s);
  feed(s, 4, 4, NULL);
  cb_state c = {0};
  CHECK(st_turn_end(t, s, NULL, 0, 1, NULL, on_done, &c) == -1 && c.calls == 0);
  CHECK(st_lookup(t, "f1", owner, &s) == ST_MISSING);
  CHECK(restore(st, t, "f1", owner, &s) == ST_FOUND && s && s->digest == dig);
  /* a turn that fed nothing has nothing to commit: released at once */
  st_acquire(t, s);
  CHECK(st_turn_end(t, s, NULL, 0, 0, NULL, on_done, &c) == 0 && !s->busy && c.calls == 0);
  /* a creation and an import whose save fails are not kept either: the import's id holds
   * what the store holds (the committed f1) */
  MEM_FAIL_PUT = 1;
  session *made = st_create(t, "made", owner, &xe), *x = NULL;
  cb_state p1 = {0};
  CHECK(st_persist(t, made, on_done, &p1) == 1);
  PUMP_UNTIL(p1.calls, 60, pump(st));
  CHECK(p1.status == -1 && st_lookup(t, "made", owner, &x) == ST_MISSING);
  session *other = busy_session(7);
  size_t en, eml;
  uint8_t *env = envelope(other, M, &en, &eml);
  session_free(other);
  cb_state imp = {0};
  st_import(t, "f1", owner, env, en, on_import_done, &imp);
  PUMP_UNTIL(imp.calls, 60, pump(st));
  MEM_FAIL_PUT = 0;
  CHECK(imp.status == IMPORT_ERROR && st_lookup(t, "f1", owner, &x) == ST_MISSING);
  CHECK(restore(st, t, "f1", owner, &x) == ST_FOUND && x && x->digest == dig);

  /* async: the failed save leaves the session unsaved; leaving RAM hands it over */
  session *probe = busy_session(0);
  session_table *ta = st_new(M, session_ram(probe) * 3 / 2, 0, 100, st, DUR_ASYNC);
  session_free(probe);
  session *a = st_create(ta, "a1", owner, &xe);
  st_acquire(ta, a);
  feed(a, 30, 1, NULL);
  CHECK(xl_state_clone(a->state, &ref, &xe) == XL_OK);
  dig = a->digest;
  uint8_t *core;
  size_t cl;
  CHECK(xl_state_serialize(a->state, &core, &cl, &xe) == XL_OK);
  long before = store_count(st);
  MEM_FAIL_PUT = 1;
  CHECK(st_turn_end(ta, a, core, cl, 1, NULL, on_done, &c) == 0 && !a->busy);
  PUMP_UNTIL(a->unsaved, 60, pump(st));
  MEM_FAIL_PUT = 0;
  CHECK(store_count(st) == before);
  session *a2 = st_create(ta, "a2", owner, &xe); /* pushes a1 out: handed over, not lost */
  st_acquire(ta, a2);
  feed(a2, 5, 2, NULL);
  st_release(ta, a2);
  CHECK(st_lookup(ta, "a1", owner, &a) == ST_MISSING);
  PUMP_UNTIL(store_count(st) == before + 1, 60, pump(st));
  CHECK(restore(st, ta, "a1", owner, &a) == ST_FOUND);
  if (a) {
    session tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.state = ref;
    tmp.digest = dig;
    CHECK(a->digest == dig && continues_identically(a, &tmp));
  }
  xl_state_free(ref);
  st_free(ta);
  end_store(st, b, t);
}

/* Ids are per key: two owners' sessions of one id are two sessions (create, lookup, delete,
 * tombstones, list, minted ids), with and without a store. */
static void test_ids_are_per_owner(void) {
  uint8_t ka[32], kb[32];
  memset(ka, 0xa1, 32);
  memset(kb, 0xb2, 32);
  xl_error xe;
  /* RAM only: a budget of about one session, so the first one is evicted (tombstone) */
  session *probe = busy_session(0);
  session_table *t = st_new(M, session_ram(probe) * 3 / 2, 0, 100, NULL, DUR_OFF);
  session_free(probe);
  session *a = st_create(t, "alice-1", ka, &xe), *x = NULL;
  st_acquire(t, a);
  feed(a, 11, 1, NULL);
  st_release(t, a);
  CHECK(st_lookup(t, "alice-1", kb, &x) == ST_MISSING && !x);
  session *b = st_create(t, "alice-1", kb, &xe); /* b's own alice-1; evicts a's */
  CHECK(b && b != a && xl_state_tokens_fed(b->state) == 0);
  CHECK(st_lookup(t, "alice-1", kb, &x) == ST_FOUND && x == b);
  CHECK(st_lookup(t, "alice-1", ka, &x) == ST_EXPIRED); /* a's tombstone, a's alone */
  session *out[4];
  CHECK(st_list(t, kb, out, 4) == 1 && out[0] == b);
  CHECK(st_list(t, ka, out, 4) == 0);
  CHECK(st_forget_tombstone(t, "alice-1", kb) == 0);
  CHECK(st_forget_tombstone(t, "alice-1", ka) == 1);
  CHECK(st_lookup(t, "alice-1", ka, &x) == ST_MISSING);
  CHECK(st_lookup(t, "alice-1", kb, &x) == ST_FOUND);
  st_free(t);

  /* with a store: two rows, deleted and restored independently */
  store_backend *sb;
  session_store *st = new_store("store_keys", 1000, &sb);
  t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  a = st_create(t, "same", ka, &xe);
  b = st_create(t, "same", kb, &xe);
  CHECK(a != b);
  CHECK(committed_turn(st, t, a, 9, 1) == 0 && committed_turn(st, t, b, 17, 2) == 0);
  CHECK(store_count(st) == 2);
  uint64_t da = a->digest, db = b->digest;
  cb_state d = {0};
  CHECK(st_delete(t, a, on_done, &d) == 1);
  PUMP_UNTIL(d.calls, 60, pump(st));
  CHECK(d.status == 0 && store_count(st) == 1);
  CHECK(restore(st, t, "same", ka, &x) == ST_MISSING);
  CHECK(st_lookup(t, "same", kb, &x) == ST_FOUND && x->digest == db);
  st_free(t); /* a new table: b's session comes back from the store */
  t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  CHECK(restore(st, t, "same", kb, &x) == ST_FOUND && x && x->digest == db &&
        xl_state_tokens_fed(x->state) == 17);
  CHECK(restore(st, t, "same", ka, &x) == ST_MISSING);
  (void)da;
  end_store(st, sb, t);
}

/* Per-key fair share: when the budget must evict, keys over an even share of it lose their
 * sessions first, so key b creating many sessions never evicts key a's one; a per-key cap
 * (session_ram_mb_per_key) evicts a key's own sessions under a roomy budget; max_sessions_per_key
 * is reported by st_key_full. */
static void test_keys_share_the_budget(void) {
  uint8_t ka[32], kb[32];
  memset(ka, 0xa1, 32);
  memset(kb, 0xb2, 32);
  xl_error xe;
  session *probe = session_new(M, &xe); /* what a new session holds */
  size_t per = session_ram(probe);
  session_free(probe);
  session_table *t = st_new(M, per * 10, 0, 1000, NULL, DUR_OFF);
  session *a = st_create(t, "mine", ka, &xe), *x = NULL;
  st_acquire(t, a);
  feed(a, 5, 1, NULL);
  st_release(t, a);
  char id[32];
  for (int i = 0; i < 100; i++) {
    snprintf(id, sizeof id, "b-%d", i);
    CHECK(st_create(t, id, kb, &xe) != NULL);
  }
  CHECK(st_lookup(t, "mine", ka, &x) == ST_FOUND && x == a);
  CHECK(st_ram(t) <= per * 10 + per);
  CHECK(st_key_sessions(t, ka) == 1);
  CHECK(st_key_sessions(t, kb) >= 5 && st_key_sessions(t, kb) <= 10);
  CHECK(st_lookup(t, "b-0", kb, &x) == ST_EXPIRED);
  CHECK(st_lookup(t, "b-99", kb, &x) == ST_FOUND);
  st_free(t);

  /* a cap per key: b holds at most 3 sessions' worth, a roomy budget notwithstanding */
  t = st_new(M, per * 1000, 0, 1000, NULL, DUR_OFF);
  st_set_key_limits(t, 0, per * 3);
  CHECK(st_create(t, "mine", ka, &xe) != NULL);
  for (int i = 0; i < 20; i++) {
    snprintf(id, sizeof id, "b-%d", i);
    CHECK(st_create(t, id, kb, &xe) != NULL);
  }
  CHECK(st_key_sessions(t, kb) == 3 && st_key_sessions(t, ka) == 1);
  CHECK(st_lookup(t, "b-16", kb, &x) == ST_EXPIRED && st_lookup(t, "b-17", kb, &x) == ST_FOUND);
  st_free(t);

  /* max_sessions_per_key: full at the limit, for that key alone; a deletion makes room */
  t = st_new(M, per * 1000, 0, 1000, NULL, DUR_OFF);
  st_set_key_limits(t, 2, 0);
  session *b0 = st_create(t, "b-0", kb, &xe);
  CHECK(!st_key_full(t, kb));
  st_create(t, "b-1", kb, &xe);
  CHECK(st_key_full(t, kb) && !st_key_full(t, ka));
  st_delete(t, b0, NULL, NULL);
  CHECK(!st_key_full(t, kb) && st_key_sessions(t, kb) == 1);
  st_free(t);
}

/* A stateless request's memory is kept, emptied, for the next one: the same mapping comes
 * back with nothing in it (the next request's numbers are those of a new memory), only within
 * the budget, and it is the first thing to go when sessions need the room. */
static void test_stateless_memory_is_reused(void) {
  uint8_t owner[32];
  memset(owner, 0x5a, 32);
  xl_error xe;
  const size_t bytes = xl_model_state_bytes(M);
  const int V = xl_model_config(M)->vocab_size;
  float *fresh = malloc(sizeof(float) * (size_t)V), *again = malloc(sizeof(float) * (size_t)V);
  session *ref = session_new(M, &xe);
  feed(ref, 6, 9, fresh);
  session_free(ref);

  session *probe = session_new(M, &xe);
  size_t per = session_ram(probe);
  session_free(probe);
  session_table *t = st_new(M, per * 3, 0, 1000, NULL, DUR_OFF);
  session *a = st_new_stateless(t, &xe);
  CHECK(a && st_spare_bytes(t) == 0);
  const xl_state *mem = a->state;
  feed(a, 40, 1, NULL);
  st_free_stateless(t, a);
  CHECK(st_spare_bytes(t) == bytes);
  session *b = st_new_stateless(t, &xe);
  CHECK(b && b->state == mem && st_spare_bytes(t) == 0);
  CHECK(xl_state_mem_length(b->state) == 0 && xl_state_tokens_fed(b->state) == 0);
  CHECK(b->pending == -1 && b->n_msgs == 0 && b->turns == 0);
  feed(b, 6, 9, again);
  CHECK(memcmp(fresh, again, sizeof(float) * (size_t)V) == 0);
  session *c = st_new_stateless(t, &xe); /* a second at once: a memory of its own */
  CHECK(c && c->state != mem);
  st_free_stateless(t, b);
  st_free_stateless(t, c); /* one is kept, the other freed */
  CHECK(st_spare_bytes(t) == bytes);

  /* sessions take the room: the kept memory goes, none of the three sessions does */
  char id[16];
  for (int i = 0; i < 3; i++) {
    snprintf(id, sizeof id, "s-%d", i);
    CHECK(st_create(t, id, owner, &xe) != NULL);
  }
  CHECK(st_spare_bytes(t) == 0 && st_key_sessions(t, owner) == 3);
  /* and a full budget keeps none */
  session *d = st_new_stateless(t, &xe);
  st_free_stateless(t, d);
  CHECK(st_spare_bytes(t) == 0);
  st_free(t);
  free(fresh);
  free(again);
}

/* A fork is a use of its parent: forking a parent 1000 times under a budget of about two
 * sessions, without a store, never evicts the parent (its forks go instead). */
static void test_fork_keeps_its_parent(void) {
  session *probe = busy_session(0);
  session_table *t = st_new(M, session_ram(probe) * 5 / 2, 0, 100000, NULL, DUR_OFF);
  session_free(probe);
  uint8_t owner[32];
  memset(owner, 9, 32);
  xl_error xe;
  session *p = st_create(t, "parent", owner, &xe), *x = NULL;
  st_acquire(t, p);
  feed(p, 13, 1, NULL);
  st_release(t, p);
  uint64_t dig = p->digest;
  int kept = 1;
  char first_fork[129] = "";
  for (int i = 0; i < 1000 && kept; i++) {
    session *f = st_fork(t, p, &xe);
    CHECK(f != NULL);
    if (!f) break;
    if (!i) snprintf(first_fork, sizeof first_fork, "%s", f->id);
    CHECK(f->digest == dig && strcmp(f->id, "parent"));
    kept = st_lookup(t, "parent", owner, &x) == ST_FOUND && x == p;
  }
  CHECK(kept);
  CHECK(st_lookup(t, first_fork, owner, &x) == ST_EXPIRED); /* the forks left RAM instead */
  CHECK(st_count(t) <= 3);
  st_free(t);
}


/* ---- snapshot + deltas ---- */

typedef struct {
  int calls;
  store_status status;
  session *out;
  char err[400];
} load_state;

static void on_load_op(store_op *op) {
  load_state *l = op->ctx;
  l->calls++;
  l->status = op->status;
  l->out = op->out;
  op->out = NULL;
  snprintf(l->err, sizeof l->err, "%s", op->err);
  store_op_free(op);
}

/* The store's rebuild of owner's id (its snapshot plus its deltas), equal to s in RAM: the
 * same record, and the same state byte for byte. */
static int store_equals_ram(session_store *st, const session *s) {
  load_state l = {0};
  store_op *op = store_op_new(SOP_LOAD, on_load_op, &l);
  snprintf(op->id, sizeof op->id, "%s", s->id);
  memcpy(op->owner, s->owner, 32);
  store_submit(st, op);
  PUMP_UNTIL(l.calls, 60, pump(st));
  if (l.status != STORE_OK || !l.out) {
    fprintf(stderr, "load: %d %s\n", (int)l.status, l.err);
    return 0;
  }
  uint8_t *x, *y;
  size_t nx, ny;
  xl_error xe;
  int same = same_record(s, l.out) && l.out->store_seq == s->store_seq &&
             xl_state_serialize(s->state, &x, &nx, &xe) == XL_OK &&
             xl_state_serialize(l.out->state, &y, &ny, &xe) == XL_OK && nx == ny &&
             !memcmp(x, y, nx);
  if (same) free(x), free(y);
  session_free(l.out);
  return same;
}

/* One turn of n tokens handed to the store as the worker does (its delta); durability turn
 * waits for the commit, async does not. */
static void turn_of(session_store *st, session_table *t, session *s, int n, int seed, int wait,
                    cb_state *c) {
  xl_error xe;
  st_acquire(t, s);
  feed(s, n, seed, NULL);
  s->turns++;
  session_push_msg(s, ROLE_USER, (uint64_t)seed);
  uint8_t *core;
  size_t cl;
  CHECK(session_encode_for_store(s, &core, &cl, &xe) == XL_OK);
  CHECK(xl_state_blob_is_delta(core, cl) == s->delta_ok);
  int w = st_turn_end(t, s, core, cl, 1, NULL, wait ? on_done : NULL, c);
  CHECK(w == (wait ? 1 : 0));
  if (wait) PUMP_UNTIL(c->calls, 60, pump(st));
}

/* A SQLite store in a fresh directory named `dir`, or (sqlite_backend 0) the second backend. */
static store_backend *open_backend(int sqlite_backend, const char *dir) {
  char err[512];
  if (sqlite_backend) return store_sqlite_open(tl_tmpdir(dir), 0, err, sizeof err);
  store_backend *b = calloc(1, sizeof *b);
  if (b) b->ops = &MEM_OPS;
  return b;
}

/* A session's durable form is a snapshot plus its turns' deltas: after every few of 120 turns
 * of 1 to 40 tokens (the ring of 24 wrapping over and over, a reset among them) the store
 * rebuilds the RAM session bit for bit; deltas outgrowing the snapshot are compacted while
 * turns keep committing (async: turns are handed over without waiting), the log stays within
 * its bound, and a restored session continues identically. On SQLite and on the second
 * backend, durability turn and async. */
static void deltas_rebuild(int sqlite_backend, int async) {
  char err[512];
  store_backend *b = open_backend(sqlite_backend, async ? "deltas_async" : "deltas_turn");
  CHECK(b != NULL);
  if (!b) return;
  store_opts o = {.async_commit_ms = 2, .max_batch = 64, .compact_ratio = 1.0,
                  .compact_min_bytes = 1, .compact_max_deltas = 6};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, async ? DUR_ASYNC : DUR_TURN);
  uint8_t owner[32];
  memset(owner, 0x61, 32);
  xl_error xe;
  session *s = st_create(t, "log", owner, &xe);
  unsigned rnd = 7;
  int all_equal = 1, checks = 0;
  for (int i = 0; i < 120; i++) {
    rnd = rnd * 1103515245u + 12345u;
    int n = 1 + (int)((rnd >> 16) % 40);
    if (i == 50) { /* an edited history: the next write is a whole snapshot again */
      session_reset(s);
      s->unsaved = 1;
    }
    cb_state c = {0};
    turn_of(st, t, s, n, i, !async, &c);
    CHECK(c.status == 0);
    if (i % 9 == 8 || i == 119) {
      all_equal &= store_equals_ram(st, s); /* FIFO: after the turns handed over before it */
      checks++;
    }
  }
  CHECK(all_equal && checks > 10);
  PUMP_UNTIL(store_compactions_pending(st) == 0, 60, usleep(2000));
  CHECK(store_compactions(st) > 5);
  store_conn *c = b->ops->connect(b->cfg, err, sizeof err);
  store_row r;
  CHECK(b->ops->get(c, "log", owner, &r, err, sizeof err) == 0);
  CHECK(r.seq == s->store_seq && r.n_deltas <= 6 && r.seq - r.snap_seq == (uint64_t)r.n_deltas);
  CHECK(r.delta_bytes <= r.snap_bytes + 64 * 1024 || r.n_deltas < 6);
  b->ops->release(c);
  if (sqlite_backend) b->ops->disconnect(c);
  /* a restore (RAM emptied) continues like the session that never left */
  session *keep = session_new(M, &xe);
  xl_state_free(keep->state);
  CHECK(xl_state_clone(s->state, &keep->state, &xe) == XL_OK);
  keep->digest = s->digest;
  st_free(t);
  t = st_new(M, (size_t)1 << 30, 0, 100, st, async ? DUR_ASYNC : DUR_TURN);
  session *back = NULL;
  CHECK(restore(st, t, "log", owner, &back) == ST_FOUND);
  if (back) CHECK(continues_identically(keep, back));
  session_free(keep);
  end_store(st, b, t);
}

static void test_deltas_rebuild_and_compact(void) {
  deltas_rebuild(1, 0);
  deltas_rebuild(1, 1);
  deltas_rebuild(0, 0);
  deltas_rebuild(0, 1);
}

/* A compaction held between its rebuild and its swap (the store's test hook). */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int reached, released;
  uint64_t seq; /* the version the first compaction folded up to */
} hold_state;

static void hold_compaction(void *arg, const char *id, uint64_t seq) {
  (void)id;
  hold_state *h = arg;
  pthread_mutex_lock(&h->mu);
  int me = ++h->reached;
  if (me == 1) h->seq = seq;
  pthread_cond_broadcast(&h->cv);
  double until = now_mono() + 120;
  while (h->released < me && now_mono() < until) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  }
  pthread_mutex_unlock(&h->mu);
}

static int hold_reached(hold_state *h) {
  pthread_mutex_lock(&h->mu);
  int n = h->reached;
  pthread_mutex_unlock(&h->mu);
  return n;
}

static void hold_release(hold_state *h, int upto) {
  pthread_mutex_lock(&h->mu);
  h->released = upto;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Turns commit while a compaction of their session is in flight: the compaction is held
 * between its rebuild and its swap (the store's test hook, so a compaction that never ends
 * rather than a timing), and the session's turns (durability turn) and another session's are
 * acknowledged meanwhile; the store's rebuild equals RAM while it is held; after the swap the
 * row is the new snapshot (the version the compaction read) followed by the deltas appended
 * meanwhile, and rebuilds bit for bit. On SQLite and on the second backend. */
static void turns_during_compaction(int sqlite_backend) {
  char err[512];
  store_backend *b = open_backend(sqlite_backend, "compaction_held");
  CHECK(b != NULL);
  if (!b) return;
  hold_state h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  store_opts o = {.async_commit_ms = 2, .max_batch = 64, .compact_ratio = 1.0,
                  .compact_min_bytes = 1L << 40, .compact_max_deltas = 4,
                  .compact_hook = hold_compaction, .compact_hook_arg = &h};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  uint8_t owner[32];
  memset(owner, sqlite_backend ? 0x71 : 0x72, 32);
  xl_error xe;
  session *s = st_create(t, "held", owner, &xe);
  session *other = st_create(t, "bystander", owner, &xe);
  CHECK(s && other);
  if (!s || !other) return;
  int seed = 0;
  /* a snapshot, then deltas until the fourth asks for a compaction */
  for (int i = 0; i < 5; i++) {
    cb_state c = {0};
    turn_of(st, t, s, 3 + i, seed++, 1, &c);
    CHECK(c.status == 0);
  }
  PUMP_UNTIL(hold_reached(&h) >= 1, 60, usleep(2000));
  uint64_t folded = h.seq;
  CHECK(folded >= 4 && folded <= s->store_seq);
  long done0 = store_compactions(st);
  /* held: the turns of that session and of another are acknowledged meanwhile */
  int acked = 0;
  for (int i = 0; i < 6; i++) {
    cb_state c = {0}, d = {0};
    turn_of(st, t, s, 2 + i, seed++, 1, &c);
    turn_of(st, t, other, 4, seed++, 1, &d);
    acked += c.calls == 1 && c.status == 0 && d.calls == 1 && d.status == 0;
  }
  CHECK(acked == 6);
  CHECK(hold_reached(&h) == 1 && store_compactions(st) == done0); /* still held */
  CHECK(store_equals_ram(st, s));
  hold_release(&h, 1);
  PUMP_UNTIL(store_compactions(st) == done0 + 1, 60, usleep(2000));
  /* the turns appended meanwhile asked again: that compaction is held now, so the row is the
   * first swap's */
  store_conn *c = b->ops->connect(b->cfg, err, sizeof err);
  store_row r;
  CHECK(b->ops->get(c, "held", owner, &r, err, sizeof err) == 0);
  CHECK(r.snap_seq == folded && r.seq == s->store_seq &&
        r.n_deltas == (int)(r.seq - folded) && r.n_deltas >= 6);
  b->ops->release(c);
  if (sqlite_backend) b->ops->disconnect(c);
  CHECK(store_equals_ram(st, s));
  hold_release(&h, 1000);
  PUMP_UNTIL(store_compactions_pending(st) == 0, 60, usleep(2000));
  CHECK(store_equals_ram(st, s));
  CHECK(store_equals_ram(st, other));
  end_store(st, b, t);
}

static void test_turns_commit_during_a_compaction(void) {
  turns_during_compaction(1);
  turns_during_compaction(0);
}

/* Writes are held back behind a compaction that does not keep up: the compaction is held
 * between its rebuild and its swap (the test hook) while the session's turns keep coming; the
 * turns are acknowledged until the deltas pass 1.5 snapshots, then the next one waits (not
 * acknowledged while held: the row stops growing) and is acknowledged after the swap, and the
 * store rebuilds the session bit for bit. On SQLite and on the second backend. */
static void writes_held_back(int sqlite_backend) {
  char err[512];
  store_backend *b = open_backend(sqlite_backend, "compaction_lagging");
  CHECK(b != NULL);
  if (!b) return;
  hold_state h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  store_opts o = {.async_commit_ms = 2, .max_batch = 64, .compact_ratio = 1.2,
                  .compact_min_bytes = 1, .compact_max_deltas = 100000,
                  .compact_hook = hold_compaction, .compact_hook_arg = &h};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  uint8_t owner[32];
  memset(owner, sqlite_backend ? 0x73 : 0x74, 32);
  xl_error xe;
  session *s = st_create(t, "lagging", owner, &xe);
  CHECK(s != NULL);
  if (!s) return;
  int seed = 100;
  cb_state first = {0};
  turn_of(st, t, s, 20, seed++, 1, &first); /* the snapshot: 20 positions (deltas: 2 each) */
  CHECK(first.status == 0);
  /* turns until one asks for a compaction (queued before that turn is acknowledged), then no
   * more until the compaction thread holds it: the deltas have just passed one snapshot */
  for (int i = 0; i < 200 && store_compactions_pending(st) == 0; i++) {
    cb_state c = {0};
    turn_of(st, t, s, 2, seed++, 1, &c);
    CHECK(c.status == 0);
  }
  PUMP_UNTIL(hold_reached(&h) == 1, 60, usleep(2000));
  cb_state c = {0};
  int acked = 0;
  /* turns while it is held: each acknowledged, until the commit of one sets the store holding
   * writes back (before that turn's callback), then one more, which is held */
  for (int i = 0; i < 201; i++) {
    int holding = store_holding_writes(st);
    memset(&c, 0, sizeof c);
    st_acquire(t, s); /* a turn committed with a callback, not waited for */
    feed(s, 2, seed++, NULL);
    s->turns++;
    session_push_msg(s, ROLE_USER, (uint64_t)seed);
    uint8_t *core;
    size_t cl;
    CHECK(session_encode_for_store(s, &core, &cl, &xe) == XL_OK);
    CHECK(st_turn_end(t, s, core, cl, 1, NULL, on_done, &c) == 1);
    if (holding) break;
    PUMP_UNTIL(c.calls, 60, pump(st));
    acked++;
  }
  /* the held one is not acknowledged while the compaction is held (here for half a second:
   * on a slow machine this could miss a write let through, never fail a correct store) */
  for (double until = now_mono() + 0.5; !c.calls && now_mono() < until;) {
    store_poll(st);
    usleep(1000);
  }
  CHECK(acked > 0 && !c.calls); /* some turns went through, then one was held back */
  store_conn *rc = b->ops->connect(b->cfg, err, sizeof err);
  store_row r;
  CHECK(b->ops->get(rc, "lagging", owner, &r, err, sizeof err) == 0);
  CHECK((double)r.delta_bytes > 1.5 * (double)r.snap_bytes); /* held for cause */
  CHECK((double)r.delta_bytes <= 2.0 * (double)r.snap_bytes); /* and not much later */
  b->ops->release(rc);
  if (sqlite_backend) b->ops->disconnect(rc);
  CHECK(hold_reached(&h) == 1); /* still the same compaction */
  hold_release(&h, 1000);
  PUMP_UNTIL(c.calls, 60, pump(st));
  CHECK(c.calls == 1 && c.status == 0);
  PUMP_UNTIL(store_compactions_pending(st) == 0, 60, usleep(2000));
  CHECK(store_equals_ram(st, s));
  end_store(st, b, t);
}

static void test_writes_held_back_behind_a_lagging_compaction(void) {
  writes_held_back(1);
  writes_held_back(0);
}

/* ---- the short swap (SQLite: a compaction's snapshot written in pieces ahead of its swap) ---- */

/* A compaction held after a given piece of its new snapshot, and again before its swap (the
 * store's test hooks). */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int hold_part;                  /* hold after this piece (-1: none) */
  int pieces;                     /* pieces committed so far */
  int piece_held, piece_released; /* held after hold_part */
  int swap_reached, swap_released;
  int notify_fd; /* >= 0: a byte written there once held after hold_part (another process) */
} piece_hold;

static void wait_released(piece_hold *h, const int *released) {
  double until = now_mono() + 120;
  while (!*released && now_mono() < until) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  }
}

static void hold_piece(void *arg, const char *id, int part) {
  (void)id;
  piece_hold *h = arg;
  pthread_mutex_lock(&h->mu);
  h->pieces = part + 1;
  if (part == h->hold_part && !h->piece_released) {
    h->piece_held = 1;
    pthread_cond_broadcast(&h->cv);
    if (h->notify_fd >= 0) CHECK(write(h->notify_fd, "p", 1) == 1);
    wait_released(h, &h->piece_released);
  }
  pthread_mutex_unlock(&h->mu);
}

static void hold_swap(void *arg, const char *id, uint64_t seq) {
  (void)id, (void)seq;
  piece_hold *h = arg;
  pthread_mutex_lock(&h->mu);
  h->swap_reached++;
  pthread_cond_broadcast(&h->cv);
  wait_released(h, &h->swap_released);
  pthread_mutex_unlock(&h->mu);
}

static int piece_hold_get(piece_hold *h, const int *field) {
  pthread_mutex_lock(&h->mu);
  int v = *field;
  pthread_mutex_unlock(&h->mu);
  return v;
}

static void piece_hold_set(piece_hold *h, int *field) {
  pthread_mutex_lock(&h->mu);
  *field = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* One integer from the store's file (a reader of its own; the WAL lets it read while the
 * store writes). -1 on failure. */
static long long db_int(const char *dir, const char *sql) {
  char path[1100];
  snprintf(path, sizeof path, "%s/sessions.db", dir);
  sqlite3 *db = NULL;
  long long v = -1;
  sqlite3_stmt *q;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_busy_timeout(db, 10000) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
    if (sqlite3_step(q) == SQLITE_ROW) v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return v;
}

/* Bytes of the pieces of snapshots the row does not point at (a compaction's, ahead of its
 * swap; or dead ones), and how many. */
#define SQL_DEAD_PIECE_BYTES                                                                   \
  "SELECT coalesce(sum(length(bytes)), 0) FROM snap_pieces p WHERE p.snap_id IS NOT (SELECT " \
  "s.snap_id FROM sessions s WHERE s.owner = p.owner AND s.id = p.id)"
#define SQL_DEAD_PIECES                                                                       \
  "SELECT count(*) FROM snap_pieces p WHERE p.snap_id IS NOT (SELECT s.snap_id FROM "         \
  "sessions s WHERE s.owner = p.owner AND s.id = p.id)"
#define SQL_DEAD_DELTAS                                                                       \
  "SELECT count(*) FROM deltas d WHERE d.seq <= coalesce((SELECT s.snap_seq FROM sessions s " \
  "WHERE s.owner = d.owner AND s.id = d.id), d.seq)"

/* The swap is short: a compaction's new snapshot is written by the compaction thread in pieces
 * (here of 1 KiB), each a transaction of its own. Held after its second piece, the session's
 * turns (durability turn) are acknowledged meanwhile; held before its swap, every byte of the
 * new snapshot is already in the file (pieces the row does not point at yet); the swap then
 * hands the backend no byte (the store's written-bytes counter does not move), the row points
 * at those very pieces and its dead data is collected; the store rebuilds RAM bit for bit. */
static void test_a_compaction_swap_only_repoints(void) {
  char err[512];
  const char *dir = tl_tmpdir("short_swap");
  store_backend *b = store_sqlite_open(dir, 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  piece_hold h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                  .hold_part = 1, .notify_fd = -1};
  store_opts o = {.async_commit_ms = 2, .max_batch = 64, .compact_ratio = 1.0,
                  .compact_min_bytes = 1L << 40, .compact_max_deltas = 4,
                  .snap_piece_bytes = 1024, .compact_hook = hold_swap,
                  .compact_hook_arg = &h, .piece_hook = hold_piece};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  uint8_t owner[32];
  memset(owner, 0x75, 32);
  xl_error xe;
  session *s = st_create(t, "pieces", owner, &xe);
  CHECK(s != NULL);
  if (!s) return;
  int seed = 300;
  for (int i = 0; i < 5; i++) { /* a snapshot, then deltas until the fourth asks */
    cb_state c = {0};
    turn_of(st, t, s, 20 + i, seed++, 1, &c);
    CHECK(c.status == 0);
  }
  PUMP_UNTIL(piece_hold_get(&h, &h.piece_held), 60, usleep(2000));
  /* held between pieces: the session's turns are acknowledged */
  int acked = 0;
  for (int i = 0; i < 3; i++) { /* 3: not enough deltas to ask for another compaction */
    cb_state c = {0};
    turn_of(st, t, s, 3, seed++, 1, &c);
    acked += c.calls == 1 && c.status == 0;
  }
  CHECK(acked == 3);
  CHECK(piece_hold_get(&h, &h.pieces) == 2 && store_compactions(st) == 0);
  CHECK(store_equals_ram(st, s));
  piece_hold_set(&h, &h.piece_released);
  PUMP_UNTIL(piece_hold_get(&h, &h.swap_reached) == 1, 60, usleep(2000));
  /* before the swap: the whole new snapshot is in the file, in pieces of at most 1 KiB */
  int n_pieces = piece_hold_get(&h, &h.pieces);
  long long ahead = db_int(dir, SQL_DEAD_PIECE_BYTES);
  CHECK(n_pieces > 4 && db_int(dir, SQL_DEAD_PIECES) == n_pieces);
  CHECK(ahead > 4 * 1024 && ahead <= (long long)n_pieces * 1024);
  CHECK(db_int(dir, "SELECT max(length(bytes)) FROM snap_pieces p WHERE p.snap_id IS NOT "
                    "(SELECT s.snap_id FROM sessions s)") <= 1024);
  uint64_t written = store_bytes_written(st);
  piece_hold_set(&h, &h.swap_released);
  PUMP_UNTIL(store_compactions(st) == 1, 60, usleep(2000));
  CHECK(store_bytes_written(st) == written); /* the swap handed the backend no byte */
  /* the row points at those pieces (its snapshot is as big as they were), and the old
   * snapshot and the folded deltas are collected */
  CHECK(db_int(dir, "SELECT snap_bytes FROM sessions") == ahead);
  PUMP_UNTIL(db_int(dir, SQL_DEAD_PIECES) == 0 && db_int(dir, SQL_DEAD_DELTAS) == 0, 60,
             usleep(2000));
  CHECK(db_int(dir, "SELECT count(*) FROM snap_pieces") == n_pieces);
  CHECK(db_int(dir, "SELECT n_deltas FROM sessions") == 3 &&
        db_int(dir, "SELECT count(*) FROM deltas") == 3); /* the turns of the hold continue it */
  /* The turns of the hold asked for a compaction of the row being built, so the store looks
   * at the row again once the swap is done: queued in the very step that ends the swap's
   * compaction, and run by the compaction thread after its collection, so it may still be
   * pending here (the count never reads 0 in between). It finds the 3 deltas within the
   * bound and compacts nothing more. */
  PUMP_UNTIL(store_compactions_pending(st) == 0, 60, usleep(2000));
  CHECK(store_compactions(st) == 1);
  CHECK(store_equals_ram(st, s));
  end_store(st, b, t);
}

/* A compaction killed between its pieces (kill -9 of a process holding it after its second
 * piece) leaves pieces no row points at; they are never read, and the next open deletes them
 * (and deltas a swap folded): the session restores as it was acknowledged, bit for bit. */
static void test_pieces_left_by_a_crash_are_collected(void) {
  const char *dir = tl_tmpdir("crash_pieces");
  uint8_t owner[32];
  memset(owner, 0x76, 32);
  const int lens[5] = {20, 21, 22, 23, 24};
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) { /* the process that crashes: 5 acknowledged turns, then held */
    close(fds[0]);
    char err[512];
    store_backend *b = store_sqlite_open(dir, 0, err, sizeof err);
    if (!b) _exit(2);
    piece_hold h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                    .hold_part = 1, .notify_fd = fds[1]};
    store_opts o = {.async_commit_ms = 2, .max_batch = 64, .compact_ratio = 1.0,
                    .compact_min_bytes = 1L << 40, .compact_max_deltas = 4,
                    .snap_piece_bytes = 1024, .compact_hook_arg = &h, .piece_hook = hold_piece};
    session_store *st = store_new(b, &o, notify, NULL);
    if (store_start(st, M, err, sizeof err)) _exit(3);
    session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
    xl_error xe;
    session *s = st_create(t, "crashy", owner, &xe);
    if (!s) _exit(4);
    for (int i = 0; i < 5; i++) {
      cb_state c = {0};
      turn_of(st, t, s, lens[i], 500 + i, 1, &c);
      if (c.status) _exit(5);
    }
    for (;;) pause(); /* killed while the compaction is held after its second piece */
  }
  close(fds[1]);
  char byte = 0;
  struct timeval tv = {60, 0};
  fd_set rs;
  FD_ZERO(&rs);
  FD_SET(fds[0], &rs);
  CHECK(select(fds[0] + 1, &rs, NULL, NULL, &tv) == 1 && read(fds[0], &byte, 1) == 1);
  kill(pid, SIGKILL);
  int wst = 0;
  CHECK(waitpid(pid, &wst, 0) == pid && WIFSIGNALED(wst));
  close(fds[0]);
  CHECK(byte == 'p');
  /* the crash left the compaction's first two pieces, which no row points at */
  CHECK(db_int(dir, SQL_DEAD_PIECES) == 2);
  CHECK(db_int(dir, "SELECT seq FROM sessions") == 5);

  char err[512];
  store_backend *b = store_sqlite_open(dir, 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  CHECK(db_int(dir, SQL_DEAD_PIECES) == 0 && db_int(dir, SQL_DEAD_DELTAS) == 0);
  CHECK(db_int(dir, "SELECT count(*) FROM deltas") == 4);
  store_opts o = {.async_commit_ms = 2, .max_batch = 64};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  session *back = NULL;
  CHECK(restore(st, t, "crashy", owner, &back) == ST_FOUND);
  /* the same turns replayed in RAM: the same state, byte for byte, and the same next turn */
  xl_error xe;
  session *replay = session_new(M, &xe);
  for (int i = 0; i < 5; i++) feed(replay, lens[i], 500 + i, NULL);
  if (back) {
    uint8_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    CHECK(xl_state_serialize(back->state, &x, &nx, &xe) == XL_OK &&
          xl_state_serialize(replay->state, &y, &ny, &xe) == XL_OK && nx == ny &&
          !memcmp(x, y, nx));
    free(x);
    free(y);
    CHECK(back->turns == 5 && back->n_msgs == 5 && back->store_seq == 5);
    CHECK(continues_identically(replay, back));
  }
  session_free(replay);
  end_store(st, b, t);
}

/* The schema of the first store format (user_version 1: rows keyed by id alone), as that
 * version's store_sqlite.c created it. */
static const char *V1_SCHEMA =
    "PRAGMA page_size=65536; PRAGMA journal_mode=WAL;"
    "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY NOT NULL, owner BLOB NOT NULL, "
    "fingerprint INTEGER NOT NULL, created REAL NOT NULL, last_used REAL NOT NULL, tokens "
    "INTEGER NOT NULL, turns INTEGER NOT NULL, mode INTEGER NOT NULL, messages INTEGER NOT NULL, "
    "positions INTEGER NOT NULL, meta BLOB NOT NULL, state BLOB NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sessions_by_owner ON sessions (owner, last_used);"
    "CREATE INDEX IF NOT EXISTS sessions_by_last_used ON sessions (last_used);"
    "PRAGMA user_version = 1;";

static int user_version(const char *path) {
  sqlite3 *db = NULL;
  int v = -1;
  sqlite3_stmt *q;
  /* the store's checkpoint thread may hold the WAL's locks for a moment: wait as the store does */
  if (sqlite3_open(path, &db) == SQLITE_OK && sqlite3_busy_timeout(db, 10000) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &q, NULL) == SQLITE_OK) {
    if (sqlite3_step(q) == SQLITE_ROW) v = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return v;
}

/* A store written by the first schema opens (migrated to the second, then the third: its rows
 * become snapshots without deltas), its sessions are served under their owner (and
 * continue bit for bit), and the owner's id is no longer the only one of that name. */
static void test_sqlite_migrates_v1(void) {
  const char *dir = tl_tmpdir("store_v1");
  char path[1100], err[512];
  snprintf(path, sizeof path, "%s/sessions.db", dir);
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  char *msg = NULL;
  CHECK(sqlite3_exec(db, V1_SCHEMA, NULL, NULL, &msg) == SQLITE_OK);
  sqlite3_free(msg);
  uint8_t ka[32], kb[32];
  memset(ka, 0x3c, 32);
  memset(kb, 0x4d, 32);
  session *orig[2] = {busy_session(4), busy_session(5)};
  const char *ids[2] = {"alice-1", "bob-7"};
  sqlite3_stmt *ins;
  CHECK(sqlite3_prepare_v2(db,
                           "INSERT INTO sessions (id, owner, fingerprint, created, last_used, "
                           "tokens, turns, mode, messages, positions, meta, state) VALUES "
                           "(?1, ?2, ?3, 1.0, ?4, ?5, 3, 1, 3, ?6, ?7, ?8)",
                           -1, &ins, NULL) == SQLITE_OK);
  for (int i = 0; i < 2; i++) {
    uint8_t *meta, *core;
    size_t ml, cl;
    CHECK(sess_encode(orig[i], M, &meta, &ml, &core, &cl, err, sizeof err) == 0);
    sqlite3_bind_text(ins, 1, ids[i], -1, SQLITE_STATIC);
    sqlite3_bind_blob(ins, 2, i ? kb : ka, 32, SQLITE_STATIC);
    sqlite3_bind_int64(ins, 3, (sqlite3_int64)xl_model_fingerprint(M));
    sqlite3_bind_double(ins, 4, 100.0 + i);
    sqlite3_bind_int64(ins, 5, (sqlite3_int64)session_tokens(orig[i]));
    sqlite3_bind_int(ins, 6, xl_state_mem_length(orig[i]->state));
    sqlite3_bind_blob(ins, 7, meta, (int)ml, SQLITE_TRANSIENT);
    sqlite3_bind_blob(ins, 8, core, (int)cl, SQLITE_TRANSIENT);
    CHECK(sqlite3_step(ins) == SQLITE_DONE);
    sqlite3_reset(ins);
    free(meta);
    free(core);
  }
  sqlite3_finalize(ins);
  sqlite3_close(db);
  CHECK(user_version(path) == 1);

  store_backend *b = store_sqlite_open(dir, 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  CHECK(user_version(path) == 5); /* through versions 2, 3 and 4 */
  store_opts o = {.async_commit_ms = 1000, .max_batch = 64};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  CHECK(store_count(st) == 2);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  session *s = NULL;
  CHECK(restore(st, t, "alice-1", ka, &s) == ST_FOUND);
  if (s) CHECK(same_record(orig[0], s) && continues_identically(orig[0], s));
  CHECK(restore(st, t, "bob-7", kb, &s) == ST_FOUND);
  if (s) CHECK(same_record(orig[1], s) && continues_identically(orig[1], s));
  CHECK(restore(st, t, "alice-1", kb, &s) == ST_MISSING); /* b's alice-1: not a's */
  xl_error xe;
  s = st_create(t, "alice-1", kb, &xe); /* b may have its own now */
  CHECK(committed_turn(st, t, s, 5, 9) == 0 && store_count(st) == 3);
  end_store(st, b, t);
  session_free(orig[0]);
  session_free(orig[1]);
  /* the migrated file opens again as it is */
  b = store_sqlite_open(dir, 0, err, sizeof err);
  CHECK(b != NULL);
  if (b) {
    store_conn *c = b->ops->connect(b->cfg, err, sizeof err);
    CHECK(c && b->ops->count(c) == 3);
    store_row g;
    CHECK(b->ops->get(c, "alice-1", ka, &g, err, sizeof err) == 0 && g.owner[0] == 0x3c &&
          g.last_used == 100.0);
    b->ops->release(c);
    b->ops->disconnect(c);
    store_backend_free(b);
  }
  CHECK(user_version(path) == 5); /* through versions 2, 3 and 4 */

  /* a migration that fails (here: a version-1 file that lacks a column) stops the open with a
   * message and leaves the file as it was: version 1, its row still there */
  const char *bad = tl_tmpdir("store_v1_bad");
  snprintf(path, sizeof path, "%s/sessions.db", bad);
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db,
                     "CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, owner BLOB NOT NULL);"
                     "INSERT INTO sessions VALUES ('x', zeroblob(32)); PRAGMA user_version = 1;",
                     NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  CHECK(store_sqlite_open(bad, 0, err, sizeof err) == NULL);
  CHECK(strstr(err, "migrating the store from schema version 1") != NULL);
  CHECK(user_version(path) == 1);
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  sqlite3_stmt *q;
  CHECK(sqlite3_prepare_v2(db, "SELECT count(*) FROM sessions", -1, &q, NULL) == SQLITE_OK);
  CHECK(sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) == 1);
  sqlite3_finalize(q);
  sqlite3_close(db);
}

/* The deltas table as schemas 3 and 4 had it (WITHOUT ROWID), written back from this build's;
 * the trigger that names it is dropped (the caller makes its own) */
#define DELTAS_WITHOUT_ROWID                                                                   \
  "DROP TRIGGER sessions_drop;"                                                                \
  "CREATE TABLE deltas_old (owner BLOB NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, "     \
  "meta BLOB NOT NULL, delta BLOB NOT NULL, PRIMARY KEY (owner, id, seq)) WITHOUT ROWID;"      \
  "INSERT INTO deltas_old SELECT owner, id, seq, meta, delta FROM deltas;"                     \
  "DROP TABLE deltas; ALTER TABLE deltas_old RENAME TO deltas;"

/* The deltas are a rowid table (their key an index of its own), not WITHOUT ROWID */
#define DELTAS_HAVE_ROWIDS                                                                     \
  "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'deltas' AND sql NOT "   \
  "LIKE '%WITHOUT ROWID%'"

/* A store of an older schema opens migrated to this build's, and its session, a snapshot plus
 * four deltas, is rebuilt bit for bit and continues. The file is written by this build and
 * then turned back into the older layout by `backdate` (SQL, ending at user_version `from`);
 * `check` (SQL giving a count) must answer 0 before the open and 1 after. */
static void migrated_log_continues(const char *tag, const char *backdate, int from,
                                   const char *check) {
  char err[512];
  const char *dir = tl_tmpdir(tag);
  store_backend *b = store_sqlite_open(dir, 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  store_opts o = {.async_commit_ms = 2, .max_batch = 64, .compact_max_deltas = 1000};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  uint8_t owner[32];
  memset(owner, 0x77, 32);
  xl_error xe;
  session *s = st_create(t, "old-log", owner, &xe);
  CHECK(s != NULL);
  if (!s) return;
  for (int i = 0; i < 5; i++) {
    cb_state c = {0};
    turn_of(st, t, s, 6 + i, 700 + i, 1, &c);
    CHECK(c.status == 0);
  }
  session *keep = session_new(M, &xe);
  xl_state_free(keep->state);
  CHECK(xl_state_clone(s->state, &keep->state, &xe) == XL_OK);
  keep->digest = s->digest;
  end_store(st, b, t);
  char path[1100];
  snprintf(path, sizeof path, "%s/sessions.db", dir);
  /* the file this build made is schema 5 as created, not by migration */
  CHECK(user_version(path) == 5 && db_int(dir, DELTAS_HAVE_ROWIDS) == 1);
  CHECK(db_int(dir, "SELECT count(*) FROM sqlite_master WHERE name = 'snapshots'") == 0);
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, backdate, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  CHECK(user_version(path) == from && db_int(dir, "SELECT count(*) FROM deltas") == 4);
  CHECK(db_int(dir, check) == 0);

  b = store_sqlite_open(dir, 0, err, sizeof err);
  CHECK(b != NULL);
  if (!b) {
    session_free(keep);
    return;
  }
  CHECK(user_version(path) == 5 && db_int(dir, "SELECT count(*) FROM snap_pieces") == 2);
  CHECK(db_int(dir, "SELECT count(*) FROM sqlite_master WHERE name = 'snapshots'") == 0);
  CHECK(db_int(dir, check) == 1);
  CHECK(db_int(dir, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND "
                    "name = 'sessions_drop' AND sql LIKE '%snap_pieces%'") == 1);
  st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  session *back = NULL;
  CHECK(restore(st, t, "old-log", owner, &back) == ST_FOUND);
  if (back) {
    CHECK(back->store_seq == 5 && back->turns == 5);
    CHECK(continues_identically(keep, back));
    cb_state c = {0}; /* the migrated log takes further deltas */
    turn_of(st, t, back, 3, 800, 1, &c);
    CHECK(c.status == 0 && store_equals_ram(st, back));
  }
  session_free(keep);
  end_store(st, b, t);
}

/* Schema 3: a session's snapshot one row of `snapshots` (migrated: pieces under the row's
 * snap_id), its deltas WITHOUT ROWID (migrated: a rowid table). */
static void test_sqlite_migrates_v3(void) {
  migrated_log_continues(
      "store_v3",
      "BEGIN;" DELTAS_WITHOUT_ROWID
      "CREATE TABLE snapshots (owner BLOB NOT NULL, id TEXT NOT NULL, meta BLOB NOT "
      "NULL, state BLOB NOT NULL, PRIMARY KEY (owner, id));"
      "INSERT INTO snapshots SELECT s.owner, s.id, (SELECT bytes FROM snap_pieces "
      "p WHERE p.owner = s.owner AND p.id = s.id AND p.snap_id = s.snap_id AND "
      "part = 0), (SELECT bytes FROM snap_pieces p WHERE p.owner = s.owner AND "
      "p.id = s.id AND p.snap_id = s.snap_id AND part = 1) FROM sessions s;"
      "DROP TABLE snap_pieces;"
      "CREATE TRIGGER sessions_drop AFTER DELETE ON sessions BEGIN DELETE FROM "
      "snapshots WHERE owner = old.owner AND id = old.id; DELETE FROM deltas "
      "WHERE owner = old.owner AND id = old.id; END;"
      "PRAGMA user_version = 3; COMMIT;",
      3, DELTAS_HAVE_ROWIDS);
}

/* Schema 4: the snapshot in pieces as now, the deltas WITHOUT ROWID (migrated: a rowid table,
 * in which a new delta's place is found without reading earlier deltas back). */
static void test_sqlite_migrates_v4(void) {
  migrated_log_continues(
      "store_v4",
      "BEGIN;" DELTAS_WITHOUT_ROWID
      "CREATE TRIGGER sessions_drop AFTER DELETE ON sessions BEGIN DELETE FROM "
      "snap_pieces WHERE owner = old.owner AND id = old.id; DELETE FROM deltas "
      "WHERE owner = old.owner AND id = old.id; END;"
      "PRAGMA user_version = 4; COMMIT;",
      4, DELTAS_HAVE_ROWIDS);
}


/* ---------------------------------------------------------------------------------------- */
/* A VFS over the default one that can fail the WAL's next fsync (SQLITE_IOERR_FSYNC) or its
 * next write (SQLITE_FULL), as a failing or full disk does. */

static sqlite3_vfs *REAL_VFS, SHIM_VFS;
static int SHIM_FAIL_SYNC, SHIM_FAIL_WRITE; /* armed: the WAL's next xSync / xWrite fails */
typedef struct shim_file {
  sqlite3_file base;
  int wal;
  sqlite3_file *real; /* follows this struct */
} shim_file;
#define REAL(f) (((shim_file *)(f))->real)
static int sh_close(sqlite3_file *f) { return REAL(f)->pMethods->xClose(REAL(f)); }
static int sh_read(sqlite3_file *f, void *p, int n, sqlite3_int64 o) {
  return REAL(f)->pMethods->xRead(REAL(f), p, n, o);
}
static int sh_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 o) {
  if (((shim_file *)f)->wal && __atomic_exchange_n(&SHIM_FAIL_WRITE, 0, __ATOMIC_SEQ_CST))
    return SQLITE_FULL;
  return REAL(f)->pMethods->xWrite(REAL(f), p, n, o);
}
static int sh_truncate(sqlite3_file *f, sqlite3_int64 n) {
  return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int sh_sync(sqlite3_file *f, int flags) {
  if (((shim_file *)f)->wal && __atomic_exchange_n(&SHIM_FAIL_SYNC, 0, __ATOMIC_SEQ_CST))
    return SQLITE_IOERR_FSYNC;
  return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int sh_size(sqlite3_file *f, sqlite3_int64 *n) {
  return REAL(f)->pMethods->xFileSize(REAL(f), n);
}
static int sh_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int sh_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int sh_check(sqlite3_file *f, int *r) {
  return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r);
}
static int sh_fctl(sqlite3_file *f, int op, void *a) {
  return REAL(f)->pMethods->xFileControl(REAL(f), op, a);
}
static int sh_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int sh_caps(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int sh_shmmap(sqlite3_file *f, int i, int sz, int ext, void volatile **pp) {
  return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, ext, pp);
}
static int sh_shmlock(sqlite3_file *f, int o, int n, int fl) {
  return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void sh_shmbarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int sh_shmunmap(sqlite3_file *f, int del) {
  return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static const sqlite3_io_methods SHIM_IO = {
    2,        sh_close, sh_read,   sh_write, sh_truncate,   sh_sync,     sh_size,
    sh_lock,  sh_unlock, sh_check, sh_fctl,  sh_sector,     sh_caps,     sh_shmmap,
    sh_shmlock, sh_shmbarrier, sh_shmunmap, NULL, NULL};
static int sh_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out) {
  (void)v;
  shim_file *sf = (shim_file *)f;
  sf->real = (sqlite3_file *)(sf + 1);
  sf->wal = (flags & SQLITE_OPEN_WAL) != 0;
  sf->base.pMethods = NULL;
  int rc = REAL_VFS->xOpen(REAL_VFS, name, sf->real, flags, out);
  if (sf->real->pMethods) sf->base.pMethods = &SHIM_IO;
  return rc;
}
static int sh_delete(sqlite3_vfs *v, const char *n, int sync) {
  (void)v;
  return REAL_VFS->xDelete(REAL_VFS, n, sync);
}
static int sh_access(sqlite3_vfs *v, const char *n, int fl, int *r) {
  (void)v;
  return REAL_VFS->xAccess(REAL_VFS, n, fl, r);
}
static int sh_full(sqlite3_vfs *v, const char *n, int k, char *o) {
  (void)v;
  return REAL_VFS->xFullPathname(REAL_VFS, n, k, o);
}

static void shim_install(void) {
  REAL_VFS = sqlite3_vfs_find(NULL);
  SHIM_VFS = *REAL_VFS;
  SHIM_VFS.iVersion = 1; /* only the methods above (and the real ones' version-1 rest) */
  SHIM_VFS.szOsFile = (int)sizeof(shim_file) + REAL_VFS->szOsFile;
  SHIM_VFS.zName = "xlserve-test-shim";
  SHIM_VFS.pNext = NULL;
  SHIM_VFS.xOpen = sh_open;
  SHIM_VFS.xDelete = sh_delete;
  SHIM_VFS.xAccess = sh_access;
  SHIM_VFS.xFullPathname = sh_full;
  sqlite3_vfs_register(&SHIM_VFS, 1);
}

static void shim_remove(void) {
  sqlite3_vfs_unregister(&SHIM_VFS);
  sqlite3_vfs_register(REAL_VFS, 1);
}

/* SQLite, durability turn, fsync on: a COMMIT whose fsync of the WAL fails has an unknown
 * outcome (its commit frame may be in the file: a reopen's recovery could keep it): the turn
 * is answered -3, never "not kept", and the session leaves RAM; the store's row is then
 * whole and a next turn commits on it. A COMMIT that finds no room (SQLITE_FULL) wrote no
 * commit frame: the turn is not kept (-1) and the store's row is the previous turn's. */
static void test_sqlite_commit_outcome_unknown(void) {
  shim_install();
  char err[512];
  store_backend *b = store_sqlite_open(tl_tmpdir("store_unknown"), 1, err, sizeof err);
  CHECK(b != NULL);
  store_opts o = {.async_commit_ms = 1000, .max_batch = 64};
  session_store *st = store_new(b, &o, notify, NULL);
  CHECK(store_start(st, M, err, sizeof err) == 0);
  session_table *t = st_new(M, (size_t)1 << 30, 0, 100, st, DUR_TURN);
  uint8_t owner[32];
  memset(owner, 8, 32);
  xl_error xe;
  session *s = st_create(t, "u1", owner, &xe);
  CHECK(committed_turn(st, t, s, 20, 1) == 0 && store_equals_ram(st, s));
  uint64_t unknown0 = atomic_load(&g_metrics.store_outcome_unknown);
  SHIM_FAIL_SYNC = 1;
  CHECK(committed_turn_rec(st, t, s, 9, 2, "u1/k2") == -3);
  CHECK(SHIM_FAIL_SYNC == 0); /* the failure did come from the WAL's fsync */
  CHECK(atomic_load(&g_metrics.store_outcome_unknown) == unknown0 + 1);
  CHECK(st_lookup(t, "u1", owner, &s) == ST_MISSING); /* dropped: re-read at its next use */
  CHECK(restore(st, t, "u1", owner, &s) == ST_FOUND && s);
  if (s) {
    uint64_t fed = xl_state_tokens_fed(s->state);
    CHECK(fed == 20 || fed == 29); /* either outcome, whole */
    /* the turn's record is in its commit: there if and only if the turn is */
    CHECK(has_record(st, owner, "u1/k2") == (fed == 29));
    CHECK(committed_turn(st, t, s, 5, 3) == 0 && store_equals_ram(st, s));
    fed = xl_state_tokens_fed(s->state);
    SHIM_FAIL_WRITE = 1;
    CHECK(committed_turn_rec(st, t, s, 7, 4, "u1/k4") == -1); /* SQLITE_FULL: not kept */
    CHECK(SHIM_FAIL_WRITE == 0);
    CHECK(!has_record(st, owner, "u1/k4")); /* nor its record */
    CHECK(atomic_load(&g_metrics.store_outcome_unknown) == unknown0 + 1);
    CHECK(restore(st, t, "u1", owner, &s) == ST_FOUND && s &&
          xl_state_tokens_fed(s->state) == fed);
    if (s) CHECK(committed_turn(st, t, s, 3, 5) == 0 && store_equals_ram(st, s));
  }
  end_store(st, b, t);
  shim_remove();
}

int main(void) {
  metrics_init();
  const char *dir = tl_tmpdir("server_store");
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  spec.mem_len = 24;
  if (tl_write_model(dir, &spec)) return 1;
  const char *dir2 = tl_tmpdir("server_store2");
  spec.seed = 9;
  if (tl_write_model(dir2, &spec)) return 1;
  xl_error err;
  xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
  if (xl_model_load(dir, &lo, &M, &err) != XL_OK || xl_model_load(dir2, &lo, &M2, &err) != XL_OK ||
      xl_workspace_new(M, &WS, &err) != XL_OK) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  RUN(test_codec_round_trip);
  RUN(test_codec_refuses_damage);
  RUN(test_sqlite_backend);
  RUN(test_sqlite_records);
  RUN(test_front_records);
  RUN(test_wal_bounded_without_the_checkpoint_thread);
  RUN(test_table_evicts_saves_and_restores);
  RUN(test_async_saves_wait_bounded);
  RUN(test_second_backend_and_failed_commits);
  RUN(test_ids_are_per_owner);
  RUN(test_fork_keeps_its_parent);
  RUN(test_keys_share_the_budget);
  RUN(test_stateless_memory_is_reused);
  RUN(test_sqlite_migrates_v1);
  RUN(test_sqlite_migrates_v3);
  RUN(test_sqlite_migrates_v4);
  RUN(test_deltas_rebuild_and_compact);
  RUN(test_turns_commit_during_a_compaction);
  RUN(test_writes_held_back_behind_a_lagging_compaction);
  RUN(test_a_compaction_swap_only_repoints);
  RUN(test_pieces_left_by_a_crash_are_collected);
  RUN(test_sqlite_commit_outcome_unknown);
  xl_workspace_free(WS);
  xl_model_free(M);
  xl_model_free(M2);
  return tl_summary();
}
