/*
 * http_server.c (http_server.h): libmicrohttpd 0.9.75 in external epoll mode, driven by the libuv loop
 * (docs/internals.md): MHD's epoll fd under a uv_poll_t, a uv_timer_t fed by
 * MHD_get_timeout after every MHD_run, a uv_idle_t for a run asked for again (never a loop of
 * runs inside one callback), suspend/resume only on the loop thread, a per-request
 * UV_DISCONNECT watch while the owner's work runs, SSE via a callback response that suspends when
 * it has nothing to send (never returns 0 without suspending: that would spin).
 * Owns: the MHD daemon, every req (refcounted), the access log line, reply helpers; what a
 * request means is the owner's (http_hooks). Thread: loop thread only (MHD callbacks run inside MHD_run on it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_server.h"

#include "dlist.h"
#include "http_content_length.h"
#include "http_cors.h"
#include "http_guard.h"
#include "http_raw_reply.h"
#include "json_writer.h"
#include "metrics.h"
#include "util.h"
#include "xlog.h"

/* ------------------------------------------------------------------------------------------ */
/* pump */

static void on_mhd_timer(uv_timer_t *t) { http_pump(t->data); }

static void on_mhd_poll(uv_poll_t *p, int status, int events) {
  (void)status, (void)events;
  http_pump(p->data);
}

static void on_mhd_rerun(uv_idle_t *h) {
  uv_idle_stop(h);
  http_pump(h->data);
}

/* One MHD_run per call. A run asked for again (a pump from inside MHD_run, a closed connection:
 * see on_connection) comes in the loop's next iteration, after its I/O and timers: looping here
 * instead would starve them (job events, the sweep) for as long as every run closes a
 * connection, which clients that open one per request keep true under load. */
void http_pump(http_server *a) {
  if (!a->mhd) return;
  if (a->in_mhd) {
    a->rerun = 1;
    return;
  }
  a->in_mhd = 1;
  a->rerun = 0;
  MHD_run(a->mhd);
  a->in_mhd = 0;
  if (a->rerun) uv_idle_start(&a->mhd_rerun, on_mhd_rerun);
  MHD_UNSIGNED_LONG_LONG to;
  if (MHD_get_timeout(a->mhd, &to) == MHD_YES)
    uv_timer_start(&a->mhd_timer, on_mhd_timer, to > INT32_MAX ? INT32_MAX : (uint64_t)to, 0);
  else
    uv_timer_stop(&a->mhd_timer);
}

/* ------------------------------------------------------------------------------------------ */
/* request records */

static void req_free(req *r) {
  http_server *a = r->srv;
  double dur = now_mono() - r->t_start;
  int status = r->status ? r->status : 499;
  if (!r->counted) ctr_add(&g_metrics.requests[r->route][status], 1);
  hist_observe(&g_metrics.duration, dur);
  if (a->set.access_log) {
    buf l;
    buf_init(&l);
    json_writer w;
    jw_init(&w, &l);
    jw_object(&w);
    xlog_ts(&w, now_wall() - dur);
    jw_kstring(&w, "event", "request");
    jw_kstring(&w, "request_id", r->request_id);
    jw_kstring(&w, "remote", r->remote);
    jw_kstring(&w, "method", r->method);
    jw_kstring(&w, "path", r->path ? r->path : "");
    jw_kint(&w, "status", status);
    if (a->set.hooks.log_fields) a->set.hooks.log_fields(r, &w, dur);
    else jw_kfixed(&w, "duration_ms", dur * 1e3, 3);
    if (r->err) jw_kstring(&w, "error", api_err_code(r->err));
    if (r->client_gone) jw_kbool(&w, "client_gone", 1);
    if (a->set.hooks.log_end) a->set.hooks.log_end(r, &w);
    jw_end(&w);
    xlog_write(l.p, l.len);
    buf_free(&l);
  }
  if (r->phase == REQ_NEW) a->n_new--;
  req *no_tail = NULL; /* the list of requests keeps no tail */
  DLIST_REMOVE(a->reqs, no_tail, r, prev, next);
  (void)no_tail;
  a->n_reqs--;
  if (a->set.hooks.free_ctx) a->set.hooks.free_ctx(r);
  buf_free(&r->body);
  buf_free(&r->reply_body);
  free(r->path);
  free(r);
  if (a->set.hooks.request_freed) a->set.hooks.request_freed(a->set.hooks.arg);
}

void req_ref(req *r) { r->refs++; }

void req_unref(req *r) {
  if (--r->refs == 0) req_free(r);
}

static void on_handle_closed(uv_handle_t *h) { req_unref(h->data); }

static void close_watchers(req *r) {
  if (r->dc_open) {
    r->dc_open = 0;
    uv_poll_stop(&r->dc); /* EPOLL_CTL_DEL now, before MHD closes (and may reuse) the fd */
    uv_close((uv_handle_t *)&r->dc, on_handle_closed);
  }
  if (r->ping_open) {
    r->ping_open = 0;
    uv_timer_stop(&r->ping);
    uv_close((uv_handle_t *)&r->ping, on_handle_closed);
  }
}

void req_kick(req *r) {
  if (r->suspended && !r->mhd_done) {
    r->suspended = 0;
    MHD_resume_connection(r->conn);
  }
}

static void client_left(req *r) {
  r->client_gone = 1;
  if (r->srv->set.hooks.close) r->srv->set.hooks.close(r);
  req_kick(r);
  http_pump(r->srv);
}

/* An SSE comment (": ping") on a stream: keeps proxies' read timers fed while it waits, and
 * makes a peer that closed for good answer with a reset. */
static void stream_ping(req *r) {
  if (!r->stream_put || r->stream_complete || r->client_gone) return;
  if (!r->stream_put(r, ": ping\n\n", 8)) return;
  req_kick(r);
  http_pump(r->srv);
}

/* After a stream's FIN: epoll always reports an error (a reset), whatever was asked for, and
 * UV_PRIORITIZED asks for nothing HTTP uses. One event stops it either way: a reset is the
 * client gone; urgent (out-of-band) data is level-triggered and would spin the loop, so the
 * stream then relies on its writes alone (MHD's next failed write ends it). */
static void on_reset(uv_poll_t *h, int status, int events) {
  (void)events;
  uv_poll_stop(h);
  if (status < 0) client_left(h->data);
}

/* The peer's FIN (UV_DISCONNECT) or an error. A FIN may be a half-close (shutdown(SHUT_WR) after
 * sending, which HTTP/1.1 allows; the peer still reads) or a full close: from this side the two
 * look the same until something is written. A stream is served on: it writes a ping at once
 * and watches for the reset with which a peer that closed for good answers it (so a stream
 * still queued or in its prefill is cancelled at once too). A request that writes nothing
 * until its end (non-stream) takes the FIN as the client gone, so an abandoned generation stops
 * within a decode step instead of running to max_tokens for nobody. */
static void on_disconnect(uv_poll_t *h, int status, int events) {
  req *r = h->data;
  if (status >= 0 && !(events & UV_DISCONNECT)) return;
  if (status >= 0 && r->phase == REQ_STREAMING) {
    uv_poll_start(h, UV_PRIORITIZED, on_reset); /* the FIN is level-triggered: stop asking */
    stream_ping(r);
    return;
  }
  uv_poll_stop(h);
  client_left(r);
}

void req_watch_disconnect(req *r) {
  if (r->dc_open) return;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return;
  int rc = uv_poll_init(r->srv->set.loop, &r->dc, ci->connect_fd);
  if (rc) {
    xlog_msg("warn", "disconnect_watch", "uv_poll_init(fd %d): %s", ci->connect_fd, uv_strerror(rc));
    return;
  }
  r->dc.data = r;
  r->dc_open = 1;
  r->refs++;
  uv_poll_start(&r->dc, UV_DISCONNECT, on_disconnect);
}

static void on_ping(uv_timer_t *t) { stream_ping(t->data); }

static void set_phase(req *r, req_phase p) {
  if (r->phase == REQ_NEW && p != REQ_NEW) r->srv->n_new--;
  r->phase = p;
}

/* A stream whose client reads nothing (stream_stall_timeout): MHD holds bytes for it (the
 * connection is not suspended) and has not asked for more since the deadline. Its generation is
 * cancelled and the socket shut down, so MHD closes the connection. */
static int stream_stalled(const req *r, double now) {
  long long limit = r->srv->set.stream_stall_timeout;
  return r->phase == REQ_STREAMING && limit > 0 && !r->suspended && !r->mhd_done &&
         !r->client_gone && now - r->t_stream_read > (double)limit;
}

static void stream_stall_close(req *r) {
  xlog_msg("warn", "stream_stalled", "request %s: its client read nothing for %llds "
           "(stream_stall_timeout): the stream is cancelled", r->request_id,
           r->srv->set.stream_stall_timeout);
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  r->client_gone = 1;
  if (r->srv->set.hooks.close) r->srv->set.hooks.close(r);
  if (ci) shutdown(ci->connect_fd, SHUT_RDWR);
}

/* Requests whose body stalls past request_timeout: shutting the socket down makes MHD see the
 * end of the connection on its next event and close it (MHD has no deadline of its own, and a
 * FIN that arrives with the last data can go unnoticed until the idle timeout). Streams whose
 * client stopped reading (stream_stall_timeout). Runs while either kind is there. */
static void on_sweep(uv_timer_t *t) {
  http_server *a = t->data;
  double now = now_mono();
  int streams = 0;
  for (req *r = a->reqs; r; r = r->next) {
    if (r->phase == REQ_STREAMING && !r->mhd_done) {
      streams++;
      if (stream_stalled(r, now)) stream_stall_close(r);
      continue;
    }
    if (r->phase != REQ_NEW || r->timed_out || r->mhd_done) continue;
    if (now - r->t_start <= (double)a->set.request_timeout) continue;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->timed_out = 1;
    r->err = API_ERR_REQUEST_TIMEOUT;
    r->status = api_err_status(API_ERR_REQUEST_TIMEOUT);
    if (ci) shutdown(ci->connect_fd, SHUT_RDWR);
  }
  if (a->n_new == 0 && !streams) {
    uv_timer_stop(&a->sweep_timer);
    a->sweep_on = 0;
  }
  http_pump(a);
}

static void start_sweep(http_server *a) {
  if (a->sweep_on) return;
  a->sweep_on = 1;
  uv_timer_start(&a->sweep_timer, on_sweep, 1000, 1000);
}

/* ------------------------------------------------------------------------------------------ */
/* responses */

static void add_headers(req *r, struct MHD_Response *resp) {
  MHD_add_response_header(resp, "X-Request-Id", r->request_id);
  if (r->srv->set.hooks.headers) r->srv->set.hooks.headers(r, resp);
  if (r->retry_after) MHD_add_response_header(resp, "Retry-After", r->retry_after);
  if (r->srv->closing) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  cors_add_headers(r->srv->set.cors, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin"), resp);
}

static void queue(req *r, int status, struct MHD_Response *resp) {
  add_headers(r, resp);
  if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
  if (MHD_queue_response(r->conn, (unsigned)status, resp) != MHD_YES)
    xlog_msg("error", "queue_response", "MHD_queue_response failed (status %d)", status);
  MHD_destroy_response(resp);
  r->status = status;
  if (!r->counted && status >= 100 && status < 600) { /* counted when answered */
    r->counted = 1;
    ctr_add(&g_metrics.requests[r->route][status], 1);
  }
  set_phase(r, REQ_REPLIED);
}

void req_queue_response(req *r, int status, struct MHD_Response *resp) { queue(r, status, resp); }

void req_reply(req *r, int status, const char *ctype, const char *body, size_t len) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  queue(r, status, resp);
}

static void reply_buf(req *r, int status, const char *ctype, buf *body) {
  size_t n = body->len;
  char *p = buf_steal(body);
  struct MHD_Response *resp = MHD_create_response_from_buffer(n, p, MHD_RESPMEM_MUST_FREE);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  queue(r, status, resp);
}

void req_reply_json(req *r, int status, buf *body) {
  if (r->phase == REQ_WAITING) req_defer_reply(r, status, body); /* queued after the resume */
  else reply_buf(r, status, "application/json", body);
}

void req_error(req *r, api_err err, const char *param, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  buf b;
  buf_init(&b);
  api_err_body(&b, err, param, msg);
  r->err = err;
  req_reply_json(r, api_err_status(err), &b);
}

void req_error_from(req *r, const api_error *e) { req_error(r, e->err, e->param, "%s", e->message); }

void req_error_header(req *r, api_err err, const char *name, const char *value, const char *msg) {
  buf b;
  buf_init(&b);
  api_err_body(&b, err, NULL, msg);
  r->err = err;
  size_t n = b.len;
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(n, buf_steal(&b), MHD_RESPMEM_MUST_FREE);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  if (name) MHD_add_response_header(resp, name, value);
  queue(r, api_err_status(err), resp);
}

/* SSE body: copies what the handler produced (stream_take); suspends when there is nothing
 * (never returns 0 without suspending); -1 after the last bytes; -2 when the client is gone. */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
  (void)pos;
  req *r = cls;
  if (r->client_gone) return MHD_CONTENT_READER_END_WITH_ERROR;
  r->t_stream_read = now_mono(); /* MHD has room: the client reads */
  size_t n = r->stream_take(r, out, max);
  if (n) return (ssize_t)n;
  if (r->stream_complete) return MHD_CONTENT_READER_END_OF_STREAM;
  r->suspended = 1;
  MHD_suspend_connection(r->conn);
  return 0;
}

static void stream_free(void *cls) { req_unref(cls); }

void req_start_stream(req *r) {
  struct MHD_Response *resp =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, r, stream_free);
  r->refs++; /* released by stream_free */
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  queue(r, 200, resp);
  set_phase(r, REQ_STREAMING);
  r->t_stream_read = now_mono();
  start_sweep(r->srv);
  req_watch_disconnect(r);
  long long iv = r->srv->set.ping_interval;
  if (iv > 0) {
    uv_timer_init(r->srv->set.loop, &r->ping);
    r->ping.data = r;
    r->ping_open = 1;
    r->refs++;
    uv_update_time(r->srv->set.loop); /* the loop's cached clock may be a busy iteration old: the
                                 * first ping comes a full interval after the stream opens */
    uv_timer_start(&r->ping, on_ping, (uint64_t)iv * 1000, (uint64_t)iv * 1000);
  }
}

void req_suspend_waiting(req *r) {
  set_phase(r, REQ_WAITING);
  r->suspended = 1;
  MHD_suspend_connection(r->conn);
  req_watch_disconnect(r);
}

void req_defer_reply(req *r, int status, buf *body) {
  r->reply_status = status;
  buf_free(&r->reply_body);
  r->reply_body = *body;
  buf_init(body);
  req_kick(r);
}

void req_wait_restore(req *r) {
  r->refs++; /* the lookup callback's, dropped when it has run */
  set_phase(r, REQ_RESTORING);
  r->suspended = 1;
  MHD_suspend_connection(r->conn);
}

void req_wait_reply(req *r) {
  r->refs++; /* the callback's, dropped when it has run */
  set_phase(r, REQ_WAITING);
  r->suspended = 1;
  MHD_suspend_connection(r->conn);
}

/* ------------------------------------------------------------------------------------------ */
/* access handler */

static void peer_address(req *r) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  snprintf(r->remote, sizeof r->remote, "?");
  if (!ci || !ci->client_addr) return;
  const struct sockaddr *sa = ci->client_addr;
  socklen_t sl = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  getnameinfo(sa, sl, r->remote, sizeof r->remote, NULL, 0, NI_NUMERICHOST);
}

static int header_token_ok(const char *s, size_t max) {
  size_t n = strlen(s);
  if (!n || n > max) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '"' || s[i] == '\\')
      return 0;
  return 1;
}

static const char *hdr(req *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *req_header(req *r, const char *name) { return hdr(r, name); }

static req *req_new(http_server *a, struct MHD_Connection *c, const char *url, const char *method) {
  req *r = xcalloc(1, sizeof *r);
  r->a = a->set.owner;
  r->srv = a;
  r->conn = c;
  r->refs = 1;
  r->t_start = now_mono();
  snprintf(r->method, sizeof r->method, "%s", method);
  r->path = xstrdup(url);
  buf_init(&r->body);
  buf_init(&r->reply_body);
  req *no_tail = NULL;
  DLIST_PUSH_FRONT(a->reqs, no_tail, r, prev, next);
  (void)no_tail;
  a->n_reqs++;
  a->n_new++;
  start_sweep(a);
  peer_address(r);
  int trusted = guard_trusts(a->guard, r->remote);
  const char *rid = hdr(r, "X-Request-Id");
  if (trusted && rid && header_token_ok(rid, 64)) {
    snprintf(r->request_id, sizeof r->request_id, "%s", rid);
  } else {
    uint8_t b[12];
    random_bytes(b, sizeof b);
    hex_encode(b, sizeof b, r->request_id);
  }
  const char *xff = trusted ? hdr(r, "X-Forwarded-For") : NULL;
  if (xff) {
    /* the rightmost address that is not one of our proxies is the client */
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", xff);
    char *end = tmp + strlen(tmp);
    while (end > tmp) {
      char *comma = end;
      while (comma > tmp && comma[-1] != ',') comma--;
      char *s = comma;
      while (*s == ' ') s++;
      char *e = end;
      while (e > s && e[-1] == ' ') e--;
      *e = 0;
      if (*s && !guard_trusts(a->guard, s)) {
        if (header_token_ok(s, sizeof r->remote - 1)) memcpy(r->remote, s, strlen(s) + 1);
        break;
      }
      end = comma > tmp ? comma - 1 : tmp;
    }
  }
  return r;
}

/* 400 for a head whose framing or URL cannot be trusted; the connection is closed after it
 * (whatever follows on it could be read differently by a proxy in front: request smuggling). */
static void reply_malformed(req *r, const char *problem) {
  const char *conn = r->srv->closing ? NULL : MHD_HTTP_HEADER_CONNECTION; /* else said already */
  req_error_header(r, API_ERR_MALFORMED_REQUEST, conn, "close", problem);
}

static void dispatch(req *r) { r->srv->set.hooks.dispatch(r); }

static enum MHD_Result ahc(void *cls, struct MHD_Connection *c, const char *url,
                           const char *method, const char *version, const char *upload_data,
                           size_t *upload_size, void **con_cls) {
  http_server *a = cls;
  req *r = *con_cls;
  if (!r) {
    guard_request_started(a->guard, c);
    r = req_new(a, c, url, method);
    *con_cls = r;
    const char *problem = guard_head_problem(c, method, version);
    if (problem) reply_malformed(r, problem);
    else a->set.hooks.head(r);
    return MHD_YES;
  }
  if (*upload_size) {
    if (r->phase == REQ_NEW && !r->too_big) {
      if (r->body.len + *upload_size > r->body_limit) {
        r->too_big = 1; /* chunked upload: refuse on the final call */
        buf_free(&r->body);
      } else {
        buf_add(&r->body, upload_data, *upload_size);
      }
    }
    *upload_size = 0;
    if (now_mono() - r->t_start > (double)a->set.request_timeout) {
      r->err = API_ERR_REQUEST_TIMEOUT;
      r->status = api_err_status(API_ERR_REQUEST_TIMEOUT);
      return MHD_NO;
    }
    return MHD_YES;
  }
  switch (r->phase) {
    case REQ_NEW:
      if (r->too_big) {
        req_error(r, API_ERR_BODY_TOO_LARGE, NULL,
                  "the request body exceeds %zu bytes", r->body_limit);
        return MHD_YES;
      }
      dispatch(r);
      return MHD_YES;
    case REQ_RESTORING:
      if (r->redispatch) { /* the store answered: the handler runs again */
        r->redispatch = 0;
        dispatch(r);
        return MHD_YES;
      }
      if (r->client_gone) return MHD_NO;
      r->suspended = 1; /* resumed early (spurious): wait again */
      MHD_suspend_connection(c);
      return MHD_YES;
    case REQ_WAITING:
      if (r->reply_status) {
        buf b = r->reply_body;
        buf_init(&r->reply_body);
        int st = r->reply_status;
        r->reply_status = 0;
        reply_buf(r, st, r->reply_ctype ? r->reply_ctype : "application/json", &b);
        return MHD_YES;
      }
      if (r->client_gone) return MHD_NO; /* closes the connection */
      r->suspended = 1;                  /* resumed early (spurious): wait again */
      MHD_suspend_connection(c);
      return MHD_YES;
    default:
      return MHD_YES;
  }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  http_server *a = cls;
  guard_request_done(a->guard, c);
  req *r = *con_cls;
  if (!r) return;
  *con_cls = NULL;
  r->mhd_done = 1;
  r->suspended = 0;
  if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
    if (r->phase == REQ_STREAMING && !r->stream_complete) r->client_gone = 1;
    if (r->phase == REQ_WAITING || r->phase == REQ_NEW || r->phase == REQ_RESTORING)
      r->client_gone = 1;
  }
  close_watchers(r);
  if (a->set.hooks.close) a->set.hooks.close(r);
  req_unref(r);
}

/* A closed connection makes room under the connection limit, but MHD puts its listening socket
 * back into its epoll set only at the start of its next run (it takes it out while at the
 * limit, or after accept() ran out of descriptors, and counts the closed connections down at
 * the end of a run). When that run closed the last connections, nothing would ever wake the
 * loop again: no socket is left in MHD's epoll set and MHD_get_timeout says "no timeout", so
 * the queued clients were never accepted. One more run after any close (in the loop's next
 * iteration: http_pump) re-arms the listener. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  http_server *a = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    a->n_conns++;
    guard_conn_started(a->guard, c, socket_context);
  } else {
    a->n_conns--;
    guard_conn_closed(a->guard, socket_context);
    a->rerun = 1; /* inside MHD_run (or MHD_stop_daemon, where it is moot) */
  }
}

/* libmicrohttpd 0.9.75 reports, just before it queues its own reply to a Content-Length it
 * cannot parse (a reply whose header block it then writes twice), with these two messages. The
 * daemon answers that request itself at this point, once, in the API's error shape. */
static void refuse_content_length(http_server *a) {
  int too_large = 0;
  int fd = guard_take_bad_content_length(a->guard, &too_large);
  if (fd < 0) return; /* none found: MHD answers it */
  api_err err = too_large ? API_ERR_BODY_TOO_LARGE : API_ERR_INVALID_CONTENT_LENGTH;
  raw_reply_error(fd, err,
                  too_large ? CONTENT_LENGTH_OUT_OF_RANGE_MESSAGE : CONTENT_LENGTH_NOT_NUMBER_MESSAGE);
  /* counted like a malformed head: no route was chosen (route 0, "other") */
  ctr_add(&g_metrics.requests[0][api_err_status(err)], 1);
}

static int starts_with(const char *s, const char *prefix) {
  return !strncmp(s, prefix, strlen(prefix));
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  http_server *a = cls;
  if (a->guard && (starts_with(fmt, "Failed to parse `Content-Length' header.") ||
                   starts_with(fmt, "Too large value of 'Content-Length' header.")))
    refuse_content_length(a);
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n') msg[--n] = 0;
  xlog_msg("warn", "mhd", "%s", msg);
}

static void mhd_panic(void *cls, const char *file, unsigned int line, const char *reason) {
  (void)cls;
  xlog_msg("fatal", "mhd_panic", "%s:%u: %s", file, line, reason ? reason : "");
  abort();
}

static void pump_cb(void *a) { http_pump(a); }

int http_start(http_server *a, const http_settings *set, char *err, size_t errcap) {
  a->set = *set;
  const http_settings *c = &a->set;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  unsigned int flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, c->host, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)c->port);
  } else if (inet_pton(AF_INET6, c->host, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)c->port);
    flags |= MHD_USE_IPv6;
  } else {
    snprintf(err, errcap, "option host: '%s' is not an IPv4 or IPv6 address", c->host);
    return -1;
  }
  MHD_set_panic_func(mhd_panic, a);
  guard_settings gs = {.loop = c->loop, .header_timeout = c->header_timeout,
                       .idle_timeout = c->idle_timeout,
                       .max_per_client = c->max_connections_per_client,
                       .proxies = c->proxies, .n_proxies = c->n_proxies,
                       .pump = pump_cb, .pump_arg = a};
  a->guard = guard_new(&gs);
  a->mhd = MHD_start_daemon(
      flags, 0, guard_accept_policy, a->guard, ahc, a, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, a,
      MHD_OPTION_UNESCAPE_CALLBACK, guard_unescape, a, MHD_OPTION_URI_LOG_CALLBACK, guard_uri_seen, a->guard,
      MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
      MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)c->max_connections,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)c->idle_timeout,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
      a, MHD_OPTION_NOTIFY_CONNECTION, on_connection, a, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, (int)1, MHD_OPTION_END);
  if (!a->mhd) {
    snprintf(err, errcap, "cannot listen on %s:%lld (MHD_start_daemon failed: %s)", c->host,
             c->port, strerror(errno));
    guard_free(a->guard); /* its timer is closed by the loop's last run */
    a->guard = NULL;
    return -1;
  }
  const union MHD_DaemonInfo *pi = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_BIND_PORT);
  a->port = pi ? pi->port : (unsigned short)c->port;
  const union MHD_DaemonInfo *ei = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_EPOLL_FD);
  uv_poll_init(c->loop, &a->mhd_poll, ei->epoll_fd);
  a->mhd_poll.data = a;
  uv_poll_start(&a->mhd_poll, UV_READABLE, on_mhd_poll);
  uv_timer_init(c->loop, &a->mhd_timer);
  a->mhd_timer.data = a;
  uv_idle_init(c->loop, &a->mhd_rerun);
  a->mhd_rerun.data = a;
  uv_timer_init(c->loop, &a->sweep_timer);
  a->sweep_timer.data = a;
  http_pump(a);
  return 0;
}

void http_quiesce(http_server *a) {
  if (!a->mhd || a->listen_fd_closed) return;
  MHD_socket fd = MHD_quiesce_daemon(a->mhd);
  if (fd != MHD_INVALID_SOCKET) close(fd); /* MHD no longer owns it; refuse new connections now */
  a->listen_fd_closed = 1;
}

void http_stop(http_server *a) {
  if (!a->mhd) return;
  uv_poll_stop(&a->mhd_poll);
  uv_timer_stop(&a->mhd_timer);
  for (req *r = a->reqs; r; r = r->next) {
    r->client_gone = 1;
    req_kick(r); /* MHD_stop_daemon aborts with suspended connections left */
  }
  a->in_mhd = 1;
  MHD_stop_daemon(a->mhd); /* runs on_completed and the response free callbacks */
  a->in_mhd = 0;
  a->mhd = NULL;
  guard_free(a->guard); /* every connection record went with MHD_stop_daemon */
  a->guard = NULL;
  uv_close((uv_handle_t *)&a->mhd_poll, NULL);
  uv_close((uv_handle_t *)&a->mhd_timer, NULL);
  uv_close((uv_handle_t *)&a->mhd_rerun, NULL);
  uv_timer_stop(&a->sweep_timer);
  uv_close((uv_handle_t *)&a->sweep_timer, NULL);
}
