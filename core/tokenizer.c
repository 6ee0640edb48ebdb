/*
 * tokenizer.c: the model's tokenizer: loads vocab.txt and the options of config.json
 * ("xlserve_tokenizer_options") (vocab.txt itself: tok_vocab.c), and dispatches encoding and decoding by kind: bytes (id = byte
 * value), words (whitespace split, "<eos>" per newline, "<unk>"), transfo_xl (tok_moses.c,
 * tok_detok_moses.c), byte_table and char_table (tok_tables.c). Also the streaming
 * detokeniser's UTF-8 assembly. Loading happens once with the model; the rest is reentrant (any
 * thread; an xl_detok belongs to one stream).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static const char *const KIND_NAMES[XL_TOKENIZER_KIND_COUNT] = {"bytes", "words", "transfo_xl",
                                                                "byte_table", "char_table"};

const char *xl_tokenizer_kind_name(xl_tokenizer_kind kind) {
  return (unsigned)kind < XL_TOKENIZER_KIND_COUNT ? KIND_NAMES[kind] : "unknown";
}

/* ---- options ------------------------------------------------------------------------- */

static xl_code opt_bool(json_t *o, const char *path, const char *key, int *out, xl_error *err) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) return XL_OK;
  if (!json_is_boolean(v))
    return xl_fail(err, XL_CONFIG, "%s: 'xlserve_tokenizer_options.%s' must be true or false",
                   path, key);
  *out = json_is_true(v);
  return XL_OK;
}

static xl_code opt_string(json_t *o, const char *path, const char *key, int allow_null,
                          char **out, xl_error *err) {
  json_t *v = json_object_get(o, key);
  if (!v) return XL_OK;
  if (json_is_null(v) && allow_null) {
    free(*out);
    *out = NULL;
    return XL_OK;
  }
  if (!json_is_string(v) || (!allow_null && json_string_length(v) == 0) ||
      strlen(json_string_value(v)) != json_string_length(v))
    return xl_fail(err, XL_CONFIG, "%s: 'xlserve_tokenizer_options.%s' must be a%s string", path,
                   key, allow_null ? " string or null" : " non-empty");
  char *s = strdup(json_string_value(v));
  if (!s) return xl_fail(err, XL_NOMEM, "out of memory");
  free(*out);
  *out = s;
  return XL_OK;
}

typedef struct {
  char *delimiter, *eos, *unk, *space, *unknown;
  char **never_split;
  int n_never_split, never_split_set;
} raw_opts;

static void raw_free(raw_opts *r) {
  free(r->delimiter);
  free(r->eos);
  free(r->unk);
  free(r->space);
  free(r->unknown);
  for (int i = 0; i < r->n_never_split; i++) free(r->never_split[i]);
  free(r->never_split);
}

static xl_code read_options(xl_model *m, raw_opts *r, xl_error *err) {
  char path[XL_MAX_PATH + 32];
  snprintf(path, sizeof path, "%s/config.json", m->dir);
  json_error_t je;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!root) return xl_fail(err, XL_FORMAT, "%s: %s", path, je.text);
  xl_tokenizer_info *in = &m->tok->info;
  xl_code rc = XL_OK;
  json_t *o = json_object_get(root, "xlserve_tokenizer_options");
  if (o && !json_is_null(o)) {
    if (!json_is_object(o)) {
      rc = xl_fail(err, XL_CONFIG, "%s: 'xlserve_tokenizer_options' must be an object", path);
      goto out;
    }
    static const char *const KNOWN[] = {"lower_case", "delimiter", "never_split", "eos_token",
                                        "unk_token", "unknown", "space_symbol", "spell_digits"};
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
      size_t k = 0;
      while (k < sizeof KNOWN / sizeof *KNOWN && strcmp(KNOWN[k], key)) k++;
      if (k == sizeof KNOWN / sizeof *KNOWN) {
        rc = xl_fail(err, XL_CONFIG, "%s: unknown key 'xlserve_tokenizer_options.%s'", path, key);
        goto out;
      }
    }
    if ((rc = opt_bool(o, path, "lower_case", &in->lower_case, err)) ||
        (rc = opt_bool(o, path, "spell_digits", &in->spell_digits, err)) ||
        (rc = opt_string(o, path, "delimiter", 1, &r->delimiter, err)) ||
        (rc = opt_string(o, path, "eos_token", 0, &r->eos, err)) ||
        (rc = opt_string(o, path, "unk_token", 0, &r->unk, err)) ||
        (rc = opt_string(o, path, "space_symbol", 0, &r->space, err)) ||
        (rc = opt_string(o, path, "unknown", 0, &r->unknown, err)))
      goto out;
    if (r->unknown && strcmp(r->unknown, "refuse") && strcmp(r->unknown, "drop")) {
      rc = xl_fail(err, XL_CONFIG,
                   "%s: 'xlserve_tokenizer_options.unknown' must be \"refuse\" or \"drop\"", path);
      goto out;
    }
    json_t *ns = json_object_get(o, "never_split");
    if (ns && !json_is_null(ns)) {
      if (!json_is_array(ns) || json_array_size(ns) > 4096) {
        rc = xl_fail(err, XL_CONFIG,
                     "%s: 'xlserve_tokenizer_options.never_split' must be an array of strings",
                     path);
        goto out;
      }
      r->never_split_set = 1;
      r->never_split = calloc(json_array_size(ns) + 1, sizeof *r->never_split);
      if (!r->never_split) {
        rc = xl_fail(err, XL_NOMEM, "out of memory");
        goto out;
      }
      for (size_t i = 0; i < json_array_size(ns); i++) {
        json_t *s = json_array_get(ns, i);
        if (!json_is_string(s) || !json_string_length(s) ||
            strlen(json_string_value(s)) != json_string_length(s)) {
          rc = xl_fail(err, XL_CONFIG,
                       "%s: 'xlserve_tokenizer_options.never_split[%zu]' must be a non-empty "
                       "string", path, i);
          goto out;
        }
        if (!(r->never_split[r->n_never_split++] = strdup(json_string_value(s)))) {
          rc = xl_fail(err, XL_NOMEM, "out of memory");
          goto out;
        }
      }
    }
  }
out:
  json_decref(root);
  return rc;
}

/* ---- load ----------------------------------------------------------------------------- */

static xl_code setup_transfo_xl(xl_model *m, raw_opts *r, xl_error *err) {
  struct xl_tok *t = m->tok;
  if (!r->never_split_set) { /* Hugging Face's default: the special tokens */
    static const char *const DEF[] = {"<unk>", "<eos>", "<formula>"};
    r->never_split = calloc(3, sizeof *r->never_split);
    if (!r->never_split) return xl_fail(err, XL_NOMEM, "out of memory");
    for (int i = 0; i < 3; i++)
      if (!(r->never_split[r->n_never_split++] = strdup(DEF[i])))
        return xl_fail(err, XL_NOMEM, "out of memory");
  }
  int n = r->n_never_split;
  t->never_split = r->never_split;
  r->never_split = NULL;
  r->n_never_split = 0;
  t->info.n_never_split = n;
  t->never_split_u = calloc((size_t)n + 1, sizeof *t->never_split_u);
  t->never_split_id = calloc((size_t)n + 1, sizeof *t->never_split_id);
  if (!t->never_split_u || !t->never_split_id) return xl_fail(err, XL_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    if (xl_utf8_decode(t->never_split[i], strlen(t->never_split[i]), &t->never_split_u[i]))
      return xl_fail(err, XL_NOMEM, "out of memory");
    t->never_split_id[i] = xl_vocab_find(m, t->never_split[i], strlen(t->never_split[i]));
  }
  t->info.never_split = (const char *const *)t->never_split;
  t->delimiter = r->delimiter;
  r->delimiter = NULL;
  t->info.delimiter = t->delimiter;
  return XL_OK;
}

xl_code xl_tokenizer_load(xl_model *m, xl_error *err) {
  m->unk_id = m->eos_id = -1;
  struct xl_tok *t = calloc(1, sizeof *t);
  if (!t) return xl_fail(err, XL_NOMEM, "out of memory");
  m->tok = t;
  xl_tokenizer_info *in = &t->info;
  in->kind = m->cfg.tokenizer;
  in->name = xl_tokenizer_kind_name(in->kind);
  in->lower_case = in->kind == XL_TOKENIZER_CHAR_TABLE;
  in->spells_any_text = in->kind == XL_TOKENIZER_BYTES;
  t->space_id = -1;
  if (in->kind == XL_TOKENIZER_BYTES) return XL_OK;
  raw_opts r;
  memset(&r, 0, sizeof r);
  xl_code rc = read_options(m, &r, err);
  if (!rc) rc = xl_vocab_load(m, xl_tokenizer_kind_name(m->cfg.tokenizer), err);
  if (rc) goto out;
  const char *eos = r.eos ? r.eos : "<eos>", *unk = r.unk ? r.unk : "<unk>";
  m->unk_id = xl_vocab_find(m, unk, strlen(unk));
  m->eos_id = xl_vocab_find(m, eos, strlen(eos));
  in->eos_token = m->eos_id >= 0 ? m->vocab[m->eos_id] : NULL;
  in->unk_token = m->unk_id >= 0 ? m->vocab[m->unk_id] : NULL;
  in->unknown_drop = r.unknown && !strcmp(r.unknown, "drop");
  if (in->kind == XL_TOKENIZER_CHAR_TABLE) {
    t->info.space_symbol = r.space ? r.space : "_";
    if (r.space) { /* keep the string alive with the model */
      t->delimiter = r.space;
      r.space = NULL;
    }
  }
  if (in->kind == XL_TOKENIZER_TRANSFO_XL) rc = setup_transfo_xl(m, &r, err);
  else if (in->kind == XL_TOKENIZER_BYTE_TABLE || in->kind == XL_TOKENIZER_CHAR_TABLE)
    rc = xl_table_setup(m, err);
out:
  raw_free(&r);
  return rc;
}

void xl_tokenizer_free(xl_model *m) {
  if (m->vocab)
    for (int i = 0; i < m->cfg.vocab_size; i++) free(m->vocab[i]);
  free(m->vocab);
  free(m->vocab_index);
  m->vocab = NULL;
  m->vocab_index = NULL;
  struct xl_tok *t = m->tok;
  if (t) {
    for (int i = 0; i < t->info.n_never_split; i++) {
      free(t->never_split[i]);
      xl_ustr_free(&t->never_split_u[i]);
    }
    free(t->never_split);
    free(t->never_split_u);
    free(t->never_split_id);
    free(t->delimiter);
    free(t->id_byte_v);
    free(t);
  }
  m->tok = NULL;
}

const xl_tokenizer_info *xl_model_tokenizer(const xl_model *m) { return &m->tok->info; }

const char *xl_token_symbol(const xl_model *m, int32_t id) {
  if (!m->vocab || id < 0 || id >= m->cfg.vocab_size) return NULL;
  return m->vocab[id];
}
