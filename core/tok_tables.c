/*
 * tok_tables.c: the two table kinds of the authors' character models. byte_table (enwik8):
 * each symbol is a byte value written in decimal ("32", "101"); text is encoded byte by byte
 * and decoded back to those bytes. char_table (text8): each symbol is one character, one of
 * them (space_symbol, "_") standing for a space; input is lowercased first (lower_case) and
 * digits may be spelled out (spell_digits, as text8's preprocessing did). Input the table
 * cannot spell is refused with the byte/character named, or dropped (unknown: "drop").
 * Setup at load; the rest reentrant.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static int parse_byte(const char *s) {
  if (!*s || strlen(s) > 3) return -1;
  int v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
  }
  if (v > 255 || (s[0] == '0' && s[1])) return -1; /* "007" is not a byte symbol */
  return v;
}

xl_code xl_table_setup(xl_model *m, xl_error *err) {
  struct xl_tok *t = m->tok;
  int V = m->cfg.vocab_size;
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  t->space_id = -1;
  if (t->info.kind == XL_TOKENIZER_BYTE_TABLE) {
    t->id_byte_v = malloc((size_t)V * sizeof *t->id_byte_v);
    if (!t->id_byte_v) return xl_fail(err, XL_NOMEM, "out of memory");
    int n = 0;
    for (int id = 0; id < V; id++) {
      int b = parse_byte(m->vocab[id]);
      t->id_byte_v[id] = (int16_t)b;
      if (b >= 0) t->byte_id[b] = id, n++;
    }
    if (!n)
      return xl_fail(err, XL_TOKENIZER,
                     "%s/vocab.txt: a byte_table vocabulary needs decimal byte symbols "
                     "(\"32\", \"101\", ...); none found",
                     m->dir);
  } else {
    const char *sp = t->info.space_symbol ? t->info.space_symbol : "_";
    t->space_id = xl_vocab_find(m, sp, strlen(sp));
  }
  return XL_OK;
}

static const char *const DIGIT_WORDS[10] = {"zero", "one", "two",   "three", "four",
                                             "five", "six", "seven", "eight", "nine"};

static void describe_char(uint32_t c, char *out, size_t cap) {
  char u8[5] = {0};
  u8[xl_utf8_put(c, u8)] = 0;
  if (c < 32 || c == 127) snprintf(out, cap, "U+%04X", (unsigned)c);
  else snprintf(out, cap, "'%s' (U+%04X)", u8, (unsigned)c);
}

xl_code xl_table_encode(const xl_model *m, const char *text, size_t len, int32_t *out, size_t *n,
                        xl_error *err) {
  const struct xl_tok *t = m->tok; /* out: see tok_internal.h */
  size_t k = 0;
  if (t->info.kind == XL_TOKENIZER_BYTE_TABLE) {
    for (size_t i = 0; i < len; i++) {
      uint8_t b = (uint8_t)text[i];
      int32_t id = t->byte_id[b];
      if (id < 0) {
        if (t->info.unknown_drop) continue;
        return xl_fail(err, XL_TOKENIZER,
                       "byte %u (0x%02X%s) at offset %zu is not in the model's byte table", b, b,
                       b == '\n' ? ", newline" : b == '\t' ? ", tab" : "", i);
      }
      out[k++] = id;
    }
    *n = k;
    return XL_OK;
  }
  xl_ustr u = {0};
  if (xl_utf8_decode(text, len, &u)) return xl_fail(err, XL_NOMEM, "out of memory");
  xl_code rc = XL_OK;
  int pending_space = 0; /* a spelled digit wants a space before the next character */
  for (size_t i = 0; i < u.n && rc == XL_OK; i++) {
    uint32_t c = u.p[i];
    if (t->info.lower_case) c = xl_ulower(c);
    const char *word = NULL;
    if (t->info.spell_digits && c >= '0' && c <= '9') word = DIGIT_WORDS[c - '0'];
    char sym[8];
    size_t sl;
    int32_t id;
    if (word) {
      if (k && out[k - 1] != t->space_id && t->space_id >= 0) out[k++] = t->space_id;
      for (const char *w = word; *w && rc == XL_OK; w++) {
        id = xl_vocab_find(m, w, 1);
        if (id < 0 && !t->info.unknown_drop)
          rc = xl_fail(err, XL_TOKENIZER, "'%c' (spelling the digit '%c') is not in the model's "
                       "character table", *w, (char)c);
        else if (id >= 0) out[k++] = id;
      }
      pending_space = 1;
      continue;
    }
    if (c == ' ') {
      id = t->space_id;
      pending_space = 0;
    } else {
      sl = xl_utf8_put(c, sym);
      id = xl_vocab_find(m, sym, sl);
      if (id == t->space_id) id = -1; /* the symbol "_" stands for a space, not itself */
    }
    if (id < 0) {
      if (t->info.unknown_drop) continue;
      char what[48];
      describe_char(u.p[i], what, sizeof what);
      rc = xl_fail(err, XL_TOKENIZER, "character %s at position %zu is not in the model's "
                   "character table", what, i);
      break;
    }
    if (pending_space && c != ' ' && t->space_id >= 0) out[k++] = t->space_id;
    pending_space = 0;
    out[k++] = id;
  }
  xl_ustr_free(&u);
  *n = k;
  return rc;
}

size_t xl_table_token_bytes(const xl_model *m, int32_t id, char *out, size_t cap) {
  const struct xl_tok *t = m->tok;
  if (t->info.kind == XL_TOKENIZER_BYTE_TABLE && t->id_byte_v[id] >= 0) {
    if (cap >= 1) out[0] = (char)t->id_byte_v[id];
    return 1;
  }
  if (t->info.kind == XL_TOKENIZER_CHAR_TABLE && id == t->space_id) {
    if (cap >= 1) out[0] = ' ';
    return 1;
  }
  if (id == m->eos_id) {
    if (cap >= 1) out[0] = '\n';
    return 1;
  }
  const char *s = m->vocab[id];
  size_t n = strlen(s);
  if (n <= cap) memcpy(out, s, n);
  return n;
}
