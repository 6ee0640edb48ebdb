/*
 * http_server.h: the MHD server on the libuv loop, the request record and its replies.
 * libmicrohttpd in external epoll mode, driven from the loop (docs/internals.md). The server
 * knows transport only: it reads a request's head and body, answers, streams SSE, watches for
 * a client that leaves, and writes the access log line. What a request means is the owner's
 * (api/): the server calls the hooks it was started with (hooks.head on a request's head,
 * hooks.dispatch once its body is in) and keeps the owner's context in req.ctx for it.
 * Thread: loop thread only (MHD callbacks run inside MHD_run on it).
 */
#ifndef XLS_HTTP_SERVER_H
#define XLS_HTTP_SERVER_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "api_errors.h"
#include "buf.h"
#include "http_cors.h"
#include "json_writer.h"

typedef struct req req;
typedef struct http_server http_server;
struct app;   /* the owner's (api/app.h); the server only carries the pointer */
struct route; /* the owner's routes table row (api/routes.h) */

/* What the owner does with requests; every hook may be NULL except head and dispatch. */
typedef struct http_hooks {
  /* first call, the head only: route, check, and either answer at once or set body_limit */
  void (*head)(req *r);
  /* the body is in (or a REQ_RESTORING request was woken with redispatch): run the handler */
  void (*dispatch)(req *r);
  /* the client left or MHD ended the request: stop its work */
  void (*close)(req *r);
  /* the record is being freed: release req.ctx */
  void (*free_ctx)(req *r);
  /* headers the owner adds to every reply (after X-Request-Id) */
  void (*headers)(req *r, struct MHD_Response *resp);
  /* the access log line: the owner's fields after "status", and after "client_gone" */
  void (*log_fields)(req *r, json_writer *line, double dur);
  void (*log_end)(req *r, json_writer *line);
  /* a request was freed (the owner may finish a drain) */
  void (*request_freed)(void *arg);
  void *arg;
} http_hooks;

/* What the server is started with; fixed for its life (strings and proxies are borrowed). */
typedef struct http_settings {
  uv_loop_t *loop;
  struct app *owner; /* req.a of every request */
  const char *host;
  long long port;
  long long header_timeout, idle_timeout, request_timeout;
  long long max_connections, max_connections_per_client;
  long long ping_interval;        /* seconds between SSE pings (<= 0: none) */
  long long stream_stall_timeout; /* seconds a stream's bytes may wait unread (<= 0: no limit) */
  int access_log;
  char **proxies; /* trusted proxies (X-Forwarded-For, X-Request-Id) */
  int n_proxies;
  const cors_cfg *cors; /* the CORS headers of every reply */
  http_hooks hooks;
} http_settings;

struct http_server {
  http_settings set;
  struct MHD_Daemon *mhd;
  uv_poll_t mhd_poll;
  uv_timer_t mhd_timer;
  uv_idle_t mhd_rerun; /* another MHD_run in the loop's next iteration (http_pump) */
  int in_mhd, rerun;
  int listen_fd_closed;
  int closing;              /* a drain began: every reply says Connection: close */
  struct http_guard *guard; /* connection records, head deadline, per-client limit */
  unsigned short port;
  /* requests in progress (any phase), for draining and gauges */
  req *reqs;
  long n_reqs, n_conns;
  long n_new;             /* requests still arriving (phase REQ_NEW): they do not hold up a drain */
  uv_timer_t sweep_timer; /* request_timeout for bodies, stalled streams; runs while any */
  int sweep_on;
};

typedef enum {
  REQ_NEW,       /* headers seen, body arriving */
  REQ_RESTORING, /* suspended until an operation answers; dispatched again after (redispatch) */
  REQ_WAITING,   /* suspended until the owner defers the reply (non-stream) */
  REQ_STREAMING, /* 200 + SSE headers queued; bytes flow from stream_take */
  REQ_REPLIED    /* a full response was queued */
} req_phase;

struct req {
  struct app *a; /* the owner's (http_settings.owner) */
  http_server *srv;
  struct MHD_Connection *conn;
  int refs; /* MHD (until NOTIFY_COMPLETED), response (until its free callback), the owner's */
  req *prev, *next;
  req_phase phase;
  int route;              /* the metrics label (0 until matched) */
  const struct route *rt; /* the owner's routes table row (NULL: none matched) */
  const char *param;      /* its path parameter, inside `path` (NULL: none) */
  size_t param_len;
  char method[16];
  char *path;
  char request_id[80];
  char remote[64];
  uint8_t owner[32]; /* the API key's owner */
  double t_start;    /* monotonic */
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
  int redispatch; /* REQ_RESTORING: run the handler again on the next access-handler call */
  void *ctx;      /* the owner's context (api/api_ctx.h), freed by hooks.free_ctx */
  int stream_complete;
  int client_gone;
  /* disconnect watch and SSE pings */
  uv_poll_t dc;
  int dc_open;
  uv_timer_t ping;
  int ping_open;
  double t_stream_read; /* monotonic: MHD last asked the stream for bytes (stream_stall_timeout) */
  /* stream (req_start_stream): move up to max bytes of the body produced so far into out;
   * append bytes to it (0: there is no stream to append to) */
  size_t (*stream_take)(req *r, char *out, size_t max);
  int (*stream_put)(req *r, const char *bytes, size_t n);
  /* log */
  int status;
  int counted; /* in xlserve_requests_total */
  api_err err; /* the error answered (the access log's "error"); API_ERR_NONE: none */
};

int http_start(http_server *s, const http_settings *set, char *err, size_t errcap);
void http_pump(http_server *s);
void http_quiesce(http_server *s); /* stop accepting: close the listen socket */
void http_stop(http_server *s);    /* resume everything, stop MHD */
void req_kick(req *r);             /* resume a suspended connection (loop thread, outside MHD) */
/* A request header's value (NULL: absent). */
const char *req_header(req *r, const char *name);
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
/* An error answered at once (never deferred), with one more header (name NULL: none) and msg as
 * the error object's message (param null). */
void req_error_header(req *r, api_err err, const char *name, const char *value, const char *msg);
void req_start_stream(req *r);
void req_suspend_waiting(req *r);
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

#endif
