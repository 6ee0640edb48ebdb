/*
 * record_mem.c: the in-memory keyed records of a daemon without a store (record_mem.h): a
 * strmap from "ns ownerhex key" to an entry, and an LRU list (most recent at the head).
 * Thread: the store thread only.
 */
#include "record_mem.h"

#include <stdlib.h>
#include <string.h>

#include "dlist.h"
#include "session_store.h"
#include "strmap.h"
#include "util.h"

typedef struct rentry {
  struct rentry *prev, *next;
  char *mkey; /* the map's key (owned copy) */
  uint8_t *value;
  size_t len;
  double expires;
} rentry;

struct record_mem {
  strmap map;
  rentry *head, *tail;
  long n, max_n;
  size_t bytes, max_bytes;
};

/* "ns ownerhex key": ns has no space, the owner is 64 hex digits, so the split is unique */
static char *map_key(const struct store_record *r) {
  size_t nl = strlen(r->ns), kl = strlen(r->key);
  char *k = xmalloc(nl + 1 + 64 + 1 + kl + 1);
  memcpy(k, r->ns, nl);
  k[nl] = ' ';
  hex_encode(r->owner, 32, k + nl + 1);
  k[nl + 65] = ' ';
  memcpy(k + nl + 66, r->key, kl + 1);
  return k;
}

static size_t cost(const rentry *e) { return strlen(e->mkey) + e->len + sizeof *e; }

static void remove_entry(record_mem *m, rentry *e) {
  strmap_del(&m->map, e->mkey);
  DLIST_REMOVE(m->head, m->tail, e, prev, next);
  m->n--;
  m->bytes -= cost(e);
  free(e->mkey);
  free(e->value);
  free(e);
}

record_mem *record_mem_new(long max_records, size_t max_bytes) {
  record_mem *m = xcalloc(1, sizeof *m);
  strmap_init(&m->map);
  m->max_n = max_records > 0 ? max_records : 65536;
  m->max_bytes = max_bytes > 0 ? max_bytes : (size_t)64 << 20;
  return m;
}

void record_mem_free(record_mem *m) {
  if (!m) return;
  while (m->head) remove_entry(m, m->head);
  strmap_free(&m->map);
  free(m);
}

int record_mem_put(record_mem *m, const struct store_record *r, double now) {
  (void)now;
  rentry *e = xcalloc(1, sizeof *e);
  e->mkey = map_key(r);
  e->len = r->len;
  e->value = xmalloc(r->len ? r->len : 1);
  if (r->len) memcpy(e->value, r->value, r->len);
  e->expires = r->expires;
  rentry *old = strmap_get(&m->map, e->mkey);
  if (old) remove_entry(m, old);
  if (cost(e) > m->max_bytes) {
    free(e->mkey);
    free(e->value);
    free(e);
    return -1;
  }
  while (m->tail && (m->n + 1 > m->max_n || m->bytes + cost(e) > m->max_bytes))
    remove_entry(m, m->tail);
  strmap_put(&m->map, e->mkey, e);
  DLIST_PUSH_FRONT(m->head, m->tail, e, prev, next);
  m->n++;
  m->bytes += cost(e);
  return 0;
}

int record_mem_get(record_mem *m, struct store_record *r, double now) {
  char *k = map_key(r);
  rentry *e = strmap_get(&m->map, k);
  free(k);
  if (!e) return 1;
  if (e->expires <= now) {
    remove_entry(m, e);
    return 1;
  }
  DLIST_REMOVE(m->head, m->tail, e, prev, next);
  DLIST_PUSH_FRONT(m->head, m->tail, e, prev, next);
  r->value = e->value;
  r->len = e->len;
  r->expires = e->expires;
  return 0;
}

int record_mem_del(record_mem *m, const struct store_record *r) {
  char *k = map_key(r);
  rentry *e = strmap_get(&m->map, k);
  free(k);
  if (!e) return 1;
  remove_entry(m, e);
  return 0;
}

long record_mem_count(const record_mem *m) { return m ? m->n : 0; }
