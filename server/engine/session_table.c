/*
 * session_table.c: sessions in RAM with LRU, budget, TTL and tombstones, in front of the
 * durable store (see session_table.h). Thread: loop thread only (store callbacks arrive on
 * it through store_poll).
 */
#include "session_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dlist.h"
#include "metrics.h"
#include "session_codec.h"
#include "strmap.h"
#include "util.h"
#include "xlog.h"

#define SWEEP_BATCH 500 /* store rows expired per transaction */

/* Session ids are per API key: the table's maps are keyed by the owner (64 hex characters),
 * '/', and the id, so no lookup ever sees another key's session of the same id. */
#define TKEY_CAP (64 + 1 + 129)
static const char *tkey(char out[TKEY_CAP], const uint8_t owner[32], const char *id) {
  hex_encode(owner, 32, out);
  out[64] = '/';
  snprintf(out + 65, TKEY_CAP - 65, "%s", id);
  return out;
}

typedef struct tomb {
  struct tomb *prev, *next; /* FIFO: oldest at head */
  uint8_t owner[32];
  char id[129];
} tomb;

typedef struct waiter {
  struct waiter *next;
  st_wait_fn fn;
  void *ctx;
} waiter;

typedef struct pending_load {
  waiter *head, *tail;
} pending_load;

struct session_table {
  const xl_model *model;
  uint64_t fingerprint;
  strmap map;   /* (owner, id) -> session */
  strmap tombs; /* (owner, id) -> tomb */
  strmap loads; /* (owner, id) -> pending_load (a LOAD in the store's queue) */
  tomb *tomb_head, *tomb_tail;
  size_t n_tombs, max_tombs;
  session *lru_head, *lru_tail; /* head = most recently used */
  size_t ram, budget;
  double ttl;
  session_store *store; /* NULL: none (unit tests) */
  int persist;          /* the store has a backend */
  st_durability durability;
  int sweeping;         /* a store sweep is queued */
  prefix_cache *pc;     /* shares the budget, yields first (NULL: none) */
  /* per-key use of RAM (owner hex -> owner_use), for the fair share and the per-key limits */
  strmap owners;
  size_t max_per_key;   /* sessions one key may create while it holds that many (0: no limit) */
  size_t ram_per_key;   /* bytes one key's sessions may hold in RAM (0: only the fair share) */
  /* The memory of the last stateless request, emptied, for the next one (NULL: none): a new
   * memory is a mapping the kernel zeroes page by page (225 MiB at the wt103 shape), paid on
   * every stateless request without it. Held within the budget beside the sessions and the
   * prefix cache, and the first to go when they need room. */
  xl_state *spare; /* always a memory as session_new makes it: xl_model_state_bytes */
};

/* What one key's sessions hold in RAM. */
typedef struct owner_use {
  size_t ram, n;
} owner_use;

/* A store op's context: the table plus the caller's continuation. */
typedef struct call {
  session_table *t;
  session *s;
  void *fn;
  void *ctx;
  int replaced;
} call;

static call *call_new(session_table *t, session *s, void *fn, void *ctx) {
  call *c = xcalloc(1, sizeof *c);
  c->t = t, c->s = s, c->fn = fn, c->ctx = ctx;
  return c;
}

session_table *st_new(const xl_model *model, size_t ram_budget, double ttl, size_t max_tombstones,
                      session_store *store, st_durability durability) {
  session_table *t = xcalloc(1, sizeof *t);
  t->model = model;
  t->fingerprint = model ? xl_model_fingerprint(model) : 0;
  strmap_init(&t->map);
  strmap_init(&t->tombs);
  strmap_init(&t->loads);
  strmap_init(&t->owners);
  t->budget = ram_budget;
  t->ttl = ttl;
  t->max_tombs = max_tombstones;
  t->store = store;
  t->durability = durability;
  t->persist = store_persistent(store) && durability != DUR_OFF;
  return t;
}

int st_persistent(const session_table *t) { return t->persist; }

void st_set_prefix_cache(session_table *t, prefix_cache *pc) {
  t->pc = pc;
  prefix_cache_fit(pc, t->budget > t->ram ? t->budget - t->ram : 0);
}

static void drop_spare(session_table *t) {
  xl_state_free(t->spare);
  t->spare = NULL;
}

/* The budget's room beside the sessions and the prefix cache. */
static size_t room_left(session_table *t) {
  size_t used = t->ram + prefix_cache_bytes(t->pc);
  return t->budget > used ? t->budget - used : 0;
}

session *st_new_stateless(session_table *t, xl_error *err) {
  if (!t->spare) return session_new(t->model, err);
  session *s = session_new_on(t->spare);
  t->spare = NULL;
  return s;
}

void st_free_stateless(session_table *t, session *s) {
  xl_state *state = session_free_but_state(s);
  size_t bytes = state ? xl_state_bytes(state) : 0;
  /* only a memory as session_new makes it (the model's dtype and length) */
  if (!state || t->spare || xl_state_kv_dtype(state) != xl_model_kv_dtype(t->model) ||
      bytes != xl_model_state_bytes(t->model) || bytes > room_left(t)) {
    xl_state_free(state);
    return;
  }
  t->spare = state;
}

size_t st_spare_bytes(const session_table *t) {
  return t->spare ? xl_model_state_bytes(t->model) : 0;
}

void st_free(session_table *t) {
  if (!t) return;
  drop_spare(t);
  session *s = t->lru_head;
  while (s) {
    session *n = s->lru_next;
    session_free(s);
    s = n;
  }
  tomb *tb = t->tomb_head;
  while (tb) {
    tomb *n = tb->next;
    free(tb);
    tb = n;
  }
  size_t i = 0;
  for (strmap_entry *e = NULL; (e = strmap_next(&t->loads, &i, e));) {
    pending_load *pl = e->value;
    for (waiter *w = pl->head, *n; w; w = n) {
      n = w->next;
      free(w);
    }
    free(pl);
  }
  i = 0;
  for (strmap_entry *e = NULL; (e = strmap_next(&t->owners, &i, e));) free(e->value);
  strmap_free(&t->map);
  strmap_free(&t->tombs);
  strmap_free(&t->loads);
  strmap_free(&t->owners);
  free(t);
}

static void lru_unlink(session_table *t, session *s) {
  DLIST_REMOVE(t->lru_head, t->lru_tail, s, lru_prev, lru_next);
}

static void lru_push_front(session_table *t, session *s) {
  DLIST_PUSH_FRONT(t->lru_head, t->lru_tail, s, lru_prev, lru_next);
}

static void tomb_unlink(session_table *t, tomb *tb) {
  DLIST_REMOVE(t->tomb_head, t->tomb_tail, tb, prev, next);
  t->n_tombs--;
}

static void tomb_add(session_table *t, const char *id, const uint8_t owner[32]) {
  if (!t->max_tombs) return;
  char k[TKEY_CAP];
  tomb *tb = strmap_get(&t->tombs, tkey(k, owner, id));
  if (tb) {
    tomb_unlink(t, tb);
  } else {
    tb = xcalloc(1, sizeof *tb);
    snprintf(tb->id, sizeof tb->id, "%s", id);
    memcpy(tb->owner, owner, 32);
    strmap_put(&t->tombs, k, tb);
  }
  DLIST_APPEND(t->tomb_head, t->tomb_tail, tb, prev, next);
  t->n_tombs++;
  while (t->n_tombs > t->max_tombs) {
    tomb *old = t->tomb_head;
    tomb_unlink(t, old);
    strmap_del(&t->tombs, tkey(k, old->owner, old->id));
    free(old);
  }
}

int st_forget_tombstone(session_table *t, const char *id, const uint8_t owner[32]) {
  char k[TKEY_CAP];
  tomb *tb = strmap_del(&t->tombs, tkey(k, owner, id));
  if (!tb) return 0;
  tomb_unlink(t, tb);
  free(tb);
  return 1;
}

/* Takes s out of the table (the caller frees it or hands it over). */
static owner_use *owner_get(const session_table *t, const uint8_t owner[32]) {
  char k[65];
  hex_encode(owner, 32, k);
  return strmap_get(&t->owners, k);
}

/* s joins its key's use (s->ram is 0: account() adds its bytes). */
static void owner_link(session_table *t, const session *s) {
  char k[65];
  hex_encode(s->owner, 32, k);
  owner_use *u = strmap_get(&t->owners, k);
  if (!u) {
    u = xcalloc(1, sizeof *u);
    strmap_put(&t->owners, k, u);
  }
  u->n++;
}

static void unlink_session(session_table *t, session *s) {
  char k[TKEY_CAP];
  strmap_del(&t->map, tkey(k, s->owner, s->id));
  lru_unlink(t, s);
  t->ram -= s->ram;
  owner_use *u = owner_get(t, s->owner);
  if (u) {
    u->ram -= s->ram;
    if (--u->n == 0) {
      hex_encode(s->owner, 32, k);
      free(strmap_del(&t->owners, k));
    }
  }
  s->in_table = 0;
}

/* Removes s from the table and frees it. tombstone: remember the id (gone for good). */
static void drop(session_table *t, session *s, int tombstone) {
  unlink_session(t, s);
  if (tombstone) tomb_add(t, s->id, s->owner);
  session_free(s);
}

static void on_flushed(store_op *op) {
  if (op->status != STORE_OK)
    xlog_msg("error", "session_lost", "session %s could not be saved when it left RAM: %s", op->id,
             op->err);
  store_op_free(op);
}

/* Hands s (out of the table) to the store thread, which encodes, saves and frees it. */
static void hand_over(session_table *t, session *s) {
  unlink_session(t, s);
  store_op *op = store_op_new(SOP_SAVE, on_flushed, t);
  snprintf(op->id, sizeof op->id, "%s", s->id);
  memcpy(op->owner, s->owner, 32);
  op->row.seq = ++s->store_seq;
  op->row.cas = 1; /* a shared store: only over the version this copy continues */
  op->sess = s;
  op->free_sess = 1;
  store_submit(t->store, op);
}

/* s leaves RAM for the budget: saved first when the store lacks its latest state; without a
 * store it is gone (a tombstone remembers its id). */
static void evict(session_table *t, session *s, const char *why) {
  ctr_add(&g_metrics.sessions_evicted, 1);
  if (!t->persist) {
    xlog_msg("info", "session_evicted", "session %s left RAM (%s)", s->id, why);
    drop(t, s, 1);
  } else if (s->unsaved) {
    hand_over(t, s);
  } else {
    drop(t, s, 0); /* the store has its latest state */
  }
}

/* A key's fair share of the budget: the budget split evenly among the keys with sessions in
 * RAM, capped by session_ram_mb_per_key. */
static size_t fair_share(const session_table *t) {
  size_t keys = t->owners.n ? t->owners.n : 1, share = t->budget / keys;
  if (t->ram_per_key && t->ram_per_key < share) share = t->ram_per_key;
  return share;
}

/* Least-recently-used idle sessions leave RAM while it holds more than the budget, or while a
 * key holds more than session_ram_mb_per_key: first those of keys over their fair share (so
 * one key's sessions never push out another's that stays within its share), then any. The
 * most recently used session always stays, whatever the budget. */
static int any_key_over_cap(const session_table *t) {
  if (!t->ram_per_key) return 0;
  size_t i = 0;
  for (strmap_entry *e = NULL; (e = strmap_next(&t->owners, &i, e));)
    if (((const owner_use *)e->value)->ram > t->ram_per_key) return 1;
  return 0;
}

static void enforce_budget(session_table *t) {
  if (st_spare_bytes(t) > room_left(t)) drop_spare(t); /* the spare memory goes first, */
  size_t held = t->ram + st_spare_bytes(t);
  prefix_cache_fit(t->pc, t->budget > held ? t->budget - held : 0); /* then the cache */
  if (t->ram <= t->budget && !any_key_over_cap(t)) return;
  for (session *s = t->lru_tail; s && s != t->lru_head;) {
    session *prev = s->lru_prev;
    owner_use *u = owner_get(t, s->owner);
    if (!s->busy && u) {
      int over_cap = t->ram_per_key && u->ram > t->ram_per_key;
      if (over_cap || (t->ram > t->budget && u->ram > fair_share(t)))
        evict(t, s, over_cap             ? "its key is over session_ram_mb_per_key"
                    : t->owners.n > 1 ? "its key is over its share of session_ram_mb"
                                      : "session_ram_mb");
    }
    s = prev;
  }
  for (session *s = t->lru_tail; t->ram > t->budget && s && s != t->lru_head;) {
    session *prev = s->lru_prev;
    if (!s->busy) evict(t, s, "session_ram_mb");
    s = prev;
  }
}

void st_set_key_limits(session_table *t, size_t max_sessions_per_key, size_t ram_per_key) {
  t->max_per_key = max_sessions_per_key;
  t->ram_per_key = ram_per_key;
}

size_t st_key_sessions(const session_table *t, const uint8_t owner[32]) {
  const owner_use *u = owner_get(t, owner);
  return u ? u->n : 0;
}

int st_key_full(const session_table *t, const uint8_t owner[32]) {
  return t->max_per_key && st_key_sessions(t, owner) >= t->max_per_key;
}

static void account(session_table *t, session *s) {
  s->snap_tokens = session_tokens(s);
  s->snap_mem = xl_state_mem_length(s->state);
  size_t ram = session_ram(s);
  owner_use *u = owner_get(t, s->owner);
  if (u) u->ram = u->ram - s->ram + ram;
  t->ram = t->ram - s->ram + ram;
  s->ram = ram;
}

st_status st_lookup(session_table *t, const char *id, const uint8_t owner[32], session **out) {
  char k[TKEY_CAP];
  *out = strmap_get(&t->map, tkey(k, owner, id));
  if (*out) return ST_FOUND;
  return strmap_get(&t->tombs, k) ? ST_EXPIRED : ST_MISSING;
}

/* A restored session joins the table as the most recently used. */
static void insert_restored(session_table *t, session *s, const char *id, const uint8_t owner[32]) {
  snprintf(s->id, sizeof s->id, "%s", id);
  memcpy(s->owner, owner, 32);
  double age = now_wall() - s->last_used;
  s->last_used_mono = now_mono() - (age > 0 ? age : 0);
  s->in_table = 1;
  char k[TKEY_CAP];
  strmap_put(&t->map, tkey(k, owner, id), s);
  owner_link(t, s);
  lru_push_front(t, s);
  s->ram = 0;
  account(t, s);
  enforce_budget(t);
}

static void on_loaded(store_op *op) {
  session_table *t = op->ctx;
  char k[TKEY_CAP];
  pending_load *pl = strmap_del(&t->loads, tkey(k, op->owner, op->id));
  st_answer a = {ST_FOUND, op->err};
  switch (op->status) {
    case STORE_OK:
      if (strmap_get(&t->map, k)) break; /* cannot happen: loads are only for misses */
      insert_restored(t, op->out, op->id, op->owner);
      op->out = NULL;
      ctr_add(&g_metrics.sessions_restored, 1);
      hist_observe(&g_metrics.restore, now_mono() - op->t_submit);
      break;
    case STORE_ABSENT: a.status = ST_MISSING; break;
    case STORE_INVALID:
    case STORE_MISMATCH:
      a.status = ST_INCOMPATIBLE;
      ctr_add(&g_metrics.sessions_incompatible, 1);
      xlog_msg("warn", "session_incompatible", "session %s is kept in the store but refused: %s",
               op->id, op->err);
      break;
    default:
      a.status = ST_STORE_ERROR;
      xlog_msg("error", "store_error", "loading session %s: %s", op->id, op->err);
      break;
  }
  waiter *w = pl ? pl->head : NULL;
  free(pl);
  while (w) { /* all of them asked for this owner's id */
    waiter *n = w->next;
    w->fn(w->ctx, &a);
    free(w);
    w = n;
  }
  store_op_free(op);
}

/* A shared store's answer to "which version of this session is stored?": a RAM copy that is
 * not that version (another replica committed turns of it, or deleted it) leaves RAM, so the
 * caller's next look loads the stored one. */
static void on_versioned(store_op *op) {
  session_table *t = op->ctx;
  char k[TKEY_CAP];
  pending_load *pl = strmap_del(&t->loads, tkey(k, op->owner, op->id));
  st_answer a = {ST_FOUND, NULL};
  if (op->status == STORE_ERROR) {
    a.status = ST_STORE_ERROR;
    a.message = op->err;
  } else {
    session *s = strmap_get(&t->map, k);
    uint64_t stored = op->status == STORE_OK ? op->row.seq : 0;
    if (s && !s->busy && stored != s->store_seq) {
      xlog_msg("info", "session_stale", "session %s: the store holds version %llu, RAM %llu "
               "(another replica continued it): reloading", op->id,
               (unsigned long long)stored, (unsigned long long)s->store_seq);
      ctr_add(&g_metrics.sessions_stale, 1);
      drop(t, s, 0);
    }
  }
  waiter *w = pl ? pl->head : NULL;
  free(pl);
  while (w) {
    waiter *n = w->next;
    w->fn(w->ctx, &a);
    free(w);
    w = n;
  }
  store_op_free(op);
}

st_status st_find(session_table *t, const char *id, const uint8_t owner[32], session **out,
                  st_wait_fn fn, void *ctx) {
  st_status st = st_lookup(t, id, owner, out);
  /* a shared store: an idle RAM copy is served only once the stored version is checked */
  int verify = st == ST_FOUND && t->persist && store_shared(t->store) && !(*out)->busy;
  if (!verify && (st != ST_MISSING || !t->persist)) return st;
  char k[TKEY_CAP];
  pending_load *pl = strmap_get(&t->loads, tkey(k, owner, id));
  if (!pl) {
    pl = xcalloc(1, sizeof *pl);
    strmap_put(&t->loads, k, pl);
    store_op *op = store_op_new(verify ? SOP_VERSION : SOP_LOAD, verify ? on_versioned : on_loaded,
                                t);
    snprintf(op->id, sizeof op->id, "%s", id);
    memcpy(op->owner, owner, 32);
    store_submit(t->store, op);
  }
  waiter *w = xcalloc(1, sizeof *w);
  w->fn = fn;
  w->ctx = ctx;
  if (pl->tail) pl->tail->next = w;
  else pl->head = w;
  pl->tail = w;
  return ST_PENDING;
}

static session *insert(session_table *t, session *s, const char *id, const uint8_t owner[32]) {
  char k[TKEY_CAP];
  if (id) {
    snprintf(s->id, sizeof s->id, "%s", id);
  } else { /* unique among this owner's ids (128 random bits: a repeat is never expected) */
    do {
      uint8_t r[16];
      random_bytes(r, sizeof r);
      hex_encode(r, sizeof r, s->id);
    } while (strmap_get(&t->map, tkey(k, owner, s->id)) || strmap_get(&t->loads, k));
  }
  st_forget_tombstone(t, s->id, owner);
  memcpy(s->owner, owner, 32);
  s->in_table = 1;
  s->unsaved = 1; /* the store has never seen it */
  strmap_put(&t->map, tkey(k, owner, s->id), s);
  owner_link(t, s);
  lru_push_front(t, s);
  s->ram = 0;
  account(t, s);
  ctr_add(&g_metrics.sessions_created, 1);
  enforce_budget(t);
  return s;
}

session *st_create(session_table *t, const char *id, const uint8_t owner[32], xl_error *err) {
  session *s = session_new(t->model, err);
  if (!s) return NULL;
  return insert(t, s, id, owner);
}

static void touch(session_table *t, session *s) {
  s->last_used = now_wall();
  s->last_used_mono = now_mono();
  if (!s->in_table) return;
  lru_unlink(t, s);
  lru_push_front(t, s);
}

session *st_fork(session_table *t, session *src, xl_error *err) {
  session *s = session_clone(src, err); /* a copy of its state, chat and tail, used now */
  if (!s) return NULL;
  /* A fork is a use of its parent: the parent becomes the most recently used but one (the fork
   * joins in front of it), and while the fork joins the parent is held like a busy session, so
   * the budget never evicts it for its own fork, however small the budget. */
  touch(t, src);
  int was_busy = src->busy;
  src->busy = 1;
  session *f = insert(t, s, NULL, src->owner);
  src->busy = was_busy;
  return f;
}

void st_acquire(session_table *t, session *s) {
  s->busy = 1;
  touch(t, s);
}

void st_release(session_table *t, session *s) {
  s->busy = 0;
  touch(t, s);
  if (!s->in_table) return;
  account(t, s);
  enforce_budget(t);
}

/* ------------------------------------------------------------------------------------------ */
/* writes */

/* An async turn save (durability async: the turn was answered already). */
static void on_saved(store_op *op) {
  call *c = op->ctx;
  if (op->status != STORE_OK) {
    xlog_msg("error", "store_error", "saving session %s: %s", op->id, op->err);
    char k[TKEY_CAP];
    session *s = strmap_get(&c->t->map, tkey(k, op->owner, op->id));
    if (s) { /* retried when it leaves RAM or at the next turn, as a whole snapshot */
      s->unsaved = 1;
      s->delta_ok = 0;
    }
  }
  if (c->fn) ((st_done_fn)c->fn)(c->ctx, op->status == STORE_OK ? 0 : -1, op->err);
  free(c);
  store_op_free(op);
}

/* The turn is not kept: s (held busy since its job) leaves RAM without a save, so its next use
 * loads the store's row, which is the session as of its last committed turn (or nothing, for a
 * session whose first turn this was: the id starts afresh). */
static void roll_back_turn(session_table *t, session *s) {
  xlog_msg("warn", "turn_rolled_back", "session %s: its turn could not be committed; the "
           "session is back at its last committed state", s->id);
  drop(t, s, 0);
}

/* A turn's commit (durability turn): s was held busy until now. */
static void on_turn_committed(store_op *op) {
  call *c = op->ctx;
  if (op->status == STORE_CONFLICT) ctr_add(&g_metrics.store_conflicts, 1);
  if (op->status == STORE_OK) {
    st_release(c->t, c->s);
  } else if (op->status == STORE_UNKNOWN) {
    /* kept or not, the store's row is the truth: s leaves RAM, its next use re-reads it */
    xlog_msg("error", "store_outcome_unknown", "session %s: the commit of its turn has an "
             "unknown outcome (%s); the session is re-read from the store at its next use",
             op->id, op->err);
    drop(c->t, c->s, 0);
  } else {
    xlog_msg("error", "store_error", "saving session %s: %s", op->id, op->err);
    roll_back_turn(c->t, c->s);
  }
  ((st_done_fn)c->fn)(c->ctx, op->status == STORE_OK         ? 0
                              : op->status == STORE_CONFLICT ? -2
                              : op->status == STORE_UNKNOWN  ? -3
                                                             : -1,
                      op->err);
  free(c);
  store_op_free(op);
}

/* A turn's record written on its own (the turn has no commit to carry it). */
static void put_record(session_table *t, const session *s, st_record *rec) {
  if (!rec || !t->store) {
    if (rec) free(rec->value), rec->value = NULL;
    return;
  }
  store_op *op = store_op_new(SOP_REC_PUT, NULL, NULL);
  if (store_op_record(op, rec->ns, s->owner, rec->key, rec->value, rec->len, rec->ttl_s) == 0)
    store_submit(t->store, op);
  else
    store_op_free(op);
  rec->value = NULL;
}

int st_turn_end(session_table *t, session *s, uint8_t *core, size_t core_len, int fed,
                st_record *rec, st_done_fn fn, void *ctx) {
  int delta = core && xl_state_blob_is_delta(core, core_len);
  int commit = t->persist && t->durability == DUR_TURN && fn;
  if (commit && fed && !core) { /* the worker's snapshot failed: the turn cannot be committed */
    if (rec) free(rec->value), rec->value = NULL;
    roll_back_turn(t, s);
    return -1;
  }
  /* No snapshot otherwise: no store, or the job fed nothing (max_tokens 0 with nothing to
   * feed, a reset whose job never ran). A state is never copied on the loop thread: a session
   * that changed stays unsaved and reaches the store when it leaves RAM, at exit, or with its
   * next turn. */
  if (!t->persist || !core) {
    free(core);
    if (fed) s->unsaved = 1;
    put_record(t, s, rec);
    st_release(t, s);
    return 0;
  }
  s->busy = 1; /* held until the commit (durability turn) or until released below */
  s->last_used = now_wall();
  s->last_used_mono = now_mono();
  /* the worker encoded a delta (the store holds this session up to delta_base) or, when the
   * store has no state this one continues, a whole snapshot */
  store_op *op = store_op_new(delta ? SOP_APPEND : SOP_SAVE,
                              commit ? on_turn_committed : on_saved, NULL);
  snprintf(op->id, sizeof op->id, "%s", s->id);
  memcpy(op->owner, s->owner, 32);
  if (delta) {
    op->delta = core;
    op->delta_len = core_len;
  } else {
    op->state = core;
    op->row.state_len = core_len;
  }
  op->meta = sess_meta_encode(s, t->fingerprint, core, core_len, &op->row.meta_len);
  store_row_fill(&op->row, s, s->id, s->owner, t->fingerprint);
  op->row.meta = op->meta;
  op->row.state = op->state;
  op->row.seq = ++s->store_seq;
  op->row.cas = commit; /* a shared store: a whole state only over the version it continues */
  op->async = t->durability == DUR_ASYNC;
  if (rec) { /* kept with the turn's write, or not at all */
    store_op_record(op, rec->ns, s->owner, rec->key, rec->value, rec->len, rec->ttl_s);
    rec->value = NULL;
  }
  op->ctx = call_new(t, commit ? s : NULL, commit ? (void *)fn : NULL, ctx);
  s->unsaved = 0;
  s->delta_ok = 1; /* the next turn's delta continues this write */
  s->delta_base = xl_state_tokens_fed(s->state);
  store_submit(t->store, op);
  if (!commit) st_release(t, s); /* answered now; the save follows */
  return commit;
}

static void on_persisted(store_op *op) {
  call *c = op->ctx;
  session *s = c->s; /* held busy for the op: still in the table */
  s->busy = 0;
  if (op->status == STORE_OK) {
    s->unsaved = 0;
  } else { /* not acknowledged: not kept (the store's row, if any, is what was committed) */
    xlog_msg("error", "store_error", "saving session %s: %s (not kept)", op->id, op->err);
    drop(c->t, s, 0);
  }
  if (c->fn) ((st_done_fn)c->fn)(c->ctx, op->status == STORE_OK ? 0 : -1, op->err);
  free(c);
  store_op_free(op);
}

/* cas: a shared store writes only over the version s continues (a creation: no row); an
 * import replaces whatever is stored. */
static int persist(session_table *t, session *s, int cas, st_done_fn fn, void *ctx) {
  if (!t->persist) return 0;
  s->busy = 1;
  store_op *op = store_op_new(SOP_SAVE, on_persisted, call_new(t, s, (void *)fn, ctx));
  snprintf(op->id, sizeof op->id, "%s", s->id);
  memcpy(op->owner, s->owner, 32);
  op->row.seq = ++s->store_seq;
  op->row.cas = cas;
  op->sess = s;
  s->delta_ok = 1; /* held busy until the save: its state is the one saved */
  s->delta_base = xl_state_tokens_fed(s->state);
  store_submit(t->store, op);
  return 1;
}

int st_persist(session_table *t, session *s, st_done_fn fn, void *ctx) {
  return persist(t, s, 1, fn, ctx);
}

static void on_removed(store_op *op) {
  call *c = op->ctx;
  int st = op->status == STORE_OK ? 0 : op->status == STORE_ABSENT ? 1 : -1;
  if (st < 0) xlog_msg("error", "store_error", "deleting session %s: %s", op->id, op->err);
  if (c->fn) ((st_done_fn)c->fn)(c->ctx, st, op->err);
  free(c);
  store_op_free(op);
}

static void submit_remove(session_table *t, const char *id, const uint8_t owner[32],
                          st_done_fn fn, void *ctx) {
  store_op *op = store_op_new(SOP_REMOVE, on_removed, call_new(t, NULL, (void *)fn, ctx));
  snprintf(op->id, sizeof op->id, "%s", id);
  memcpy(op->owner, owner, 32);
  store_submit(t->store, op);
}

int st_delete(session_table *t, session *s, st_done_fn fn, void *ctx) {
  int wait = 0;
  if (t->persist) {
    wait = t->durability == DUR_TURN && fn;
    submit_remove(t, s->id, s->owner, wait ? fn : NULL, ctx);
  }
  drop(t, s, 0);
  return wait;
}

void st_remove_stored(session_table *t, const char *id, const uint8_t owner[32], st_done_fn fn,
                      void *ctx) {
  if (!t->persist) {
    fn(ctx, 1, "no store");
    return;
  }
  submit_remove(t, id, owner, fn, ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* export, import, list */

static void on_exported(store_op *op) {
  call *c = op->ctx;
  c->s->busy = 0;
  uint8_t *b = op->bytes;
  op->bytes = NULL;
  ((st_bytes_fn)c->fn)(c->ctx, op->status == STORE_OK ? b : NULL, op->n_bytes,
                       op->status == STORE_OK ? NULL : op->err);
  if (op->status != STORE_OK) free(b);
  free(c);
  store_op_free(op);
}

void st_export(session_table *t, session *s, st_bytes_fn fn, void *ctx) {
  s->busy = 1;
  store_op *op = store_op_new(SOP_EXPORT, on_exported, call_new(t, s, (void *)fn, ctx));
  snprintf(op->id, sizeof op->id, "%s", s->id);
  memcpy(op->owner, s->owner, 32);
  op->sess = s;
  store_submit(t->store, op);
}

static void on_import_saved(void *ctx, int status, const char *msg) {
  call *c = ctx;
  ((st_import_fn)c->fn)(c->ctx,
                        status ? IMPORT_ERROR : c->replaced ? IMPORT_REPLACED : IMPORT_CREATED,
                        status ? msg : NULL);
  free(c);
}

static void on_decoded(store_op *op) {
  call *c = op->ctx;
  session_table *t = c->t;
  st_import_fn fn = (st_import_fn)c->fn;
  if (op->status != STORE_OK) {
    fn(c->ctx, op->status == STORE_MISMATCH ? IMPORT_MISMATCH : IMPORT_INVALID, op->err);
    free(c);
    store_op_free(op);
    return;
  }
  char k[TKEY_CAP];
  session *old = strmap_get(&t->map, tkey(k, op->owner, op->id));
  if (old && old->busy) {
    fn(c->ctx, IMPORT_BUSY, "the session is serving a request");
  } else {
    c->replaced = old != NULL || c->replaced;
    if (old) drop(t, old, 0);
    session *s = op->out;
    op->out = NULL;
    insert_restored(t, s, op->id, op->owner);
    st_acquire(t, s); /* last used: now */
    st_release(t, s);
    s->unsaved = 1;
    st_forget_tombstone(t, op->id, op->owner);
    if (!persist(t, s, 0, on_import_saved, c)) on_import_saved(c, 0, NULL);
    store_op_free(op);
    return;
  }
  free(c);
  store_op_free(op);
}

void st_import(session_table *t, const char *id, const uint8_t owner[32], uint8_t *bytes,
               size_t n, st_import_fn fn, void *ctx) {
  call *c = call_new(t, NULL, (void *)fn, ctx);
  char k[TKEY_CAP];
  session *cur = strmap_get(&t->map, tkey(k, owner, id));
  c->replaced = cur != NULL; /* or a refused row in the store: the api says so */
  store_op *op = store_op_new(SOP_DECODE, on_decoded, c);
  snprintf(op->id, sizeof op->id, "%s", id);
  memcpy(op->owner, owner, 32);
  op->in = bytes;
  op->in_len = n;
  store_submit(t->store, op);
}

static void on_listed(store_op *op) {
  call *c = op->ctx;
  ((st_rows_fn)c->fn)(c->ctx, op->rows, op->n, op->status == STORE_OK ? NULL : op->err);
  free(c);
  store_op_free(op);
}

void st_list_stored(session_table *t, const uint8_t owner[32], int max, st_rows_fn fn, void *ctx) {
  if (!t->persist) {
    fn(ctx, NULL, 0, NULL);
    return;
  }
  store_op *op = store_op_new(SOP_LIST, on_listed, call_new(t, NULL, (void *)fn, ctx));
  memcpy(op->owner, owner, 32);
  op->max = max;
  store_submit(t->store, op);
}

/* ------------------------------------------------------------------------------------------ */
/* TTL */

static void sweep(session_table *t);

static void on_swept(store_op *op) {
  session_table *t = op->ctx;
  t->sweeping = 0;
  if (op->status != STORE_OK) {
    xlog_msg("error", "store_error", "expiring stored sessions: %s", op->err);
    store_op_free(op);
    return;
  }
  double now = now_mono();
  for (int i = 0; i < op->n; i++) {
    store_key *k = &op->keys[i];
    char key[TKEY_CAP];
    session *s = strmap_get(&t->map, tkey(key, k->owner, k->id));
    if (s && (s->busy || s->last_used_mono + t->ttl > now)) {
      s->unsaved = 1; /* in use again: its row comes back with its next save (whole) */
      s->delta_ok = 0;
      continue;
    }
    if (s) drop(t, s, 0);
    tomb_add(t, k->id, k->owner);
  }
  ctr_add(&g_metrics.sessions_expired, (uint64_t)op->n);
  int more = op->n == op->max;
  store_op_free(op);
  if (more) sweep(t); /* the next bounded batch; other ops queued meanwhile go first */
}

static void sweep(session_table *t) {
  if (t->sweeping || !t->persist || t->ttl <= 0) return;
  t->sweeping = 1;
  store_op *op = store_op_new(SOP_EXPIRE, on_swept, t);
  op->before = now_wall() - t->ttl;
  op->max = SWEEP_BATCH;
  store_submit(t->store, op);
}

int st_expire(session_table *t, double now, int max) {
  if (t->ttl <= 0) return 0;
  int n = 0;
  session *s = t->lru_tail;
  while (s && n < max) {
    session *prev = s->lru_prev;
    if (s->last_used_mono + t->ttl > now) break; /* LRU order: the rest are younger */
    if (!s->busy && t->persist && store_shared(t->store)) {
      /* another replica may be using the session: only RAM forgets it here; the store's sweep
       * deletes the row if its last use (by any replica) is older than the TTL */
      drop(t, s, 0);
      n++;
    } else if (!s->busy) {
      ctr_add(&g_metrics.sessions_expired, 1);
      if (t->persist) submit_remove(t, s->id, s->owner, NULL, NULL);
      drop(t, s, 1);
      n++;
    }
    s = prev;
  }
  sweep(t);
  return n;
}

void st_flush(session_table *t) {
  if (!t->persist) return;
  session *s = t->lru_head;
  while (s) {
    session *n = s->lru_next;
    if (!s->busy && s->unsaved) hand_over(t, s);
    s = n;
  }
}

size_t st_count(const session_table *t) { return t->map.n; }
size_t st_ram(const session_table *t) { return t->ram; }

size_t st_list(session_table *t, const uint8_t owner[32], session **out, size_t n) {
  size_t k = 0;
  for (session *s = t->lru_head; s && k < n; s = s->lru_next)
    if (!memcmp(s->owner, owner, 32)) out[k++] = s;
  return k;
}
