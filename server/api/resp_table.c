/*
 * resp_table.c: the bounded table of stored Responses API objects (see resp_table.h).
 * Thread: loop thread only.
 */
#include "resp_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"
#include "util.h"

struct resp_table {
  strmap map;               /* key(owner, id) -> resp_rec */
  resp_rec *oldest, *newest;
  size_t n, bytes, max_records, max_bytes;
};

/* "owner hex:id" */
static const char *key(char *k, size_t cap, const uint8_t owner[32], const char *id) {
  char hx[65];
  hex_encode(owner, 32, hx);
  snprintf(k, cap, "%s:%s", hx, id);
  return k;
}

resp_table *rt_new(size_t max_records, size_t max_bytes) {
  resp_table *t = xcalloc(1, sizeof *t);
  strmap_init(&t->map);
  t->max_records = max_records;
  t->max_bytes = max_bytes;
  return t;
}

static void unlink_rec(resp_table *t, resp_rec *r) {
  if (r->older) r->older->newer = r->newer;
  else t->oldest = r->newer;
  if (r->newer) r->newer->older = r->older;
  else t->newest = r->older;
  t->n--;
  t->bytes -= r->bytes;
}

static void free_rec(resp_rec *r) {
  free(r->body);
  free(r->input);
  free(r);
}

void rt_free(resp_table *t) {
  if (!t) return;
  for (resp_rec *r = t->oldest, *next; r; r = next) {
    next = r->newer;
    free_rec(r);
  }
  strmap_free(&t->map);
  free(t);
}

int rt_del(resp_table *t, const uint8_t owner[32], const char *id) {
  char k[200];
  resp_rec *r = strmap_del(&t->map, key(k, sizeof k, owner, id));
  if (!r) return 0;
  unlink_rec(t, r);
  free_rec(r);
  return 1;
}

void rt_put(resp_table *t, const uint8_t owner[32], const char *id, const char *session_id,
            uint64_t turns, char *body, char *input) {
  rt_del(t, owner, id);
  resp_rec *r = xcalloc(1, sizeof *r);
  snprintf(r->id, sizeof r->id, "%s", id);
  memcpy(r->owner, owner, 32);
  snprintf(r->session_id, sizeof r->session_id, "%s", session_id ? session_id : "");
  r->turns = turns;
  r->body = body;
  r->input = input;
  r->bytes = sizeof *r + strlen(body) + strlen(input);
  char k[200];
  strmap_put(&t->map, key(k, sizeof k, owner, id), r);
  r->older = t->newest;
  if (t->newest) t->newest->newer = r;
  else t->oldest = r;
  t->newest = r;
  t->n++;
  t->bytes += r->bytes;
  while (t->oldest != r && (t->n > t->max_records || t->bytes > t->max_bytes)) {
    resp_rec *o = t->oldest;
    strmap_del(&t->map, key(k, sizeof k, o->owner, o->id));
    unlink_rec(t, o);
    free_rec(o);
  }
}

const resp_rec *rt_get(resp_table *t, const uint8_t owner[32], const char *id) {
  char k[200];
  return strmap_get(&t->map, key(k, sizeof k, owner, id));
}

size_t rt_count(const resp_table *t) { return t->n; }
