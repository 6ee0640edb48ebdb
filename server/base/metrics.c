/*
 * metrics.c: Prometheus text exposition of g_metrics (see metrics.h).
 */
#include "metrics.h"

#include <string.h>

metrics g_metrics;

static void hist_init(histogram *h, const char *name, const char *help, const double *b, int n) {
  h->name = name, h->help = help, h->n_bounds = n;
  memcpy(h->bounds, b, sizeof(double) * (size_t)n);
}

void metrics_init(void) {
  memset(&g_metrics, 0, sizeof g_metrics);
  static const double lat[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                               0.5,   1,      2.5,   5,    10,    30,   60,  120};
  static const double itl[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                               0.1,    0.2,   0.5,   1,     2,    5};
  static const double bs[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  static const double bt[] = {1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096};
  metrics *m = &g_metrics;
  hist_init(&m->ttft, "xlserve_time_to_first_token_seconds",
            "Time from request arrival to the first generated token.", lat, 16);
  hist_init(&m->inter_token, "xlserve_inter_token_seconds",
            "Time between two consecutive tokens of one generation.", itl, 13);
  hist_init(&m->queue_wait, "xlserve_queue_wait_seconds",
            "Time a generation waited before its first forward pass.", lat, 16);
  hist_init(&m->duration, "xlserve_request_duration_seconds",
            "Time from request arrival to its completion.", lat, 16);
  hist_init(&m->batch_size, "xlserve_batch_size", "Sessions in one batched forward pass.", bs, 10);
  hist_init(&m->batch_tokens, "xlserve_batch_tokens", "Tokens in one batched forward pass.", bt,
            10);
  hist_init(&m->forward_seconds, "xlserve_forward_seconds", "Duration of one batched forward.",
            itl, 13);
  static const double st[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                              0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  hist_init(&m->store_read, "xlserve_store_read_seconds",
            "Session store: reading and decoding one session (store thread).", st, 16);
  hist_init(&m->store_write, "xlserve_store_write_seconds",
            "Session store: a write's batch from its start to its commit (store thread).", st, 16);
  hist_init(&m->store_swap, "xlserve_store_swap_seconds",
            "Session store: a compaction's swap, the transaction that makes its new snapshot the "
            "session's.", st, 16);
  hist_init(&m->restore, "xlserve_session_restore_seconds",
            "A session brought back from the store, as the request saw it (queue, read, decode).",
            st, 16);
}

void hist_observe(histogram *h, double v) {
  int i = 0;
  while (i < h->n_bounds && v > h->bounds[i]) i++;
  atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
  if (v > 0)
    atomic_fetch_add_explicit(&h->sum_micro, (uint_fast64_t)(v * 1e6), memory_order_relaxed);
}

static uint64_t ld(atomic_uint_fast64_t *c) {
  return atomic_load_explicit(c, memory_order_relaxed);
}

static uint64_t hist_count(histogram *h) {
  uint64_t n = 0;
  for (int i = 0; i <= h->n_bounds; i++) n += ld(&h->counts[i]);
  return n;
}

static void counter(buf *o, const char *name, const char *help, uint64_t v) {
  buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
             (unsigned long long)v);
}

static void gauge(buf *o, const char *name, const char *help, long v) {
  buf_printf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %ld\n", name, help, name, name, v);
}

static void hist_render(buf *o, histogram *h) {
  buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
  uint64_t cum = 0;
  for (int i = 0; i <= h->n_bounds; i++) {
    cum += ld(&h->counts[i]);
    if (i < h->n_bounds)
      buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[i], (unsigned long long)cum);
    else
      buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)cum);
  }
  buf_printf(o, "%s_sum %.6f\n%s_count %llu\n", h->name, (double)ld(&h->sum_micro) / 1e6, h->name,
             (unsigned long long)cum);
}

void metrics_render(buf *o, const metrics_gauges *g, const char *const *route_names,
                    int n_routes) {
  metrics *m = &g_metrics;
  buf_adds(o, "# HELP xlserve_requests_total HTTP requests by route and status.\n"
              "# TYPE xlserve_requests_total counter\n");
  for (int r = 0; r < n_routes && r < METRICS_ROUTES_MAX; r++)
    for (int s = 100; s < 600; s++) {
      uint64_t v = ld(&m->requests[r][s]);
      if (v)
        buf_printf(o, "xlserve_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_names[r],
                   s, (unsigned long long)v);
    }
  counter(o, "xlserve_prompt_tokens_total", "Tokens fed from prompts.", ld(&m->tokens_in));
  counter(o, "xlserve_completion_tokens_total", "Tokens generated.", ld(&m->tokens_out));
  /* one batch_size observation per forward pass, of its rows: whole numbers, so the sum is exact */
  counter(o, "xlserve_forward_passes_total", "Batched forward passes.", hist_count(&m->batch_size));
  counter(o, "xlserve_forward_rows_total", "Session rows over all forward passes.",
          ld(&m->batch_size.sum_micro) / 1000000);
  counter(o, "xlserve_generations_cancelled_total", "Generations cancelled (client gone, drain).",
          ld(&m->cancelled));
  counter(o, "xlserve_queue_full_total", "Requests refused with 429 (queue full).",
          ld(&m->rejected_queue_full));
  counter(o, "xlserve_connections_head_timeout_total",
          "Connections closed for sending no complete request head in time (header_timeout).",
          ld(&m->connections_head_timeout));
  counter(o, "xlserve_connections_refused_per_client_total",
          "Connections refused at accept: their address held max_connections_per_client.",
          ld(&m->connections_refused_per_client));
  counter(o, "xlserve_sessions_created_total", "Sessions created.", ld(&m->sessions_created));
  counter(o, "xlserve_sessions_evicted_total", "Sessions evicted from RAM (budget).",
          ld(&m->sessions_evicted));
  counter(o, "xlserve_sessions_expired_total", "Sessions expired (TTL).", ld(&m->sessions_expired));
  counter(o, "xlserve_session_resets_total", "Sessions reset by an edited chat history.",
          ld(&m->session_resets));
  counter(o, "xlserve_sessions_restored_total", "Sessions brought back into RAM from the store.",
          ld(&m->sessions_restored));
  counter(o, "xlserve_sessions_incompatible_total",
          "Stored sessions refused (another model or format, or corrupted): 409.",
          ld(&m->sessions_incompatible));
  counter(o, "xlserve_store_saves_total", "Session saves committed to the store.",
          ld(&m->store_saves));
  counter(o, "xlserve_store_errors_total", "Session store operations that failed.",
          ld(&m->store_errors));
  counter(o, "xlserve_store_conflicts_total",
          "Commits refused because another replica wrote the session first (409).",
          ld(&m->store_conflicts));
  counter(o, "xlserve_sessions_stale_total",
          "RAM copies dropped because another replica advanced the stored session.",
          ld(&m->sessions_stale));
  counter(o, "xlserve_store_unavailable_total",
          "Requests answered 503 store_unavailable (the store failed or is unreachable).",
          ld(&m->store_unavailable));
  counter(o, "xlserve_store_wait_shortfalls_total",
          "Redis commits that fewer replicas than redis_wait_replicas acknowledged in time.",
          ld(&m->store_wait_shortfalls));
  counter(o, "xlserve_store_outcome_unknown_total",
          "Session writes whose outcome is unknown (the reply was lost, or an I/O error after "
          "the commit): 503 store_outcome_unknown; the session is re-read from the store.",
          ld(&m->store_outcome_unknown));
  counter(o, "xlserve_store_index_errors_total",
          "Redis index updates (listing, expiry) that failed after their session was written; "
          "repaired at the next write.",
          ld(&m->store_index_errors));
  counter(o, "xlserve_prefix_cache_hits_total",
          "New prompts that started from a cached prefix's memory (prefix_cache_mb).",
          ld(&m->prefix_cache_hits));
  counter(o, "xlserve_prefix_cache_misses_total",
          "New prompts of at least one prefill chunk that found no cached prefix.",
          ld(&m->prefix_cache_misses));
  counter(o, "xlserve_prefix_cache_tokens_saved_total",
          "Prompt tokens not fed because their memory came from the prefix cache.",
          ld(&m->prefix_cache_tokens_saved));
  counter(o, "xlserve_prefix_cache_evictions_total",
          "Prefix cache entries evicted (its size, or the session RAM budget).",
          ld(&m->prefix_cache_evictions));
  gauge(o, "xlserve_prefix_cache_bytes", "RAM held by the prefix cache.",
        (long)ld(&m->prefix_cache_bytes));
  gauge(o, "xlserve_prefix_cache_entries", "Prefixes held by the prefix cache.",
        (long)ld(&m->prefix_cache_entries));
  gauge(o, "xlserve_store_up", "0 while the session store is unreachable, else 1.",
        !atomic_load_explicit(&m->store_down, memory_order_relaxed));
  gauge(o, "xlserve_ready", "1 when serving (model loaded, not draining).", g->ready);
  gauge(o, "xlserve_draining", "1 while draining after SIGTERM.", g->draining);
  gauge(o, "xlserve_queue_depth", "Generations waiting for a running slot.", g->queue_depth);
  gauge(o, "xlserve_running", "Generations admitted to the scheduler.", g->running);
  gauge(o, "xlserve_streams_paused",
        "Streamed generations paused until their client reads (they hold no running slot).",
        g->streams_paused);
  gauge(o, "xlserve_streams_open", "Requests in progress (streaming or waiting).", g->streams_open);
  gauge(o, "xlserve_connections", "Open HTTP connections.", g->connections);
  gauge(o, "xlserve_workers", "Worker threads.", g->workers);
  gauge(o, "xlserve_sessions_in_ram", "Sessions held in RAM.", g->sessions_in_ram);
  gauge(o, "xlserve_sessions_in_store", "Sessions in the durable store.", g->sessions_in_store);
  gauge(o, "xlserve_session_ram_bytes", "RAM accounted to sessions.", g->session_ram_bytes);
  hist_render(o, &m->ttft);
  hist_render(o, &m->inter_token);
  hist_render(o, &m->queue_wait);
  hist_render(o, &m->duration);
  hist_render(o, &m->batch_size);
  hist_render(o, &m->batch_tokens);
  hist_render(o, &m->forward_seconds);
  hist_render(o, &m->store_read);
  hist_render(o, &m->store_write);
  hist_render(o, &m->store_swap);
  hist_render(o, &m->restore);
}
