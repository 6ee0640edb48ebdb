/*
 * jc_regex.c: the regex subset and the formats of structured output (see jc_regex.h): a parser
 * that builds a Thompson NFA over bytes, the subset construction into a DFA (over classes of bytes
 * that every set treats alike), pruning of the states that cannot reach acceptance, and the
 * per-state lengths of accepted completions. Thread: any (compilation is pure; the result is
 * immutable).
 */
#include "jc_regex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define NFA_MAX 8192
#define DFA_MAX 4096
#define REP_MAX 64

enum { NS_EPS, NS_SET, NS_MATCH };
typedef struct { uint8_t kind; int out, out2, set; } nstate;
typedef struct { uint8_t b[32]; } bset;
typedef struct { int start, end; } frag;

typedef struct rx {
  nstate *st;
  int n, cap;
  bset *sets;
  int nsets, setcap;
  const char *p;
  size_t len, pos;
  char *err;
  size_t errcap;
  int failed;
} rx;

static int rx_fail(rx *r, const char *fmt, ...) {
  if (r->failed) return -1;
  r->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, r->errcap, fmt, ap);
  va_end(ap);
  return -1;
}

static void bs_set(bset *s, int c) { s->b[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static int bs_has(const bset *s, int c) { return s->b[c >> 3] >> (c & 7) & 1; }

static int new_state(rx *r, int kind, int set) {
  if (r->n >= NFA_MAX) {
    rx_fail(r, "the pattern is too large (over %d automaton states once its repetitions are "
               "expanded)", NFA_MAX);
    return -1;
  }
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 256;
    r->st = xrealloc(r->st, sizeof *r->st * (size_t)r->cap);
  }
  r->st[r->n] = (nstate){(uint8_t)kind, -1, -1, set};
  return r->n++;
}

static int new_set(rx *r, const bset *s) {
  if (r->nsets == r->setcap) {
    r->setcap = r->setcap ? 2 * r->setcap : 64;
    r->sets = xrealloc(r->sets, sizeof *r->sets * (size_t)r->setcap);
  }
  r->sets[r->nsets] = *s;
  return r->nsets++;
}

static frag f_eps(rx *r) {
  int s = new_state(r, NS_EPS, -1);
  return (frag){s, s};
}

/* one byte from the set, then an open end */
static frag f_set(rx *r, const bset *s) {
  int e = new_state(r, NS_EPS, -1);
  int a = new_state(r, NS_SET, new_set(r, s));
  if (a < 0 || e < 0) return (frag){-1, -1};
  r->st[a].out = e;
  return (frag){a, e};
}

static frag f_cat(rx *r, frag a, frag b) {
  if (r->failed || a.start < 0 || b.start < 0) return (frag){-1, -1};
  r->st[a.end].out = b.start;
  return (frag){a.start, b.end};
}

static frag f_alt(rx *r, frag a, frag b) {
  if (r->failed || a.start < 0 || b.start < 0) return (frag){-1, -1};
  int s = new_state(r, NS_EPS, -1), e = new_state(r, NS_EPS, -1);
  if (s < 0 || e < 0) return (frag){-1, -1};
  r->st[s].out = a.start;
  r->st[s].out2 = b.start;
  r->st[a.end].out = e;
  r->st[b.end].out = e;
  return (frag){s, e};
}

/* a* (loop) or a? (opt) */
static frag f_rep(rx *r, frag a, int loop) {
  if (r->failed || a.start < 0) return (frag){-1, -1};
  int s = new_state(r, NS_EPS, -1), e = new_state(r, NS_EPS, -1);
  if (s < 0 || e < 0) return (frag){-1, -1};
  r->st[s].out = a.start;
  r->st[s].out2 = e;
  r->st[a.end].out = loop ? s : e;
  return (frag){s, e};
}

/* what is generated for '.' and negations: printable ASCII */
static void universe(bset *s) {
  memset(s, 0, sizeof *s);
  for (int c = 0x20; c <= 0x7E; c++) bs_set(s, c);
}

static int producible(int c) { return (c >= 0x20 && c <= 0x7E) || c == '\t' || c == '\n' || c == '\r'; }

/* a code point's UTF-8 bytes as a chain */
static frag f_char(rx *r, unsigned cp) {
  bset s;
  memset(&s, 0, sizeof s);
  if (cp < 0x80) {
    if (producible((int)cp)) bs_set(&s, (int)cp);
    return f_set(r, &s);
  }
  unsigned char u[3];
  int n;
  if (cp < 0x800) {
    u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
  } else {
    if (cp >= 0xD800 && cp <= 0xDFFF) {
      bset empty;
      memset(&empty, 0, sizeof empty);
      return f_set(r, &empty); /* a lone surrogate: never generated */
    }
    u[0] = (unsigned char)(0xE0 | cp >> 12), u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
  }
  frag f = {-1, -1};
  for (int i = 0; i < n; i++) {
    memset(&s, 0, sizeof s);
    bs_set(&s, u[i]);
    frag g = f_set(r, &s);
    f = i ? f_cat(r, f, g) : g;
  }
  return f;
}

/* decodes one UTF-8 character of the pattern at pos */
static int take_char(rx *r, unsigned *cp) {
  const unsigned char *s = (const unsigned char *)r->p + r->pos;
  size_t left = r->len - r->pos;
  unsigned c = s[0];
  int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!n || (size_t)n > left) return rx_fail(r, "the pattern is not valid UTF-8");
  unsigned v = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return rx_fail(r, "the pattern is not valid UTF-8");
    v = v << 6 | (s[i] & 0x3F);
  }
  if (v > 0xFFFF) return rx_fail(r, "characters beyond U+FFFF in a pattern are not supported");
  r->pos += (size_t)n;
  *cp = v;
  return 0;
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void class_of(int k, bset *s) {
  memset(s, 0, sizeof *s);
  bset u;
  universe(&u);
  for (int c = 0; c < 128; c++) {
    int in = 0;
    switch (k | 0x20) {
      case 'd': in = c >= '0' && c <= '9'; break;
      case 'w': in = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; break;
      case 's': in = c == ' ' || c == '\t' || c == '\n' || c == '\r'; break;
    }
    if (k >= 'A' && k <= 'Z') in = !in && bs_has(&u, c) && c != ' ';
    if (in) bs_set(s, c);
  }
  if (k == 'S' || k == 'D' || k == 'W') /* negations: printable ASCII only */
    for (int c = 0; c < 128; c++)
      if (!bs_has(&u, c) && bs_has(s, c)) s->b[c >> 3] &= (uint8_t)~(1u << (c & 7));
}

/* an escape after '\\' (pos at the letter): a class in *s (returns 1) or one code point in *cp
 * (returns 0); -1 refused */
static int escape(rx *r, int in_class, bset *s, unsigned *cp) {
  if (r->pos >= r->len) return rx_fail(r, "the pattern ends with a lone backslash");
  int c = (unsigned char)r->p[r->pos++];
  switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': class_of(c, s); return 1;
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x':
      if (r->pos + 2 > r->len || hexval(r->p[r->pos]) < 0 || hexval(r->p[r->pos + 1]) < 0)
        return rx_fail(r, "\\x needs two hex digits");
      *cp = (unsigned)(hexval(r->p[r->pos]) * 16 + hexval(r->p[r->pos + 1]));
      r->pos += 2;
      return 0;
    case 'u': {
      unsigned v = 0;
      for (int i = 0; i < 4; i++) {
        int h = r->pos < r->len ? hexval(r->p[r->pos]) : -1;
        if (h < 0) return rx_fail(r, "\\u needs four hex digits (\\u{...} is not supported)");
        v = v * 16 + (unsigned)h;
        r->pos++;
      }
      *cp = v;
      return 0;
    }
    case 'b':
      if (in_class) {
        *cp = 8;
        return 0;
      }
      return rx_fail(r, "word boundaries (\\b) are not supported");
    case '-':
      if (in_class) {
        *cp = '-';
        return 0;
      }
      break;
    default:
      if (c && strchr("^$\\.*+?()[]{}|/", c)) {
        *cp = (unsigned)c;
        return 0;
      }
  }
  if (c >= '1' && c <= '9') return rx_fail(r, "backreferences (\\%c) are not supported", c);
  return rx_fail(r, "the escape \\%c is not supported", c);
}

static frag parse_alt(rx *r, int depth);

static frag parse_class(rx *r) {
  bset s;
  memset(&s, 0, sizeof s);
  unsigned wide[64];
  int n_wide = 0, neg = 0;
  if (r->pos < r->len && r->p[r->pos] == '^') neg = 1, r->pos++;
  int first = 1;
  for (;;) {
    if (r->pos >= r->len) {
      rx_fail(r, "a character class is not closed");
      return (frag){-1, -1};
    }
    if (r->p[r->pos] == ']' && !first) {
      r->pos++;
      break;
    }
    first = 0;
    unsigned lo, hi;
    bset cls;
    int k;
    if (r->p[r->pos] == '\\') {
      r->pos++;
      if ((k = escape(r, 1, &cls, &lo)) < 0) return (frag){-1, -1};
      if (k == 1) {
        for (int i = 0; i < 32; i++) s.b[i] |= cls.b[i];
        continue;
      }
    } else if (r->p[r->pos] == ']') { /* "[]": matches nothing in ECMAScript */
      r->pos++;
      break;
    } else if (take_char(r, &lo)) {
      return (frag){-1, -1};
    }
    hi = lo;
    if (r->pos + 1 < r->len && r->p[r->pos] == '-' && r->p[r->pos + 1] != ']') {
      r->pos++;
      if (r->p[r->pos] == '\\') {
        r->pos++;
        if ((k = escape(r, 1, &cls, &hi)) < 0) return (frag){-1, -1};
        if (k == 1) {
          rx_fail(r, "a class escape cannot end a range");
          return (frag){-1, -1};
        }
      } else if (take_char(r, &hi)) {
        return (frag){-1, -1};
      }
      if (hi < lo) {
        rx_fail(r, "a range out of order in a character class");
        return (frag){-1, -1};
      }
      if (hi >= 0x80 && (lo >= 0x80 || hi != lo)) {
        if (lo < 0x80 || hi - lo > 63) {
          rx_fail(r, "ranges of non-ASCII characters are not supported");
          return (frag){-1, -1};
        }
      }
    }
    for (unsigned c = lo; c <= hi; c++) {
      if (c < 0x80) {
        if (producible((int)c)) bs_set(&s, (int)c);
      } else if (!neg) {
        if (n_wide == 64) {
          rx_fail(r, "more than 64 non-ASCII characters in one class");
          return (frag){-1, -1};
        }
        wide[n_wide++] = c;
      }
    }
  }
  if (neg) {
    bset u;
    universe(&u);
    for (int i = 0; i < 32; i++) s.b[i] = (uint8_t)(u.b[i] & ~s.b[i]);
  }
  frag f = f_set(r, &s);
  for (int i = 0; i < n_wide; i++) f = f_alt(r, f, f_char(r, wide[i]));
  return f;
}

static frag parse_atom(rx *r, int depth) {
  int c = (unsigned char)r->p[r->pos];
  bset s;
  unsigned cp;
  switch (c) {
    case '(': {
      r->pos++;
      if (r->pos < r->len && r->p[r->pos] == '?') {
        const char *q = r->p + r->pos;
        if (q[1] == ':') {
          r->pos += 2;
        } else if (q[1] == '<' && q[2] != '=' && q[2] != '!') {
          const char *gt = memchr(q, '>', r->len - r->pos);
          if (!gt) {
            rx_fail(r, "a named group is not closed");
            return (frag){-1, -1};
          }
          r->pos += (size_t)(gt - q) + 1;
        } else {
          rx_fail(r, "lookaround groups ((?=, (?!, (?<=, (?<!) are not supported");
          return (frag){-1, -1};
        }
      }
      frag f = parse_alt(r, depth + 1);
      if (r->failed) return (frag){-1, -1};
      if (r->pos >= r->len || r->p[r->pos] != ')') {
        rx_fail(r, "a group is not closed");
        return (frag){-1, -1};
      }
      r->pos++;
      return f;
    }
    case '[':
      r->pos++;
      return parse_class(r);
    case '.':
      r->pos++;
      universe(&s);
      return f_set(r, &s);
    case '\\':
      r->pos++;
      {
        int k = escape(r, 0, &s, &cp);
        if (k < 0) return (frag){-1, -1};
        return k == 1 ? f_set(r, &s) : f_char(r, cp);
      }
    case '^': case '$':
      rx_fail(r, "'%c' is supported only at the %s of the pattern", c, c == '^' ? "start" : "end");
      return (frag){-1, -1};
    case '*': case '+': case '?': case '{':
      rx_fail(r, "'%c' has nothing to repeat", c);
      return (frag){-1, -1};
    case ')': case ']': case '}':
      rx_fail(r, "an unmatched '%c'", c);
      return (frag){-1, -1};
  }
  if (take_char(r, &cp)) return (frag){-1, -1};
  return f_char(r, cp);
}

/* {m}, {m,}, {m,n} at pos: 1 read (pos after it), 0 none */
static int read_braces(rx *r, int *m, int *n) {
  size_t p = r->pos;
  if (p >= r->len || r->p[p] != '{') return 0;
  p++;
  long a = -1, b = -1;
  if (p < r->len && r->p[p] >= '0' && r->p[p] <= '9')
    for (a = 0; p < r->len && r->p[p] >= '0' && r->p[p] <= '9'; p++) a = a * 10 + (r->p[p] - '0') > 100000 ? 100000 : a * 10 + (r->p[p] - '0');
  if (a < 0) return rx_fail(r, "'{' must start a quantifier {m}, {m,} or {m,n}");
  if (p < r->len && r->p[p] == ',') {
    p++;
    if (p < r->len && r->p[p] >= '0' && r->p[p] <= '9')
      for (b = 0; p < r->len && r->p[p] >= '0' && r->p[p] <= '9'; p++) b = b * 10 + (r->p[p] - '0') > 100000 ? 100000 : b * 10 + (r->p[p] - '0');
  } else {
    b = a;
  }
  if (p >= r->len || r->p[p] != '}') return rx_fail(r, "a quantifier {...} is not closed");
  if (b >= 0 && b < a) return rx_fail(r, "a quantifier {%ld,%ld} out of order", a, b);
  if (a > REP_MAX || b > REP_MAX)
    return rx_fail(r, "repetition counts above %d are not supported", REP_MAX);
  r->pos = p + 1;
  *m = (int)a;
  *n = (int)b;
  return 1;
}

static frag parse_quantified(rx *r, int depth) {
  size_t at = r->pos;
  frag f = parse_atom(r, depth);
  if (r->failed) return f;
  size_t after = r->pos;
  int m = 1, n = 1, q = 0;
  if (r->pos < r->len) {
    char c = r->p[r->pos];
    if (c == '*') m = 0, n = -1, q = 1, r->pos++;
    else if (c == '+') m = 1, n = -1, q = 1, r->pos++;
    else if (c == '?') m = 0, n = 1, q = 1, r->pos++;
    else if (c == '{') {
      int k = read_braces(r, &m, &n);
      if (k < 0) return (frag){-1, -1};
      q = k;
    }
  }
  if (!q) return f;
  if (r->pos < r->len && r->p[r->pos] == '?') r->pos++; /* lazy: the same language */
  if (r->pos < r->len && strchr("*+?{", r->p[r->pos])) {
    rx_fail(r, "a quantifier cannot follow a quantifier");
    return (frag){-1, -1};
  }
  size_t end = r->pos;
  /* copies of the atom: the first one is f, the others are parsed again from its text */
  frag out = f_eps(r);
  int copies = m + (n < 0 ? 1 : n - m);
  for (int i = 0; i < copies && !r->failed; i++) {
    frag g = f;
    if (i > 0) {
      r->pos = at;
      g = parse_atom(r, depth);
      r->pos = after;
    }
    if (i < m) out = f_cat(r, out, g);
    else out = f_cat(r, out, f_rep(r, g, n < 0));
  }
  r->pos = end;
  return out;
}

static frag parse_seq(rx *r, int depth) {
  frag f = f_eps(r);
  while (!r->failed && r->pos < r->len && r->p[r->pos] != '|' && r->p[r->pos] != ')')
    f = f_cat(r, f, parse_quantified(r, depth));
  return f;
}

static frag parse_alt(rx *r, int depth) {
  if (depth > 64) {
    rx_fail(r, "groups nested too deeply");
    return (frag){-1, -1};
  }
  frag f = parse_seq(r, depth);
  while (!r->failed && r->pos < r->len && r->p[r->pos] == '|') {
    r->pos++;
    f = f_alt(r, f, parse_seq(r, depth));
  }
  return f;
}

/* ---------------------------------------------------------------- automata */

typedef struct raw_dfa {
  int n, cap;
  uint16_t *next; /* [n][256] */
  uint8_t *accept;
} raw_dfa;

static int raw_add(raw_dfa *d) {
  if (d->n == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 64;
    d->next = xrealloc(d->next, sizeof *d->next * 256 * (size_t)d->cap);
    d->accept = xrealloc(d->accept, (size_t)d->cap);
  }
  for (int c = 0; c < 256; c++) d->next[(size_t)d->n * 256 + (size_t)c] = JC_RE_NONE;
  d->accept[d->n] = 0;
  return d->n++;
}

static int cont_byte(int c) { return c >= 0x80 && c <= 0xBF; }

static uint64_t shift_lens(uint64_t x) {
  uint64_t top = (x >> 62) & 3 ? 1ULL << 63 : 0;
  return (x << 1 & ~(1ULL << 63)) | top;
}

/* the distinct transitions of a raw DFA: (from, to, whether the byte starts a character) */
typedef struct { int from, to, counts; } edge;

static edge *edges_of(const raw_dfa *d, const int *map, int *n_out) {
  int n = d->n, ne = 0, cap = 256;
  edge *e = xmalloc(sizeof *e * (size_t)cap);
  int *seen = xmalloc(sizeof *seen * 2 * (size_t)(n ? n : 1));
  for (int i = 0; i < 2 * n; i++) seen[i] = -1;
  for (int i = 0; i < n; i++) {
    if (map && map[i] < 0) continue;
    for (int c = 0; c < 256; c++) {
      uint16_t t = d->next[(size_t)i * 256 + (size_t)c];
      if (t == JC_RE_NONE || (map && map[t] < 0)) continue;
      int k = 2 * t + !cont_byte(c);
      if (seen[k] == i) continue;
      seen[k] = i;
      if (ne == cap) cap *= 2, e = xrealloc(e, sizeof *e * (size_t)cap);
      e[ne++] = (edge){map ? map[i] : i, map ? map[t] : t, !cont_byte(c)};
    }
  }
  free(seen);
  *n_out = ne;
  return e;
}

/* keeps the states that can reach acceptance (state 0 must be one), computes lens */
static jc_re *finish(raw_dfa *d, char *err, size_t cap) {
  int n = d->n, ne;
  uint8_t *live = xcalloc((size_t)(n ? n : 1), 1);
  edge *e = edges_of(d, NULL, &ne);
  /* backwards from the accepting states, over the edges sorted by target */
  int *first = xcalloc((size_t)n + 1, sizeof *first), *by_to = xmalloc(sizeof *by_to * (size_t)(ne ? ne : 1));
  for (int k = 0; k < ne; k++) first[e[k].to + 1]++;
  for (int i = 0; i < n; i++) first[i + 1] += first[i];
  int *fill = xmalloc(sizeof *fill * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) fill[i] = first[i];
  for (int k = 0; k < ne; k++) by_to[fill[e[k].to]++] = k;
  int *queue = xmalloc(sizeof *queue * (size_t)(n ? n : 1)), qh = 0, qt = 0;
  for (int i = 0; i < n; i++)
    if (d->accept[i]) live[i] = 1, queue[qt++] = i;
  while (qh < qt) {
    int t = queue[qh++];
    for (int k = first[t]; k < first[t + 1]; k++) {
      int f = e[by_to[k]].from;
      if (!live[f]) live[f] = 1, queue[qt++] = f;
    }
  }
  free(first), free(by_to), free(fill), free(queue), free(e);
  if (n == 0 || !live[0]) {
    free(live);
    free(d->next);
    free(d->accept);
    snprintf(err, cap, "no string that the server can generate matches");
    return NULL;
  }
  int *map = xmalloc(sizeof *map * (size_t)n);
  int m = 0;
  for (int i = 0; i < n; i++) map[i] = live[i] ? m++ : -1;
  jc_re *r = xcalloc(1, sizeof *r);
  r->n_states = m;
  r->next = xmalloc(sizeof *r->next * 256 * (size_t)m);
  r->accept = xmalloc((size_t)m);
  r->lens = xcalloc((size_t)m, sizeof *r->lens);
  for (int i = 0; i < n; i++) {
    if (map[i] < 0) continue;
    r->accept[map[i]] = d->accept[i];
    for (int c = 0; c < 256; c++) {
      uint16_t t = d->next[(size_t)i * 256 + (size_t)c];
      r->next[(size_t)map[i] * 256 + (size_t)c] = t != JC_RE_NONE && map[t] >= 0 ? (uint16_t)map[t] : JC_RE_NONE;
    }
  }
  e = edges_of(d, map, &ne);
  for (int i = 0; i < m; i++) r->lens[i] = r->accept[i] ? 1 : 0;
  for (int changed = 1; changed;) { /* a fixed point: bits only get set */
    changed = 0;
    for (int k = 0; k < ne; k++) {
      uint64_t v = r->lens[e[k].from] | (e[k].counts ? shift_lens(r->lens[e[k].to]) : r->lens[e[k].to]);
      if (v != r->lens[e[k].from]) r->lens[e[k].from] = v, changed = 1;
    }
  }
  free(e);
  free(map);
  free(live);
  free(d->next);
  free(d->accept);
  return r;
}

typedef struct { int n_words; uint64_t *w; } sset;

static void closure_add(const rx *r, uint64_t *w, int s, int *stack) {
  int sp = 0;
  if (w[s >> 6] >> (s & 63) & 1) return;
  w[s >> 6] |= 1ULL << (s & 63);
  stack[sp++] = s;
  while (sp) {
    int x = stack[--sp];
    if (r->st[x].kind != NS_EPS) continue;
    int o[2] = {r->st[x].out, r->st[x].out2};
    for (int k = 0; k < 2; k++)
      if (o[k] >= 0 && !(w[o[k] >> 6] >> (o[k] & 63) & 1)) {
        w[o[k] >> 6] |= 1ULL << (o[k] & 63);
        stack[sp++] = o[k];
      }
  }
}

static jc_re *determinise(rx *r, int start, int match, int max_states, char *err, size_t cap) {
  int nw = (r->n + 63) / 64;
  /* classes of bytes: bytes every set (and the continuation range) treats alike */
  int cls[256], n_cls = 0, rep[256];
  for (int c = 0; c < 256; c++) {
    int found = -1;
    for (int k = 0; k < n_cls && found < 0; k++) {
      int b = rep[k], same = cont_byte(b) == cont_byte(c);
      for (int s = 0; s < r->nsets && same; s++) same = bs_has(&r->sets[s], b) == bs_has(&r->sets[s], c);
      if (same) found = k;
    }
    if (found < 0) rep[n_cls] = c, found = n_cls++;
    cls[c] = found;
  }
  int cls_first[257] = {0}, cls_bytes[256], cls_fill[256];
  for (int c = 0; c < 256; c++) cls_first[cls[c] + 1]++;
  for (int k = 0; k < n_cls; k++) cls_first[k + 1] += cls_first[k];
  for (int k = 0; k < n_cls; k++) cls_fill[k] = cls_first[k];
  for (int c = 0; c < 256; c++) cls_bytes[cls_fill[cls[c]]++] = c;
  if (max_states > DFA_MAX) max_states = DFA_MAX;
  uint64_t **sets = NULL;
  uint32_t *hashes = NULL;
  int n = 0, capd = 0;
  raw_dfa d = {0, 0, NULL, NULL};
  int *stack = xmalloc(sizeof *stack * (size_t)r->n);
  uint64_t *cur = xcalloc((size_t)nw, sizeof *cur);
  int hsize = 2 * DFA_MAX * 2;
  int *htab = xmalloc(sizeof *htab * (size_t)hsize);
  for (int i = 0; i < hsize; i++) htab[i] = -1;
  jc_re *res = NULL;
#define FIND_OR_ADD(W, OUT)                                                              \
  do {                                                                                   \
    uint32_t h = 2166136261u;                                                            \
    for (int i_ = 0; i_ < nw; i_++) h = (h ^ (uint32_t)((W)[i_] ^ (W)[i_] >> 32)) * 16777619u; \
    int slot = (int)(h % (uint32_t)hsize);                                               \
    (OUT) = -1;                                                                          \
    while (htab[slot] >= 0) {                                                            \
      if (hashes[htab[slot]] == h && !memcmp(sets[htab[slot]], (W), sizeof *(W) * (size_t)nw)) { \
        (OUT) = htab[slot];                                                              \
        break;                                                                           \
      }                                                                                  \
      slot = (slot + 1) % hsize;                                                         \
    }                                                                                    \
    if ((OUT) < 0) {                                                                     \
      if (n >= max_states) goto too_big;                                                 \
      if (n == capd) {                                                                   \
        capd = capd ? 2 * capd : 64;                                                     \
        sets = xrealloc(sets, sizeof *sets * (size_t)capd);                              \
        hashes = xrealloc(hashes, sizeof *hashes * (size_t)capd);                        \
      }                                                                                  \
      sets[n] = xmalloc(sizeof *(W) * (size_t)nw);                                       \
      memcpy(sets[n], (W), sizeof *(W) * (size_t)nw);                                    \
      hashes[n] = h;                                                                     \
      htab[slot] = n;                                                                    \
      raw_add(&d);                                                                       \
      d.accept[n] = (uint8_t)((W)[match >> 6] >> (match & 63) & 1);                      \
      (OUT) = n++;                                                                       \
    }                                                                                    \
  } while (0)
  {
    int idx;
    closure_add(r, cur, start, stack);
    FIND_OR_ADD(cur, idx);
    (void)idx;
  }
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < n_cls; k++) {
      int b = rep[k];
      memset(cur, 0, sizeof *cur * (size_t)nw);
      int any = 0;
      for (int wi = 0; wi < nw; wi++) /* the NFA states in DFA state i */
        for (uint64_t w = sets[i][wi]; w; w &= w - 1) {
          int s = wi * 64 + __builtin_ctzll(w);
          if (r->st[s].kind != NS_SET) continue;
          if (bs_has(&r->sets[r->st[s].set], b)) closure_add(r, cur, r->st[s].out, stack), any = 1;
        }
      if (!any) continue;
      int t;
      FIND_OR_ADD(cur, t);
      for (int j = cls_first[k]; j < cls_first[k + 1]; j++) d.next[(size_t)i * 256 + (size_t)cls_bytes[j]] = (uint16_t)t;
    }
  }
#undef FIND_OR_ADD
  res = finish(&d, err, cap);
  if (res) res->built = n;
  goto done;
too_big:
  snprintf(err, cap, "the pattern needs more than %d automaton states%s", max_states,
           max_states < DFA_MAX ? " (what is left of the schema's budget)" : "");
  free(d.next);
  free(d.accept);
done:
  for (int i = 0; i < n; i++) free(sets[i]);
  free(sets);
  free(hashes);
  free(htab);
  free(stack);
  free(cur);
  return res;
}

jc_re *jc_re_compile(const char *pattern, int max_states, char *err, size_t cap) {
  rx r;
  memset(&r, 0, sizeof r);
  r.p = pattern;
  r.len = strlen(pattern);
  r.err = err;
  r.errcap = cap;
  int anchored_start = 0, anchored_end = 0;
  if (r.len && pattern[0] == '^') anchored_start = 1, r.pos = 1;
  if (r.len > (size_t)anchored_start && pattern[r.len - 1] == '$') {
    size_t bs = 0;
    while (bs + 2 <= r.len && pattern[r.len - 2 - bs] == '\\') bs++;
    if (bs % 2 == 0) anchored_end = 1, r.len--;
  }
  frag f = parse_alt(&r, 0);
  if (!r.failed && r.pos < r.len) rx_fail(&r, "an unmatched ')'");
  if (!r.failed) {
    bset u;
    universe(&u);
    if (!anchored_start) f = f_cat(&r, f_rep(&r, f_set(&r, &u), 1), f);
    if (!anchored_end) f = f_cat(&r, f, f_rep(&r, f_set(&r, &u), 1));
  }
  int match = r.failed ? -1 : new_state(&r, NS_MATCH, -1);
  jc_re *res = NULL;
  if (!r.failed && match >= 0) {
    r.st[f.end].out = match;
    res = determinise(&r, f.start, match, max_states, err, cap);
  }
  free(r.st);
  free(r.sets);
  return res;
}

#define DATE_RE                                                                       \
  "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|" \
  "02-(?:0[1-9]|1\\d|2[0-8]))"
#define TIME_RE "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"
#define LABEL_RE "[a-z0-9]{1,12}(?:-[a-z0-9]{1,12})?" /* bounded: a document always ends */
#define OCTET_RE "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"

static const char *const formats[][2] = {
    {"date", "^" DATE_RE "$"},
    {"time", "^" TIME_RE "$"},
    {"date-time", "^" DATE_RE "T" TIME_RE "$"},
    {"email", "^[a-z0-9]{1,16}(?:[._-][a-z0-9]{1,16}){0,2}@" LABEL_RE "(?:\\." LABEL_RE "){0,2}\\.[a-z]{2,6}$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"},
    {"uri", "^https?://" LABEL_RE "(?:\\." LABEL_RE "){0,3}(?:/[A-Za-z0-9._~-]{0,16}){0,4}(?:\\?[A-Za-z0-9._~=&-]{0,24})?$"},
    {"ipv4", "^(?:" OCTET_RE "\\.){3}" OCTET_RE "$"},
    {"ipv6", "^[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}$"},
};

jc_re *jc_re_format(const char *format, int max_states, char *err, size_t cap) {
  for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
    if (!strcmp(format, formats[i][0])) return jc_re_compile(formats[i][1], max_states, err, cap);
  snprintf(err, cap, "the format \"%.40s\" is not supported (supported: date-time, date, time, "
                     "email, uuid, uri, ipv4, ipv6)", format);
  return NULL;
}

jc_re *jc_re_intersect(const jc_re *a, const jc_re *b, int max_states, char *err, size_t cap) {
  raw_dfa d = {0, 0, NULL, NULL};
  /* pairs (sa, sb) found so far, indexed by sa * nb + sb */
  size_t np = (size_t)a->n_states * (size_t)b->n_states;
  int *idx = xmalloc(sizeof *idx * np);
  for (size_t i = 0; i < np; i++) idx[i] = -1;
  int *qa = NULL, *qb = NULL, qcap = 0;
  raw_add(&d);
  idx[0] = 0;
  qcap = 64;
  qa = xmalloc(sizeof *qa * (size_t)qcap);
  qb = xmalloc(sizeof *qb * (size_t)qcap);
  qa[0] = qb[0] = 0;
  d.accept[0] = a->accept[0] && b->accept[0];
  for (int i = 0; i < d.n; i++) {
    for (int c = 0; c < 256; c++) {
      uint16_t ta = a->next[(size_t)qa[i] * 256 + (size_t)c], tb = b->next[(size_t)qb[i] * 256 + (size_t)c];
      if (ta == JC_RE_NONE || tb == JC_RE_NONE) continue;
      size_t k = (size_t)ta * (size_t)b->n_states + tb;
      if (idx[k] < 0) {
        if (d.n >= max_states || d.n >= DFA_MAX) {
          snprintf(err, cap, "pattern and format together need more than %d automaton states",
                   max_states < DFA_MAX ? max_states : DFA_MAX);
          free(idx), free(qa), free(qb), free(d.next), free(d.accept);
          return NULL;
        }
        int s = raw_add(&d);
        if (s == qcap) {
          qcap *= 2;
          qa = xrealloc(qa, sizeof *qa * (size_t)qcap);
          qb = xrealloc(qb, sizeof *qb * (size_t)qcap);
        }
        qa[s] = ta, qb[s] = tb;
        d.accept[s] = a->accept[ta] && b->accept[tb];
        idx[k] = s;
      }
      d.next[(size_t)i * 256 + (size_t)c] = (uint16_t)idx[k];
    }
  }
  free(idx), free(qa), free(qb);
  int built = d.n;
  jc_re *r = finish(&d, err, cap);
  if (!r) snprintf(err, cap, "no string matches both the pattern and the format");
  else r->built = built;
  return r;
}

void jc_re_free(jc_re *r) {
  if (!r) return;
  free(r->next);
  free(r->accept);
  free(r->lens);
  free(r);
}

int jc_re_len_ok(const jc_re *r, int s, long lo, long hi) {
  uint64_t l = r->lens[s];
  if (lo < 0) lo = 0;
  if (hi >= 0 && hi < lo) return 0;
  for (long n = lo; n <= JC_RE_LENS_MAX && (hi < 0 || n <= hi); n++)
    if (l >> n & 1) return 1;
  return (l >> 63 & 1) && (hi < 0 || hi > JC_RE_LENS_MAX);
}
