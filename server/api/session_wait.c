/*
 * session_wait.c: waiting for a session's cancelled turn (see session_wait.h). A client that
 * stops a stream and sends its next turn at once finds the session still held while the
 * cancelled job winds down (a decode step, the turn's end, a commit): its request waits,
 * re-running the handler every few milliseconds, rather than getting 409 session_busy. A
 * session busy with a live turn is still 409 at once. Thread: loop thread only.
 */
#include "session_wait.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "util.h"

#define POLL_MS 5

void session_turn_held(req *r, session *s) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  s->turn_fd1 = ci && ci->connect_fd >= 0 ? (unsigned)ci->connect_fd + 1 : 0;
  s->turn_cancelled = 0;
}

/* Has the holding turn's client gone (FIN or reset read, not yet noticed by its request)? */
static int holder_left(const session *s) {
  if (!s->turn_fd1) return 0;
  char ch;
  ssize_t n = recv((int)s->turn_fd1 - 1, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

typedef struct wait_timer {
  uv_timer_t t;
  req *r;
} wait_timer;

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

static void on_tick(uv_timer_t *t) {
  wait_timer *w = t->data;
  req *r = w->r;
  http_server *srv = r->srv;
  uv_close((uv_handle_t *)&w->t, on_timer_closed);
  r->redispatch = 1;
  req_kick(r); /* the access handler runs the handler again */
  req_unref(r);
  http_pump(srv);
}

int session_wait_cancelled(req *r, session *s, double *since) {
  if (!s->turn_cancelled && !holder_left(s)) return 0;
  double now = now_mono();
  if (*since == 0) *since = now;
  if (now - *since >= SESSION_CANCEL_WAIT_S) return 0;
  wait_timer *w = xcalloc(1, sizeof *w);
  w->r = r;
  uv_timer_init(r->a->loop, &w->t);
  w->t.data = w;
  req_wait_restore(r); /* r's reference, dropped by on_tick */
  uv_timer_start(&w->t, on_tick, POLL_MS, 0);
  return 1;
}
