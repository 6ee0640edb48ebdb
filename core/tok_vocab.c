/*
 * tok_vocab.c: a model's vocabulary: vocab.txt read into id order (one symbol a line) and the
 * open-addressing index from a symbol to its id. Loading happens once with the model; lookups
 * are reentrant (any thread).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static uint64_t sym_hash(const char *s, size_t n) { return xl_hash64(s, n, 0x746f6b656eULL); }

int32_t xl_vocab_find(const xl_model *m, const char *s, size_t n) {
  if (!m->vocab_index) return -1;
  size_t mask = m->vocab_index_cap - 1, i = sym_hash(s, n) & mask;
  for (;; i = (i + 1) & mask) {
    int32_t id = m->vocab_index[i];
    if (id < 0) return -1;
    const char *v = m->vocab[id];
    if (strlen(v) == n && !memcmp(v, s, n)) return id;
  }
}

xl_code xl_vocab_load(xl_model *m, const char *kind_name, xl_error *err) {
  char path[XL_MAX_PATH + 32];
  snprintf(path, sizeof path, "%s/vocab.txt", m->dir);
  FILE *f = fopen(path, "rb");
  if (!f)
    return xl_fail(err, XL_IO, "%s: %s (a %s tokenizer needs a vocab.txt)", path, strerror(errno),
                   kind_name);
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
  char line[XL_MAX_SYMBOL_BYTES + 2];
  int n = 0;
  xl_code rc = XL_OK;
  while (fgets(line, sizeof line, f)) {
    size_t len = strlen(line);
    if (len && line[len - 1] == '\n') line[--len] = '\0';
    else if (!feof(f)) {
      rc = xl_fail(err, XL_TOKENIZER, "%s:%d: symbol longer than %d bytes", path, n + 1,
                   XL_MAX_SYMBOL_BYTES);
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
    if (strlen(line) != len) {
      rc = xl_fail(err, XL_TOKENIZER, "%s:%d: symbol contains a NUL byte", path, n + 1);
      break;
    }
    if (xl_vocab_find(m, line, len) >= 0) {
      rc = xl_fail(err, XL_TOKENIZER, "%s:%d: duplicate symbol '%s'", path, n + 1, line);
      break;
    }
    if (!(m->vocab[n] = strdup(line))) {
      rc = xl_fail(err, XL_NOMEM, "%s: out of memory", path);
      break;
    }
    if (len > m->tok->max_symbol) m->tok->max_symbol = len;
    size_t i = sym_hash(line, len) & (cap - 1);
    while (m->vocab_index[i] >= 0) i = (i + 1) & (cap - 1);
    m->vocab_index[i] = n++;
  }
  fclose(f);
  if (rc) return rc;
  if (n != V)
    return xl_fail(err, XL_TOKENIZER, "%s: %d symbols, config.json says vocab_size=%d", path, n, V);
  return XL_OK;
}
