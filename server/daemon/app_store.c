/*
 * app_store.c: the session store inside the daemon. At start it opens the backend (store
 * sqlite: state_dir, SQLite in WAL mode, so a bad directory stops the start; store redis:
 * redis_url, a malformed URL or unreadable password file stops it, an unreachable Redis does
 * not: the daemon starts degraded and the store thread reconnects); once the model is
 * loaded it starts the store thread and creates the session table in front of it; the store
 * thread's completions wake the loop through store_wake (a coalescing uv_async_t), whose
 * callback runs them (store_poll) and pumps MHD once; at exit it hands the sessions whose
 * latest state the store lacks to the store and lets the store thread finish its queue, bounded
 * by the drain deadline. Thread: loop (main) thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app_store.h"
#include "config.h"
#include "store_redis.h"
#include "util.h"
#include "xlog.h"

static void on_store_wake(uv_async_t *h) {
  app *a = h->data;
  if (a->store) store_poll(a->store);
  http_pump(&a->http);
}

static void wake(void *arg) { uv_async_send(arg); } /* store thread: coalescing wake-up */

static st_durability durability(const app *a) {
  if (!a->store_backend || !strcmp(a->cfg->durability, "off")) return DUR_OFF;
  return !strcmp(a->cfg->durability, "async") ? DUR_ASYNC : DUR_TURN;
}

int app_store_open(app *a, char *err, size_t cap) {
  const config *c = a->cfg;
  if (!strcmp(c->store, "redis") && strcmp(c->durability, "off")) {
    store_redis_opts ro = {c->redis_url, c->redis_password_file, c->redis_prefix,
                           (int)c->redis_wait_replicas, (int)c->redis_wait_timeout_ms};
    a->store_backend = store_redis_open(&ro, err, cap);
    if (!a->store_backend) return -1;
  } else if (*c->state_dir && strcmp(c->durability, "off")) {
    a->store_backend = store_sqlite_open(c->state_dir, c->store_fsync, err, cap);
    if (!a->store_backend) return -1;
  }
  store_opts so = {.async_commit_ms = (int)c->async_commit_ms, .max_batch = 64};
  a->store = store_new(a->store_backend, &so, wake, &a->store_wake);
  uv_async_init(a->loop, &a->store_wake, on_store_wake);
  a->store_wake.data = a;
  a->store_wake_open = 1;
  return 0;
}

static void on_probed(store_op *op) {
  app *a = op->ctx;
  a->store_probe_inflight = 0;
  store_op_free(op);
}

static void on_probe_timer(uv_timer_t *h) {
  app *a = h->data;
  if (a->store_probe_inflight || !atomic_load(&g_metrics.store_down)) return;
  a->store_probe_inflight = 1;
  store_op *op = store_op_new(SOP_VERSION, on_probed, a); /* any read reconnects */
  snprintf(op->id, sizeof op->id, "probe");
  store_submit(a->store, op);
}

int app_store_start(app *a, char *err, size_t cap) {
  const config *c = a->cfg;
  if (store_start(a->store, a->model, err, cap)) return -1;
  st_durability d = durability(a);
  a->sessions = st_new(a->model, (size_t)c->session_ram_mb << 20, (double)c->session_ttl,
                       (size_t)c->session_tombstones, a->store, d);
  st_set_key_limits(a->sessions, (size_t)c->max_sessions_per_key,
                    (size_t)c->session_ram_mb_per_key << 20);
  a->prefix_cache = prefix_cache_new(a->model, (size_t)c->prefix_cache_mb << 20);
  st_set_prefix_cache(a->sessions, a->prefix_cache);
  if (d != DUR_OFF && store_shared(a->store)) {
    uv_timer_init(a->loop, &a->store_probe);
    a->store_probe.data = a;
    a->store_probe_open = 1;
    uv_timer_start(&a->store_probe, on_probe_timer, 1000, 1000);
  }
  if (d == DUR_OFF) {
    xlog_msg("info", "store", "sessions live in RAM only (%s)",
             *c->state_dir || !strcmp(c->store, "redis") ? "durability off" : "no state_dir");
  } else if (!strcmp(c->store, "redis")) {
    const char *at = strrchr(c->redis_url, '@'); /* never log a password */
    char what[600];
    int asked = store_redis_durability(a->store_backend, what, sizeof what);
    xlog_msg(asked ? "warn" : "info", "store",
             "session store: Redis at %s%s (prefix %s, shared by the replicas), durability %s; "
             "%s",
             at ? "redis://...@" : "", at ? at + 1 : c->redis_url, c->redis_prefix,
             c->durability, what);
  } else
    xlog_msg("info", "store", "session store: %s/sessions.db (SQLite, WAL), durability %s, %ld "
             "sessions stored",
             c->state_dir, c->durability, store_count(a->store));
  return 0;
}

void app_store_expire(app *a) {
  if (a->sessions) st_expire(a->sessions, now_mono(), 1000);
}

void app_store_shutdown(app *a) {
  if (!a->store) return;
  if (a->store_probe_open) {
    a->store_probe_open = 0;
    uv_timer_stop(&a->store_probe);
    uv_close((uv_handle_t *)&a->store_probe, NULL);
  }
  if (a->sessions) st_flush(a->sessions);
  double now = now_mono();
  double deadline = (a->drain_started > 0 ? a->drain_started : now) + (double)a->cfg->drain_timeout;
  if (deadline < now + 2) deadline = now + 2; /* a last chance for what the drain left */
  store_shutdown(a->store, deadline);
  while (store_poll(a->store) > 0) {
  } /* completions (and the failures of ops they submit after the thread ended) */
  if (a->store_wake_open) {
    a->store_wake_open = 0;
    uv_close((uv_handle_t *)&a->store_wake, NULL);
  }
}

void app_store_free(app *a) {
  if (a->store) {
    store_free(a->store);
    a->store = NULL;
  }
  store_backend_free(a->store_backend);
  a->store_backend = NULL;
}
