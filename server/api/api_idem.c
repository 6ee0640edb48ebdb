/*
 * api_idem.c: the Idempotency-Key of a turn (api_idem.h): the header's checks, the lookup of
 * the key's record through the session store (the request waits, then runs again), the
 * replayed answer, and the set of keys whose request is running (so a retry that arrives
 * while the first is still running never runs beside it).
 * Record value: "xlidem1 DIGEST TOKENS\n" followed by the answer's JSON body (empty: none).
 * Thread: loop thread only.
 */
#include "api_idem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "session_store.h"
#include "sha256.h"
#include "strmap.h"
#include "util.h"

#define IDEM_NS "idem"
#define IDEM_TTL_S (24.0 * 3600) /* how long a key's answer is kept */
#define IDEM_KEY_MAX 255

static strmap RUNNING; /* "OWNERHEX RKEY" -> the request running it (loop thread) */
static int RUNNING_INIT;

static void running_key(const struct req *r, const idem_req *q, char *out, size_t cap) {
  char hex[65];
  hex_encode(r->owner, 32, hex);
  snprintf(out, cap, "%s %s", hex, q->rkey);
}

int idem_begin(struct req *r, idem_req *q) {
  const char *k = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
  if (!k) return 0;
  size_t n = strlen(k);
  int ok = n >= 1 && n <= IDEM_KEY_MAX;
  for (size_t i = 0; ok && i < n; i++) ok = k[i] >= 0x21 && k[i] <= 0x7e;
  if (!ok) {
    req_error(r, API_ERR_INVALID_VALUE, "Idempotency-Key",
              "Idempotency-Key must be 1-%d printable ASCII characters without spaces",
              IDEM_KEY_MAX);
    return 1;
  }
  q->on = 1;
  q->key = xstrdup(k);
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, r->path, strlen(r->path) + 1);
  if (r->body.len) sha256_update(&c, r->body.p, r->body.len);
  uint8_t d[32];
  sha256_final(&c, d);
  hex_encode(d, 32, q->digest);
  return 0;
}

typedef struct lookup {
  struct req *r;
  idem_req *q; /* in the request's context, which lives while the request is referenced */
} lookup;

static void on_record(store_op *op) {
  lookup *l = op->ctx;
  struct req *r = l->r;
  idem_req *q = l->q;
  free(l);
  if (q->phase == 1) {
    q->phase = 2;
    q->got = op->status == STORE_OK ? 0 : op->status == STORE_ABSENT ? 1 : -1;
    if (!q->got) {
      q->value = op->rec_value;
      q->len = op->rec.len;
      op->rec_value = NULL;
    } else if (q->got < 0) {
      q->why = xstrdup(op->err[0] ? op->err : "store error");
    }
  }
  store_op_free(op);
  r->redispatch = 1;
  req_kick(r);
  req_unref(r);
}

static void unregister(struct req *r, idem_req *q) {
  if (!q->registered) return;
  char k[600];
  running_key(r, q, k, sizeof k);
  if (strmap_get(&RUNNING, k) == r) strmap_del(&RUNNING, k);
  q->registered = 0;
}

/* The recorded answer of the key: replayed, 409 (kept, no answer) or 422 (another body). */
static void answer_recorded(struct req *r, idem_req *q) {
  const char *p = (const char *)q->value, *nl = memchr(p, '\n', q->len);
  char digest[65] = "";
  unsigned long long tokens = 0;
  if (!nl || sscanf(p, "xlidem1 %64s %llu", digest, &tokens) != 2) {
    req_error(r, API_ERR_IDEMPOTENT_TURN_KEPT, "Idempotency-Key",
              "the turn of Idempotency-Key '%s' was kept but its record is unreadable", q->key);
    return;
  }
  if (strcmp(digest, q->digest)) {
    req_error(r, API_ERR_IDEMPOTENCY_KEY_REUSED, "Idempotency-Key",
              "Idempotency-Key '%s' was used for another request (another body or endpoint); "
              "a key names one request",
              q->key);
    return;
  }
  size_t off = (size_t)(nl + 1 - p);
  if (off == q->len) {
    req_error(r, API_ERR_IDEMPOTENT_TURN_KEPT, "Idempotency-Key",
              "the turn of Idempotency-Key '%s' was kept (the session's session_tokens is %llu "
              "after it) but its answer was not recorded (it ended in an error, was cancelled, "
              "or its other choices were still running); it is not run again",
              q->key, tokens);
    return;
  }
  ACTX(r)->idem_replayed = 1;
  buf b;
  buf_init(&b);
  buf_add(&b, p + off, q->len - off);
  req_reply_json(r, 200, &b);
  buf_free(&b);
}

int idem_stage(struct req *r, idem_req *q, const char *sid) {
  if (!q->on || !sid || !session_id_valid(sid, strlen(sid)) || q->phase == 3) return 0;
  app *a = r->a;
  if (q->phase == 0) {
    if (!RUNNING_INIT) {
      strmap_init(&RUNNING);
      RUNNING_INIT = 1;
    }
    snprintf(q->rkey, sizeof q->rkey, "%s/%s", sid, q->key);
    char k[600];
    running_key(r, q, k, sizeof k);
    if (strmap_get(&RUNNING, k)) {
      req_error(r, API_ERR_IDEMPOTENCY_IN_PROGRESS, "Idempotency-Key",
                "a request with Idempotency-Key '%s' is still running on session %s; retry "
                "after it has answered",
                q->key, sid);
      return 1;
    }
    strmap_put(&RUNNING, k, r);
    q->registered = 1;
    lookup *l = xcalloc(1, sizeof *l);
    l->r = r, l->q = q;
    store_op *op = store_op_new(SOP_REC_GET, on_record, l);
    if (store_op_record(op, IDEM_NS, r->owner, q->rkey, NULL, 0, 0)) { /* not reached */
      store_op_free(op);
      free(l);
      q->phase = 3;
      return 0;
    }
    q->phase = 1;
    req_wait_restore(r); /* the callback's reference */
    store_submit(a->store, op);
    return 1;
  }
  if (q->phase == 1) return 1; /* not reached: dispatched again only after the answer */
  /* phase 2: the store answered */
  if (q->got == 1) {
    q->phase = 3; /* a new key: the turn runs */
    return 0;
  }
  unregister(r, q);
  if (q->got < 0) {
    r->retry_after = "1";
    ctr_add(&g_metrics.store_unavailable, 1);
    req_error(r, API_ERR_STORE_UNAVAILABLE, NULL,
              "the session store could not say whether Idempotency-Key '%s' was used: %s", q->key,
              q->why ? q->why : "store error");
    return 1;
  }
  answer_recorded(r, q);
  return 1;
}

st_record *idem_record(idem_req *q, st_record *out, uint64_t session_tokens, const buf *body) {
  if (!q->on || q->phase != 3) return NULL;
  buf v;
  buf_init(&v);
  buf_printf(&v, "xlidem1 %s %llu\n", q->digest, (unsigned long long)session_tokens);
  if (body && body->len) buf_add(&v, body->p, body->len);
  out->ns = IDEM_NS;
  out->key = q->rkey;
  out->len = v.len;
  out->value = (uint8_t *)buf_steal(&v);
  out->ttl_s = IDEM_TTL_S;
  return out;
}

void idem_answered(struct req *r, idem_req *q) { unregister(r, q); }

void idem_end(struct req *r, idem_req *q) {
  unregister(r, q);
  free(q->key);
  free(q->value);
  free(q->why);
  memset(q, 0, sizeof *q);
}
