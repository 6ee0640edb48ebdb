/*
 * tok_internal.h: the tokenizer's private state (one per model, built at load, read-only after)
 * and the entry points its files share: tokenizer.c (loading, dispatch), tok_moses.c (the
 * transfo_xl encoder), tok_detok_moses.c (its streaming decoder), tok_tables.c (byte_table,
 * char_table). Any thread, once loaded.
 */
#ifndef XL_TOK_INTERNAL_H
#define XL_TOK_INTERNAL_H

#include "internal.h"
#include "tok_text.h"

#define XL_MAX_SYMBOL_BYTES 1024

typedef struct {
  const xl_ustr *never_split; /* protected patterns (matched ignoring ASCII case) */
  size_t n_never_split;
} xl_moses_opts;

struct xl_tok {
  xl_tokenizer_info info;
  char *delimiter;
  char **never_split;         /* [n_never_split] UTF-8 */
  xl_ustr *never_split_u;     /* the same as code points */
  int32_t *never_split_id;    /* their ids (-1 when not in the vocabulary) */
  int32_t byte_id[256];       /* byte_table: id of each byte, -1 none */
  int16_t *id_byte_v;         /* byte_table: [vocab] byte of each id, -1 for other symbols */
  int32_t space_id;           /* char_table: id of space_symbol, -1 none */
  size_t max_symbol;          /* longest vocab entry in bytes */
};

/* The Moses pipeline on one line (already stripped/lowercased as the caller wants): the
 * tokens, separated by whitespace, into *tokens. -1 when out of memory. */
int xl_moses_line(const xl_moses_opts *opt, const uint32_t *text, size_t n, xl_ustr *tokens);

/* Looks a UTF-8 symbol up: its id, or -1 (tok_vocab.c). */
int32_t xl_vocab_find(const xl_model *m, const char *s, size_t n);
/* Reads <model dir>/vocab.txt into m->vocab and its index (tok_vocab.c); kind_name: the
 * tokenizer kind that needs it, for the error message. */
xl_code xl_vocab_load(xl_model *m, const char *kind_name, xl_error *err);

/* transfo_xl streaming decoder (tok_detok_moses.c). */
size_t xl_moses_detok_push(const xl_model *m, xl_detok *d, int32_t id, char *out, size_t cap);
size_t xl_moses_detok_end_line(const xl_model *m, xl_detok *d, char *out, size_t cap);
void xl_moses_detok_reset(xl_detok *d);

/* byte_table / char_table (tok_tables.c). */
xl_code xl_table_setup(xl_model *m, xl_error *err);
/* out: room for len + 8 ids (8 * len + 8 with spell_digits) */
xl_code xl_table_encode(const xl_model *m, const char *text, size_t len, int32_t *out, size_t *n,
                        xl_error *err);
size_t xl_table_token_bytes(const xl_model *m, int32_t id, char *out, size_t cap);

#endif
