/*
 * util.c: clocks, randomness, hashing, UTF-8 and JSON escaping. Thread: any.
 */
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

double now_wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int thread_create_nosig(pthread_t *th, void *(*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = pthread_create(th, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

void random_bytes(void *out, size_t n) {
  uint8_t *p = out;
  while (n) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      /* getrandom cannot fail on Linux >= 3.17 once the pool is initialised; be safe. */
      uint64_t x = (uint64_t)(now_wall() * 1e9) ^ (uint64_t)(uintptr_t)p;
      for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
      }
      return;
    }
    p += r, n -= (size_t)r;
  }
}

void hex_encode(const uint8_t *in, size_t n, char *out) {
  static const char hx[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) out[2 * i] = hx[in[i] >> 4], out[2 * i + 1] = hx[in[i] & 15];
  out[2 * n] = 0;
}

uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

/* Returns the length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid,
 * -1 if it is a valid but truncated prefix. */
static int utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int len;
  unsigned min, cp;
  if ((c & 0xE0) == 0xC0) len = 2, min = 0x80, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) len = 3, min = 0x800, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) len = 4, min = 0x10000, cp = c & 0x07;
  else return 0;
  for (int i = 1; i < len; i++) {
    if ((size_t)i >= n) return -1;
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

int utf8_valid(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    int l = utf8_seq(p + i, n - i);
    if (l <= 0) return 0;
    i += (size_t)l;
  }
  return 1;
}

void json_escape(buf *b, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  buf_reserve(b, n + 2);
  buf_addc(b, '"');
  size_t i = 0, run = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      i++, run++;
      continue;
    }
    if (run) buf_add(b, p + i - run, run), run = 0;
    if (c < 0x80) {
      switch (c) {
        case '"': buf_add(b, "\\\"", 2); break;
        case '\\': buf_add(b, "\\\\", 2); break;
        case '\n': buf_add(b, "\\n", 2); break;
        case '\r': buf_add(b, "\\r", 2); break;
        case '\t': buf_add(b, "\\t", 2); break;
        default: buf_printf(b, "\\u%04x", c); break;
      }
      i++;
      continue;
    }
    int l = utf8_seq(p + i, n - i);
    if (l <= 0) {
      buf_add(b, "\xEF\xBF\xBD", 3);
      i++;
    } else {
      buf_add(b, p + i, (size_t)l);
      i += (size_t)l;
    }
  }
  if (run) buf_add(b, p + i - run, run);
  buf_addc(b, '"');
}

int session_id_valid(const char *s, size_t n) {
  if (n < 1 || n > 128) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

char *unescape_c(const char *s) {
  size_t n = strlen(s);
  char *out = xmalloc(n + 1);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '\\') {
      out[o++] = s[i];
      continue;
    }
    if (++i >= n) goto bad;
    switch (s[i]) {
      case 'n': out[o++] = '\n'; break;
      case 't': out[o++] = '\t'; break;
      case 'r': out[o++] = '\r'; break;
      case '\\': out[o++] = '\\'; break;
      case '"': out[o++] = '"'; break;
      case 'x': {
        int h1 = i + 1 < n ? hexval(s[i + 1]) : -1, h2 = i + 2 < n ? hexval(s[i + 2]) : -1;
        if (h1 < 0 || h2 < 0 || (h1 == 0 && h2 == 0)) goto bad;
        out[o++] = (char)(h1 * 16 + h2);
        i += 2;
        break;
      }
      default: goto bad;
    }
  }
  out[o] = 0;
  return out;
bad:
  free(out);
  return NULL;
}
