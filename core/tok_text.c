/*
 * tok_text.c: code-point strings, UTF-8 conversion and Unicode class lookups for the
 * tokenizers (tok_text.h). Reentrant.
 */
#include "tok_text.h"

#include <stdlib.h>
#include <string.h>

int xl_uclass_search(uint32_t cp) {
  size_t lo = 0, hi = xl_uclass_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < xl_uclass_ranges[mid].first) hi = mid;
    else if (cp > xl_uclass_ranges[mid].last) lo = mid + 1;
    else return xl_uclass_ranges[mid].flags;
  }
  return 0;
}

uint32_t xl_ulower(uint32_t cp) {
  if (cp < 128) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  size_t lo = 0, hi = xl_ulower_count;
  while (lo < hi) { /* the last run starting at or before cp */
    size_t mid = (lo + hi) / 2;
    if (xl_ulower_runs[mid].first <= cp) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return cp;
  const xl_ulower_run *r = &xl_ulower_runs[lo - 1];
  uint32_t off = cp - r->first;
  if (off % (uint32_t)r->stride == 0 && off / (uint32_t)r->stride < (uint32_t)r->count)
    return (uint32_t)((int64_t)cp + r->delta);
  return cp;
}

int xl_ustr_reserve(xl_ustr *s, size_t need) {
  if (need <= s->cap) return 0;
  size_t cap = s->cap ? s->cap : 64;
  while (cap < need) cap *= 2;
  uint32_t *p = realloc(s->p, cap * sizeof *p);
  if (!p) return -1;
  s->p = p;
  s->cap = cap;
  return 0;
}

int xl_ustr_grow(xl_ustr *s) { return xl_ustr_reserve(s, s->n + 1); }

int xl_ustr_append(xl_ustr *s, const uint32_t *c, size_t n) {
  if (xl_ustr_reserve(s, s->n + n)) return -1;
  if (n) memcpy(s->p + s->n, c, n * sizeof *c);
  s->n += n;
  return 0;
}

int xl_ustr_append_ascii(xl_ustr *s, const char *a) {
  size_t n = strlen(a);
  if (xl_ustr_reserve(s, s->n + n)) return -1;
  for (size_t i = 0; i < n; i++) s->p[s->n++] = (unsigned char)a[i];
  return 0;
}

void xl_ustr_free(xl_ustr *s) {
  free(s->p);
  s->p = NULL;
  s->n = s->cap = 0;
}

int xl_utf8_decode(const char *str, size_t n, xl_ustr *out) {
  const unsigned char *s = (const unsigned char *)str;
  if (xl_ustr_reserve(out, out->n + n)) return -1;
  size_t i = 0;
  while (i < n) {
    uint32_t c = s[i];
    int len = 0;
    uint32_t min = 0;
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2, c &= 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, c &= 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, c &= 0x07, min = 0x10000;
    int ok = len > 0 && i + (size_t)len <= n;
    for (int k = 1; ok && k < len; k++) {
      if ((s[i + (size_t)k] & 0xC0) != 0x80) ok = 0;
      else c = (c << 6) | (s[i + (size_t)k] & 0x3F);
    }
    if (ok && (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))) ok = 0;
    if (!ok) {
      c = 0xFFFD;
      len = 1;
    }
    out->p[out->n++] = c;
    i += (size_t)len;
  }
  return 0;
}

size_t xl_utf8_put(uint32_t c, char *o) {
  if (c < 0x80) {
    o[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    o[0] = (char)(0xC0 | (c >> 6));
    o[1] = (char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    o[0] = (char)(0xE0 | (c >> 12));
    o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (c >> 18));
  o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
  o[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

size_t xl_utf8_len(const uint32_t *c, size_t n) {
  size_t b = 0;
  for (size_t i = 0; i < n; i++) b += c[i] < 0x80 ? 1 : c[i] < 0x800 ? 2 : c[i] < 0x10000 ? 3 : 4;
  return b;
}
