/*
 * config.c: reads a model's config.json (TransfoXLConfig keys) into xl_config and validates
 * every value (any thread; called at load). The only JSON the core reads is model files.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "internal.h"

#define XL_MAX_DIM (1 << 20)

static xl_code get_int(json_t *root, const char *path, const char *key, int required, int dflt,
                       int *out, xl_error *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) {
    if (required) return xl_fail(err, XL_CONFIG, "%s: missing key '%s'", path, key);
    *out = dflt;
    return XL_OK;
  }
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (x < -XL_MAX_DIM * 64LL || x > XL_MAX_DIM * 64LL)
      return xl_fail(err, XL_CONFIG, "%s: '%s' = %lld is out of range", path, key, (long long)x);
    *out = (int)x;
    return XL_OK;
  }
  if (json_is_real(v)) { /* 1000.0 written by some exporters */
    double x = json_real_value(v);
    if (x != floor(x) || fabs(x) > XL_MAX_DIM * 64.0)
      return xl_fail(err, XL_CONFIG, "%s: '%s' must be an integer", path, key);
    *out = (int)x;
    return XL_OK;
  }
  return xl_fail(err, XL_CONFIG, "%s: '%s' must be an integer", path, key);
}

static xl_code get_bool(json_t *root, const char *path, const char *key, int dflt, int *out,
                        xl_error *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) {
    *out = dflt;
    return XL_OK;
  }
  if (json_is_boolean(v)) {
    *out = json_is_true(v);
    return XL_OK;
  }
  if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
    *out = (int)json_integer_value(v);
    return XL_OK;
  }
  return xl_fail(err, XL_CONFIG, "%s: '%s' must be true or false", path, key);
}

static xl_code parse(json_t *root, const char *path, xl_config *c, xl_error *err) {
  xl_code rc;
#define TRY(call)                                                                          \
  do {                                                                                     \
    if ((rc = (call)) != XL_OK) return rc;                                                 \
  } while (0)
  memset(c, 0, sizeof *c);
  if (json_object_get(root, "vocab_size"))
    TRY(get_int(root, path, "vocab_size", 1, 0, &c->vocab_size, err));
  else /* older configs */
    TRY(get_int(root, path, "n_token", 1, 0, &c->vocab_size, err));
  if (c->vocab_size < 1) /* checked before cutoffs, which are relative to it */
    return xl_fail(err, XL_CONFIG, "%s: 'vocab_size' = %d must be positive", path, c->vocab_size);
  TRY(get_int(root, path, "d_model", 1, 0, &c->d_model, err));
  TRY(get_int(root, path, "d_embed", 0, c->d_model, &c->d_embed, err));
  TRY(get_int(root, path, "n_head", 1, 0, &c->n_head, err));
  TRY(get_int(root, path, "d_head", 1, 0, &c->d_head, err));
  TRY(get_int(root, path, "d_inner", 1, 0, &c->d_inner, err));
  TRY(get_int(root, path, "div_val", 0, 1, &c->div_val, err));
  TRY(get_int(root, path, "n_layer", 1, 0, &c->n_layer, err));
  TRY(get_int(root, path, "mem_len", 0, 0, &c->mem_len, err));
  TRY(get_int(root, path, "clamp_len", 0, -1, &c->clamp_len, err));
  TRY(get_int(root, path, "tgt_len", 0, 0, &c->tgt_len, err));
  TRY(get_bool(root, path, "pre_lnorm", 0, &c->pre_lnorm, err));
  TRY(get_bool(root, path, "same_length", 0, &c->same_length, err));
  TRY(get_bool(root, path, "untie_r", 1, &c->untie_r, err));

  int tie = 1;
  if (json_object_get(root, "tie_word_embeddings"))
    TRY(get_bool(root, path, "tie_word_embeddings", 1, &tie, err));
  else
    TRY(get_bool(root, path, "tie_weight", 1, &tie, err));
  c->tie_word_embeddings = tie;

  int attn_type, sample_softmax;
  TRY(get_int(root, path, "attn_type", 0, 0, &attn_type, err));
  if (attn_type != 0)
    return xl_fail(err, XL_UNSUPPORTED, "%s: attn_type %d is not supported (only 0)", path,
                   attn_type);
  TRY(get_int(root, path, "sample_softmax", 0, -1, &sample_softmax, err));
  if (sample_softmax > 0)
    return xl_fail(err, XL_UNSUPPORTED, "%s: sample_softmax %d is not supported", path,
                   sample_softmax);

  json_t *eps = json_object_get(root, "layer_norm_epsilon");
  if (!eps || json_is_null(eps)) c->layer_norm_epsilon = 1e-5f;
  else if (json_is_number(eps)) c->layer_norm_epsilon = (float)json_number_value(eps);
  else return xl_fail(err, XL_CONFIG, "%s: 'layer_norm_epsilon' must be a number", path);

  json_t *cut = json_object_get(root, "cutoffs");
  if (cut && !json_is_null(cut)) {
    if (!json_is_array(cut))
      return xl_fail(err, XL_CONFIG, "%s: 'cutoffs' must be an array of integers", path);
    if (json_array_size(cut) > XL_MAX_CLUSTERS)
      return xl_fail(err, XL_CONFIG, "%s: 'cutoffs' has %zu entries (at most %d)", path,
                     json_array_size(cut), XL_MAX_CLUSTERS);
    c->n_cutoffs = (int)json_array_size(cut);
    for (int i = 0; i < c->n_cutoffs; i++) {
      json_t *x = json_array_get(cut, (size_t)i);
      if (!json_is_integer(x))
        return xl_fail(err, XL_CONFIG, "%s: 'cutoffs[%d]' must be an integer", path, i);
      json_int_t v = json_integer_value(x);
      if (v <= 0 || v >= c->vocab_size || (i > 0 && v <= c->cutoffs[i - 1]))
        return xl_fail(err, XL_CONFIG,
                       "%s: 'cutoffs' must increase strictly within (0, vocab_size=%d); "
                       "cutoffs[%d] = %lld",
                       path, c->vocab_size, i, (long long)v);
      c->cutoffs[i] = (int)v;
    }
  }

  /* tie_projs: explicit list, else derived from proj_share_all_but_first as HF does. */
  json_t *tp = json_object_get(root, "tie_projs");
  if (tp && !json_is_null(tp)) {
    if (!json_is_array(tp) || json_array_size(tp) > XL_MAX_CLUSTERS + 1)
      return xl_fail(err, XL_CONFIG, "%s: 'tie_projs' must be an array of at most %d booleans",
                     path, XL_MAX_CLUSTERS + 1);
    for (size_t i = 0; i < json_array_size(tp); i++) {
      json_t *x = json_array_get(tp, i);
      if (!json_is_boolean(x))
        return xl_fail(err, XL_CONFIG, "%s: 'tie_projs[%zu]' must be a boolean", path, i);
      c->tie_projs[i] = json_is_true(x);
    }
  } else {
    int share;
    TRY(get_bool(root, path, "proj_share_all_but_first", 1, &share, err)); /* HF default */
    for (int i = 1; i <= c->n_cutoffs; i++) c->tie_projs[i] = share;
  }

  json_t *tok = json_object_get(root, "xlserve_tokenizer");
  if (tok && !json_is_null(tok)) {
    const char *t = json_string_value(tok);
    int k = 0;
    while (k < XL_TOKENIZER_KIND_COUNT && !(t && !strcmp(t, xl_tokenizer_kind_name(k)))) k++;
    if (k == XL_TOKENIZER_KIND_COUNT)
      return xl_fail(err, XL_CONFIG,
                     "%s: 'xlserve_tokenizer' must be \"bytes\", \"words\", \"transfo_xl\", "
                     "\"byte_table\" or \"char_table\"",
                     path);
    c->tokenizer = (xl_tokenizer_kind)k;
  } else {
    c->tokenizer = c->vocab_size == 256 ? XL_TOKENIZER_BYTES : XL_TOKENIZER_WORDS;
  }
#undef TRY
  return XL_OK;
}

xl_code xl_config_validate(const xl_config *c, const char *path, xl_error *err) {
#define RANGE(field, lo, hi)                                                               \
  if (c->field < (lo) || c->field > (hi))                                                  \
    return xl_fail(err, XL_CONFIG, "%s: '%s' = %d is out of range [%d, %d]", path, #field,   \
                   c->field, (int)(lo), (int)(hi));
  RANGE(vocab_size, 1, 64 * XL_MAX_DIM);
  RANGE(d_model, 2, 65536);
  RANGE(d_embed, 1, 65536);
  RANGE(n_head, 1, 4096);
  RANGE(d_head, 1, 65536);
  RANGE(d_inner, 1, 1 << 20);
  RANGE(div_val, 1, 64);
  RANGE(n_layer, 1, 4096);
  RANGE(mem_len, 0, XL_MAX_DIM);
#undef RANGE
  if (c->d_model % 2)
    return xl_fail(err, XL_CONFIG, "%s: 'd_model' = %d must be even (sinusoid positions)", path,
                   c->d_model);
  if ((int64_t)c->n_head * c->d_head > 1 << 20)
    return xl_fail(err, XL_CONFIG, "%s: n_head * d_head is too large", path);
  if (c->same_length && c->mem_len == 0)
    return xl_fail(err, XL_CONFIG,
                   "%s: 'same_length' needs mem_len >= 1 (each query sees mem_len positions)",
                   path);
  if (!(c->layer_norm_epsilon > 0.0f) || !isfinite(c->layer_norm_epsilon))
    return xl_fail(err, XL_CONFIG, "%s: 'layer_norm_epsilon' must be positive", path);
  if (c->div_val > 1) {
    int64_t d = c->d_embed;
    for (int i = 0; i <= c->n_cutoffs; i++, d /= c->div_val)
      if (d < 1)
        return xl_fail(err, XL_CONFIG,
                       "%s: d_embed %d / div_val %d^%d leaves no embedding dimension", path,
                       c->d_embed, c->div_val, i);
  }
  if (c->tokenizer == XL_TOKENIZER_BYTES && c->vocab_size != 256)
    return xl_fail(err, XL_CONFIG, "%s: a bytes tokenizer needs vocab_size 256 (got %d)", path,
                   c->vocab_size);
  return XL_OK;
}

xl_code xl_config_load(const char *path, xl_config *cfg, xl_error *err) {
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    if (jerr.line == -1 || strstr(jerr.text, "unable to open"))
      return xl_fail(err, XL_IO, "%s: %s", path, jerr.text);
    return xl_fail(err, XL_FORMAT, "%s: invalid JSON at line %d: %s", path, jerr.line, jerr.text);
  }
  xl_code rc;
  if (!json_is_object(root)) rc = xl_fail(err, XL_FORMAT, "%s: not a JSON object", path);
  else rc = parse(root, path, cfg, err);
  json_decref(root);
  if (rc == XL_OK) rc = xl_config_validate(cfg, path, err);
  return rc;
}
