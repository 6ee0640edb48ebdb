/*
 * metrics.h: Prometheus counters and histograms of the daemon.
 * Owns: the process-wide metric cells (relaxed atomics). Thread: any thread may observe;
 * metrics_render runs on the loop thread (/metrics) and reads gauges passed in by the caller.
 */
#ifndef XLS_METRICS_H
#define XLS_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "buf.h"

#define HIST_MAX_BUCKETS 20

typedef struct histogram {
  const char *name, *help;
  int n_bounds;
  double bounds[HIST_MAX_BUCKETS];
  atomic_uint_fast64_t counts[HIST_MAX_BUCKETS + 1]; /* last = +Inf */
  atomic_uint_fast64_t sum_micro;                    /* sum of observations x 1e6 */
} histogram;

/* Requests are counted by route and status; the routes (their ids and names) belong to whoever
 * routes them: metrics only has room for this many. */
#define METRICS_ROUTES_MAX 16

typedef struct metrics {
  atomic_uint_fast64_t requests[METRICS_ROUTES_MAX][600]; /* [route id][HTTP status] */
  atomic_uint_fast64_t tokens_in, tokens_out;
  atomic_uint_fast64_t cancelled, rejected_queue_full;
  atomic_uint_fast64_t connections_head_timeout, connections_refused_per_client;
  atomic_uint_fast64_t sessions_created, sessions_evicted, sessions_expired, session_resets;
  atomic_uint_fast64_t sessions_restored, sessions_incompatible, store_saves, store_errors;
  /* a shared store (Redis): commits refused by the version check, RAM copies dropped because
   * another replica advanced the session, requests answered 503 store_unavailable, WAITs that
   * fell short, and whether the store is unreachable now (the store thread sets it) */
  atomic_uint_fast64_t store_conflicts, sessions_stale, store_unavailable, store_wait_shortfalls;
  /* writes whose outcome is unknown (a lost reply, an I/O error after the commit), and Redis
   * index updates (listing, expiry) that failed after their row was written */
  atomic_uint_fast64_t store_outcome_unknown, store_index_errors;
  atomic_int store_down;
  /* prefix cache (prefix_cache.h): lookups that found a prefix or none, prompt tokens not fed
   * thanks to it, entries evicted (LRU, budget), and its bytes and entries now */
  atomic_uint_fast64_t prefix_cache_hits, prefix_cache_misses, prefix_cache_tokens_saved,
      prefix_cache_evictions, prefix_cache_bytes, prefix_cache_entries;
  histogram ttft, inter_token, queue_wait, duration, batch_size, batch_tokens, forward_seconds,
      store_read, store_write, store_swap,
      restore; /* batch_size also gives the forward pass/row totals */
} metrics;

extern metrics g_metrics;

void metrics_init(void);
void hist_observe(histogram *h, double v);
static inline void ctr_add(atomic_uint_fast64_t *c, uint64_t v) {
  atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

typedef struct metrics_gauges {
  long queue_depth, running, streams_paused, streams_open, connections, sessions_in_ram, sessions_in_store,
      session_ram_bytes, workers;
  int ready, draining;
} metrics_gauges;

/* route_names[i]: the label of requests[i] (n_routes <= METRICS_ROUTES_MAX). */
void metrics_render(buf *out, const metrics_gauges *g, const char *const *route_names,
                    int n_routes);

#endif
