/*
 * tokenizer.c: the two tokenizers (bytes: id = byte value; words: vocab.txt, whitespace split,
 * "<eos>" per newline, "<unk>" for unknown words) and the streaming detokeniser that emits
 * only complete UTF-8 sequences. Loading happens once with the model; the rest is reentrant
 * (any thread; an xl_detok belongs to one stream).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_SYMBOL_BYTES 1024

static uint64_t sym_hash(const char *s, size_t n) { return xl_hash64(s, n, 0x746f6b656eULL); }

static int32_t vocab_lookup(const xl_model *m, const char *s, size_t n) {
  size_t mask = m->vocab_index_cap - 1, i = sym_hash(s, n) & mask;
  for (;; i = (i + 1) & mask) {
    int32_t id = m->vocab_index[i];
    if (id < 0) return -1;
    const char *v = m->vocab[id];
    if (strlen(v) == n && !memcmp(v, s, n)) return id;
  }
}

xl_code xl_tokenizer_load(xl_model *m, xl_error *err) {
  m->unk_id = m->eos_id = -1;
  if (m->cfg.tokenizer == XL_TOKENIZER_BYTES) return XL_OK;
  char path[XL_MAX_PATH + 32];
  snprintf(path, sizeof path, "%s/vocab.txt", m->dir);
  FILE *f = fopen(path, "rb");
  if (!f) return xl_fail(err, XL_IO, "%s: %s (word-level models need a vocab.txt)", path,
                         strerror(errno));
  int V = m->cfg.vocab_size;
  m->vocab = calloc((size_t)V, sizeof *m->vocab);
  size_t cap = 16;
  while (cap < (size_t)V * 2) cap <<= 1;
  m->vocab_index = malloc(cap * sizeof *m->vocab_index);
  m->vocab_index_cap = cap;
  if (!m->vocab || !m->vocab_index) {
    fclose(f);
    return xl_fail(err, XL_NOMEM, "%s: out of memory", path);
  }
  memset(m->vocab_index, 0xff, cap * sizeof *m->vocab_index);
  char line[MAX_SYMBOL_BYTES + 2];
  int n = 0;
  xl_code rc = XL_OK;
  while (fgets(line, sizeof line, f)) {
    size_t len = strlen(line);
    if (len && line[len - 1] == '\n') line[--len] = '\0';
    else if (!feof(f)) {
      rc = xl_fail(err, XL_TOKENIZER, "%s:%d: symbol longer than %d bytes", path, n + 1,
                   MAX_SYMBOL_BYTES);
      break;
    }
    if (len && line[len - 1] == '\r') line[--len] = '\0';
    if (n >= V) {
      rc = xl_fail(err, XL_TOKENIZER, "%s: more than vocab_size=%d symbols", path, V);
      break;
    }
    if (len == 0) {
      rc = xl_fail(err, XL_TOKENIZER, "%s:%d: empty symbol", path, n + 1);
      break;
    }
    if (vocab_lookup(m, line, len) >= 0) {
      rc = xl_fail(err, XL_TOKENIZER, "%s:%d: duplicate symbol '%s'", path, n + 1, line);
      break;
    }
    if (!(m->vocab[n] = strdup(line))) {
      rc = xl_fail(err, XL_NOMEM, "%s: out of memory", path);
      break;
    }
    size_t i = sym_hash(line, len) & (cap - 1);
    while (m->vocab_index[i] >= 0) i = (i + 1) & (cap - 1);
    m->vocab_index[i] = n++;
  }
  fclose(f);
  if (rc) return rc;
  if (n != V)
    return xl_fail(err, XL_TOKENIZER, "%s: %d symbols, config.json says vocab_size=%d", path, n, V);
  m->unk_id = vocab_lookup(m, "<unk>", 5);
  m->eos_id = vocab_lookup(m, "<eos>", 5);
  return XL_OK;
}

void xl_tokenizer_free(xl_model *m) {
  if (m->vocab)
    for (int i = 0; i < m->cfg.vocab_size; i++) free(m->vocab[i]);
  free(m->vocab);
  free(m->vocab_index);
  m->vocab = NULL;
  m->vocab_index = NULL;
}

static int is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

xl_code xl_tokenize(const xl_model *m, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                    xl_error *err) {
  *ids = NULL;
  *n_ids = 0;
  int32_t *out = malloc((len + 1) * sizeof *out); /* never more tokens than bytes (+1) */
  if (!out) return xl_fail(err, XL_NOMEM, "out of memory tokenizing %zu bytes", len);
  size_t n = 0;
  if (m->cfg.tokenizer == XL_TOKENIZER_BYTES) {
    for (size_t i = 0; i < len; i++) out[n++] = (uint8_t)text[i];
  } else {
    size_t i = 0;
    while (i < len) {
      if (text[i] == '\n') {
        if (m->eos_id >= 0) out[n++] = m->eos_id;
        i++;
        continue;
      }
      if (is_space(text[i])) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < len && text[j] != '\n' && !is_space(text[j])) j++;
      int32_t id = vocab_lookup(m, text + i, j - i);
      if (id < 0) id = m->unk_id;
      if (id < 0) {
        free(out);
        return xl_fail(err, XL_TOKENIZER, "word '%.*s' is not in the vocabulary (no <unk>)",
                       (int)(j - i > 64 ? 64 : j - i), text + i);
      }
      out[n++] = id;
      i = j;
    }
  }
  *ids = out;
  *n_ids = n;
  return XL_OK;
}

size_t xl_token_bytes(const xl_model *m, int32_t id, int first_in_line, char *out, size_t cap) {
  if (id < 0 || id >= m->cfg.vocab_size) return 0;
  if (m->cfg.tokenizer == XL_TOKENIZER_BYTES) {
    if (cap >= 1) out[0] = (char)id;
    return 1;
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
  d->n_pending = 0;
  d->line_start = 1;
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
  char tok[MAX_SYMBOL_BYTES + 8];
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

size_t xl_detok_flush(xl_detok *d, char *out, size_t cap) {
  if (!d->n_pending || cap < 3) return 0;
  d->n_pending = 0;
  memcpy(out, REPLACEMENT, 3);
  return 3;
}
