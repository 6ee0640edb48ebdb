/*
 * app.h: the daemon's shared context and the per-request record.
 *
 * The loop thread owns everything here: libmicrohttpd (external epoll mode, driven from libuv),
 * the session table, timers, signals and every `req`. Workers only see jobs (job.h) and reach
 * the loop through the scheduler's event list + the `wake` async handle.
 */
#ifndef XLS_APP_H
#define XLS_APP_H

#include <microhttpd.h>
#include <stdint.h>
#include <uv.h>

#include "api_parse.h"
#include "auth.h"
#include "buf.h"
#include "chat.h"
#include "config.h"
#include "http_cors.h"
#include "json_writer.h"
#include "job.h"
#include "metrics.h"
#include "routes.h"
#include "run_quota.h"
#include "scheduler.h"
#include "session_table.h"
#include "xl.h"

typedef enum { APP_LOADING, APP_READY, APP_DRAINING, APP_STOPPING } app_phase;

typedef struct req req;

typedef struct app {
  const config *cfg;
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
  /* http */
  struct MHD_Daemon *mhd;
  uv_poll_t mhd_poll;
  uv_timer_t mhd_timer;
  int in_mhd, rerun;
  int listen_fd_closed;
  struct http_guard *guard; /* connection records, head deadline, per-client limit */
  unsigned short port;
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
  /* requests in progress (any phase), for draining and gauges */
  req *reqs;
  long n_reqs, n_conns, n_jobs;
  long n_new; /* requests still arriving (phase REQ_NEW): they do not hold up a drain */
  uv_timer_t sweep_timer; /* request_timeout for bodies; runs only while n_new > 0 */
  int sweep_on;
} app;

typedef enum {
  REQ_NEW,       /* headers seen, body arriving */
  REQ_RESTORING, /* suspended while the store looks for its session; dispatched again after */
  REQ_WAITING,   /* suspended until the job (or a store operation) completes (non-stream) */
  REQ_STREAMING, /* 200 + SSE headers queued; bytes flow from the job */
  REQ_REPLIED    /* a full response was queued */
} req_phase;

struct req {
  app *a;
  struct MHD_Connection *conn;
  int refs; /* MHD (until NOTIFY_COMPLETED), response (until its free callback), job, handles */
  req *prev, *next;
  req_phase phase;
  route_id route;     /* the metrics label (ROUTE_OTHER until matched) */
  const route *rt;    /* the routes table's row (NULL: none matched) */
  const char *param;  /* its path parameter, inside `path` (NULL: none) */
  size_t param_len;
  char method[16];
  char *path;
  char request_id[80];
  char remote[64];
  uint8_t owner[32];
  double t_start; /* monotonic */
  buf body;
  int too_big;
  int timed_out;
  int suspended;
  int mhd_done;
  /* deferred full reply (non-stream): queued by the access handler after resume */
  int reply_status;
  buf reply_body;
  const char *reply_ctype; /* NULL: application/json */
  const char *retry_after; /* a literal, e.g. "1" */
  size_t body_limit;
  /* session store */
  int lk_have;       /* the store answered this request's lookup (REQ_RESTORING) */
  st_status lk_status;
  char *lk_msg;
  int lk_loops;
  int redispatch;    /* REQ_RESTORING: run the handler again on the next access-handler call */
  int list_limit;
  int replacing;     /* PUT state over an existing (or refused) session: 200, not 201 */
  /* the handler's context (api_generate.c: its gen_req), freed by its on_free hook */
  void *ctx;
  int job_running;  /* a generation was submitted, its DONE not yet processed (drain cancels) */
  int stream_complete;
  int client_gone;
  int sess_reset;       /* X-Session-Reset: 1 */
  char session_id[129];
  /* disconnect watch and SSE pings */
  uv_poll_t dc;
  int dc_open;
  uv_timer_t ping;
  int ping_open;
  double t_stream_read; /* monotonic: MHD last asked the stream for bytes (stream_stall_timeout) */
  /* the handler's hooks (api_generate.c sets them; NULL: none). The HTTP code calls them and
   * knows no generation, job or session behind them. */
  void (*on_close)(req *r);  /* the client left or MHD ended the request: stop its work */
  void (*on_free)(req *r);   /* the record is being freed: release what the handler hung on it */
  /* the access log's work fields, from "tokens_in" to "finish" (dur: the request's seconds) */
  void (*log_fields)(req *r, json_writer *line, double dur);
  /* stream (req_start_stream): move up to max bytes of the body produced so far into out;
   * append bytes to it (0: there is no stream to append to) */
  size_t (*stream_take)(req *r, char *out, size_t max);
  int (*stream_put)(req *r, const char *bytes, size_t n);
  /* log */
  int status;
  int counted; /* in xlserve_requests_total */
  api_err err; /* the error answered (the access log's "error"); API_ERR_NONE: none */
};

/* http_server.c */
int http_start(app *a, char *err, size_t errcap);
void http_pump(app *a);
void http_quiesce(app *a);       /* stop accepting: close the listen socket */
void http_stop(app *a);          /* resume everything, stop MHD */
void req_kick(req *r);           /* resume a suspended connection (loop thread, outside MHD) */
/* A holder of the request besides MHD (a job, a callback): the request is freed when the last
 * holder lets go. The req_wait_* helpers take their callback's reference themselves. */
void req_ref(req *r);
void req_unref(req *r);
void req_reply(req *r, int status, const char *content_type, const char *body, size_t len);
/* Takes body's bytes; a request that waits (REQ_WAITING) gets it through req_defer_reply. */
void req_reply_json(req *r, int status, buf *body);
/* Answers with the error table's row of err (api_errors.h): its status and the OpenAI error
 * object naming param (NULL: null) with the formatted detail as its message. */
void req_error(req *r, api_err err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void req_error_from(req *r, const api_error *e);
void req_start_stream(req *r);
void req_suspend_for_job(req *r);
void req_defer_reply(req *r, int status, buf *body); /* non-stream: store and resume */
/* Suspend until the store answered the lookup (then dispatched again); takes a reference for
 * the lookup's callback, which drops it with req_unref. */
void req_wait_restore(req *r);
/* Suspend until a callback defers the reply; takes a reference for that callback, which drops
 * it with req_unref after req_defer_reply. Call it before (or right after) starting the operation
 * whose callback answers, never after that callback could have run. */
void req_wait_reply(req *r);
void req_watch_disconnect(req *r);

/* Queues a prepared response (headers of every reply added); takes resp. */
void req_queue_response(req *r, int status, struct MHD_Response *resp);

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
