/*
 * buf.h: a growable byte buffer (always NUL-terminated for convenience).
 * Owns: its bytes. Thread: whoever owns the buffer; no internal locking.
 * Allocation failure aborts via xl_oom() (the daemon treats OOM in small buffers as fatal:
 * there is no sane recovery and partial JSON would be worse).
 */
#ifndef XLS_BUF_H
#define XLS_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct buf {
  char *p;
  size_t len, cap;
} buf;

void buf_init(buf *b);
void buf_free(buf *b);
void buf_reserve(buf *b, size_t extra);
void buf_add(buf *b, const void *data, size_t n);
void buf_adds(buf *b, const char *s);
void buf_addc(buf *b, char c);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(buf *b, const char *fmt, va_list ap);
void buf_consume(buf *b, size_t n); /* drop the first n bytes */
void buf_clear(buf *b);
char *buf_steal(buf *b);            /* returns the malloc'd bytes, leaves b empty */

void xl_oom(void) __attribute__((noreturn));
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t sz);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

#endif
