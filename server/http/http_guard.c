/*
 * http_guard.c: connection records, the request-head deadline, the per-client-address limit,
 * the %00-aware URL unescaper, the raw-NUL check, the request-framing checks and the search for
 * the connection whose Content-Length libmicrohttpd is refusing (see http_guard.h).
 * Thread: loop thread only.
 *
 * The head deadline: libmicrohttpd's own connection timeout is an idle timeout that every
 * received byte restarts, so a client dripping one byte per second holds its connection (and a
 * slot under max_connections) for ever. Each connection that waits for a request head sits in
 * one of three FIFO lists, each ordered by deadline because its deadlines are "start + a
 * constant":
 *   first: accepted, no request yet; deadline = accept + header_timeout
 *   later: kept alive after a response; deadline = end of it + idle_timeout + header_timeout
 *          (idle_timeout 0 means a kept-alive connection may wait for ever: no deadline)
 *   ended: kept alive after a response, but the client had already half-closed (its FIN is
 *          read, nothing follows it): no request can come any more, close it now. MHD itself
 *          can miss that FIN when it arrived with the request (edge-triggered epoll, and MHD
 *          stops reading after a short read), and the client, reading until the end, would
 *          wait for idle_timeout. The deadline is "now": the timer runs after the current
 *          MHD_run, so a pipelined request MHD already buffered starts first and is served.
 * One one-shot timer is armed for the earliest head of the three. A connection past its deadline
 * is shut down (SHUT_RDWR): MHD sees the hang-up on its next run and closes it.
 */
#include "http_guard.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "dlist.h"
#include "http_content_length.h"
#include "metrics.h"
#include "strmap.h"
#include "util.h"
#include "xlog.h"

typedef struct conn_rec conn_rec;

typedef struct wait_list {
  conn_rec *head, *tail;
} wait_list;

struct conn_rec {
  conn_rec *prev, *next; /* in the wait list `list` (NULL: none) */
  wait_list *list;
  double deadline; /* monotonic seconds */
  int fd;
  int counted;     /* holds one count in per_addr */
  int nul_in_url;  /* the unescaper decoded a %00 in this request's URL */
  const char *raw_uri; /* this request's URI in MHD's read buffer, before decoding */
  size_t raw_uri_len;  /* its length as a C string then (a raw NUL byte cuts it short) */
  struct MHD_Connection *conn;
  conn_rec *head_prev, *head_next; /* in the guard's `heads` while in_head */
  int in_head; /* its request line arrived, the access handler has not run yet */
  char addr[INET6_ADDRSTRLEN];
};

struct http_guard {
  guard_settings set;
  uv_timer_t timer;
  wait_list lists[3]; /* first, later, ended */
  wait_list heads;    /* connections between a request line and the access handler's first call */
  strmap per_addr; /* numeric address -> open connections (as intptr_t) */
  /* warnings are rate-limited: an attack must not flood the log */
  double warned_at;
  long cut_unlogged, refused_unlogged;
};

/* ------------------------------------------------------------------------------------------ */
/* wait lists and the timer */

static void list_remove(conn_rec *cr) {
  wait_list *l = cr->list;
  if (!l) return;
  DLIST_REMOVE(l->head, l->tail, cr, prev, next);
  cr->list = NULL;
}

static void list_append(wait_list *l, conn_rec *cr) {
  list_remove(cr);
  cr->list = l;
  DLIST_APPEND(l->head, l->tail, cr, prev, next);
}

/* the connection's request head is in progress (request line seen), or no longer */
static void head_begin(http_guard *g, conn_rec *cr) {
  if (cr->in_head) return;
  cr->in_head = 1;
  DLIST_APPEND(g->heads.head, g->heads.tail, cr, head_prev, head_next);
}

static void head_end(http_guard *g, conn_rec *cr) {
  if (!cr->in_head) return;
  cr->in_head = 0;
  DLIST_REMOVE(g->heads.head, g->heads.tail, cr, head_prev, head_next);
}

enum { LIST_FIRST, LIST_LATER, LIST_ENDED };

static void on_deadline(uv_timer_t *t);
static void arm(http_guard *g);

/* cr waits for a request head in list i (its deadline set); re-arms when it is the new head */
static void wait_head(http_guard *g, conn_rec *cr, int i) {
  list_append(&g->lists[i], cr);
  if (g->lists[i].head == cr) arm(g);
}

static void arm(http_guard *g) {
  conn_rec *next = NULL;
  for (int i = 0; i < 3; i++) {
    conn_rec *h = g->lists[i].head;
    if (h && (!next || h->deadline < next->deadline)) next = h;
  }
  if (!next) {
    uv_timer_stop(&g->timer);
    return;
  }
  double ms = (next->deadline - now_mono()) * 1e3;
  uv_timer_start(&g->timer, on_deadline, ms <= 0 ? 0 : (uint64_t)ms + 1, 0);
}

static void warn_limited(http_guard *g) {
  double now = now_mono();
  if (now - g->warned_at < 5.0) return;
  g->warned_at = now;
  if (g->cut_unlogged)
    xlog_msg("warn", "header_timeout",
             "closed %ld connection(s) that sent no complete request head within the deadline "
             "(header_timeout %llds)", g->cut_unlogged, g->set.header_timeout);
  if (g->refused_unlogged)
    xlog_msg("warn", "client_connection_limit",
             "refused %ld connection(s) from addresses already holding "
             "max_connections_per_client (%lld)", g->refused_unlogged,
             g->set.max_per_client);
  g->cut_unlogged = g->refused_unlogged = 0;
}

static void on_deadline(uv_timer_t *t) {
  http_guard *g = t->data;
  double now = now_mono() + 0.001; /* the timer has millisecond resolution */
  int cut = 0;
  for (int i = 0; i < 3; i++) {
    conn_rec *cr;
    while ((cr = g->lists[i].head) && cr->deadline <= now) {
      list_remove(cr);
      shutdown(cr->fd, SHUT_RDWR); /* after what was sent: the FIN follows the response */
      if (i != LIST_ENDED) {
        ctr_add(&g_metrics.connections_head_timeout, 1);
        g->cut_unlogged++;
      }
      cut = 1;
    }
  }
  if (cut) warn_limited(g);
  arm(g);
  if (cut) g->set.pump(g->set.pump_arg);
}

/* ------------------------------------------------------------------------------------------ */
/* connection records */

static void addr_key(const struct sockaddr *sa, char *out, size_t cap) {
  out[0] = 0;
  if (!sa) return;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)cap);
}

/* Addresses the per-client limit does not apply to: a trusted proxy speaks for many clients,
 * and this host's own loopback address (a proxy, tool or benchmark on the same machine). */
static int is_exempt(const http_guard *g, const char *addr) {
  if (!strcmp(addr, "127.0.0.1") || !strcmp(addr, "::1")) return 1;
  return guard_trusts(g, addr);
}

int guard_trusts(const http_guard *g, const char *addr) {
  for (int i = 0; i < g->set.n_proxies; i++)
    if (!strcmp(g->set.proxies[i], addr)) return 1;
  return 0;
}

int guard_exempt(const http_guard *g, const char *addr) { return is_exempt(g, addr); }

static long addr_count(http_guard *g, const char *addr) {
  return (long)(intptr_t)strmap_get(&g->per_addr, addr);
}

http_guard *guard_new(const guard_settings *set) {
  http_guard *g = xcalloc(1, sizeof *g);
  g->set = *set;
  uv_timer_init(set->loop, &g->timer);
  g->timer.data = g;
  strmap_init(&g->per_addr);
  g->warned_at = -1e9;
  return g;
}

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

void guard_free(http_guard *g) {
  if (!g) return;
  strmap_free(&g->per_addr);
  uv_timer_stop(&g->timer);
  uv_close((uv_handle_t *)&g->timer, on_timer_closed);
}

enum MHD_Result guard_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
  (void)addrlen;
  http_guard *g = cls;
  long long limit = g->set.max_per_client;
  if (limit <= 0) return MHD_YES;
  char key[INET6_ADDRSTRLEN];
  addr_key(addr, key, sizeof key);
  if (!key[0] || is_exempt(g, key) || addr_count(g, key) < limit) return MHD_YES;
  ctr_add(&g_metrics.connections_refused_per_client, 1);
  g->refused_unlogged++;
  warn_limited(g);
  return MHD_NO; /* MHD closes the socket at once */
}

void guard_conn_started(http_guard *g, struct MHD_Connection *c, void **socket_context) {
  conn_rec *cr = xcalloc(1, sizeof *cr);
  const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  cr->fd = fi ? fi->connect_fd : -1;
  cr->conn = c;
  const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  addr_key(ai ? ai->client_addr : NULL, cr->addr, sizeof cr->addr);
  if (g->set.max_per_client > 0 && cr->addr[0] &&
      !is_exempt(g, cr->addr)) {
    strmap_put(&g->per_addr, cr->addr, (void *)(intptr_t)(addr_count(g, cr->addr) + 1));
    cr->counted = 1;
  }
  *socket_context = cr;
  cr->deadline = now_mono() + (double)g->set.header_timeout;
  wait_head(g, cr, LIST_FIRST);
}

void guard_conn_closed(http_guard *g, void **socket_context) {
  conn_rec *cr = *socket_context;
  if (!cr) return;
  *socket_context = NULL;
  int was_head = cr->list && cr->list->head == cr;
  list_remove(cr);
  head_end(g, cr);
  if (was_head) arm(g);
  if (cr->counted) {
    long n = addr_count(g, cr->addr) - 1;
    if (n > 0) strmap_put(&g->per_addr, cr->addr, (void *)(intptr_t)n);
    else strmap_del(&g->per_addr, cr->addr);
  }
  free(cr);
}

static conn_rec *rec_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

void guard_request_started(http_guard *g, struct MHD_Connection *c) {
  conn_rec *cr = rec_of(c);
  if (!cr) return;
  list_remove(cr); /* the timer may fire once for nothing: arm() then re-arms it */
  head_end(g, cr);
}

void guard_request_done(http_guard *g, struct MHD_Connection *c) {
  conn_rec *cr = rec_of(c);
  if (!cr) return;
  cr->nul_in_url = 0;
  cr->raw_uri = NULL;
  head_end(g, cr);
  char ch;
  if (recv(cr->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0) { /* the client half-closed */
    cr->deadline = now_mono();
    wait_head(g, cr, LIST_ENDED);
    return;
  }
  long long idle = g->set.idle_timeout;
  if (idle <= 0) return; /* kept-alive connections may wait for ever: no deadline */
  cr->deadline = now_mono() + (double)(idle + g->set.header_timeout);
  wait_head(g, cr, LIST_LATER);
}

/* ------------------------------------------------------------------------------------------ */
/* request heads */

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

size_t guard_unescape(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  for (const char *p = s; (p = strchr(p, '%')); p++)
    if (hexval(p[1]) == 0 && hexval(p[2]) == 0) { /* "%00" */
      conn_rec *cr = rec_of(c);
      if (cr) cr->nul_in_url = 1;
      break;
    }
  return MHD_http_unescape(s); /* MHD's own %HH decoding for everything else */
}

void *guard_uri_seen(void *cls, const char *uri, struct MHD_Connection *c) {
  http_guard *g = cls;
  conn_rec *cr = rec_of(c);
  if (cr) {
    cr->raw_uri = uri;
    cr->raw_uri_len = strlen(uri);
    head_begin(g, cr);
  }
  return NULL; /* the request's context stays NULL until the access handler's first call */
}

/* Raw NUL bytes in the head. MHD 0.9.75 splits a line by its length but hands out C strings,
 * so whatever follows a NUL byte vanishes (`GET /health\0x` reads as `/health`, a header value
 * is cut). The pieces it hands out lie in order in its read buffer, and between two of them
 * there is only what MHD itself replaced or skipped:
 *   method "\0" spaces* uri "\0" version EOL { name "\0" (space|tab)* value EOL } EOL
 * with EOL one NUL (LF) or two (CR LF). Any other byte between them was hidden behind a NUL;
 * a NUL where a space or line end belongs is one more than MHD wrote. `end` is where the head
 * ends (MHD's header size from the method). */
typedef struct nul_scan {
  const char *at, *end; /* the end of the last piece checked; the end of the head */
  int bad;
} nul_scan;

/* [from, to): exactly `nuls_min`..`nuls_max` NULs, then only bytes of `skip` */
static int gap_is(const char *from, const char *to, int nuls_min, int nuls_max, const char *skip) {
  if (to < from) return 0;
  int n = 0;
  while (from < to && !*from && n < nuls_max) from++, n++;
  if (n < nuls_min) return 0;
  for (; from < to; from++)
    if (!*from || !strchr(skip, *from)) return 0;
  return 1;
}

static enum MHD_Result scan_nul(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
  (void)kind;
  nul_scan *n = cls;
  if (n->bad) return MHD_NO;
  const char *v = value ? value : key + strlen(key); /* a header without a colon has none */
  /* not in the read buffer: a folded line's value that MHD joined in new memory; the rest of
   * the head cannot be placed (the check gives up: obs-fold of an unknown header is ignored) */
  if (key < n->at || key > n->end || v < key || v > n->end) {
    n->bad = -1;
    return MHD_NO;
  }
  if (!gap_is(n->at, key, 1, 2, "") || (value && !gap_is(key + strlen(key), v, 1, 1, " \t"))) {
    n->bad = 1;
    return MHD_NO;
  }
  n->at = v + strlen(v);
  return MHD_YES;
}

static int raw_nul_in_head(struct MHD_Connection *c, const conn_rec *cr, const char *method,
                           const char *version) {
  if (!cr->raw_uri || !method || !version || !*version) return 0;
  const union MHD_ConnectionInfo *hi =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
  if (!hi || !hi->header_size) return 0;
  nul_scan n = {.at = version + strlen(version), .end = method + hi->header_size};
  /* the request line: the pieces in order, the head's end after them */
  if (cr->raw_uri < method || version < cr->raw_uri || n.at > n.end) return 0;
  if (!gap_is(method + strlen(method), cr->raw_uri, 1, 1, " ")) return 1;
  if (cr->raw_uri + cr->raw_uri_len + 1 != version) return 1; /* one NUL: the space MHD split at */
  MHD_get_connection_values(c, MHD_HEADER_KIND, scan_nul, &n);
  if (n.bad) return n.bad > 0;
  return !gap_is(n.at, n.end, 2, 4, ""); /* the last line's end and the empty line */
}

typedef struct head_scan {
  int n_content_length, n_transfer_encoding, n_host;
  const char *transfer_encoding;
  const char *bad_name;
  const char *folded;
} head_scan;

static int is_tchar(unsigned char ch) {
  return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  (void)kind;
  head_scan *h = cls;
  if (!*key) h->bad_name = key;
  for (const char *p = key; *p; p++)
    if (!is_tchar((unsigned char)*p)) h->bad_name = key;
  /* MHD appends a folded line (obs-fold: a line starting with a space) to the header's NAME,
   * so "Transfer-Encoding:\r\n chunked" arrives as a header "Transfer-Encodingchunked" while a
   * proxy that unfolds reads Transfer-Encoding: chunked. A framing header's name followed by
   * anything is such a fold (no real header is named like that). */
  static const char *const framing[] = {MHD_HTTP_HEADER_CONTENT_LENGTH,
                                        MHD_HTTP_HEADER_TRANSFER_ENCODING, MHD_HTTP_HEADER_HOST};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(framing[i]);
    if (!strncasecmp(key, framing[i], n) && key[n]) h->folded = key;
  }
  if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) h->n_content_length++;
  else if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) h->n_host++;
  else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
    h->n_transfer_encoding++;
    h->transfer_encoding = value ? value : "";
  }
  return MHD_YES;
}

const char *guard_head_problem(struct MHD_Connection *c, const char *method,
                               const char *version) {
  conn_rec *cr = rec_of(c);
  if (cr && cr->nul_in_url) {
    cr->nul_in_url = 0;
    return "the URL contains an encoded NUL byte (%00)";
  }
  head_scan h = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &h);
  if (h.bad_name)
    return "a header name contains a character that is not allowed (whitespace before ':', or "
           "a folded line?)";
  if (h.folded)
    return "a Content-Length, Transfer-Encoding or Host header is folded over several lines";
  if (cr && raw_nul_in_head(c, cr, method, version))
    return "the request line or a header contains a NUL byte";
  if (h.n_content_length > 1) return "the request has more than one Content-Length header";
  if (h.n_host > 1) return "the request has more than one Host header";
  if (!h.n_host && version && !strcmp(version, MHD_HTTP_VERSION_1_1))
    return "an HTTP/1.1 request must have a Host header";
  if (h.n_transfer_encoding > 1) return "the request has more than one Transfer-Encoding header";
  if (h.n_transfer_encoding) {
    if (h.n_content_length)
      return "the request has both Transfer-Encoding and Content-Length (ambiguous framing)";
    if (version && !strcmp(version, MHD_HTTP_VERSION_1_0))
      return "Transfer-Encoding is not allowed in an HTTP/1.0 request";
    if (strcasecmp(h.transfer_encoding, "chunked"))
      return "the only transfer coding accepted is 'Transfer-Encoding: chunked'";
  }
  return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* a Content-Length libmicrohttpd refuses itself */

int guard_take_bad_content_length(http_guard *g, int *too_large) {
  for (conn_rec *cr = g->heads.head; cr; cr = cr->head_next) {
    struct MHD_Connection *c = cr->conn;
    /* the head is complete (NULL before that, and once closed), and nothing was queued yet:
     * while MHD parses one connection's head no other connection is in that state (the
     * access handler, or MHD's own error reply, follows in the same step) */
    if (!MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE)) continue;
    if (MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS)) continue;
    const char *v;
    size_t n;
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING,
                                      strlen(MHD_HTTP_HEADER_TRANSFER_ENCODING), NULL,
                                      NULL) == MHD_YES)
      continue; /* MHD ignores Content-Length then */
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH,
                                      strlen(MHD_HTTP_HEADER_CONTENT_LENGTH), &v, &n) != MHD_YES)
      continue;
    uint64_t value;
    content_length_kind kind = content_length_parse(v, n, &value);
    if (kind == CONTENT_LENGTH_NUMBER) continue;
    head_end(g, cr); /* answered: never picked again (its head deadline stays a safety net) */
    *too_large = kind == CONTENT_LENGTH_OUT_OF_RANGE;
    return cr->fd;
  }
  return -1;
}
