/*
 * resp_store.c: the stored Responses API objects as the session store's keyed records (see
 * resp_store.h). Thread: loop thread only.
 */
#include "resp_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "session_store.h"
#include "util.h"

#define RESP_NS "resp"

int resp_id_session(const char *id, char *sid, size_t cap) {
  if (strncmp(id, "resp_", 5)) return -1;
  const char *u = strrchr(id + 5, '_');
  size_t n = u ? (size_t)(u - id - 5) : 0;
  if (!n || n >= cap || !session_id_valid(id + 5, n)) return -1;
  memcpy(sid, id + 5, n);
  sid[n] = 0;
  return 0;
}

static int key_of(const char *id, char *key, size_t cap) {
  char sid[129];
  if (resp_id_session(id, sid, sizeof sid)) return -1;
  int n = snprintf(key, cap, "%s/%s", sid, id);
  return n > 0 && (size_t)n < cap && store_record_valid(RESP_NS, key) ? 0 : -1;
}

typedef struct waiter {
  req *r;
  resp_lookup *l; /* in the request's context, which lives while the request is referenced */
  void (*done)(req *r, int ok, const char *why);
} waiter;

/* "xlresp1 TURNS\n" OBJECT "\n" ITEMS */
static int parse(resp_lookup *l, const char *v, size_t n) {
  const char *nl = memchr(v, '\n', n);
  unsigned long long turns;
  if (!nl || sscanf(v, "xlresp1 %llu", &turns) != 1) return -1;
  const char *obj = nl + 1, *end = v + n;
  const char *nl2 = memchr(obj, '\n', (size_t)(end - obj));
  if (!nl2) return -1;
  l->turns = turns;
  l->object = xstrndup(obj, (size_t)(nl2 - obj));
  l->items = xstrndup(nl2 + 1, (size_t)(end - nl2 - 1));
  return 0;
}

static void on_got(store_op *op) {
  waiter *w = op->ctx;
  req *r = w->r;
  resp_lookup *l = w->l;
  free(w);
  l->phase = 2;
  if (op->status == STORE_OK) {
    l->got = parse(l, (const char *)op->rec_value, op->rec.len) ? -1 : 0;
    if (l->got) l->why = xstrdup("the stored response is unreadable");
  } else if (op->status == STORE_ABSENT) {
    l->got = 1;
  } else {
    l->got = -1;
    l->why = xstrdup(op->err[0] ? op->err : "store error");
  }
  store_op_free(op);
  r->redispatch = 1;
  req_kick(r);
  req_unref(r);
}

int resp_lookup_run(req *r, resp_lookup *l, const char *id) {
  if (l->phase == 2) return 0;
  if (l->phase == 1) return 1; /* not reached: dispatched again only after the answer */
  char key[STORE_RKEY_CAP];
  if (resp_id_session(id, l->session_id, sizeof l->session_id) || key_of(id, key, sizeof key)) {
    l->phase = 2;
    l->got = 1;
    return 0;
  }
  waiter *w = xcalloc(1, sizeof *w);
  w->r = r, w->l = l;
  store_op *op = store_op_new(SOP_REC_GET, on_got, w);
  if (store_op_record(op, RESP_NS, r->owner, key, NULL, 0, 0)) { /* not reached: key valid */
    store_op_free(op);
    free(w);
    l->phase = 2;
    l->got = 1;
    return 0;
  }
  l->phase = 1;
  req_wait_restore(r); /* the callback's reference */
  store_submit(r->a->store, op);
  return 1;
}

void resp_lookup_free(resp_lookup *l) {
  free(l->why);
  free(l->object);
  free(l->items);
  memset(l, 0, sizeof *l);
}

st_record *resp_record(st_record *out, char *keybuf, size_t cap, const char *id, uint64_t turns,
                       const char *object, const char *items) {
  if (key_of(id, keybuf, cap)) return NULL;
  buf v;
  buf_init(&v);
  buf_printf(&v, "xlresp1 %llu\n%s\n%s", (unsigned long long)turns, object, items);
  out->ns = RESP_NS;
  out->key = keybuf;
  out->len = v.len;
  out->value = (uint8_t *)buf_steal(&v);
  out->ttl_s = RESP_TTL_S;
  return out;
}

static void on_deleted(store_op *op) {
  waiter *w = op->ctx;
  int ok = op->status == STORE_OK ? 1 : op->status == STORE_ABSENT ? 0 : -1;
  w->done(w->r, ok, op->err[0] ? op->err : "store error");
  req_unref(w->r);
  free(w);
  store_op_free(op);
}

void resp_delete(req *r, const char *id, void (*done)(req *r, int ok, const char *why)) {
  char key[STORE_RKEY_CAP];
  if (key_of(id, key, sizeof key)) {
    done(r, 0, NULL);
    return;
  }
  waiter *w = xcalloc(1, sizeof *w);
  w->r = r, w->done = done;
  store_op *op = store_op_new(SOP_REC_DEL, on_deleted, w);
  if (store_op_record(op, RESP_NS, r->owner, key, NULL, 0, 0)) { /* not reached: key valid */
    store_op_free(op);
    free(w);
    done(r, 0, NULL);
    return;
  }
  req_wait_reply(r); /* the callback's reference */
  store_submit(r->a->store, op);
}
