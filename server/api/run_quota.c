/*
 * run_quota.c: per-key and per-client counts of generation requests in flight (run_quota.h).
 * Thread: loop thread only.
 */
#include "run_quota.h"

#include <stdio.h>
#include <stdlib.h>

#include "strmap.h"
#include "util.h"

struct run_quota {
  long long per_key, per_client;
  strmap counts; /* "k:" + owner hex, "c:" + address -> (long *) */
};

run_quota *rq_new(long long per_key, long long per_client) {
  run_quota *q = xcalloc(1, sizeof *q);
  q->per_key = per_key;
  q->per_client = per_client;
  strmap_init(&q->counts);
  return q;
}

void rq_free(run_quota *q) {
  if (!q) return;
  size_t i = 0;
  for (strmap_entry *e = NULL; (e = strmap_next(&q->counts, &i, e));) free(e->value);
  strmap_free(&q->counts);
  free(q);
}

#define RQ_KEY_CAP (2 + 64 + 1 + 64)

static const char *key_of(char out[RQ_KEY_CAP], const uint8_t owner[32]) {
  out[0] = 'k', out[1] = ':';
  hex_encode(owner, 32, out + 2);
  return out;
}

static const char *client_of(char out[RQ_KEY_CAP], const char *client) {
  snprintf(out, RQ_KEY_CAP, "c:%s", client);
  return out;
}

static long get(const run_quota *q, const char *k) {
  const long *n = strmap_get(&q->counts, k);
  return n ? *n : 0;
}

static void add(run_quota *q, const char *k, long d) {
  long *n = strmap_get(&q->counts, k);
  if (!n) {
    if (d <= 0) return;
    n = xcalloc(1, sizeof *n);
    strmap_put(&q->counts, k, n);
  }
  *n += d;
  if (*n <= 0) free(strmap_del(&q->counts, k));
}

long rq_count_key(const run_quota *q, const uint8_t owner[32]) {
  char k[RQ_KEY_CAP];
  return get(q, key_of(k, owner));
}

long rq_count_client(const run_quota *q, const char *client) {
  char k[RQ_KEY_CAP];
  return client ? get(q, client_of(k, client)) : 0;
}

const char *rq_check(const run_quota *q, const uint8_t owner[32], const char *client) {
  if (q->per_key > 0 && rq_count_key(q, owner) >= q->per_key) return "max_running_per_key";
  if (client && q->per_client > 0 && rq_count_client(q, client) >= q->per_client)
    return "max_running_per_client";
  return NULL;
}

/* Only what a limit applies to is counted (the limits never change). */
static void count(run_quota *q, const uint8_t owner[32], const char *client, long d) {
  char k[RQ_KEY_CAP];
  if (q->per_key > 0) add(q, key_of(k, owner), d);
  if (client && q->per_client > 0) add(q, client_of(k, client), d);
}

void rq_take(run_quota *q, const uint8_t owner[32], const char *client) {
  count(q, owner, client, 1);
}

void rq_release(run_quota *q, const uint8_t owner[32], const char *client) {
  count(q, owner, client, -1);
}
