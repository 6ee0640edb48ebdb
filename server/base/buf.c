/*
 * buf.c: growable byte buffer and checked allocation helpers. Thread: any (no shared state).
 */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void xl_oom(void) {
  static const char msg[] = "xlserve: out of memory\n";
  ssize_t r = write(2, msg, sizeof msg - 1);
  (void)r;
  abort();
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) xl_oom();
  return p;
}

void *xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) xl_oom();
  return p;
}

void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) xl_oom();
  return q;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

char *xstrndup(const char *s, size_t n) {
  char *p = xmalloc(n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

void buf_init(buf *b) { b->p = NULL, b->len = b->cap = 0; }

void buf_free(buf *b) {
  free(b->p);
  buf_init(b);
}

void buf_reserve(buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  b->p = xrealloc(b->p, cap);
  b->cap = cap;
}

void buf_add(buf *b, const void *data, size_t n) {
  buf_reserve(b, n);
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = 0;
}

void buf_adds(buf *b, const char *s) { buf_add(b, s, strlen(s)); }

void buf_addc(buf *b, char c) { buf_add(b, &c, 1); }

void buf_vprintf(buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  char tmp[256];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  if (n < 0) {
    va_end(ap2);
    return;
  }
  if ((size_t)n < sizeof tmp) {
    buf_add(b, tmp, (size_t)n);
  } else {
    buf_reserve(b, (size_t)n);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
    b->len += (size_t)n;
  }
  va_end(ap2);
}

void buf_printf(buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  buf_vprintf(b, fmt, ap);
  va_end(ap);
}

void buf_consume(buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
  }
  if (b->p) b->p[b->len] = 0;
}

void buf_clear(buf *b) {
  b->len = 0;
  if (b->p) b->p[0] = 0;
}

char *buf_steal(buf *b) {
  char *p = b->p ? b->p : xstrdup("");
  buf_init(b);
  return p;
}
