/*
 * tok_codec.c: encoding and decoding, dispatched by tokenizer kind: xl_tokenize,
 * xl_token_bytes and the streaming detokeniser (UTF-8 assembly for the byte kinds; the
 * transfo_xl line decoder lives in tok_detok_moses.c). Reentrant (an xl_detok belongs to one
 * stream).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct {
  int32_t *p;
  size_t n, cap;
} ids_vec;

static int ids_push(ids_vec *v, int32_t id) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 64;
    int32_t *p = realloc(v->p, cap * sizeof *p);
    if (!p) return -1;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n++] = id;
  return 0;
}

static int is_ascii_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* One word (UTF-8) -> its id, <unk>, or an error naming it. */
static xl_code word_id(const xl_model *m, const char *w, size_t n, ids_vec *v, xl_error *err) {
  int32_t id = xl_vocab_find(m, w, n);
  if (id < 0) id = m->unk_id;
  if (id < 0)
    return xl_fail(err, XL_TOKENIZER, "word '%.*s' is not in the vocabulary (no unknown token)",
                   (int)(n > 64 ? 64 : n), w);
  return ids_push(v, id) ? xl_fail(err, XL_NOMEM, "out of memory") : XL_OK;
}

static xl_code encode_words(const xl_model *m, const char *text, size_t len, ids_vec *v,
                            xl_error *err) {
  size_t i = 0;
  while (i < len) {
    if (text[i] == '\n') {
      if (m->eos_id >= 0 && ids_push(v, m->eos_id)) return xl_fail(err, XL_NOMEM, "out of memory");
      i++;
      continue;
    }
    if (is_ascii_space(text[i])) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < len && text[j] != '\n' && !is_ascii_space(text[j])) j++;
    xl_code rc = word_id(m, text + i, j - i, v, err);
    if (rc) return rc;
    i = j;
  }
  return XL_OK;
}

/* Whitespace-separated tokens of u -> ids. */
static xl_code emit_tokens(const xl_model *m, const uint32_t *u, size_t n, ids_vec *v,
                           xl_error *err) {
  char buf[4 * 256];
  size_t p = 0;
  while (p < n) {
    while (p < n && xl_is_space(u[p])) p++;
    if (p >= n) break;
    size_t s = p;
    while (p < n && !xl_is_space(u[p])) p++;
    size_t bl = xl_utf8_len(u + s, p - s);
    char *w = bl <= sizeof buf ? buf : malloc(bl);
    if (!w) return xl_fail(err, XL_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = s; i < p; i++) k += xl_utf8_put(u[i], w + k);
    xl_code rc = word_id(m, w, k, v, err);
    if (w != buf) free(w);
    if (rc) return rc;
  }
  return XL_OK;
}

/* One piece of a line between special tokens: HF's _tokenize (strip, lower, then the Moses
 * pipeline, or the delimiter split). */
static xl_code encode_chunk(const xl_model *m, const uint32_t *c, size_t n, ids_vec *v,
                            xl_error *err) {
  const struct xl_tok *t = m->tok;
  while (n && xl_is_space(c[0])) c++, n--;
  while (n && xl_is_space(c[n - 1])) n--;
  if (!n) return XL_OK;
  xl_ustr s = {0}, toks = {0};
  xl_code rc = XL_OK;
  if (xl_ustr_append(&s, c, n)) {
    rc = xl_fail(err, XL_NOMEM, "out of memory");
    goto out;
  }
  if (t->info.lower_case)
    for (size_t i = 0; i < s.n; i++) s.p[i] = xl_ulower(s.p[i]);
  if (t->delimiter && !t->delimiter[0]) { /* "": every character is a symbol */
    for (size_t i = 0; i < s.n && !rc; i++) rc = emit_tokens(m, s.p + i, 1, v, err);
  } else if (t->delimiter) { /* split on the delimiter; empty pieces dropped */
    xl_ustr d = {0};
    if (xl_utf8_decode(t->delimiter, strlen(t->delimiter), &d)) {
      rc = xl_fail(err, XL_NOMEM, "out of memory");
      goto out;
    }
    size_t p = 0, start = 0;
    while (p <= s.n && !rc) {
      int at = p + d.n <= s.n && !memcmp(s.p + p, d.p, d.n * sizeof *d.p);
      if (at || p == s.n) {
        if (p > start) {
          size_t bl = xl_utf8_len(s.p + start, p - start), k = 0;
          char *w = malloc(bl + 1);
          if (!w) rc = xl_fail(err, XL_NOMEM, "out of memory");
          else {
            for (size_t i = start; i < p; i++) k += xl_utf8_put(s.p[i], w + k);
            rc = word_id(m, w, k, v, err);
            free(w);
          }
        }
        p += at ? d.n : 1;
        start = p;
      } else {
        p++;
      }
    }
    xl_ustr_free(&d);
  } else {
    xl_moses_opts o = {t->never_split_u, (size_t)t->info.n_never_split};
    if (xl_moses_line(&o, s.p, s.n, &toks)) rc = xl_fail(err, XL_NOMEM, "out of memory");
    else rc = emit_tokens(m, toks.p, toks.n, v, err);
  }
out:
  xl_ustr_free(&s);
  xl_ustr_free(&toks);
  return rc;
}

/* The never_split token at u[p..n) (the longest), or -1; its length in *len. */
static int special_at(const struct xl_tok *t, const uint32_t *u, size_t n, size_t p,
                      size_t *len) {
  int best = -1;
  size_t best_len = 0;
  for (int k = 0; k < t->info.n_never_split; k++) {
    const xl_ustr *s = &t->never_split_u[k];
    if (s->n > best_len && p + s->n <= n && !memcmp(u + p, s->p, s->n * sizeof *u))
      best = k, best_len = s->n;
  }
  *len = best_len;
  return best;
}

/* lower_case: HF's tokenize lowercases every character outside the never_split tokens first
 * (Python's str.lower of each character: U+0130 becomes "i" + U+0307), so that "<EOS>" is then
 * cut out as "<eos>". */
static int lower_outside_specials(const struct xl_tok *t, const uint32_t *u, size_t n,
                                  xl_ustr *out) {
  size_t p = 0, len;
  while (p < n) {
    if (special_at(t, u, n, p, &len) >= 0) {
      if (xl_ustr_append(out, u + p, len)) return -1;
      p += len;
    } else if (u[p] == 0x130) {
      if (xl_ustr_push(out, 'i') || xl_ustr_push(out, 0x307)) return -1;
      p++;
    } else if (xl_ustr_push(out, xl_ulower(u[p++]))) {
      return -1;
    }
  }
  return 0;
}

/* One line: split on the never_split tokens (leftmost, longest), each kept whole; the pieces
 * between go through encode_chunk. */
static xl_code encode_line(const xl_model *m, const uint32_t *u, size_t n, ids_vec *v,
                           xl_error *err) {
  const struct xl_tok *t = m->tok;
  size_t start = 0, p = 0;
  while (p < n) {
    size_t best_len;
    int best = special_at(t, u, n, p, &best_len);
    if (best < 0) {
      p++;
      continue;
    }
    xl_code rc = encode_chunk(m, u + start, p - start, v, err);
    if (rc) return rc;
    int32_t id = t->never_split_id[best];
    if (id < 0) id = m->unk_id;
    if (id < 0)
      return xl_fail(err, XL_TOKENIZER, "'%s' is not in the vocabulary (no unknown token)",
                     t->never_split[best]);
    if (ids_push(v, id)) return xl_fail(err, XL_NOMEM, "out of memory");
    p += best_len;
    start = p;
  }
  return encode_chunk(m, u + start, n - start, v, err);
}

static xl_code encode_transfo_xl(const xl_model *m, const char *text, size_t len, ids_vec *v,
                                 xl_error *err) {
  xl_ustr u = {0};
  if (xl_utf8_decode(text, len, &u)) return xl_fail(err, XL_NOMEM, "out of memory");
  xl_code rc = XL_OK;
  size_t start = 0;
  for (size_t i = 0; i <= u.n && !rc; i++) {
    if (i < u.n && u.p[i] != '\n') continue;
    if (m->tok->info.lower_case) {
      xl_ustr low = {0};
      if (lower_outside_specials(m->tok, u.p + start, i - start, &low))
        rc = xl_fail(err, XL_NOMEM, "out of memory");
      else
        rc = encode_line(m, low.p, low.n, v, err);
      xl_ustr_free(&low);
    } else {
      rc = encode_line(m, u.p + start, i - start, v, err);
    }
    if (!rc && i < u.n && m->eos_id >= 0 && ids_push(v, m->eos_id))
      rc = xl_fail(err, XL_NOMEM, "out of memory");
    start = i + 1;
  }
  xl_ustr_free(&u);
  return rc;
}

xl_code xl_tokenize(const xl_model *m, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                    xl_error *err) {
  *ids = NULL;
  *n_ids = 0;
  ids_vec v = {0};
  xl_code rc = XL_OK;
  switch (m->cfg.tokenizer) {
    case XL_TOKENIZER_BYTES:
      for (size_t i = 0; i < len && !rc; i++)
        if (ids_push(&v, (uint8_t)text[i])) rc = xl_fail(err, XL_NOMEM, "out of memory");
      break;
    case XL_TOKENIZER_WORDS: rc = encode_words(m, text, len, &v, err); break;
    case XL_TOKENIZER_TRANSFO_XL: rc = encode_transfo_xl(m, text, len, &v, err); break;
    default: {
      /* one id per byte or character, up to 7 for a spelled digit (" seven ") */
      v.cap = (m->tok->info.kind == XL_TOKENIZER_CHAR_TABLE && m->tok->info.spell_digits ? 8 : 1) *
                  len + 8;
      if (!(v.p = malloc(v.cap * sizeof *v.p))) return xl_fail(err, XL_NOMEM, "out of memory");
      rc = xl_table_encode(m, text, len, v.p, &v.n, err);
      break;
    }
  }
  if (rc) {
    free(v.p);
    return rc;
  }
  if (!v.p && !(v.p = malloc(sizeof *v.p))) return xl_fail(err, XL_NOMEM, "out of memory");
  *ids = v.p;
  *n_ids = v.n;
  return XL_OK;
}

size_t xl_token_bytes(const xl_model *m, int32_t id, int first_in_line, char *out, size_t cap) {
  if (id < 0 || id >= m->cfg.vocab_size) return 0;
  switch (m->cfg.tokenizer) {
    case XL_TOKENIZER_BYTES:
      if (cap >= 1) out[0] = (char)id;
      return 1;
    case XL_TOKENIZER_BYTE_TABLE:
    case XL_TOKENIZER_CHAR_TABLE: return xl_table_token_bytes(m, id, out, cap);
    default: break;
  }
  if (id == m->eos_id) {
    if (cap >= 1) out[0] = '\n';
    return 1;
  }
  const char *s = m->vocab[id];
  size_t n = strlen(s), need = n + (first_in_line ? 0 : 1);
  if (need > cap) return need;
  if (!first_in_line) *out++ = ' ';
  memcpy(out, s, n);
  return need;
}

/* ---- streaming UTF-8 ----------------------------------------------------------------- */

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

static int utf8_expected(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

/* May byte `b` be the second byte after lead byte `lead`? (rejects overlongs, surrogates) */
static int utf8_second_ok(uint8_t lead, uint8_t b) {
  if (b < 0x80 || b > 0xBF) return 0;
  if (lead == 0xE0) return b >= 0xA0;
  if (lead == 0xED) return b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90;
  if (lead == 0xF4) return b <= 0x8F;
  return 1;
}

void xl_detok_init(xl_detok *d) {
  memset(d, 0, sizeof *d);
  d->line_start = 1;
  xl_moses_detok_reset(d);
}

static size_t push_byte(xl_detok *d, uint8_t b, char *out) {
  size_t w = 0;
  if (d->n_pending) {
    uint8_t lead = (uint8_t)d->pending[0];
    int ok = d->n_pending == 1 ? utf8_second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (ok) {
      d->pending[d->n_pending++] = (char)b;
      if (d->n_pending == utf8_expected(lead)) {
        memcpy(out, d->pending, (size_t)d->n_pending);
        w = (size_t)d->n_pending;
        d->n_pending = 0;
      }
      return w;
    }
    memcpy(out, REPLACEMENT, 3); /* broken sequence: one U+FFFD, then b starts afresh */
    w = 3;
    d->n_pending = 0;
  }
  if (b < 0x80) {
    out[w++] = (char)b;
  } else if (utf8_expected(b)) {
    d->pending[d->n_pending++] = (char)b;
  } else {
    memcpy(out + w, REPLACEMENT, 3);
    w += 3;
  }
  return w;
}

size_t xl_detok_push(const xl_model *m, xl_detok *d, int32_t id, char *out, size_t cap) {
  if (id < 0 || id >= m->cfg.vocab_size) return 0;
  if (m->cfg.tokenizer == XL_TOKENIZER_TRANSFO_XL) {
    if (id != m->eos_id) return xl_moses_detok_push(m, d, id, out, cap);
    size_t w = xl_moses_detok_end_line(m, d, out, cap);
    if (w < cap) out[w++] = '\n';
    return w;
  }
  char tok[XL_MAX_SYMBOL_BYTES + 8];
  size_t n = xl_token_bytes(m, id, d->line_start, tok, sizeof tok);
  if (n > sizeof tok) return 0;
  if (m->cfg.tokenizer == XL_TOKENIZER_WORDS) d->line_start = (id == m->eos_id);
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    if (w + 8 > cap) break; /* cap >= 64 + longest symbol per the contract */
    w += push_byte(d, (uint8_t)tok[i], out + w);
  }
  return w;
}

size_t xl_detok_flush(const xl_model *m, xl_detok *d, char *out, size_t cap) {
  if (m && m->cfg.tokenizer == XL_TOKENIZER_TRANSFO_XL)
    return xl_moses_detok_end_line(m, d, out, cap);
  if (!d->n_pending || cap < 3) return 0;
  d->n_pending = 0;
  memcpy(out, REPLACEMENT, 3);
  return 3;
}
