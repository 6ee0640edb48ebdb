/*
 * tok_text.h: text helpers private to the tokenizers: growable code-point strings (xl_ustr),
 * UTF-8 <-> code points, and the Unicode classes of tok_unicode_tables.c (generated).
 * Reentrant; an xl_ustr belongs to one caller.
 */
#ifndef XL_TOK_TEXT_H
#define XL_TOK_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Class bits (Perl's names as the Moses scripts use them). */
enum {
  XL_UC_ALPHA = 1, /* IsAlpha: Alphabetic */
  XL_UC_N = 2,     /* IsN: general category N */
  XL_UC_ND = 4,    /* decimal digits: \d, and IsAlnum's digits */
  XL_UC_SC = 8,    /* IsSc: currency symbols */
  XL_UC_SO = 16,   /* IsSo: other symbols */
  XL_UC_LOWER = 32,/* IsLower: Lowercase */
  XL_UC_SPACE = 64, /* Python's str.isspace (\s, str.split, str.strip) */
  XL_UC_ALNUM = 128 /* IsAlnum: IsAlpha and decimal digits */
};

typedef struct { uint32_t first, last; uint8_t flags; } xl_uclass_range;
typedef struct { uint32_t first; int32_t count, delta, stride; } xl_ulower_run;
extern const xl_uclass_range xl_uclass_ranges[];
extern const size_t xl_uclass_count;
extern const xl_ulower_run xl_ulower_runs[];
extern const size_t xl_ulower_count;
extern const uint8_t xl_uclass_latin1[256]; /* the class bits of U+0000..U+00FF */
extern const char xl_unicode_version[];

int xl_uclass_search(uint32_t cp);
static inline int xl_uclass(uint32_t cp) { /* the class bits of cp */
  return cp < 256 ? xl_uclass_latin1[cp] : xl_uclass_search(cp);
}
static inline int xl_is_space(uint32_t c) { return xl_uclass(c) & XL_UC_SPACE; }
static inline int xl_is_alpha(uint32_t c) { return xl_uclass(c) & XL_UC_ALPHA; }
static inline int xl_is_n(uint32_t c) { return xl_uclass(c) & XL_UC_N; }
static inline int xl_is_digit(uint32_t c) { return xl_uclass(c) & XL_UC_ND; }
static inline int xl_is_alnum(uint32_t c) { return xl_uclass(c) & XL_UC_ALNUM; }
static inline int xl_is_lower(uint32_t c) { return xl_uclass(c) & XL_UC_LOWER; }
uint32_t xl_ulower(uint32_t cp); /* simple lowercase mapping (one code point) */

/* A growable code-point string. Functions return -1 when out of memory. */
typedef struct { uint32_t *p; size_t n, cap; } xl_ustr;
int xl_ustr_reserve(xl_ustr *s, size_t need);
int xl_ustr_grow(xl_ustr *s);
static inline int xl_ustr_push(xl_ustr *s, uint32_t c) {
  if (s->n == s->cap && xl_ustr_grow(s)) return -1;
  s->p[s->n++] = c;
  return 0;
}
int xl_ustr_append(xl_ustr *s, const uint32_t *c, size_t n);
int xl_ustr_append_ascii(xl_ustr *s, const char *a);
void xl_ustr_free(xl_ustr *s);

/* Decodes UTF-8 (invalid bytes become U+FFFD) onto the end of out. */
int xl_utf8_decode(const char *s, size_t n, xl_ustr *out);
/* Encodes one code point; returns 1..4 bytes written to out (room for 4). */
size_t xl_utf8_put(uint32_t c, char *out);
/* Bytes of the UTF-8 encoding of c[0..n). */
size_t xl_utf8_len(const uint32_t *c, size_t n);

#endif
