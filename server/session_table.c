/*
 * session_table.c: sessions in RAM with LRU, budget, TTL and tombstones (see
 * session_table.h). Thread: loop thread only.
 */
#include "session_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "metrics.h"
#include "strmap.h"
#include "util.h"
#include "xlog.h"

typedef struct tomb {
  struct tomb *prev, *next; /* FIFO: oldest at head */
  uint8_t owner[32];
  char id[129];
} tomb;

struct session_table {
  const xl_model *model;
  strmap map;   /* id -> session */
  strmap tombs; /* id -> tomb */
  tomb *tomb_head, *tomb_tail;
  size_t n_tombs, max_tombs;
  session *lru_head, *lru_tail; /* head = most recently used */
  size_t ram, budget;
  double ttl;
  session_store *store; /* NULL until issue 6 */
};

session_table *st_new(const xl_model *model, size_t ram_budget, double ttl, size_t max_tombstones,
                      session_store *store) {
  session_table *t = xcalloc(1, sizeof *t);
  t->model = model;
  strmap_init(&t->map);
  strmap_init(&t->tombs);
  t->budget = ram_budget;
  t->ttl = ttl;
  t->max_tombs = max_tombstones;
  t->store = store;
  return t;
}

void st_free(session_table *t) {
  if (!t) return;
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
  strmap_free(&t->map);
  strmap_free(&t->tombs);
  free(t);
}

static void lru_unlink(session_table *t, session *s) {
  if (s->lru_prev) s->lru_prev->lru_next = s->lru_next;
  else t->lru_head = s->lru_next;
  if (s->lru_next) s->lru_next->lru_prev = s->lru_prev;
  else t->lru_tail = s->lru_prev;
  s->lru_prev = s->lru_next = NULL;
}

static void lru_push_front(session_table *t, session *s) {
  s->lru_prev = NULL;
  s->lru_next = t->lru_head;
  if (t->lru_head) t->lru_head->lru_prev = s;
  t->lru_head = s;
  if (!t->lru_tail) t->lru_tail = s;
}

static void tomb_unlink(session_table *t, tomb *tb) {
  if (tb->prev) tb->prev->next = tb->next;
  else t->tomb_head = tb->next;
  if (tb->next) tb->next->prev = tb->prev;
  else t->tomb_tail = tb->prev;
  t->n_tombs--;
}

static void tomb_add(session_table *t, const session *s) {
  if (!t->max_tombs) return;
  tomb *tb = strmap_get(&t->tombs, s->id);
  if (tb) {
    tomb_unlink(t, tb);
  } else {
    tb = xcalloc(1, sizeof *tb);
    memcpy(tb->id, s->id, sizeof tb->id);
    strmap_put(&t->tombs, tb->id, tb);
  }
  memcpy(tb->owner, s->owner, 32);
  tb->next = NULL;
  tb->prev = t->tomb_tail;
  if (t->tomb_tail) t->tomb_tail->next = tb;
  else t->tomb_head = tb;
  t->tomb_tail = tb;
  t->n_tombs++;
  while (t->n_tombs > t->max_tombs) {
    tomb *old = t->tomb_head;
    tomb_unlink(t, old);
    strmap_del(&t->tombs, old->id);
    free(old);
  }
}

int st_forget_tombstone(session_table *t, const char *id) {
  tomb *tb = strmap_del(&t->tombs, id);
  if (!tb) return 0;
  tomb_unlink(t, tb);
  free(tb);
  return 1;
}

/* Removes s from the table and frees it. tombstone: remember the id (evicted / expired). */
static void drop(session_table *t, session *s, int tombstone) {
  strmap_del(&t->map, s->id);
  lru_unlink(t, s);
  t->ram -= s->ram;
  if (tombstone) tomb_add(t, s);
  session_free(s);
}

static void enforce_budget(session_table *t) {
  session *s = t->lru_tail;
  /* the most recently used session always stays, whatever the budget */
  while (t->ram > t->budget && s && s != t->lru_head) {
    session *prev = s->lru_prev;
    if (!s->busy) {
      /* Issue 6: with a store, serialise on a worker and save before dropping. */
      xlog_msg("info", "session_evicted", "session %s left RAM (budget %zu bytes)", s->id,
               t->budget);
      ctr_add(&g_metrics.sessions_evicted, 1);
      drop(t, s, 1);
    }
    s = prev;
  }
}

static void account(session_table *t, session *s) {
  s->snap_tokens = session_tokens(s);
  s->snap_mem = xl_state_mem_length(s->state);
  t->ram -= s->ram;
  s->ram = session_ram(s);
  t->ram += s->ram;
}

st_status st_lookup(session_table *t, const char *id, const uint8_t owner[32], session **out) {
  *out = NULL;
  session *s = strmap_get(&t->map, id);
  if (s) {
    if (memcmp(s->owner, owner, 32)) return ST_FORBIDDEN;
    *out = s;
    return ST_FOUND;
  }
  /* Issue 6: ask the store here (asynchronously) before concluding. */
  tomb *tb = strmap_get(&t->tombs, id);
  if (tb && !memcmp(tb->owner, owner, 32)) return ST_EXPIRED;
  return ST_MISSING;
}

static session *insert(session_table *t, session *s, const char *id, const uint8_t owner[32]) {
  if (id) {
    snprintf(s->id, sizeof s->id, "%s", id);
  } else {
    do {
      uint8_t r[16];
      random_bytes(r, sizeof r);
      hex_encode(r, sizeof r, s->id);
    } while (strmap_get(&t->map, s->id));
  }
  st_forget_tombstone(t, s->id);
  memcpy(s->owner, owner, 32);
  s->in_table = 1;
  strmap_put(&t->map, s->id, s);
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

session *st_fork(session_table *t, const session *src, xl_error *err) {
  session *s = xcalloc(1, sizeof *s);
  if (xl_state_clone(src->state, &s->state, err) != XL_OK) {
    free(s);
    return NULL;
  }
  s->pending = src->pending;
  s->digest = src->digest;
  s->rng = src->rng;
  s->chat = src->chat;
  if (src->n_msgs) {
    s->msgs = xmalloc(sizeof *s->msgs * (size_t)src->n_msgs);
    memcpy(s->msgs, src->msgs, sizeof *s->msgs * (size_t)src->n_msgs);
    s->n_msgs = s->cap_msgs = src->n_msgs;
  }
  session_set_tail(s, src->tail, src->tail_len);
  s->turns = src->turns;
  s->created = s->last_used = now_wall();
  s->last_used_mono = now_mono();
  return insert(t, s, NULL, src->owner);
}

void st_acquire(session_table *t, session *s) {
  s->busy = 1;
  s->last_used = now_wall();
  s->last_used_mono = now_mono();
  if (!s->in_table) return;
  lru_unlink(t, s);
  lru_push_front(t, s);
}

void st_release(session_table *t, session *s) {
  s->busy = 0;
  s->last_used = now_wall();
  s->last_used_mono = now_mono();
  if (!s->in_table) return;
  lru_unlink(t, s);
  lru_push_front(t, s);
  account(t, s);
  enforce_budget(t);
}

void st_delete(session_table *t, session *s) { drop(t, s, 0); }

int st_expire(session_table *t, double now, int max) {
  if (t->ttl <= 0) return 0;
  int n = 0;
  session *s = t->lru_tail;
  while (s && n < max) {
    session *prev = s->lru_prev;
    if (s->last_used_mono + t->ttl > now) break; /* LRU order: the rest are younger */
    if (!s->busy) {
      ctr_add(&g_metrics.sessions_expired, 1);
      drop(t, s, 1);
      n++;
    }
    s = prev;
  }
  return n;
}

size_t st_count(const session_table *t) { return t->map.n; }
size_t st_ram(const session_table *t) { return t->ram; }

size_t st_list(session_table *t, const uint8_t owner[32], session **out, size_t n) {
  size_t k = 0;
  for (session *s = t->lru_head; s && k < n; s = s->lru_next)
    if (!memcmp(s->owner, owner, 32)) out[k++] = s;
  return k;
}
