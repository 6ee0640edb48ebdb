/*
 * tok_moses.c: the Hugging Face TransfoXLTokenizer's text pipeline for one line of text, as
 * code-point passes that each do what one rule of sacremoses 0.1 does (leftmost, non-overlapping
 * matches, applied in the rules' order): Moses punctuation normalisation (English, Penn quotes),
 * the Moses English tokenizer (aggressive dash splits, no XML escaping, English non-breaking
 * prefixes, protected patterns = never_split, matched without case), then the number splitting
 * (`1,000` -> `1 @,@ 000`). Written from the published rules; no regex engine. Reentrant.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- pass machinery ------------------------------------------------------------------- */

/* A matcher looks at t[p..n) (and may look behind p or beyond what it consumes); on a match it
 * appends the replacement to out and returns the code points consumed (> 0), else 0. */
typedef size_t (*matcher)(const uint32_t *t, size_t n, size_t p, xl_ustr *out, const void *ctx);

typedef struct {
  xl_ustr cur, tmp;
  int oom;
  int ascii; /* the text is ASCII: no rule adds other characters, so their passes are skipped */
} text_buf;

static void run_pass(text_buf *b, matcher m, const void *ctx) {
  if (b->oom) return;
  b->tmp.n = 0;
  if (xl_ustr_reserve(&b->tmp, 5 * b->cur.n + 16)) { /* no rule grows text more than 5x */
    b->oom = 1;
    return;
  }
  const uint32_t *t = b->cur.p;
  size_t n = b->cur.n, p = 0;
  while (p < n) {
    size_t used = m(t, n, p, &b->tmp, ctx);
    if (used) {
      p += used;
    } else if (xl_ustr_push(&b->tmp, t[p++])) {
      b->oom = 1;
      return;
    }
  }
  xl_ustr s = b->cur;
  b->cur = b->tmp;
  b->tmp = s;
}

/* Appends to a pass's output, which run_pass reserved for the largest growth of any rule. */
static void put(xl_ustr *o, uint32_t c) { (void)xl_ustr_push(o, c); }
static void puts_a(xl_ustr *o, const char *a) { (void)xl_ustr_append_ascii(o, a); }

typedef struct {
  uint32_t from[4];
  int nfrom;
  const char *to; /* ASCII replacement, or NULL when to32 is used */
  uint32_t to32[4];
  int nto32;
} lit_rule;

static size_t m_lit(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  const lit_rule *r = ctx;
  if (t[p] != r->from[0] || p + (size_t)r->nfrom > n) return 0;
  for (int k = 1; k < r->nfrom; k++)
    if (t[p + (size_t)k] != r->from[k]) return 0;
  if (r->to) puts_a(o, r->to);
  else (void)xl_ustr_append(o, r->to32, (size_t)r->nto32);
  return (size_t)r->nfrom;
}

static int has(const text_buf *b, uint32_t c) {
  for (size_t i = 0; i < b->cur.n; i++)
    if (b->cur.p[i] == c) return 1;
  return 0;
}

/* A pass that can only match where character c is: skipped when the text has none. */
static void run_pass_if(text_buf *b, uint32_t c, matcher m, const void *ctx) {
  if (!(c >= 128 && b->ascii) && has(b, c)) run_pass(b, m, ctx);
}

static void lit(text_buf *b, const lit_rule *r) { run_pass_if(b, r->from[r->nfrom - 1], m_lit, r); }

#define L1(a, s) ((lit_rule){{a}, 1, s, {0}, 0})
#define L2(a, b2, s) ((lit_rule){{a, b2}, 2, s, {0}, 0})
#define L3(a, b2, c, s) ((lit_rule){{a, b2, c}, 3, s, {0}, 0})

static size_t m_spaces(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* " +" -> " " */
  if (t[p] != ' ') return 0;
  size_t q = p;
  while (q < n && t[q] == ' ') q++;
  put(o, ' ');
  return q - p;
}

static size_t m_ws(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "\s+" -> " " */
  if (!xl_is_space(t[p])) return 0;
  size_t q = p;
  while (q < n && xl_is_space(t[q])) q++;
  put(o, ' ');
  return q - p;
}

static void strip(text_buf *b) {
  size_t s = 0, e = b->cur.n;
  while (s < e && xl_is_space(b->cur.p[s])) s++;
  while (e > s && xl_is_space(b->cur.p[e - 1])) e--;
  if (s) memmove(b->cur.p, b->cur.p + s, (e - s) * sizeof *b->cur.p);
  b->cur.n = e - s;
}

static int in_set(uint32_t c, const char *set) { return c && c < 128 && strchr(set, (int)c); }
static int ascii_alpha(uint32_t c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }

/* The tokenizer's IsAlpha and IsAlnum are sacremoses' perluniprops classes plus the Indic
 * viramas and nuktas it appends to both (sacremoses.indic); the detokenizer uses the plain
 * IsAlpha. Sorted, for bsearch. */
static const uint32_t INDIC_SIGNS[] = {
    0x93C,   0x94D,   0x9BC,   0x9CD,   0xA3C,   0xA4D,   0xABC,   0xACD,   0xAFD,   0xAFE,
    0xAFF,   0xB3C,   0xB4D,   0xBCD,   0xC4D,   0xCBC,   0xCCD,   0xD3B,   0xD3C,   0xD4D,
    0xDCA,   0xEBA,   0x1039,  0x1714,  0x1BAB,  0x1C37,  0xA8C4,  0xA8F3,  0xA8F4,  0xA953,
    0xAAF6,  0x10A3F, 0x11046, 0x110B9, 0x110BA, 0x11133, 0x11173, 0x111C0, 0x111CA, 0x11235,
    0x11236, 0x112E9, 0x112EA, 0x1133C, 0x1134D, 0x11442, 0x11446, 0x114C2, 0x114C3, 0x115BF,
    0x115C0, 0x1163F, 0x116B6, 0x116B7, 0x11839, 0x1183A, 0x119E0, 0x11A34, 0x11C3F, 0x11D42,
    0x11D45, 0x11D97, 0x1E94A};

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}
static int indic_sign(uint32_t c) {
  return c >= 0x93C && bsearch(&c, INDIC_SIGNS, sizeof INDIC_SIGNS / sizeof *INDIC_SIGNS,
                               sizeof *INDIC_SIGNS, cmp_u32) != NULL;
}
static int tok_alpha(uint32_t c) { return xl_is_alpha(c) || indic_sign(c); }
static int tok_alnum(uint32_t c) { return xl_is_alnum(c) || indic_sign(c); }

/* ---- the punctuation normaliser ------------------------------------------------------- */

static size_t m_close_paren_punct(const uint32_t *t, size_t n, size_t p, xl_ustr *o,
                                  const void *ctx) {
  (void)ctx; /* "\) ([.!:?;,])" -> ")\1" */
  if (t[p] != ')' || p + 2 >= n || t[p + 1] != ' ' || !in_set(t[p + 2], ".!:?;,")) return 0;
  put(o, ')');
  put(o, t[p + 2]);
  return 3;
}

static size_t m_digit_space_pct(const uint32_t *t, size_t n, size_t p, xl_ustr *o,
                                const void *ctx) {
  (void)ctx; /* "(\d) %" -> "\1%" */
  if (p + 2 >= n || t[p + 1] != ' ' || t[p + 2] != '%' || !xl_is_digit(t[p])) return 0;
  put(o, t[p]);
  put(o, '%');
  return 3;
}

static size_t m_alpha_quote_alpha(const uint32_t *t, size_t n, size_t p, xl_ustr *o,
                                  const void *ctx) {
  uint32_t q = *(const uint32_t *)ctx; /* "([a-zA-Z])Q([a-zA-Z])" -> "\1'\2" */
  if (p + 2 >= n || t[p + 1] != q || !ascii_alpha(t[p]) || !ascii_alpha(t[p + 2])) return 0;
  put(o, t[p]);
  put(o, '\'');
  put(o, t[p + 2]);
  return 3;
}

static size_t m_quote_commas(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "\"([,.]+)" -> "\1\"" */
  if (t[p] != '"' || p + 1 >= n || !in_set(t[p + 1], ",.")) return 0;
  size_t q = p + 1;
  while (q < n && in_set(t[q], ",.")) put(o, t[q++]);
  put(o, '"');
  return q - p;
}

static size_t m_digit_nbsp_digit(const uint32_t *t, size_t n, size_t p, xl_ustr *o,
                                 const void *ctx) {
  (void)ctx; /* "(\d)\u00A0(\d)" -> "\1.\2" */
  if (p + 2 >= n || t[p + 1] != 0xA0 || !xl_is_digit(t[p]) || !xl_is_digit(t[p + 2])) return 0;
  put(o, t[p]);
  put(o, '.');
  put(o, t[p + 2]);
  return 3;
}

static void normalize(text_buf *b) {
  lit(b, &L1('\r', ""));
  lit(b, &L1('(', " ("));
  lit(b, &L1(')', ") "));
  run_pass(b, m_spaces, NULL);
  run_pass_if(b, ')', m_close_paren_punct, NULL);
  lit(b, &L2('(', ' ', "("));
  lit(b, &L2(' ', ')', ")"));
  run_pass_if(b, '%', m_digit_space_pct, NULL);
  lit(b, &L2(' ', ':', ":"));
  lit(b, &L2(' ', ';', ";"));
  /* Penn quotes */
  lit(b, &L1('`', "'"));
  lit(b, &L2('\'', '\'', " \" "));
  /* Unicode punctuation */
  lit(b, &L1(0x201E, "\""));
  lit(b, &L1(0x201C, "\""));
  lit(b, &L1(0x201D, "\""));
  lit(b, &L1(0x2013, "-"));
  lit(b, &L1(0x2014, " - "));
  run_pass(b, m_spaces, NULL);
  lit(b, &L1(0xB4, "'"));
  static const uint32_t lsq = 0x2018, rsq = 0x2019;
  run_pass_if(b, lsq, m_alpha_quote_alpha, &lsq);
  run_pass_if(b, rsq, m_alpha_quote_alpha, &rsq);
  lit(b, &L1(0x2018, "'"));
  lit(b, &L1(0x201A, "'"));
  lit(b, &L1(0x2019, "'"));
  lit(b, &L2('\'', '\'', "\""));
  lit(b, &L2(0xB4, 0xB4, "\""));
  lit(b, &L1(0x2026, "..."));
  /* French quotes */
  lit(b, &L3(0xA0, 0xAB, 0xA0, "\""));
  lit(b, &L2(0xAB, 0xA0, "\""));
  lit(b, &L1(0xAB, "\""));
  lit(b, &L3(0xA0, 0xBB, 0xA0, "\""));
  lit(b, &L2(0xA0, 0xBB, "\""));
  lit(b, &L1(0xBB, "\""));
  /* pseudo-spaces */
  lit(b, &L2(0xA0, '%', "%"));
  lit(b, &((lit_rule){{'n', 0xBA, 0xA0}, 3, NULL, {'n', 0xBA, ' '}, 3}));
  lit(b, &L2(0xA0, ':', ":"));
  lit(b, &((lit_rule){{0xA0, 0xBA, 'C'}, 3, NULL, {' ', 0xBA, 'C'}, 3}));
  lit(b, &L3(0xA0, 'c', 'm', " cm"));
  lit(b, &L2(0xA0, '?', "?"));
  lit(b, &L2(0xA0, '!', "!"));
  lit(b, &L2(0xA0, ';', ";"));
  lit(b, &L2(',', 0xA0, ", "));
  run_pass(b, m_spaces, NULL);
  /* English: quotation followed by comma; numbers */
  run_pass_if(b, '"', m_quote_commas, NULL);
  run_pass_if(b, 0xA0, m_digit_nbsp_digit, NULL);
  strip(b);
}

/* ---- the tokenizer -------------------------------------------------------------------- */

static size_t m_ascii_junk(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)n, (void)o, (void)ctx; /* "[\000-\037]" -> "" */
  return t[p] < 32 ? 1 : 0;
}

static size_t m_pad_not_alnum(const uint32_t *t, size_t n, size_t p, xl_ustr *o,
                              const void *ctx) {
  (void)n, (void)ctx; /* "([^IsAlnum\s\.'\`\,\-])" -> " \1 " */
  uint32_t c = t[p];
  if (in_set(c, ".'`,-") || tok_alnum(c) || xl_is_space(c)) return 0;
  put(o, ' ');
  put(o, c);
  put(o, ' ');
  return 1;
}

static size_t m_dash_split(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "([IsAlnum])\-(?=[IsAlnum])" -> "\1 @-@ " */
  if (p + 2 >= n || t[p + 1] != '-' || !tok_alnum(t[p]) || !tok_alnum(t[p + 2])) return 0;
  put(o, t[p]);
  puts_a(o, " @-@ ");
  return 2;
}

static size_t m_multidot1(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "\.([\.]+)" -> " DOTMULTI\1" */
  if (t[p] != '.' || p + 1 >= n || t[p + 1] != '.') return 0;
  size_t q = p + 1;
  puts_a(o, " DOTMULTI");
  while (q < n && t[q] == '.') put(o, t[q++]);
  return q - p;
}

static const uint32_t DOTMULTI[8] = {'D', 'O', 'T', 'M', 'U', 'L', 'T', 'I'};

static int at_word(const uint32_t *t, size_t n, size_t p, const uint32_t *w, size_t wn) {
  if (p + wn > n) return 0;
  for (size_t k = 0; k < wn; k++)
    if (t[p + k] != w[k]) return 0;
  return 1;
}

static size_t m_multidot2(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "DOTMULTI\.([^\.])" -> "DOTDOTMULTI \1" */
  if (t[p] != 'D' || !at_word(t, n, p, DOTMULTI, 8) || p + 9 >= n || t[p + 8] != '.' ||
      t[p + 9] == '.')
    return 0;
  puts_a(o, "DOTDOTMULTI ");
  put(o, t[p + 9]);
  return 10;
}

static size_t m_multidot3(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "DOTMULTI\." -> "DOTDOTMULTI" */
  if (t[p] != 'D' || !at_word(t, n, p, DOTMULTI, 8) || p + 8 >= n || t[p + 8] != '.') return 0;
  puts_a(o, "DOTDOTMULTI");
  return 9;
}

static int contains_dotmulti_dot(const xl_ustr *s) {
  for (size_t p = 0; p + 9 <= s->n; p++)
    if (s->p[p] == 'D' && at_word(s->p, s->n, p, DOTMULTI, 8) && s->p[p + 8] == '.') return 1;
  return 0;
}

static size_t m_comma1(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "([^IsN])[,]" -> "\1 , " */
  if (p + 1 >= n || t[p + 1] != ',' || xl_is_n(t[p])) return 0;
  put(o, t[p]);
  puts_a(o, " , ");
  return 2;
}

static size_t m_comma2(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "[,]([^IsN])" -> " , \1" */
  if (t[p] != ',' || p + 1 >= n || xl_is_n(t[p + 1])) return 0;
  puts_a(o, " , ");
  put(o, t[p + 1]);
  return 2;
}

static size_t m_comma3(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  (void)ctx; /* "([IsN])[,]$" -> "\1 , " */
  if (p + 2 != n || t[p + 1] != ',' || !xl_is_n(t[p])) return 0;
  put(o, t[p]);
  puts_a(o, " , ");
  return 2;
}

/* English apostrophes: "(L)[']( R)" with the classes of each rule. */
enum { AP_1, AP_2, AP_3, AP_4, AP_5 };
static size_t m_apos(const uint32_t *t, size_t n, size_t p, xl_ustr *o, const void *ctx) {
  int rule = *(const int *)ctx;
  if (p + 2 >= n || t[p + 1] != '\'') return 0;
  uint32_t l = t[p], r = t[p + 2];
  int la = tok_alpha(l) != 0, ra = tok_alpha(r) != 0, ok = 0, glue = 0;
  switch (rule) {
    case AP_1: ok = !la && !ra; break;
    case AP_2: ok = !la && !xl_is_n(l) && ra; break;
    case AP_3: ok = la && !ra; break;
    case AP_4: ok = la && ra, glue = 1; break;
    default: ok = xl_is_n(l) && r == 's', glue = 1; break;
  }
  if (!ok) return 0;
  put(o, l);
  puts_a(o, glue ? " '" : " ' ");
  put(o, r);
  return 3;
}

/* The English non-breaking prefixes of Moses (nonbreaking_prefix.en); "#NUMERIC_ONLY#" ones
 * stay joined to their period only before a number. */
static const char *const NB_PREFIXES[] = {
    "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R",
    "S", "T", "U", "V", "W", "X", "Y", "Z", "Adj", "Adm", "Adv", "Asst", "Bart", "Bldg",
    "Brig", "Bros", "Capt", "Cmdr", "Col", "Comdr", "Con", "Corp", "Cpl", "DR", "Dr", "Drs",
    "Ens", "Gen", "Gov", "Hon", "Hr", "Hosp", "Insp", "Lt", "MM", "MR", "MRS", "MS", "Maj",
    "Messrs", "Mlle", "Mme", "Mr", "Mrs", "Ms", "Msgr", "Op", "Ord", "Pfc", "Ph", "Prof", "Pvt",
    "Rep", "Reps", "Res", "Rev", "Rt", "Sen", "Sens", "Sfc", "Sgt", "Sr", "St", "Supt", "Surg",
    "v", "vs", "i.e", "rev", "e.g", "Rs", "Nos", "Nr", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul",
    "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const NB_NUMERIC_ONLY[] = {"No", "Art", "pp"};

static int word_is(const uint32_t *w, size_t n, const char *a) {
  size_t k = 0;
  for (; k < n && a[k]; k++)
    if (w[k] != (unsigned char)a[k]) return 0;
  return k == n && !a[k];
}

static int in_list(const uint32_t *w, size_t n, const char *const *list, size_t count) {
  for (size_t i = 0; i < count; i++)
    if (word_is(w, n, list[i])) return 1;
  return 0;
}

/* handles_nonbreaking_prefixes: split on whitespace, re-join with single spaces; a word
 * "X." that is not a known abbreviation (and not followed by a lowercase word, ...) becomes
 * "X .". */
static void nonbreaking(text_buf *b) {
  if (b->oom) return;
  const uint32_t *t = b->cur.p;
  size_t n = b->cur.n, p = 0;
  xl_ustr *o = &b->tmp;
  o->n = 0;
  if (xl_ustr_reserve(o, 2 * n + 16)) {
    b->oom = 1;
    return;
  }
  int first = 1;
  while (p < n) {
    while (p < n && xl_is_space(t[p])) p++;
    if (p >= n) break;
    size_t s = p;
    while (p < n && !xl_is_space(t[p])) p++;
    size_t e = p, q = p; /* the next word: [ns, ne) */
    while (q < n && xl_is_space(t[q])) q++;
    size_t ns = q;
    while (q < n && !xl_is_space(t[q])) q++;
    int has_next = ns < n;
    if (!first) put(o, ' ');
    first = 0;
    (void)xl_ustr_append(o, t + s, e - s);
    if (e - s < 2 || t[e - 1] != '.') continue;
    const uint32_t *pre = t + s;
    size_t pn = e - s - 1;
    int dot_alpha = 0, has_dot = 0;
    for (size_t k = 0; k < pn; k++) {
      if (pre[k] == '.') has_dot = 1;
      if (tok_alpha(pre[k])) dot_alpha = 1;
    }
    if ((has_dot && dot_alpha) ||
        in_list(pre, pn, NB_PREFIXES, sizeof NB_PREFIXES / sizeof *NB_PREFIXES) ||
        (has_next && xl_is_lower(t[ns])))
      continue;
    if (in_list(pre, pn, NB_NUMERIC_ONLY, 3) && has_next && t[ns] >= '0' && t[ns] <= '9')
      continue;
    o->n--; /* "X." -> "X ." */
    puts_a(o, " .");
  }
  xl_ustr sw = b->cur;
  b->cur = b->tmp;
  b->tmp = sw;
}

static size_t m_trailing_dot_apos(const uint32_t *t, size_t n, size_t p, xl_ustr *o,
                                  const void *ctx) {
  (void)ctx; /* "\.' ?$" -> " . ' " */
  if (t[p] != '.' || p + 1 >= n || t[p + 1] != '\'') return 0;
  if (!(p + 2 == n || (p + 3 == n && t[p + 2] == ' '))) return 0;
  puts_a(o, " . ' ");
  return n - p;
}

/* Python's str.replace(a, b) on the current text. */
static void replace_all(text_buf *b, const uint32_t *a, size_t an, const uint32_t *r, size_t rn) {
  if (b->oom || !an) return;
  const uint32_t *t = b->cur.p;
  size_t n = b->cur.n, p = 0;
  xl_ustr *o = &b->tmp;
  o->n = 0;
  if (xl_ustr_reserve(o, n + 1)) {
    b->oom = 1;
    return;
  }
  while (p < n) {
    if (t[p] == a[0] && at_word(t, n, p, a, an)) {
      if (xl_ustr_append(o, r, rn)) {
        b->oom = 1;
        return;
      }
      p += an;
    } else {
      if (xl_ustr_push(o, t[p++])) {
        b->oom = 1;
        return;
      }
    }
  }
  xl_ustr sw = b->cur;
  b->cur = b->tmp;
  b->tmp = sw;
}

static uint32_t fold(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

static void placeholder(size_t i, uint32_t *out, size_t *n) {
  size_t k = 0;
  const char *pre = "THISISPROTECTED";
  for (; pre[k]; k++) out[k] = (unsigned char)pre[k];
  int len = 0;
  char digits[24];
  do digits[len++] = (char)('0' + i % 10), i /= 10;
  while (i);
  while (len < 3) digits[len++] = '0';
  for (int d = len - 1; d >= 0; d--) out[k++] = (unsigned char)digits[d];
  *n = k;
}

int xl_moses_line(const xl_moses_opts *opt, const uint32_t *text, size_t n, xl_ustr *tokens) {
  text_buf b = {{0}, {0}, 0, 1};
  xl_ustr prot = {0};         /* the protected tokens' text, one after another */
  size_t *prot_off = NULL, n_prot = 0, cap_prot = 0;
  int rc = -1;
  if (xl_ustr_append(&b.cur, text, n)) goto done;
  for (size_t i = 0; i < n && b.ascii; i++) b.ascii = text[i] < 128;
  strip(&b);
  normalize(&b);
  /* tokenize() */
  run_pass(&b, m_ws, NULL);
  run_pass(&b, m_ascii_junk, NULL);
  if (b.oom) goto done;
  for (size_t s = 0; s < opt->n_never_split; s++) { /* protected patterns, in their order */
    const xl_ustr *pat = &opt->never_split[s];
    if (!pat->n) continue;
    for (size_t p = 0; p + pat->n <= b.cur.n;) {
      size_t k = 0;
      while (k < pat->n && fold(b.cur.p[p + k]) == fold(pat->p[k])) k++;
      if (k < pat->n) {
        p++;
        continue;
      }
      if (n_prot + 2 > cap_prot) {
        cap_prot = cap_prot ? 2 * cap_prot : 8;
        size_t *np = realloc(prot_off, cap_prot * sizeof *np);
        if (!np) goto done;
        prot_off = np;
      }
      prot_off[n_prot++] = prot.n;
      if (xl_ustr_append(&prot, b.cur.p + p, pat->n)) goto done;
      p += pat->n;
    }
  }
  if (prot_off) prot_off[n_prot] = prot.n;
  uint32_t ph[40];
  size_t phn;
  for (size_t i = 0; i < n_prot; i++) {
    placeholder(i, ph, &phn);
    replace_all(&b, prot.p + prot_off[i], prot_off[i + 1] - prot_off[i], ph, phn);
  }
  strip(&b);
  run_pass(&b, m_pad_not_alnum, NULL);
  run_pass_if(&b, '-', m_dash_split, NULL);
  run_pass_if(&b, '.', m_multidot1, NULL);
  while (!b.oom && contains_dotmulti_dot(&b.cur)) {
    run_pass(&b, m_multidot2, NULL);
    run_pass(&b, m_multidot3, NULL);
  }
  run_pass_if(&b, ',', m_comma1, NULL);
  run_pass_if(&b, ',', m_comma2, NULL);
  run_pass_if(&b, ',', m_comma3, NULL);
  static const int rules[5] = {AP_1, AP_2, AP_3, AP_4, AP_5};
  for (int r = 0; r < 5; r++) run_pass_if(&b, '\'', m_apos, &rules[r]);
  nonbreaking(&b);
  run_pass(&b, m_ws, NULL);
  strip(&b);
  run_pass_if(&b, '\'', m_trailing_dot_apos, NULL);
  for (size_t i = 0; i < n_prot; i++) {
    placeholder(i, ph, &phn);
    replace_all(&b, ph, phn, prot.p + prot_off[i], prot_off[i + 1] - prot_off[i]);
  }
  /* restore_multidots */
  static const uint32_t DDM[11] = {'D', 'O', 'T', 'D', 'O', 'T', 'M', 'U', 'L', 'T', 'I'};
  static const uint32_t DM_DOT[9] = {'D', 'O', 'T', 'M', 'U', 'L', 'T', 'I', '.'};
  static const uint32_t DOT[1] = {'.'};
  for (;;) {
    int found = 0;
    for (size_t p = 0; !found && p + 11 <= b.cur.n; p++)
      found = at_word(b.cur.p, b.cur.n, p, DDM, 11);
    if (!found || b.oom) break;
    replace_all(&b, DDM, 11, DM_DOT, 9);
  }
  replace_all(&b, DOTMULTI, 8, DOT, 1);
  if (b.oom) goto done;
  /* tokenize_numbers: "(?<=\d)[,.](?=\d)" -> " @\0@ " inside each token */
  tokens->n = 0;
  for (size_t p = 0; p < b.cur.n; p++) {
    uint32_t c = b.cur.p[p];
    if ((c == ',' || c == '.') && p > 0 && p + 1 < b.cur.n && xl_is_digit(b.cur.p[p - 1]) &&
        xl_is_digit(b.cur.p[p + 1])) {
      uint32_t r[5] = {' ', '@', c, '@', ' '};
      if (xl_ustr_append(tokens, r, 5)) goto done;
    } else if (xl_ustr_push(tokens, c)) {
      goto done;
    }
  }
  rc = 0;
done:
  xl_ustr_free(&b.cur);
  xl_ustr_free(&b.tmp);
  xl_ustr_free(&prot);
  free(prot_off);
  return rc;
}
