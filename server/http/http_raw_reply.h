/*
 * http_raw_reply.h: one complete error reply written straight to a connection's socket, for a
 * request libmicrohttpd would otherwise answer itself (and garble): see
 * guard_take_bad_content_length. Thread: loop thread (inside MHD_run, from MHD's logger).
 */
#ifndef XLS_HTTP_RAW_REPLY_H
#define XLS_HTTP_RAW_REPLY_H

#include "api_errors.h"

/* Writes "HTTP/1.1 <status>", Date, Content-Type: application/json, Content-Length,
 * Connection: close, X-Request-Id, then err's API error body with `message`, and shuts the
 * socket's write side, so that nothing libmicrohttpd queues after it reaches the client (its
 * send fails and it closes the connection). 0 when the whole reply went to the kernel; -1 when
 * it did not (a full send buffer, a gone peer): the socket is then shut both ways. */
int raw_reply_error(int fd, api_err err, const char *message);

#endif
