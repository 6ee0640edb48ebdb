/*
 * http_guard.h: what a TCP connection may cost the daemon before it has sent a request, and
 * what a request head may look like on the wire.
 * Owns: one record per open connection (MHD's socket context), the request-head deadline
 * (header_timeout), the per-client-address connection limit (max_connections_per_client), the
 * URL unescaper that notices %00, the request-framing checks (Content-Length,
 * Transfer-Encoding, header names), and which connections are between their request line and
 * the access handler (for a Content-Length libmicrohttpd refuses itself).
 * Thread: loop thread only (MHD callbacks run on it).
 */
#ifndef XLS_HTTP_GUARD_H
#define XLS_HTTP_GUARD_H

#include <stddef.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include <uv.h>

typedef struct http_guard http_guard;

/* What the guard enforces; fixed for the daemon's life (the guard keeps a copy; `proxies` is
 * borrowed and must outlive it). */
typedef struct guard_settings {
  uv_loop_t *loop;
  long long header_timeout;      /* seconds for a request head (option header_timeout) */
  long long idle_timeout;        /* seconds a kept-alive connection may wait (idle_timeout) */
  long long max_per_client;      /* connections per client address; <= 0: no limit */
  char *const *proxies;          /* trusted proxies' addresses: exempt from the limit */
  int n_proxies;
  void (*pump)(void *pump_arg);  /* called after the guard closed sockets: let MHD notice */
  void *pump_arg;
} guard_settings;

http_guard *guard_new(const guard_settings *set);
/* Is addr one of the trusted proxies (`trusted_proxies`)? Their X-Forwarded-For and
 * X-Request-Id are believed, and the per-client limit does not count them. */
int guard_trusts(const http_guard *g, const char *addr);
/* Is addr exempt from per-client limits (a trusted proxy, or this host's 127.0.0.1 / ::1)? */
int guard_exempt(const http_guard *g, const char *addr);
/* After MHD_stop_daemon (every connection record is gone by then). */
void guard_free(http_guard *g);

/* MHD's accept policy: refuses an address that already holds max_connections_per_client. */
enum MHD_Result guard_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen);
/* NOTIFY_CONNECTION: a connection was accepted / is about to be closed. */
void guard_conn_started(http_guard *g, struct MHD_Connection *c, void **socket_context);
void guard_conn_closed(http_guard *g, void **socket_context);
/* The access handler's first call for a request: its head is complete. */
void guard_request_started(http_guard *g, struct MHD_Connection *c);
/* NOTIFY_COMPLETED: the connection waits for its next request head (when kept alive). */
void guard_request_done(http_guard *g, struct MHD_Connection *c);

/* MHD_OPTION_UNESCAPE_CALLBACK: %HH decoding that remembers a decoded NUL byte. */
size_t guard_unescape(void *cls, struct MHD_Connection *c, char *s);

/* MHD_OPTION_URI_LOG_CALLBACK (cls: the guard): notes where the raw URI lies (for the raw-NUL
 * check) and that the connection's head is in progress; returns NULL. */
void *guard_uri_seen(void *cls, const char *uri, struct MHD_Connection *c);

/* NULL when the request's head is acceptable, else why it is not (for a 400 reply): a NUL byte
 * in the URL (%00) or a raw NUL byte in the request line or a header, repeated or conflicting
 * framing headers, a transfer coding other than chunked, Transfer-Encoding with Content-Length
 * or in HTTP/1.0, a header name that is not a token, a framing header folded over several
 * lines, HTTP/1.1 without Host. method and version as the access handler got them. */
const char *guard_head_problem(struct MHD_Connection *c, const char *method,
                               const char *version);

/* libmicrohttpd 0.9.75 answers a Content-Length that is not a plain decimal number (-1, +29,
 * "29, 29", empty) with 400, and one over 2^64 - 1 with 413, itself, while it parses the head
 * and before the access handler runs; and it writes that reply's header block twice. Called
 * from MHD's logger when MHD reports that refusal, before it queues its reply: finds the one
 * connection being refused (head complete, no response queued, access handler not called, its
 * first Content-Length malformed and no Transfer-Encoding), marks it answered and
 * returns its socket, with *too_large set for the 413 case; -1 when there is none. */
int guard_take_bad_content_length(http_guard *g, int *too_large);

#endif
