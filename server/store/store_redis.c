/*
 * store_redis.c: the session store's Redis backend (hiredis), for several daemons sharing one
 * store. Owns the key layout, the Lua scripts that make each write one atomic compare-and-set,
 * and the connection's life: lazy connect, AUTH, SELECT, script loading, and reconnection with
 * exponential backoff (0.1 s doubling to 2 s) while Redis is unreachable (g_metrics.store_down
 * says so meanwhile).
 *
 * Keys (P = redis_prefix, K = the owner's 64 hex digits ':' the id; the braces are a Redis
 * Cluster hash tag, so a session's two keys share one slot and one script may touch both):
 *   P:s:{K}  hash: the row (fp, created, last_used, tokens, turns, mode, messages, positions,
 *            seq, snap_seq, snap_id, snap_bytes, delta_bytes, n_deltas) and its snapshot
 *            (meta, state)
 *   P:d:{K}  list: the deltas after the snapshot, in seq order; an entry is u64 seq LE, u32
 *            meta bytes LE, meta, delta
 *   P:lru    sorted set: member K, score last_used (expire, count)
 *   P:o:OWNERHEX  sorted set: member id, score last_used (list)
 * The two indexes live in other slots, so they are written by separate commands in the same
 * round trip (pipelined), not inside the scripts: they serve listing, expiry and the gauge; the
 * hash and the list are authoritative.
 *
 * Every write is one script, atomic on the server: put (optionally conditional on the row's
 * seq), append (conditional on seq = the delta's - 1), compact (conditional on snap_id). So a
 * batch is not one transaction: begin does nothing, commit WAITs for replicas when configured.
 * Thread: a connection belongs to the store thread that made it; open/destroy on the main thread.
 */
#include "store_redis.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "buf.h"
#include "metrics.h"
#include "util.h"
#include "xlog.h"

typedef struct redis_cfg {
  char host[256];
  int port;
  char sock[512]; /* a unix socket path, or "" */
  int db;
  char *password;
  char prefix[128];
  int wait_replicas, wait_timeout_ms;
} redis_cfg;

enum { SCR_GET, SCR_PUT, SCR_APPEND, SCR_COMPACT, SCR_DEL, SCR_EXPIRE, N_SCRIPTS };

/* KEYS[1] the row hash, KEYS[2] the delta list */
static const char *const SCRIPTS[N_SCRIPTS] = {
    /* get: the row and its deltas, read atomically; 0 when absent */
    "local h = redis.call('HGETALL', KEYS[1])\n"
    "if #h == 0 then return 0 end\n"
    "return {h, redis.call('LRANGE', KEYS[2], 0, -1)}\n",
    /* put: ARGV cas, expected seq, seq, record ms, record value, then field/value pairs; -1
     * conflict, else 1 if it existed. Without cas (an import) the version still moves past
     * the stored one, so that another replica's RAM copy of the replaced session is never
     * taken for current. KEYS[3], when given: a record written with the row (PX record ms). */
    "local cur = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')\n"
    "local seq = tonumber(ARGV[3])\n"
    "if ARGV[1] == '1' then\n"
    "  if cur ~= tonumber(ARGV[2]) then return -1 end\n"
    "elseif cur >= seq then seq = cur + 1 end\n"
    "local existed = redis.call('EXISTS', KEYS[1])\n"
    "redis.call('DEL', KEYS[1], KEYS[2])\n"
    "redis.call('HSET', KEYS[1], 'seq', seq, 'snap_seq', seq, unpack(ARGV, 6))\n"
    "if #KEYS > 2 then redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[4]) end\n"
    "return existed\n",
    /* append: ARGV expected seq, new seq, entry, entry's counted bytes, record ms, record
     * value, field/value pairs; 0 conflict, else {snap_bytes, delta_bytes, n_deltas}.
     * KEYS[3], when given: a record written with the delta */
    "local cur = redis.call('HGET', KEYS[1], 'seq')\n"
    "if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then return 0 end\n"
    "redis.call('RPUSH', KEYS[2], ARGV[3])\n"
    "redis.call('HSET', KEYS[1], 'seq', ARGV[2], unpack(ARGV, 7))\n"
    "if #KEYS > 2 then redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[5]) end\n"
    "local db = redis.call('HINCRBY', KEYS[1], 'delta_bytes', ARGV[4])\n"
    "local nd = redis.call('HINCRBY', KEYS[1], 'n_deltas', 1)\n"
    "return {tonumber(redis.call('HGET', KEYS[1], 'snap_bytes')), db, nd}\n",
    /* compact: ARGV old snap_id, seq, meta, state, new snap_id, snap_bytes; 1 stale, 0 done */
    "if redis.call('HGET', KEYS[1], 'snap_id') ~= ARGV[1] then return 1 end\n"
    "local target = tonumber(ARGV[2])\n"
    "if tonumber(redis.call('HGET', KEYS[1], 'seq')) < target then return 1 end\n"
    "local old = tonumber(redis.call('HGET', KEYS[1], 'snap_seq'))\n"
    "redis.call('LTRIM', KEYS[2], target - old, -1)\n"
    "local rest = redis.call('LRANGE', KEYS[2], 0, -1)\n"
    "local bytes = 0\n"
    "for i = 1, #rest do bytes = bytes + #rest[i] - 12 end\n"
    "redis.call('HSET', KEYS[1], 'meta', ARGV[3], 'state', ARGV[4], 'snap_seq', ARGV[2],\n"
    "  'snap_id', ARGV[5], 'snap_bytes', ARGV[6], 'delta_bytes', bytes, 'n_deltas', #rest)\n"
    "return 0\n",
    /* del: 1 if the row existed */
    "local e = redis.call('EXISTS', KEYS[1])\n"
    "redis.call('DEL', KEYS[1], KEYS[2])\n"
    "return e\n",
    /* expire one: ARGV before; 1 deleted, 0 used since (ARGV[2] gets its last_used), -1 absent */
    "local lu = redis.call('HGET', KEYS[1], 'last_used')\n"
    "if not lu then return -1 end\n"
    "if tonumber(lu) >= tonumber(ARGV[1]) then return 0 end\n"
    "redis.call('DEL', KEYS[1], KEYS[2])\n"
    "return 1\n",
};

struct store_conn {
  redis_cfg *cfg;
  redisContext *rc;
  char sha[N_SCRIPTS][41];
  double next_try; /* monotonic: no connection attempt before */
  double backoff;
  redisReply *held; /* get's reply, lent until release */
  redisReply *rec_held; /* rec_get's reply, lent until the next call */
  size_t next_delta;
  int logged_down;
  int lost; /* the last command was sent and its reply lost (the connection failed meanwhile) */
  /* index updates that failed after their row was written, redone after the next batch */
  struct pending_index *pending;
  int n_pending;
};

/* ------------------------------------------------------------------------------------------ */
/* options */

static int parse_url(redis_cfg *c, const char *url, char *err, size_t cap) {
  c->port = 6379;
  c->db = 0;
  if (!strncmp(url, "unix:", 5) || url[0] == '/') {
    const char *p = url[0] == '/' ? url : url + 5;
    if (!strncmp(p, "//", 2)) p += 2; /* unix:///path */
    const char *q = strchr(p, '?');
    size_t n = q ? (size_t)(q - p) : strlen(p);
    if (!n || n >= sizeof c->sock || p[0] != '/') {
      snprintf(err, cap, "option redis_url: '%s': a unix socket needs an absolute path", url);
      return -1;
    }
    memcpy(c->sock, p, n);
    c->sock[n] = 0;
    if (q) {
      char *end;
      if (strncmp(q, "?db=", 4) || (c->db = (int)strtol(q + 4, &end, 10)) < 0 || *end ||
          end == q + 4) {
        snprintf(err, cap, "option redis_url: '%s': the only parameter is ?db=N", url);
        return -1;
      }
    }
    return 0;
  }
  if (strncmp(url, "redis://", 8)) {
    snprintf(err, cap, "option redis_url: '%s' is neither redis://HOST:PORT/DB nor unix:/PATH "
             "(TLS, rediss://, is not supported by this build's hiredis)", url);
    return -1;
  }
  const char *p = url + 8;
  const char *at = strrchr(p, '@');
  if (at) { /* [user]:password@ */
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (!colon) {
      snprintf(err, cap, "option redis_url: the part before '@' must be [USER]:PASSWORD");
      return -1;
    }
    if (colon != p) {
      snprintf(err, cap, "option redis_url: Redis ACL users are not supported; give only "
               ":PASSWORD (or redis_password_file)");
      return -1;
    }
    free(c->password);
    c->password = xstrndup(colon + 1, (size_t)(at - colon - 1));
    p = at + 1;
  }
  const char *slash = strchr(p, '/');
  size_t hl = slash ? (size_t)(slash - p) : strlen(p);
  const char *colon = memchr(p, ':', hl);
  size_t host_len = colon ? (size_t)(colon - p) : hl;
  if (!host_len || host_len >= sizeof c->host) {
    snprintf(err, cap, "option redis_url: '%s': no host", url);
    return -1;
  }
  memcpy(c->host, p, host_len);
  c->host[host_len] = 0;
  if (colon) {
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (end != p + hl || end == colon + 1 || port < 1 || port > 65535) {
      snprintf(err, cap, "option redis_url: '%s': bad port", url);
      return -1;
    }
    c->port = (int)port;
  }
  if (slash && slash[1]) {
    char *end;
    long db = strtol(slash + 1, &end, 10);
    if (*end || db < 0 || db > 1000000) {
      snprintf(err, cap, "option redis_url: '%s': the path must be a database number", url);
      return -1;
    }
    c->db = (int)db;
  }
  return 0;
}

static int read_password(redis_cfg *c, const char *path, char *err, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, cap, "option redis_password_file: %s: cannot open it", path);
    return -1;
  }
  char line[1024];
  if (!fgets(line, sizeof line, f)) line[0] = 0;
  fclose(f);
  line[strcspn(line, "\r\n")] = 0;
  if (!*line) {
    snprintf(err, cap, "option redis_password_file: %s: the first line is empty", path);
    return -1;
  }
  free(c->password);
  c->password = xstrdup(line);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* connection */

static void drop_conn(store_conn *c, const char *why) {
  if (c->held) {
    freeReplyObject(c->held);
    c->held = NULL;
  }
  if (c->rc) {
    redisFree(c->rc);
    c->rc = NULL;
  }
  c->backoff = c->backoff > 0 ? c->backoff * 2 : 0.1;
  if (c->backoff > 2) c->backoff = 2;
  c->next_try = now_mono() + c->backoff;
  if (!c->logged_down) {
    xlog_msg("error", "store_unavailable", "Redis is unreachable (%s); retrying with backoff",
             why);
    c->logged_down = 1;
  }
  atomic_store(&g_metrics.store_down, 1);
}

/* A command's reply, or NULL with err (a broken connection is dropped). */
static redisReply *command(store_conn *c, int argc, const char **argv, const size_t *lens,
                           char *err, size_t cap) {
  redisReply *r = redisCommandArgv(c->rc, argc, argv, lens);
  if (!r) {
    snprintf(err, cap, "Redis: %s", c->rc->errstr[0] ? c->rc->errstr : "connection lost");
    drop_conn(c, err);
    c->lost = 1;
    return NULL;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(err, cap, "Redis: %.*s", (int)r->len, r->str);
    freeReplyObject(r);
    return NULL;
  }
  return r;
}

static redisReply *command1(store_conn *c, char *err, size_t cap, int argc, ...) {
  const char *argv[8];
  size_t lens[8];
  va_list ap;
  va_start(ap, argc);
  for (int i = 0; i < argc && i < 8; i++) {
    argv[i] = va_arg(ap, const char *);
    lens[i] = strlen(argv[i]);
  }
  va_end(ap);
  return command(c, argc, argv, lens, err, cap);
}

static int try_connect(store_conn *c, char *err, size_t cap) {
  redis_cfg *g = c->cfg;
  struct timeval tv = {1, 0};
  c->rc = *g->sock ? redisConnectUnixWithTimeout(g->sock, tv)
                   : redisConnectWithTimeout(g->host, g->port, tv);
  if (!c->rc || c->rc->err) {
    snprintf(err, cap, "Redis at %s%s%.0d: %s", *g->sock ? g->sock : g->host, *g->sock ? "" : ":",
             *g->sock ? 0 : g->port, c->rc ? c->rc->errstr : "out of memory");
    return -1;
  }
  struct timeval cmd_tv = {10, 0}; /* a command that takes longer: the connection is dropped */
  redisSetTimeout(c->rc, cmd_tv);
  redisReply *r;
  if (g->password) {
    if (!(r = command1(c, err, cap, 2, "AUTH", g->password))) return -1;
    freeReplyObject(r);
  }
  if (g->db) {
    char db[16];
    snprintf(db, sizeof db, "%d", g->db);
    if (!(r = command1(c, err, cap, 2, "SELECT", db))) return -1;
    freeReplyObject(r);
  }
  for (int i = 0; i < N_SCRIPTS; i++) {
    if (!(r = command1(c, err, cap, 3, "SCRIPT", "LOAD", SCRIPTS[i]))) return -1;
    snprintf(c->sha[i], sizeof c->sha[i], "%.*s", (int)r->len, r->str);
    freeReplyObject(r);
  }
  return 0;
}

/* 0 with a live connection, or -1 (err says why; no attempt before the backoff is over). */
static int ensure(store_conn *c, char *err, size_t cap) {
  if (c->rc) return 0;
  double now = now_mono();
  if (now < c->next_try) {
    snprintf(err, cap, "Redis is unreachable; the next attempt is in %.1f s",
             c->next_try - now);
    return -1;
  }
  if (try_connect(c, err, cap)) {
    if (c->rc) { /* connected but refused (AUTH, SELECT): keep the reason */
      char why[300];
      snprintf(why, sizeof why, "%s", err);
      drop_conn(c, why);
    } else {
      drop_conn(c, err);
    }
    return -1;
  }
  c->backoff = 0;
  if (c->logged_down) xlog_msg("info", "store_reconnected", "Redis is reachable again");
  c->logged_down = 0;
  atomic_store(&g_metrics.store_down, 0);
  return 0;
}

static store_conn *rconnect(void *cfg, char *err, size_t cap) {
  store_conn *c = xcalloc(1, sizeof *c);
  c->cfg = cfg;
  if (ensure(c, err, cap)) /* not fatal: the daemon starts degraded and keeps trying */
    xlog_msg("warn", "store_unavailable", "%s (the daemon starts; requests that need the "
             "store get 503 until Redis answers)", err);
  return c;
}

static void rdisconnect(store_conn *c) {
  if (!c) return;
  if (c->held) freeReplyObject(c->held);
  if (c->rec_held) freeReplyObject(c->rec_held);
  if (c->rc) redisFree(c->rc);
  free(c->pending);
  free(c);
}

/* A connection Redis closed while it was idle (a restart, a timeout, a proxy) reads as ready:
 * nothing is due on it between commands. It is replaced before a write is sent on it, so a
 * write's lost reply means the write did reach a live connection. */
static void drop_if_stale(store_conn *c) {
  if (!c->rc || c->rc->fd < 0) return;
  struct pollfd p = {.fd = c->rc->fd, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0) return;
  redisFree(c->rc);
  c->rc = NULL;
  c->next_try = 0; /* reconnect at once (ensure), no backoff: it was up a moment ago */
}

/* ------------------------------------------------------------------------------------------ */
/* arguments */

#define MAX_ARGS 48
typedef struct args {
  int n;
  const char *v[MAX_ARGS];
  size_t len[MAX_ARGS];
  char num[MAX_ARGS][32]; /* formatted numbers */
} args;

static void arg_bin(args *a, const void *p, size_t n) {
  a->v[a->n] = n ? p : "";
  a->len[a->n++] = n;
}
static void arg_str(args *a, const char *s) { arg_bin(a, s, strlen(s)); }
static void arg_u64(args *a, uint64_t v) {
  int k = snprintf(a->num[a->n], sizeof a->num[0], "%llu", (unsigned long long)v);
  a->v[a->n] = a->num[a->n];
  a->len[a->n++] = (size_t)k;
}
static void arg_f64(args *a, double v) {
  int k = snprintf(a->num[a->n], sizeof a->num[0], "%.17g", v);
  a->v[a->n] = a->num[a->n];
  a->len[a->n++] = (size_t)k;
}

typedef struct keys {
  char row[512], deltas[512], member[200], owner_set[256];
  char rec[STORE_RKEY_CAP + 256]; /* a record written with the row ("": none) */
} keys;

/* A record's key: P:r:NS:{OWNERHEX:K1}REST (K1: the key up to its first '/'). */
static void record_key(const redis_cfg *g, const store_record *r, char *out, size_t cap) {
  char hex[65];
  hex_encode(r->owner, 32, hex);
  const char *slash = strchr(r->key, '/');
  int k1 = slash ? (int)(slash - r->key) : (int)strlen(r->key);
  snprintf(out, cap, "%s:r:%s:{%s:%.*s}%s", g->prefix, r->ns, hex, k1, r->key,
           slash ? slash : "");
}

/* The record's PX: milliseconds until it expires (at least 1). */
static uint64_t record_px(const store_record *r) {
  double ms = (r->expires - now_wall()) * 1000.0;
  return ms < 1 ? 1 : (uint64_t)ms;
}

static void make_keys(const redis_cfg *g, const char *id, const uint8_t owner[32], keys *k) {
  char hex[65];
  hex_encode(owner, 32, hex);
  snprintf(k->member, sizeof k->member, "%s:%s", hex, id);
  snprintf(k->row, sizeof k->row, "%s:s:{%s}", g->prefix, k->member);
  snprintf(k->deltas, sizeof k->deltas, "%s:d:{%s}", g->prefix, k->member);
  snprintf(k->owner_set, sizeof k->owner_set, "%s:o:%s", g->prefix, hex);
  k->rec[0] = 0;
}

/* EVALSHA script with the keys of (owner, id) and the arguments in a (after them). */
static redisReply *run_script(store_conn *c, int script, const keys *k, const args *a, char *err,
                              size_t cap) {
  c->lost = 0;
  drop_if_stale(c);
  if (ensure(c, err, cap)) return NULL;
  const char *argv[MAX_ARGS + 6];
  size_t lens[MAX_ARGS + 6];
  argv[0] = "EVALSHA", lens[0] = 7;
  argv[1] = c->sha[script], lens[1] = strlen(c->sha[script]);
  argv[2] = k->rec[0] ? "3" : "2", lens[2] = 1;
  argv[3] = k->row, lens[3] = strlen(k->row);
  argv[4] = k->deltas, lens[4] = strlen(k->deltas);
  int n = 5;
  if (k->rec[0]) argv[n] = k->rec, lens[n++] = strlen(k->rec);
  for (int i = 0; a && i < a->n; i++) argv[n] = a->v[i], lens[n++] = a->len[i];
  redisReply *r = command(c, n, argv, lens, err, cap);
  if (!r && c->rc && !strncmp(err, "Redis: NOSCRIPT", 15)) { /* SCRIPT FLUSH, a failover */
    argv[0] = "EVAL", lens[0] = 4;
    argv[1] = SCRIPTS[script], lens[1] = strlen(SCRIPTS[script]);
    r = command(c, n, argv, lens, err, cap);
  }
  return r;
}

/* Reads and drops the replies of n pipelined commands; -1 (the connection dropped) when the
 * connection fails before all came. */
static int discard_replies(store_conn *c, int n, char *err, size_t cap) {
  for (int i = 0; i < n; i++) {
    redisReply *r = NULL;
    if (redisGetReply(c->rc, (void **)&r) != REDIS_OK || !r) {
      snprintf(err, cap, "Redis: %s", c->rc->errstr);
      drop_conn(c, err);
      return -1;
    }
    freeReplyObject(r);
  }
  return 0;
}

/* An index update to redo: ZADD (remove 0) or ZREM of (owner, id) in P:lru and P:o:OWNER. */
typedef struct pending_index {
  keys k;
  char id[129];
  double when;
  int remove;
} pending_index;
#define MAX_PENDING 256

static int index_cmds(store_conn *c, const keys *k, const char *id, double when, int remove,
                      char *err, size_t cap);

/* The row of k was written but its index update failed (the connection is dropped): not a
 * failure of the write. Counted, logged, and kept to be redone after the next batch (and by
 * the row's next write anyway). */
static void index_failed(store_conn *c, const keys *k, const char *id, double when, int remove,
                         const char *why) {
  ctr_add(&g_metrics.store_index_errors, 1);
  xlog_msg("warn", "store_index_error", "session %s: its row is written but the index update "
           "failed (%s); it is redone once Redis answers", id, why);
  if (!c->pending) c->pending = xcalloc(MAX_PENDING, sizeof *c->pending);
  for (int i = 0; i < c->n_pending; i++)
    if (!strcmp(c->pending[i].k.member, k->member)) { /* the newer update replaces it */
      c->pending[i].when = when, c->pending[i].remove = remove;
      return;
    }
  if (c->n_pending == MAX_PENDING) { /* the oldest is dropped: its row's next write redoes it */
    memmove(c->pending, c->pending + 1, sizeof *c->pending * (MAX_PENDING - 1));
    c->n_pending--;
  }
  pending_index *p = &c->pending[c->n_pending++];
  p->k = *k;
  snprintf(p->id, sizeof p->id, "%s", id);
  p->when = when;
  p->remove = remove;
}

/* Redoes the pending index updates (after a batch, on a live connection). */
static void repair_indexes(store_conn *c) {
  char err[300];
  while (c->n_pending > 0 && c->rc) {
    pending_index *p = &c->pending[c->n_pending - 1];
    if (index_cmds(c, &p->k, p->id, p->when, p->remove, err, sizeof err)) return;
    c->n_pending--;
  }
}

/* Pipelined index updates after a write of k (last used: when). Best effort: a failure does
 * not fail the write (index_failed). */
static void forget_pending(store_conn *c, const keys *k) {
  for (int i = 0; i < c->n_pending; i++) /* an older update must not undo this one */
    if (!strcmp(c->pending[i].k.member, k->member)) {
      c->pending[i] = c->pending[--c->n_pending];
      return;
    }
}

static int touch_indexes(store_conn *c, const keys *k, const char *id, double when, char *err,
                         size_t cap) {
  char why[300];
  if (index_cmds(c, k, id, when, 0, why, sizeof why)) index_failed(c, k, id, when, 0, why);
  else forget_pending(c, k);
  (void)err, (void)cap;
  return 0;
}

static int zadd_indexes(store_conn *c, const keys *k, const char *id, double when, char *err,
                        size_t cap) {
  char score[32];
  snprintf(score, sizeof score, "%.17g", when);
  const char *a1[] = {"ZADD", "", score, k->member};
  const char *a2[] = {"ZADD", k->owner_set, score, id};
  char lru[160];
  snprintf(lru, sizeof lru, "%s:lru", c->cfg->prefix);
  a1[1] = lru;
  size_t l1[] = {4, strlen(lru), strlen(score), strlen(k->member)};
  size_t l2[] = {4, strlen(k->owner_set), strlen(score), strlen(id)};
  redisAppendCommandArgv(c->rc, 4, a1, l1);
  redisAppendCommandArgv(c->rc, 4, a2, l2);
  return discard_replies(c, 2, err, cap);
}

static void row_fields(args *a, const store_row *row) {
  arg_str(a, "fp"), arg_u64(a, row->fingerprint);
  arg_str(a, "created"), arg_f64(a, row->created);
  arg_str(a, "last_used"), arg_f64(a, row->last_used);
  arg_str(a, "tokens"), arg_u64(a, row->tokens);
  arg_str(a, "turns"), arg_u64(a, row->turns);
  arg_str(a, "mode"), arg_u64(a, (uint64_t)row->mode);
  arg_str(a, "messages"), arg_u64(a, (uint64_t)row->messages);
  arg_str(a, "positions"), arg_u64(a, (uint64_t)row->positions);
}

/* ------------------------------------------------------------------------------------------ */
/* reading replies */

static uint64_t reply_u64(const redisReply *r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return (uint64_t)r->integer;
  if (r->type == REDIS_REPLY_STRING) return strtoull(r->str, NULL, 10);
  return 0;
}

static double reply_f64(const redisReply *r) {
  return r && r->type == REDIS_REPLY_STRING ? strtod(r->str, NULL) : 0;
}

/* Fills row's metadata (and blobs, borrowed from h) from an HGETALL array. */
static void fill_row(store_row *row, const redisReply *h) {
  for (size_t i = 0; i + 1 < h->elements; i += 2) {
    const char *f = h->element[i]->str;
    const redisReply *v = h->element[i + 1];
    if (!strcmp(f, "fp")) row->fingerprint = reply_u64(v);
    else if (!strcmp(f, "created")) row->created = reply_f64(v);
    else if (!strcmp(f, "last_used")) row->last_used = reply_f64(v);
    else if (!strcmp(f, "tokens")) row->tokens = reply_u64(v);
    else if (!strcmp(f, "turns")) row->turns = reply_u64(v);
    else if (!strcmp(f, "mode")) row->mode = (int)reply_u64(v);
    else if (!strcmp(f, "messages")) row->messages = (int)reply_u64(v);
    else if (!strcmp(f, "positions")) row->positions = (int)reply_u64(v);
    else if (!strcmp(f, "seq")) row->seq = reply_u64(v);
    else if (!strcmp(f, "snap_seq")) row->snap_seq = reply_u64(v);
    else if (!strcmp(f, "snap_id")) row->snap_id = reply_u64(v);
    else if (!strcmp(f, "snap_bytes")) row->snap_bytes = reply_u64(v);
    else if (!strcmp(f, "delta_bytes")) row->delta_bytes = reply_u64(v);
    else if (!strcmp(f, "n_deltas")) row->n_deltas = (int)reply_u64(v);
    else if (!strcmp(f, "meta")) row->meta = (const uint8_t *)v->str, row->meta_len = v->len;
    else if (!strcmp(f, "state")) row->state = (const uint8_t *)v->str, row->state_len = v->len;
  }
}

/* 64 hex digits -> 32 bytes; -1 on a non-hex digit */
static int owner_from_hex(const char *h, uint8_t out[32]) {
  for (int i = 0; i < 64; i++) {
    char ch = h[i];
    int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (v < 0) return -1;
    if (i % 2 == 0) out[i / 2] = (uint8_t)(v << 4);
    else out[i / 2] |= (uint8_t)v;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* ops */

static int rbegin(store_conn *c, char *err, size_t cap) {
  (void)c, (void)err, (void)cap;
  return 0; /* each write is atomic on its own (a script) */
}

static int rcommit(store_conn *c, char *err, size_t cap) {
  redis_cfg *g = c->cfg;
  if (c->n_pending) {
    char why[300];
    if (!ensure(c, why, sizeof why)) repair_indexes(c);
  }
  if (g->wait_replicas <= 0 || !c->rc) return 0;
  char n[16], ms[16];
  snprintf(n, sizeof n, "%d", g->wait_replicas);
  snprintf(ms, sizeof ms, "%d", g->wait_timeout_ms);
  redisReply *r = command1(c, err, cap, 3, "WAIT", n, ms);
  if (!r) return 0; /* the writes stand on the primary: not undone (the error is logged) */
  if (r->type == REDIS_REPLY_INTEGER && r->integer < g->wait_replicas) {
    ctr_add(&g_metrics.store_wait_shortfalls, 1);
    xlog_msg("warn", "store_wait_shortfall", "WAIT: %lld of %d Redis replicas acknowledged the "
             "commit within %d ms", (long long)r->integer, g->wait_replicas, g->wait_timeout_ms);
  }
  freeReplyObject(r);
  return 0;
}

static void rrollback(store_conn *c) { (void)c; }

static int rget(store_conn *c, const char *id, const uint8_t owner[32], store_row *row, char *err,
                size_t cap) {
  keys k;
  make_keys(c->cfg, id, owner, &k);
  if (c->held) freeReplyObject(c->held), c->held = NULL;
  redisReply *r = run_script(c, SCR_GET, &k, NULL, err, cap);
  if (!r) return -1;
  if (r->type == REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return 1;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_ARRAY || r->element[1]->type != REDIS_REPLY_ARRAY) {
    snprintf(err, cap, "Redis: an unexpected reply to the session read");
    freeReplyObject(r);
    return -1;
  }
  snprintf(row->id, sizeof row->id, "%s", id);
  memcpy(row->owner, owner, 32);
  fill_row(row, r->element[0]);
  if (!row->meta || !row->state) {
    snprintf(err, cap, "session %s: the stored row has no snapshot", id);
    freeReplyObject(r);
    return -1;
  }
  c->held = r;
  c->next_delta = 0;
  return 0;
}

static int rnext_delta(store_conn *c, store_delta *d, char *err, size_t cap) {
  if (!c->held) return 1;
  const redisReply *list = c->held->element[1];
  if (c->next_delta >= list->elements) return 1;
  const redisReply *e = list->element[c->next_delta++];
  const uint8_t *p = (const uint8_t *)e->str;
  uint32_t ml = 0;
  if (e->type != REDIS_REPLY_STRING || e->len < 12 ||
      (memcpy(&ml, p + 8, 4), (size_t)ml > e->len - 12)) {
    snprintf(err, cap, "session log: a stored delta is truncated");
    return -1;
  }
  uint64_t seq;
  memcpy(&seq, p, 8);
  d->seq = seq;
  d->meta = p + 12;
  d->meta_len = ml;
  d->delta = p + 12 + ml;
  d->delta_len = e->len - 12 - ml;
  return 0;
}

static void rrelease(store_conn *c) {
  if (c->held) freeReplyObject(c->held);
  c->held = NULL;
  if (c->rec_held) freeReplyObject(c->rec_held);
  c->rec_held = NULL;
}

/* A put's or an append's record arguments (ms, value), and its key as KEYS[3] when the row
 * carries one. */
static void record_args(store_conn *c, keys *k, args *a, const store_row *row) {
  if (!row->rec) {
    arg_u64(a, 0);
    arg_str(a, "");
    return;
  }
  record_key(c->cfg, row->rec, k->rec, sizeof k->rec);
  arg_u64(a, record_px(row->rec));
  arg_bin(a, row->rec->value, row->rec->len);
}

static int rput(store_conn *c, const store_row *row, int *created, char *err, size_t cap) {
  keys k;
  make_keys(c->cfg, row->id, row->owner, &k);
  args a = {0};
  arg_str(&a, row->cas ? "1" : "0");
  arg_u64(&a, row->seq - 1);
  arg_u64(&a, row->seq);
  record_args(c, &k, &a, row);
  row_fields(&a, row);
  arg_str(&a, "snap_id"), arg_u64(&a, row->snap_id);
  arg_str(&a, "snap_bytes"), arg_u64(&a, row->meta_len + row->state_len);
  arg_str(&a, "delta_bytes"), arg_u64(&a, 0);
  arg_str(&a, "n_deltas"), arg_u64(&a, 0);
  arg_str(&a, "meta"), arg_bin(&a, row->meta, row->meta_len);
  arg_str(&a, "state"), arg_bin(&a, row->state, row->state_len);
  redisReply *r = run_script(c, SCR_PUT, &k, &a, err, cap);
  if (!r) return c->lost ? -2 : -1; /* sent, reply lost: it may have been applied */
  long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  freeReplyObject(r);
  if (v < 0) return 1;
  *created = v == 0;
  if (touch_indexes(c, &k, row->id, row->last_used, err, cap)) return -1;
  return 0;
}

static int rappend(store_conn *c, const store_row *row, const store_delta *d, store_row *after,
                   char *err, size_t cap) {
  keys k;
  make_keys(c->cfg, row->id, row->owner, &k);
  size_t n = 12 + d->meta_len + d->delta_len;
  uint8_t *entry = xmalloc(n);
  uint64_t seq = d->seq;
  uint32_t ml = (uint32_t)d->meta_len;
  memcpy(entry, &seq, 8);
  memcpy(entry + 8, &ml, 4);
  memcpy(entry + 12, d->meta, d->meta_len);
  if (d->delta_len) memcpy(entry + 12 + d->meta_len, d->delta, d->delta_len);
  args a = {0};
  arg_u64(&a, d->seq - 1);
  arg_u64(&a, d->seq);
  arg_bin(&a, entry, n);
  arg_u64(&a, d->meta_len + d->delta_len);
  record_args(c, &k, &a, row);
  row_fields(&a, row);
  redisReply *r = run_script(c, SCR_APPEND, &k, &a, err, cap);
  free(entry);
  if (!r) return c->lost ? -2 : -1; /* sent, reply lost: it may have been applied */
  if (r->type == REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return 1;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
    freeReplyObject(r);
    snprintf(err, cap, "Redis: an unexpected reply to the delta's append");
    return -1;
  }
  if (after) {
    after->snap_bytes = reply_u64(r->element[0]);
    after->delta_bytes = reply_u64(r->element[1]);
    after->n_deltas = (int)reply_u64(r->element[2]);
  }
  freeReplyObject(r);
  if (touch_indexes(c, &k, row->id, row->last_used, err, cap)) return -1;
  return 0;
}

static int rcompact(store_conn *c, const store_row *row, uint64_t old_snap_id, char *err,
                    size_t cap) {
  keys k;
  make_keys(c->cfg, row->id, row->owner, &k);
  args a = {0};
  arg_u64(&a, old_snap_id);
  arg_u64(&a, row->seq);
  arg_bin(&a, row->meta, row->meta_len);
  arg_bin(&a, row->state, row->state_len);
  arg_u64(&a, row->snap_id);
  arg_u64(&a, row->meta_len + row->state_len);
  redisReply *r = run_script(c, SCR_COMPACT, &k, &a, err, cap);
  if (!r) return -1;
  int v = r->type == REDIS_REPLY_INTEGER && r->integer == 0 ? 0 : 1;
  freeReplyObject(r);
  return v;
}

static int rversion(store_conn *c, const char *id, const uint8_t owner[32], uint64_t *seq,
                    char *err, size_t cap) {
  keys k;
  make_keys(c->cfg, id, owner, &k);
  if (ensure(c, err, cap)) return -1;
  redisReply *r = command1(c, err, cap, 3, "HGET", k.row, "seq");
  if (!r) return -1;
  int absent = r->type == REDIS_REPLY_NIL;
  *seq = reply_u64(r);
  freeReplyObject(r);
  return absent ? 1 : 0;
}

static int zrem_indexes(store_conn *c, const keys *k, const char *id, char *err, size_t cap);

static int index_cmds(store_conn *c, const keys *k, const char *id, double when, int remove,
                      char *err, size_t cap) {
  if (!c->rc) {
    snprintf(err, cap, "Redis: not connected");
    return -1;
  }
  return remove ? zrem_indexes(c, k, id, err, cap) : zadd_indexes(c, k, id, when, err, cap);
}

/* Removes (owner, id) from the two indexes after its row is gone: best effort, as
 * touch_indexes. */
static int unindex(store_conn *c, const keys *k, const char *id, char *err, size_t cap) {
  char why[300];
  forget_pending(c, k); /* an older update of it must not index it again */
  if (index_cmds(c, k, id, 0, 1, why, sizeof why)) index_failed(c, k, id, 0, 1, why);
  (void)err, (void)cap;
  return 0;
}

/* Removes (owner, id) from the two indexes (pipelined). */
static int zrem_indexes(store_conn *c, const keys *k, const char *id, char *err, size_t cap) {
  char lru[160];
  snprintf(lru, sizeof lru, "%s:lru", c->cfg->prefix);
  const char *a1[] = {"ZREM", lru, k->member};
  const char *a2[] = {"ZREM", k->owner_set, id};
  size_t l1[] = {4, strlen(lru), strlen(k->member)};
  size_t l2[] = {4, strlen(k->owner_set), strlen(id)};
  redisAppendCommandArgv(c->rc, 3, a1, l1);
  redisAppendCommandArgv(c->rc, 3, a2, l2);
  return discard_replies(c, 2, err, cap);
}

static int rdel(store_conn *c, const char *id, const uint8_t owner[32], char *err, size_t cap) {
  keys k;
  make_keys(c->cfg, id, owner, &k);
  redisReply *r = run_script(c, SCR_DEL, &k, NULL, err, cap);
  if (!r) return -1;
  int existed = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  if (unindex(c, &k, id, err, cap)) return -1;
  return existed ? 0 : 1;
}

static int rexpire(store_conn *c, double before, int max, store_key *out, char *err, size_t cap) {
  if (ensure(c, err, cap)) return -1;
  char lru[160], hi[40], lim[16];
  snprintf(lru, sizeof lru, "%s:lru", c->cfg->prefix);
  snprintf(hi, sizeof hi, "(%.17g", before);
  snprintf(lim, sizeof lim, "%d", max);
  const char *argv[] = {"ZRANGEBYSCORE", lru, "-inf", hi, "LIMIT", "0", lim};
  size_t lens[7];
  for (int i = 0; i < 7; i++) lens[i] = strlen(argv[i]);
  redisReply *r = command(c, 7, argv, lens, err, cap);
  if (!r) return -1;
  int n = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const char *m = r->element[i]->str;
    const char *colon = strchr(m, ':');
    if (!colon || colon - m != 64 || strlen(colon + 1) >= sizeof out[0].id) continue;
    store_key key;
    if (owner_from_hex(m, key.owner)) continue;
    snprintf(key.id, sizeof key.id, "%s", colon + 1);
    keys k;
    make_keys(c->cfg, key.id, key.owner, &k);
    args a = {0};
    arg_f64(&a, before);
    redisReply *x = run_script(c, SCR_EXPIRE, &k, &a, err, cap);
    if (!x) {
      freeReplyObject(r);
      return -1;
    }
    long long v = x->type == REDIS_REPLY_INTEGER ? x->integer : 0;
    freeReplyObject(x);
    if (v == 0) continue; /* used since (another replica): its index entry is updated */
    if (unindex(c, &k, key.id, err, cap)) {
      freeReplyObject(r);
      return -1;
    }
    if (v == 1) out[n++] = key;
  }
  freeReplyObject(r);
  return n;
}

static int rlist(store_conn *c, const uint8_t owner[32], int max, store_row *out, char *err,
                 size_t cap) {
  if (ensure(c, err, cap)) return -1;
  keys k0;
  make_keys(c->cfg, "", owner, &k0);
  char stop[16];
  snprintf(stop, sizeof stop, "%d", max - 1);
  redisReply *ids = command1(c, err, cap, 4, "ZREVRANGE", k0.owner_set, "0", stop);
  if (!ids) return -1;
  static const char *const F[] = {"fp", "created", "last_used", "tokens", "turns",
                                  "mode", "messages", "positions", "seq"};
  for (size_t i = 0; i < ids->elements; i++) {
    keys k;
    make_keys(c->cfg, ids->element[i]->str, owner, &k);
    const char *argv[11] = {"HMGET", k.row};
    size_t lens[11] = {5, strlen(k.row)};
    for (int j = 0; j < 9; j++) argv[2 + j] = F[j], lens[2 + j] = strlen(F[j]);
    redisAppendCommandArgv(c->rc, 11, argv, lens);
  }
  int n = 0;
  for (size_t i = 0; i < ids->elements; i++) {
    redisReply *r = NULL;
    if (redisGetReply(c->rc, (void **)&r) != REDIS_OK || !r) {
      snprintf(err, cap, "Redis: %s", c->rc->errstr);
      freeReplyObject(ids);
      drop_conn(c, err);
      return -1;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 9 &&
        r->element[8]->type == REDIS_REPLY_STRING && n < max) {
      store_row *w = &out[n++];
      memset(w, 0, sizeof *w);
      snprintf(w->id, sizeof w->id, "%s", ids->element[i]->str);
      memcpy(w->owner, owner, 32);
      w->fingerprint = reply_u64(r->element[0]);
      w->created = reply_f64(r->element[1]);
      w->last_used = reply_f64(r->element[2]);
      w->tokens = reply_u64(r->element[3]);
      w->turns = reply_u64(r->element[4]);
      w->mode = (int)reply_u64(r->element[5]);
      w->messages = (int)reply_u64(r->element[6]);
      w->positions = (int)reply_u64(r->element[7]);
      w->seq = reply_u64(r->element[8]);
    }
    freeReplyObject(r);
  }
  freeReplyObject(ids);
  return n;
}

/* ---- keyed records: plain commands on the record's own key ---- */

static int rrec_put(store_conn *c, const store_record *r, char *err, size_t cap) {
  char key[STORE_RKEY_CAP + 256], px[32];
  record_key(c->cfg, r, key, sizeof key);
  snprintf(px, sizeof px, "%llu", (unsigned long long)record_px(r));
  c->lost = 0;
  drop_if_stale(c);
  if (ensure(c, err, cap)) return -1;
  const char *argv[] = {"SET", key, r->len ? (const char *)r->value : "", "PX", px};
  size_t lens[] = {3, strlen(key), r->len, 2, strlen(px)};
  int expired = r->expires <= now_wall(); /* already: as good as deleted */
  if (expired) argv[0] = "DEL", lens[0] = 3;
  redisReply *rep = command(c, expired ? 2 : 5, argv, lens, err, cap);
  if (!rep) return c->lost ? -2 : -1;
  freeReplyObject(rep);
  return 0;
}

static int rrec_get(store_conn *c, store_record *r, char *err, size_t cap) {
  char key[STORE_RKEY_CAP + 256];
  record_key(c->cfg, r, key, sizeof key);
  if (c->rec_held) freeReplyObject(c->rec_held), c->rec_held = NULL;
  drop_if_stale(c);
  if (ensure(c, err, cap)) return -1;
  /* the value and its remaining time, read together */
  redisReply *rep = command1(c, err, cap, 4, "EVAL",
                             "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}",
                             "1", key);
  if (!rep) return -1;
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
      rep->element[0]->type != REDIS_REPLY_STRING) {
    int absent = rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
                 rep->element[0]->type == REDIS_REPLY_NIL;
    freeReplyObject(rep);
    if (absent) return 1;
    snprintf(err, cap, "Redis: an unexpected reply to a record's read");
    return -1;
  }
  r->value = (const uint8_t *)rep->element[0]->str;
  r->len = rep->element[0]->len;
  long long ttl = rep->elements > 1 && rep->element[1]->type == REDIS_REPLY_INTEGER
                      ? rep->element[1]->integer
                      : -1;
  r->expires = now_wall() + (ttl > 0 ? (double)ttl / 1000.0 : 0);
  c->rec_held = rep;
  return 0;
}

static int rrec_del(store_conn *c, const store_record *r, char *err, size_t cap) {
  char key[STORE_RKEY_CAP + 256];
  record_key(c->cfg, r, key, sizeof key);
  drop_if_stale(c);
  if (ensure(c, err, cap)) return -1;
  redisReply *rep = command1(c, err, cap, 2, "DEL", key);
  if (!rep) return -1;
  int n = rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : 0;
  freeReplyObject(rep);
  return n > 0 ? 0 : 1;
}

static long rcount(store_conn *c) {
  char err[300];
  if (ensure(c, err, sizeof err)) return -1;
  char lru[160];
  snprintf(lru, sizeof lru, "%s:lru", c->cfg->prefix);
  redisReply *r = command1(c, err, sizeof err, 2, "ZCARD", lru);
  if (!r) return -1;
  long v = (long)r->integer;
  freeReplyObject(r);
  return v;
}

static void rdestroy(void *cfg) {
  redis_cfg *g = cfg;
  if (!g) return;
  if (g->password) {
    memset(g->password, 0, strlen(g->password));
    free(g->password);
  }
  free(g);
}

static const store_backend_ops REDIS_OPS = {
    .name = "redis",
    .shared = 1,
    .connect = rconnect,
    .disconnect = rdisconnect,
    .begin = rbegin,
    .commit = rcommit,
    .rollback = rrollback,
    .get = rget,
    .next_delta = rnext_delta,
    .release = rrelease,
    .put = rput,
    .append = rappend,
    .compact = rcompact,
    .version = rversion,
    .del = rdel,
    .expire = rexpire,
    .list = rlist,
    .count = rcount,
    .rec_put = rrec_put,
    .rec_get = rrec_get,
    .rec_del = rrec_del,
    .destroy = rdestroy,
};

store_backend *store_redis_open(const store_redis_opts *o, char *err, size_t cap) {
  redis_cfg *g = xcalloc(1, sizeof *g);
  if (parse_url(g, o->url, err, cap) ||
      (*o->password_file && read_password(g, o->password_file, err, cap))) {
    rdestroy(g);
    return NULL;
  }
  if (!*o->prefix || strlen(o->prefix) >= sizeof g->prefix || strpbrk(o->prefix, "{}")) {
    snprintf(err, cap, "option redis_prefix: '%s': 1-%zu characters without braces", o->prefix,
             sizeof g->prefix - 1);
    rdestroy(g);
    return NULL;
  }
  snprintf(g->prefix, sizeof g->prefix, "%s", o->prefix);
  g->wait_replicas = o->wait_replicas;
  g->wait_timeout_ms = o->wait_timeout_ms;
  store_backend *b = xcalloc(1, sizeof *b);
  b->ops = &REDIS_OPS;
  b->cfg = g;
  return b;
}

static const char *config_get(store_conn *c, const char *name, char *val, size_t vcap, char *err,
                              size_t cap) {
  redisReply *r = command1(c, err, cap, 3, "CONFIG", "GET", name);
  if (!r) return NULL;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
    snprintf(val, vcap, "%s", r->element[1]->str);
  else
    snprintf(val, vcap, "?");
  freeReplyObject(r);
  return val;
}

int store_redis_durability(store_backend *b, char *out, size_t cap) {
  store_conn c = {.cfg = b->cfg};
  char err[300], aof[32], fsync[32], save[128];
  if (try_connect(&c, err, sizeof err) ||
      !config_get(&c, "appendonly", aof, sizeof aof, err, sizeof err) ||
      !config_get(&c, "appendfsync", fsync, sizeof fsync, err, sizeof err) ||
      !config_get(&c, "save", save, sizeof save, err, sizeof err)) {
    snprintf(out, cap, "cannot ask Redis for its persistence settings: %s", err);
    if (c.rc) redisFree(c.rc);
    return -1;
  }
  redisFree(c.rc);
  redis_cfg *g = b->cfg;
  char wait[96] = "";
  if (g->wait_replicas > 0)
    snprintf(wait, sizeof wait, "; each commit also waits for %d replica(s) (WAIT, %d ms)",
             g->wait_replicas, g->wait_timeout_ms);
  if (!strcmp(aof, "yes") && !strcmp(fsync, "always"))
    snprintf(out, cap, "appendonly yes, appendfsync always: an acknowledged turn is on Redis's "
             "disk (survives a crash of Redis and a power loss)%s", wait);
  else if (!strcmp(aof, "yes"))
    snprintf(out, cap, "appendonly yes, appendfsync %s: an acknowledged turn survives a crash of "
             "Redis; a power loss may lose about the last second (set appendfsync always for "
             "none)%s", fsync, wait);
  else
    snprintf(out, cap, "appendonly no (save \"%s\"): an acknowledged turn lives in Redis's RAM "
             "only; a restart of Redis loses what came after its last snapshot (set "
             "appendonly yes, appendfsync always)%s", save, wait);
  return 0;
}
