/*
 * prefix_cache.c: packed memories of prompt prefixes, keyed by model, weights mode, memory
 * dtype, prefill chunk and tokens, LRU within a byte limit (see prefix_cache.h).
 * Threads: any (one mutex guards the map, the LRU and the counts; states are packed and
 * copied outside it: an entry's state is immutable once inserted and lives while referenced).
 */
#include "prefix_cache.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlist.h"
#include "job.h"
#include "metrics.h"
#include "strmap.h"
#include "util.h"
#include "xlog.h"

struct pc_entry {
  prefix_cache *pc;
  pc_entry *prev, *next; /* LRU: head = most recently used */
  char key[17];          /* hex of hash */
  int32_t *tokens;       /* [n] */
  int n;
  xl_state *state; /* packed: the memory after feeding tokens[0..n) (immutable) */
  size_t bytes;
  int refs; /* jobs about to copy it, + 1 while in the map */
};

struct prefix_cache {
  pthread_mutex_t mu;
  const xl_model *model;
  uint64_t seed; /* model fingerprint, weights mode and memory dtype folded */
  size_t max_bytes, allowance, bytes;
  strmap map; /* key -> entry */
  pc_entry *head, *tail;
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

prefix_cache *prefix_cache_new(const xl_model *model, size_t max_bytes) {
  if (!max_bytes) return NULL;
  prefix_cache *pc = xcalloc(1, sizeof *pc);
  pthread_mutex_init(&pc->mu, NULL);
  pc->model = model;
  pc->max_bytes = max_bytes;
  pc->allowance = (size_t)-1;
  uint64_t id[3] = {xl_model_fingerprint(model), (uint64_t)xl_model_weights(model),
                    (uint64_t)xl_model_kv_dtype(model)};
  pc->seed = fnv(14695981039346656037ULL, id, sizeof id);
  strmap_init(&pc->map);
  return pc;
}

static void entry_free(pc_entry *e) {
  xl_state_free(e->state);
  free(e->tokens);
  free(e);
}

/* mu held: drops e from the map and the LRU; freed now or by its last reference. */
static void unlink_entry(prefix_cache *pc, pc_entry *e) {
  strmap_del(&pc->map, e->key);
  DLIST_REMOVE(pc->head, pc->tail, e, prev, next);
  pc->bytes -= e->bytes;
  if (--e->refs == 0) entry_free(e);
}

void prefix_cache_free(prefix_cache *pc) {
  if (!pc) return;
  while (pc->tail) unlink_entry(pc, pc->tail); /* no job holds one by now */
  strmap_free(&pc->map);
  pthread_mutex_destroy(&pc->mu);
  free(pc);
}

static size_t limit(const prefix_cache *pc) {
  return pc->allowance < pc->max_bytes ? pc->allowance : pc->max_bytes;
}

/* mu held: evicts least recently used entries until `need` more bytes fit. */
static void shrink(prefix_cache *pc, size_t need) {
  size_t lim = limit(pc);
  while (pc->tail && (pc->bytes + need > lim)) {
    unlink_entry(pc, pc->tail);
    ctr_add(&g_metrics.prefix_cache_evictions, 1);
  }
  atomic_store(&g_metrics.prefix_cache_bytes, pc->bytes);
  atomic_store(&g_metrics.prefix_cache_entries, pc->map.n);
}

void prefix_cache_fit(prefix_cache *pc, size_t allowance) {
  if (!pc) return;
  pthread_mutex_lock(&pc->mu);
  pc->allowance = allowance;
  shrink(pc, 0);
  pthread_mutex_unlock(&pc->mu);
}

size_t prefix_cache_bytes(prefix_cache *pc) {
  if (!pc) return 0;
  pthread_mutex_lock(&pc->mu);
  size_t n = pc->bytes;
  pthread_mutex_unlock(&pc->mu);
  return n;
}

size_t prefix_cache_entries(prefix_cache *pc) {
  if (!pc) return 0;
  pthread_mutex_lock(&pc->mu);
  size_t n = pc->map.n;
  pthread_mutex_unlock(&pc->mu);
  return n;
}

/* The key of tokens[0..n) for prefill chunk `chunk`, continuing h (the hash of the tokens
 * before `from`). */
static void key_of(uint64_t h, int chunk, int n, char out[17]) {
  uint64_t k = fnv(h, &chunk, sizeof chunk);
  k = fnv(k, &n, sizeof n);
  snprintf(out, 17, "%016" PRIx64, k);
}

void prefix_cache_attach(prefix_cache *pc, job *j, int hint) {
  j->prefix.pc = pc;
  if (!pc || j->feed.input_has_pending || j->score.prompt || j->params->chunk <= 0 ||
      j->links.parked)
    return;
  if (xl_state_tokens_fed(j->sess->state) != 0) return; /* only an empty memory */
  int within = j->feed.n_input - 1; /* the last token is always fed: its row gives the logprobs */
  if (hint >= 0 && hint < within) within = hint;
  int top = within / j->params->chunk; /* boundaries 1..top (in chunks) */
  if (top <= 0 || xl_model_config(j->params->model)->mem_len <= 0) return;
  char *keys = xmalloc((size_t)top * 17);
  uint64_t h = pc->seed;
  for (int k = 1; k <= top; k++) {
    h = fnv(h, j->feed.input + (size_t)(k - 1) * (size_t)j->params->chunk,
            sizeof(int32_t) * (size_t)j->params->chunk);
    key_of(h, j->params->chunk, k * j->params->chunk, keys + (size_t)(k - 1) * 17);
  }
  pc_entry *hit = NULL;
  pthread_mutex_lock(&pc->mu);
  for (int k = top; k >= 1 && !hit; k--) {
    pc_entry *e = strmap_get(&pc->map, keys + (size_t)(k - 1) * 17);
    if (e && e->n == k * j->params->chunk &&
        !memcmp(e->tokens, j->feed.input, sizeof(int32_t) * (size_t)e->n))
      hit = e;
  }
  if (hit) {
    hit->refs++;
    DLIST_REMOVE(pc->head, pc->tail, hit, prev, next);
    DLIST_PUSH_FRONT(pc->head, pc->tail, hit, prev, next);
  }
  pthread_mutex_unlock(&pc->mu);
  free(keys);
  if (hit) {
    j->prefix.hit = hit;
    ctr_add(&g_metrics.prefix_cache_hits, 1);
  } else {
    ctr_add(&g_metrics.prefix_cache_misses, 1);
  }
  if (!hit || hit->n < top * j->params->chunk) j->prefix.store_at = top * j->params->chunk;
}

int prefix_cache_apply(job *j) {
  pc_entry *e = j->prefix.hit;
  j->prefix.applied = 1;
  if (!e) return 0;
  if (xl_state_unpack(j->sess->state, e->state, &j->run.error) != XL_OK) {
    xlog_msg("error", "prefix_cache", "a cached prefix could not be used: %s",
             j->run.error.message);
    memset(&j->run.error, 0, sizeof j->run.error);
    return 0; /* the state is unchanged: the prompt is fed from its start */
  }
  session_digest_tokens(j->sess, j->feed.input, e->n);
  j->run.pos = e->n;
  ctr_add(&g_metrics.prefix_cache_tokens_saved, (uint64_t)e->n);
  ctr_add(&g_metrics.tokens_in, (uint64_t)e->n); /* in the memory as if fed */
  return 0;
}

void prefix_cache_capture(job *j) {
  prefix_cache *pc = j->prefix.pc;
  int n = j->prefix.store_at;
  j->prefix.store_at = 0;
  if (!pc || n <= 0) return;
  xl_state *packed = NULL;
  xl_error err;
  memset(&err, 0, sizeof err);
  if (xl_state_pack(j->sess->state, &packed, &err) != XL_OK) return;
  pc_entry *e = xcalloc(1, sizeof *e);
  e->pc = pc;
  e->n = n;
  e->tokens = xmalloc(sizeof(int32_t) * (size_t)n);
  memcpy(e->tokens, j->feed.input, sizeof(int32_t) * (size_t)n);
  e->state = packed;
  e->bytes = xl_state_bytes(packed) + sizeof(int32_t) * (size_t)n + sizeof *e;
  e->refs = 1;
  uint64_t h = pc->seed;
  h = fnv(h, j->feed.input, sizeof(int32_t) * (size_t)n);
  key_of(h, j->params->chunk, n, e->key);
  pthread_mutex_lock(&pc->mu);
  int keep = !strmap_get(&pc->map, e->key) && e->bytes <= limit(pc);
  if (keep) {
    shrink(pc, e->bytes);
    strmap_put(&pc->map, e->key, e);
    DLIST_PUSH_FRONT(pc->head, pc->tail, e, prev, next);
    pc->bytes += e->bytes;
    atomic_store(&g_metrics.prefix_cache_bytes, pc->bytes);
    atomic_store(&g_metrics.prefix_cache_entries, pc->map.n);
  }
  pthread_mutex_unlock(&pc->mu);
  if (!keep) entry_free(e);
}

void prefix_cache_release(job *j) {
  pc_entry *e = j->prefix.hit;
  if (!e) return;
  j->prefix.hit = NULL;
  prefix_cache *pc = e->pc;
  pthread_mutex_lock(&pc->mu);
  int last = --e->refs == 0;
  pthread_mutex_unlock(&pc->mu);
  if (last) entry_free(e);
}
