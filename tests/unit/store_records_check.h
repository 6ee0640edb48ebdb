/*
 * store_records_check.h: the keyed-record contract of a store backend (store_record in
 * session_store.h), checked the same way on SQLite (test_server_store.c) and Redis
 * (test_server_store_redis.c): put/get/replace/delete, the (ns, owner, key) scoping, expiry,
 * and a record written by a row's put or append only when that write is (its compare-and-set
 * holds). Included by one test file each (static functions). Thread: the test's.
 */
#ifndef XLS_STORE_RECORDS_CHECK_H
#define XLS_STORE_RECORDS_CHECK_H

#include <string.h>
#include <unistd.h>

#include "session_store.h"
#include "testlib.h"
#include "util.h"

static void rec_of(store_record *r, const char *ns, uint8_t owner_byte, const char *key,
                   const char *value, double ttl_s) {
  memset(r, 0, sizeof *r);
  snprintf(r->ns, sizeof r->ns, "%s", ns);
  memset(r->owner, owner_byte, 32);
  snprintf(r->key, sizeof r->key, "%s", key);
  r->value = (const uint8_t *)value;
  r->len = value ? strlen(value) : 0;
  r->expires = now_wall() + ttl_s;
}

/* The record (ns, owner_byte, key) reads as `want` (NULL: absent). */
static int rec_reads(const store_backend_ops *B, store_conn *c, const char *ns, uint8_t owner_byte,
                     const char *key, const char *want) {
  store_record r;
  char err[512];
  rec_of(&r, ns, owner_byte, key, NULL, 0);
  int rc = B->rec_get(c, &r, err, sizeof err);
  if (!want) return rc == 1;
  return rc == 0 && r.len == strlen(want) && (r.len == 0 || !memcmp(r.value, want, r.len)) &&
         r.expires > now_wall();
}

/* id: a session id the backend does not hold yet (owner 7). */
static void check_backend_records(const store_backend_ops *B, store_conn *c, const char *id) {
  char err[512];
  store_record r;
  CHECK(B->rec_put && B->rec_get && B->rec_del);
  CHECK(B->begin(c, err, sizeof err) == 0);
  rec_of(&r, "resp", 7, "resp_1", "{\"a\":1}", 60);
  CHECK(B->rec_put(c, &r, err, sizeof err) == 0);
  rec_of(&r, "resp", 8, "resp_1", "owner 8's", 60); /* another owner: another record */
  CHECK(B->rec_put(c, &r, err, sizeof err) == 0);
  rec_of(&r, "other", 7, "resp_1", "", 60); /* another namespace; an empty value */
  CHECK(B->rec_put(c, &r, err, sizeof err) == 0);
  rec_of(&r, "resp", 7, "gone", "x", -1); /* expired already */
  CHECK(B->rec_put(c, &r, err, sizeof err) == 0);
  rec_of(&r, "resp", 7, "short", "y", 0.3);
  CHECK(B->rec_put(c, &r, err, sizeof err) == 0);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(rec_reads(B, c, "resp", 7, "resp_1", "{\"a\":1}"));
  CHECK(rec_reads(B, c, "resp", 8, "resp_1", "owner 8's"));
  CHECK(rec_reads(B, c, "other", 7, "resp_1", ""));
  CHECK(rec_reads(B, c, "resp", 7, "resp_2", NULL));
  CHECK(rec_reads(B, c, "resp", 7, "gone", NULL));
  CHECK(rec_reads(B, c, "resp", 7, "short", "y"));
  usleep(400000);
  CHECK(rec_reads(B, c, "resp", 7, "short", NULL)); /* expired since */
  /* replaced, then deleted */
  CHECK(B->begin(c, err, sizeof err) == 0);
  rec_of(&r, "resp", 7, "resp_1", "{\"a\":2}", 60);
  CHECK(B->rec_put(c, &r, err, sizeof err) == 0);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(rec_reads(B, c, "resp", 7, "resp_1", "{\"a\":2}"));
  CHECK(B->begin(c, err, sizeof err) == 0);
  rec_of(&r, "resp", 7, "resp_1", NULL, 0);
  CHECK(B->rec_del(c, &r, err, sizeof err) == 0);
  CHECK(B->rec_del(c, &r, err, sizeof err) == 1);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(rec_reads(B, c, "resp", 7, "resp_1", NULL));
  CHECK(rec_reads(B, c, "resp", 8, "resp_1", "owner 8's"));

  /* a record carried by a row's write: kept with it, and not when the write is refused */
  uint8_t state[64];
  for (size_t i = 0; i < sizeof state; i++) state[i] = (uint8_t)i;
  store_row w;
  memset(&w, 0, sizeof w);
  snprintf(w.id, sizeof w.id, "%s", id);
  memset(w.owner, 7, 32);
  w.fingerprint = 42;
  w.last_used = 10;
  w.meta = (const uint8_t *)"m";
  w.meta_len = 1;
  w.state = state;
  w.state_len = sizeof state;
  w.seq = 1;
  w.snap_id = 5;
  w.cas = 1;
  char key[200];
  snprintf(key, sizeof key, "%s/k1", id);
  rec_of(&r, "idem", 7, key, "answer 1", 60);
  w.rec = &r;
  int created = 0;
  CHECK(B->begin(c, err, sizeof err) == 0);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(rec_reads(B, c, "idem", 7, key, "answer 1"));
  store_delta d = {2, (const uint8_t *)"dm", 2, state, 8};
  store_row after;
  memset(&after, 0, sizeof after);
  w.seq = 2;
  snprintf(key, sizeof key, "%s/k2", id);
  rec_of(&r, "idem", 7, key, "answer 2", 60);
  CHECK(B->begin(c, err, sizeof err) == 0);
  CHECK(B->append(c, &w, &d, &after, err, sizeof err) == 0 && after.n_deltas == 1);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(rec_reads(B, c, "idem", 7, key, "answer 2"));
  /* version 2 is taken: the append is refused, and its record is not written */
  snprintf(key, sizeof key, "%s/k3", id);
  rec_of(&r, "idem", 7, key, "answer 3", 60);
  CHECK(B->begin(c, err, sizeof err) == 0);
  CHECK(B->append(c, &w, &d, &after, err, sizeof err) == 1);
  if (B->shared) { /* a refused compare-and-set of a whole state: no record either */
    w.seq = 2;
    CHECK(B->put(c, &w, &created, err, sizeof err) == 1);
  }
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(rec_reads(B, c, "idem", 7, key, NULL));
  B->release(c);
}

#endif
