/*
 * tok_detok_moses.c: the transfo_xl decoder, streaming. Per line (tokens up to <eos>) it gives
 * what Hugging Face's TransfoXLTokenizer.convert_tokens_to_string gives for that line:
 * " @-@ " joins its neighbours with "-", XML entities are unescaped, the Moses English
 * detokenizer places the spaces (currency and opening brackets attach to the next token,
 * closing punctuation to the previous one, quotes alternate, "'s"-style contractions attach,
 * CJK runs join), then " @,@ " -> "," and " @.@ " -> ".". Every rule looks backwards except the
 * "@-@" join, so a punctuation or quote token is held back until the next shows whether it
 * joins (a word is placed the same either way, at once); the number rules hold back at most
 * four bytes. Written from the published rules. Reentrant: the state
 * lives in the caller's xl_detok.
 */
#include <string.h>

#include "tok_internal.h"

typedef struct {
  char *p;
  size_t n, cap;
  xl_detok *d;
} sink;

static void raw_out(sink *s, char c) {
  if (s->n < s->cap) s->p[s->n++] = c;
}

/* The second number rule (" @.@ " -> "."), fed by the first. */
static void num_feed(sink *s, int stage, char c);

static void num_emit(sink *s, int stage, char c) {
  if (stage == 0) num_feed(s, 1, c);
  else raw_out(s, c);
}

static void num_feed(sink *s, int stage, char c) {
  static const char pat[2][6] = {" @,@ ", " @.@ "};
  char *pend = s->d->mx_num[stage];
  int *n = &s->d->mx_num_n[stage];
  if (*n > 0 && pat[stage][*n] != c) { /* broken partial match: let it through */
    for (int i = 0; i < *n; i++) num_emit(s, stage, pend[i]);
    *n = 0;
  }
  if (pat[stage][*n] == c) {
    pend[(*n)++] = c;
    if (*n == 5) {
      num_emit(s, stage, pat[stage][2]);
      *n = 0;
    }
    return;
  }
  num_emit(s, stage, c);
}

static void num_flush(sink *s) {
  for (int stage = 0; stage < 2; stage++) {
    int n = s->d->mx_num_n[stage];
    s->d->mx_num_n[stage] = 0;
    for (int i = 0; i < n; i++) num_emit(s, stage, s->d->mx_num[stage][i]);
  }
}

static void out_cp(sink *s, uint32_t c) {
  char b[4];
  size_t k = xl_utf8_put(c, b);
  for (size_t i = 0; i < k; i++) num_feed(s, 0, b[i]);
}

static void out_cps(sink *s, const uint32_t *c, size_t n) {
  for (size_t i = 0; i < n; i++) out_cp(s, c[i]);
}

/* sacremoses' is_cjk ranges */
static int is_cjk(uint32_t c) {
  static const uint32_t R[][2] = {{4352, 4607},     {11904, 42191},   {43072, 43135},
                                  {44032, 55215},   {63744, 64255},   {65072, 65103},
                                  {65381, 65500},   {94208, 101119},  {110592, 110895},
                                  {110960, 111359}, {131072, 196607}};
  for (size_t i = 0; i < sizeof R / sizeof *R; i++)
    if (c >= R[i][0] && c <= R[i][1]) return 1;
  return 0;
}

static int all_in(const uint32_t *u, size_t n, int (*pred)(uint32_t)) {
  for (size_t i = 0; i < n; i++)
    if (!pred(u[i])) return 0;
  return 1;
}
static int is_open(uint32_t c) { /* currency, ( [ { ¿ ¡ */
  return (xl_uclass(c) & XL_UC_SC) || c == '(' || c == '[' || c == '{' || c == 0xBF || c == 0xA1;
}
static int is_close(uint32_t c) { return c < 128 && c && strchr(",.?!:;\\%}])", (int)c); }
static int is_quote(uint32_t c) {
  return c == '\'' || c == '"' || c == 0x201E || c == 0x201C || c == '`';
}
static int is_dquote(uint32_t c) { return c == 0x201E || c == 0x201C || c == 0x201D; }

/* One bit per quote token (Moses counts each distinct token's occurrences). Tokens of up to
 * three quote characters get their own bit; longer ones share the remaining bits by hash. */
static int quote_slot(const uint32_t *u, size_t n) {
  if (all_in(u, n, is_dquote)) return 1; /* normalised to '"' */
  if (n <= 3) {
    int idx = 0, base = 0, pow = 1;
    for (size_t i = 0; i < n; i++) {
      int k = u[i] == '\'' ? 0 : u[i] == '"' ? 1 : u[i] == 0x201E ? 2 : u[i] == 0x201C ? 3 : 4;
      idx = idx * 5 + k;
    }
    for (size_t l = 1; l < n; l++) pow *= 5, base += pow;
    return base + idx; /* n=1: 0..4, n=2: 5..29, n=3: 30..154 */
  }
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ u[i]) * 16777619u;
  return 155 + (int)(h % 37);
}

/* Places one token (its code points; `merged`: it is the start of a token that "@-@" joined,
 * so the rules that look at the whole token do not apply). */
static void place(sink *s, const uint32_t *u, size_t n, int merged) {
  xl_detok *d = s->d;
  if (!n) return;
  int first = d->mx_tokens == 0, space = 0, prepend = 1;
  uint32_t c0 = u[0];
  if (is_cjk(c0)) {
    space = !(!first && is_cjk(d->mx_prev_last));
  } else if (!merged && all_in(u, n, is_open)) {
    space = 1, prepend = 0;
  } else if (!merged && all_in(u, n, is_close)) {
    space = 0;
  } else if (!first && c0 == '\'' && n > 1 && xl_is_alpha(u[1])) {
    space = 0;
  } else if (!merged && all_in(u, n, is_quote)) {
    int slot = quote_slot(u, n);
    uint64_t *w = &d->mx_quotes[slot / 64], bit = (uint64_t)1 << (slot % 64);
    if (!(*w & bit)) { /* even count so far */
      if (n == 1 && c0 == '\'' && !first && d->mx_prev_last == 's') {
        space = 0; /* possessive: "The Jones' house" */
      } else {
        space = 1, prepend = 0;
        *w ^= bit;
      }
    } else {
      space = 0;
      *w ^= bit;
    }
  } else {
    space = 1;
  }
  if (space && d->mx_prepend && !first) out_cp(s, ' ');
  out_cps(s, u, n);
  d->mx_prepend = prepend;
  d->mx_tokens++;
  d->mx_prev_last = u[n - 1];
}

/* Whether a rule that looks at the whole token applies to it (currency/opening brackets,
 * closing punctuation, quotes): only then does a following "@-@" change its place. */
static int whole_token_rule(const uint32_t *u, size_t n) {
  return all_in(u, n, is_open) || all_in(u, n, is_close) || all_in(u, n, is_quote);
}

/* The token's text after XML unescaping, as code points. */
static size_t unescaped(const xl_model *m, int32_t id, uint32_t *u, size_t cap) {
  const char *sym = m->vocab[id];
  char buf[XL_MAX_SYMBOL_BYTES + 1];
  size_t n = strlen(sym);
  if (n > XL_MAX_SYMBOL_BYTES) n = XL_MAX_SYMBOL_BYTES;
  memcpy(buf, sym, n);
  buf[n] = 0;
  if (memchr(buf, '&', n)) {
    static const char *const R[][2] = {{"&bar;", "|"},  {"&#124;", "|"}, {"&lt;", "<"},
                                       {"&gt;", ">"},   {"&bra;", "["},  {"&ket;", "]"},
                                       {"&quot;", "\""}, {"&apos;", "'"}, {"&#91;", "["},
                                       {"&#93;", "]"},  {"&amp;", "&"}};
    for (size_t r = 0; r < sizeof R / sizeof *R; r++) {
      size_t fl = strlen(R[r][0]), w = 0;
      for (size_t i = 0; i < n;) {
        if (i + fl <= n && !memcmp(buf + i, R[r][0], fl)) {
          buf[w++] = R[r][1][0];
          i += fl;
        } else {
          buf[w++] = buf[i++];
        }
      }
      n = w;
    }
  }
  xl_ustr t = {u, 0, cap}; /* cap >= n: decoding never yields more code points than bytes */
  (void)xl_utf8_decode(buf, n, &t);
  return t.n;
}

/* Whitespace-separated parts of u: fills starts/lens, returns the count. */
static size_t parts_of(const uint32_t *u, size_t n, size_t *st, size_t *ln, size_t max) {
  size_t k = 0, p = 0;
  while (p < n && k < max) {
    while (p < n && xl_is_space(u[p])) p++;
    if (p >= n) break;
    size_t s = p;
    while (p < n && !xl_is_space(u[p])) p++;
    st[k] = s;
    ln[k++] = p - s;
  }
  return k;
}

#define MAX_PARTS 64

/* Places the held token's last part (the one a "@-@" could have joined), not joined. */
static void place_held(sink *s, const xl_model *m) {
  xl_detok *d = s->d;
  if (d->mx_held < 0) return;
  uint32_t u[XL_MAX_SYMBOL_BYTES + 1];
  size_t st[MAX_PARTS], ln[MAX_PARTS];
  size_t n = unescaped(m, d->mx_held, u, sizeof u / sizeof *u);
  size_t k = parts_of(u, n, st, ln, MAX_PARTS);
  d->mx_held = -1;
  if (k) place(s, u + st[k - 1], ln[k - 1], 0);
}

static const uint32_t DASH[1] = {'-'};

static void push(sink *s, const xl_model *m, int32_t id) {
  xl_detok *d = s->d;
  const char *sym = m->vocab[id];
  if (!strcmp(sym, "@-@") && !d->mx_join) { /* joins its neighbours */
    if (d->mx_held >= 0) {
      int32_t h = d->mx_held;
      uint32_t u[XL_MAX_SYMBOL_BYTES + 1];
      size_t st[MAX_PARTS], ln[MAX_PARTS];
      size_t n = unescaped(m, h, u, sizeof u / sizeof *u);
      size_t k = parts_of(u, n, st, ln, MAX_PARTS);
      d->mx_held = -1;
      if (k) {
        place(s, u + st[k - 1], ln[k - 1], 1);
        out_cps(s, DASH, 1);
      } else {
        place(s, DASH, 1, 1);
      }
    } else if (d->mx_in_merged) {
      out_cps(s, DASH, 1);
    } else {
      place(s, DASH, 1, 1);
    }
    d->mx_prev_last = '-';
    d->mx_in_merged = 1;
    d->mx_join = 1;
    return;
  }
  uint32_t u[XL_MAX_SYMBOL_BYTES + 1];
  size_t st[MAX_PARTS], ln[MAX_PARTS];
  size_t n = unescaped(m, id, u, sizeof u / sizeof *u);
  size_t k = parts_of(u, n, st, ln, MAX_PARTS);
  size_t from = 0;
  if (d->mx_join) { /* continues the joined token */
    d->mx_join = 0;
    if (!k || st[0] > 0) { /* whitespace ends the joined token */
      d->mx_in_merged = 0;
    } else {
      out_cps(s, u, ln[0]);
      d->mx_prev_last = u[ln[0] - 1];
      if (k == 1) return; /* still inside the joined token */
      d->mx_in_merged = 0;
      from = 1;
    }
  } else {
    place_held(s, m);
    d->mx_in_merged = 0;
  }
  for (size_t i = from; i + 1 < k; i++) place(s, u + st[i], ln[i], 0);
  if (k <= from) {
    d->mx_held = -1;
  } else if (whole_token_rule(u + st[k - 1], ln[k - 1])) {
    d->mx_held = id; /* its place depends on whether "@-@" follows */
  } else { /* a word: placed the same either way, so now; a "@-@" after it just adds "-" */
    place(s, u + st[k - 1], ln[k - 1], 0);
    d->mx_held = -1;
    d->mx_in_merged = 1;
  }
}

size_t xl_moses_detok_push(const xl_model *m, xl_detok *d, int32_t id, char *out, size_t cap) {
  sink s = {out, 0, cap, d};
  push(&s, m, id);
  return s.n;
}

void xl_moses_detok_reset(xl_detok *d) {
  d->mx_tokens = 0;
  d->mx_prepend = 1;
  d->mx_join = 0;
  d->mx_in_merged = 0;
  d->mx_held = -1;
  d->mx_prev_last = 0;
  memset(d->mx_quotes, 0, sizeof d->mx_quotes);
  d->mx_num_n[0] = d->mx_num_n[1] = 0;
}

size_t xl_moses_detok_end_line(const xl_model *m, xl_detok *d, char *out, size_t cap) {
  sink s = {out, 0, cap, d};
  place_held(&s, m);
  num_flush(&s);
  xl_moses_detok_reset(d);
  return s.n;
}
