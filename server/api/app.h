/*
 * app.h: the daemon's shared context (the request record itself: http_server.h; what the
 * handlers hang on it: api_ctx.h).
 *
 * The loop thread owns everything here: the HTTP server (http_server.h), the session table,
 * timers, signals and every `req`. Workers only see jobs (job.h) and reach
 * the loop through the scheduler's event list + the `wake` async handle.
 */
#ifndef XLS_APP_H
#define XLS_APP_H

#include <microhttpd.h>
#include <stdint.h>
#include <uv.h>

#include "api_ctx.h"
#include "api_parse.h"
#include "auth.h"
#include "buf.h"
#include "chat.h"
#include "http_cors.h"
#include "http_server.h"
#include "json_writer.h"
#include "job.h"
#include "metrics.h"
#include "routes.h"
#include "run_quota.h"
#include "scheduler.h"
#include "session_table.h"
#include "xl.h"

typedef enum { APP_LOADING, APP_READY, APP_DRAINING, APP_STOPPING } app_phase;

/* The options the API reads (the daemon fills them from its option table, daemon/config.h). */
typedef struct api_options {
  long long max_prompt_tokens;
  long long max_body_bytes;
  long long workers;
  const char *path_prefix;
  long long max_sessions_per_key, max_running_per_key, max_running_per_client; /* 0: none */
} api_options;

typedef struct app {
  const struct config *cfg; /* the daemon's options (daemon/config.h); the API reads `opt` */
  api_options opt;
  uv_loop_t *loop;
  app_phase phase;
  int exit_code;
  /* the daemon (serve_main.c): called when a request ends; stops the loop once a drain has
   * nothing left to wait for */
  void (*check_drained)(struct app *a);
  /* model (set once loaded; immutable afterwards) */
  xl_model *model;
  char *model_name;
  char fingerprint[24]; /* system_fingerprint: "fp_" + the model's fingerprint in hex */
  int prefill_chunk;
  http_server http; /* the MHD server: every request, the listening port */
  /* loop handles */
  uv_async_t wake;
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t drain_timer, ttl_timer;
  uv_work_t load_work;
  xl_error load_err;
  int load_rc;
  /* work */
  sched *sched;
  sched_event *ev;
  int ev_cap;
  session_table *sessions;
  run_quota *quota; /* generation requests in flight per key and per client */
  prefix_cache *prefix_cache; /* NULL: off (prefix_cache_mb 0) */
  /* session store (app_store.c): its thread's completions wake the loop through store_wake */
  store_backend *store_backend;
  session_store *store;
  uv_async_t store_wake;
  int store_wake_open;
  /* a shared store (Redis) that is unreachable is probed every second, so it reconnects (and
   * /health says ok again) without waiting for a request */
  uv_timer_t store_probe;
  int store_probe_open, store_probe_inflight;
  double drain_started; /* monotonic; bounds the store's flush at exit */
  chat_template tpl;
  parse_limits limits;
  auth_keys keys;
  char **proxies;
  int n_proxies;
  cors_cfg cors; /* cors_origins */
  long n_jobs;
} app;

/* api_request.c: the HTTP server's hooks for the API (head checks, dispatch, the context) */
http_hooks api_http_hooks(app *a);

/* api_*.c: helpers of the handlers (the handlers themselves: routes.h) */
/* The text of token ids (streaming detokeniser: word models' line starts, whole UTF-8). */
void detok_ids(const xl_model *m, const int32_t *ids, size_t n, buf *out);
/* The session id for r: RAM, then the store (ST_PENDING: r waits and is dispatched again). */
st_status req_find_session(req *r, const char *id, session **s);
/* Answers a lookup status other than FOUND and PENDING (MISSING: 404 not found). */
void req_session_error(req *r, const char *id, st_status st);
/* the loop's handling of a job's events (api_generate.c) */
void gen_on_output(req *r);
void gen_on_done(req *r);
void gen_on_job_done(req *r, job *j); /* a DONE event of any of r's jobs */
void gen_cancel(req *r, int by_drain);


#endif
