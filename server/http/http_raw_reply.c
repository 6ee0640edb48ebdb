/*
 * http_raw_reply.c: an error reply written on a socket behind libmicrohttpd's back (see
 * http_raw_reply.h). Thread: loop thread.
 */
#include "http_raw_reply.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "buf.h"
#include "util.h"

int raw_reply_error(int fd, api_err err, const char *message) {
  int status = api_err_status(err);
  buf body;
  buf_init(&body);
  api_err_body(&body, err, NULL, message);
  char date[64];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  uint8_t id[12];
  char rid[2 * sizeof id + 1];
  random_bytes(id, sizeof id);
  hex_encode(id, sizeof id, rid);
  const char *reason = MHD_get_reason_phrase_for((unsigned)status);
  buf out;
  buf_init(&out);
  buf_printf(&out,
             "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\nX-Request-Id: %s\r\n\r\n",
             status, reason && *reason ? reason : "Error", date, body.len, rid);
  buf_add(&out, body.p, body.len);
  buf_free(&body);
  size_t sent = 0;
  while (sent < out.len) {
    ssize_t n = send(fd, out.p + sent, out.len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break; /* EAGAIN included: the loop thread never waits on a client */
    sent += (size_t)n;
  }
  int whole = sent == out.len;
  buf_free(&out);
  shutdown(fd, whole ? SHUT_WR : SHUT_RDWR);
  return whole ? 0 : -1;
}
