/*
 * http_content_length.h: the one reading of a Content-Length header's value, shared by the
 * guard that answers the values libmicrohttpd refuses (http_guard.c) and by the head checks
 * that hold a body to its route's limit (api_head.c), so both judge a value alike. The value is
 * read as libmicrohttpd 0.9.75 stores it (from the first non-blank byte after the colon to the
 * line's end) and accepts it: decimal digits only, at most 2^64 - 1. Pure; any thread.
 */
#ifndef XLS_HTTP_CONTENT_LENGTH_H
#define XLS_HTTP_CONTENT_LENGTH_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  CONTENT_LENGTH_NUMBER,      /* *out is the value */
  CONTENT_LENGTH_NOT_NUMBER,  /* empty, or a byte other than a decimal digit (a sign, a space) */
  CONTENT_LENGTH_OUT_OF_RANGE /* digits only, but more than 2^64 - 1 */
} content_length_kind;

#define CONTENT_LENGTH_NOT_NUMBER_MESSAGE \
  "the Content-Length header's value is not a plain decimal number"
#define CONTENT_LENGTH_OUT_OF_RANGE_MESSAGE \
  "the Content-Length header's value is larger than any body this server reads"

/* The n bytes at v as a Content-Length value: its kind, and the number in *out (0 otherwise). */
static inline content_length_kind content_length_parse(const char *v, size_t n, uint64_t *out) {
  *out = 0;
  if (!n) return CONTENT_LENGTH_NOT_NUMBER;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9') return CONTENT_LENGTH_NOT_NUMBER;
    unsigned d = (unsigned)(v[i] - '0');
    if (x > (UINT64_MAX - d) / 10) return CONTENT_LENGTH_OUT_OF_RANGE;
    x = x * 10 + d;
  }
  *out = x;
  return CONTENT_LENGTH_NUMBER;
}

#endif /* XLS_HTTP_CONTENT_LENGTH_H */
