/*
 * model.c: loading a model directory (config.json + model.safetensors + tokenizer) into an
 * immutable xl_model, the load-time overrides, the per-model positional cache, the
 * fingerprint, and the read-only accessors. Load/free on any one thread; afterwards the model
 * is shared read-only by all threads.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* Distances cached beyond mem_len when same_length is off (prompt chunks up to this long
 * need no extra work; longer ones compute their extra rows per call). */
#define XL_POS_CACHE_EXTRA 1024

static xl_code read_file(const char *path, char **data, size_t *len, xl_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return xl_fail(err, XL_IO, "%s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      char *b = realloc(buf, cap);
      if (!b) {
        free(buf);
        fclose(f);
        return xl_fail(err, XL_NOMEM, "%s: out of memory", path);
      }
      buf = b;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return xl_fail(err, XL_IO, "%s: read error", path);
  }
  *data = buf;
  *len = n;
  return XL_OK;
}

static size_t count_params(const xl_model *m) {
  const xl_config *c = &m->cfg;
  size_t n = 0;
  for (int i = 0; i < m->n_emb_clusters; i++) {
    const xl_emb_cluster *e = &m->emb[i];
    n += (size_t)(e->end - e->begin) * e->d_emb + (e->proj_f32 ? (size_t)c->d_model * e->d_emb : 0);
  }
  for (int i = 0; i < m->n_out_clusters; i++) {
    const xl_out_cluster *o = &m->out[i];
    n += (size_t)(o->end - o->begin); /* bias */
    if (!c->tie_word_embeddings && (c->div_val > 1 || i == 0))
      n += (size_t)(c->div_val > 1 ? o->end - o->begin : c->vocab_size) * o->d_emb;
    if (o->proj && !c->tie_projs[i]) n += (size_t)c->d_model * o->d_emb;
  }
  n += (size_t)c->n_cutoffs * (c->d_embed + 1);
  size_t per_layer = (size_t)3 * m->hd * c->d_model + 2 * (size_t)m->hd * c->d_model +
                     4 * (size_t)c->d_model + 2 * (size_t)c->d_inner * c->d_model +
                     (size_t)c->d_inner + c->d_model;
  n += per_layer * c->n_layer;
  n += (size_t)(c->untie_r ? c->n_layer : 1) * 2 * m->hd;
  return n;
}

static xl_code build_position_cache(xl_model *m, xl_error *err) {
  const xl_config *c = &m->cfg;
  int rows = c->same_length ? c->mem_len : c->mem_len + XL_POS_CACHE_EXTRA;
  if (c->clamp_len > 0 && rows > c->clamp_len + 1) rows = c->clamp_len + 1;
  if (rows < 1) rows = 1;
  m->n_pos_cached = rows;
  float *r = malloc((size_t)rows * c->d_model * sizeof *r);
  if (!r) return xl_fail(err, XL_NOMEM, "out of memory for positional projections");
  for (int l = 0; l < c->n_layer; l++) {
    xl_layer *L = &m->layers[l];
    L->pos_k = xl_arena_alloc(&m->arena, (size_t)rows * m->hd * sizeof(float));
    L->pos_bias = xl_arena_alloc(&m->arena, (size_t)rows * c->n_head * sizeof(float));
    xl_kv_layer *T = &L->pos_keys;
    *T = (xl_kv_layer){m->kv_dtype, rows, NULL, NULL, NULL, NULL};
    T->keys = xl_arena_alloc(&m->arena, (size_t)rows * m->hd * xl_kv_elem_bytes(m->kv_dtype));
    if (m->kv_dtype == XL_KV_INT8)
      T->kscale = xl_arena_alloc(&m->arena, (size_t)rows * c->n_head * sizeof(float));
    if (!L->pos_k || !T->keys || !L->pos_bias || (m->kv_dtype == XL_KV_INT8 && !T->kscale)) {
      free(r);
      return xl_fail(err, XL_NOMEM, "out of memory for positional projections");
    }
    xl_positional_project(m, l, rows, L->pos_k, L->pos_bias, r);
    /* the decode step's copy, transposed and narrowed as the memory's keys are */
    for (int d = 0; d < rows; d++) xl_kv_store_key(m, T, d, L->pos_k + (size_t)d * m->hd);
  }
  free(r);
  return XL_OK;
}

xl_code xl_model_load(const char *dir, const xl_load_options *opts, xl_model **out,
                      xl_error *err) {
  xl_error_clear(err);
  *out = NULL;
  if (!dir || !*dir) return xl_fail(err, XL_ARG, "no model directory given");
  struct stat sb;
  if (stat(dir, &sb) != 0) return xl_fail(err, XL_IO, "%s: %s", dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return xl_fail(err, XL_IO, "%s: not a directory", dir);
  if (strlen(dir) + 32 >= XL_MAX_PATH) return xl_fail(err, XL_ARG, "%s: path too long", dir);

  xl_model *m = calloc(1, sizeof *m);
  if (!m) return xl_fail(err, XL_NOMEM, "out of memory");
  snprintf(m->dir, sizeof m->dir, "%s", dir);
  char path[XL_MAX_PATH + 32];
  xl_code rc;
  snprintf(path, sizeof path, "%s/config.json", dir);
  if ((rc = xl_config_load(path, &m->cfg, err))) goto fail;
  if (opts) {
    if (!xl_weights_name(opts->weights)) {
      rc = xl_fail(err, XL_ARG, "unknown weight type %d (f32, bf16, int8 or int4)", (int)opts->weights);
      goto fail;
    }
    m->weights = opts->weights;
    if (opts->mem_len >= 0) m->cfg.mem_len = opts->mem_len;
    if (opts->clamp_len != -1) m->cfg.clamp_len = opts->clamp_len;
    if (opts->same_length >= 0) m->cfg.same_length = opts->same_length != 0;
    if ((unsigned)opts->kv_dtype >= XL_KV_DTYPE_COUNT) {
      rc = xl_fail(err, XL_ARG, "memory dtype code %d is not one of f32, bf16, int8",
                   (int)opts->kv_dtype);
      goto fail;
    }
    m->kv_dtype = opts->kv_dtype;
    if ((rc = xl_config_validate(&m->cfg, "overrides", err))) goto fail;
  }
  const xl_config *c = &m->cfg;
  m->hd = c->n_head * c->d_head;
  m->emb_scale = sqrtf((float)c->d_model);

  char *cfg_bytes = NULL;
  size_t cfg_len = 0;
  if ((rc = read_file(path, &cfg_bytes, &cfg_len, err))) goto fail;
  m->fingerprint = xl_hash64(cfg_bytes, cfg_len, 0x786c736572766531ULL);
  free(cfg_bytes);

  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  char *st_path = strdup(path);
  if (!st_path) {
    rc = xl_fail(err, XL_NOMEM, "out of memory");
    goto fail;
  }
  if ((rc = xl_safetensors_open(st_path, &m->st, err))) goto fail; /* m->st.path owns st_path */
  if ((rc = xl_weights_bind(m, err))) goto fail;
  m->n_params = count_params(m);
  if ((rc = xl_tokenizer_load(m, err))) goto fail;
  if ((rc = build_position_cache(m, err))) goto fail;

  m->fingerprint = xl_hash64(m->st.map, m->st.map_len, m->fingerprint);
  int32_t eff[3] = {c->mem_len, c->clamp_len, c->same_length};
  m->fingerprint = xl_hash64(eff, sizeof eff, m->fingerprint);
  *out = m;
  return XL_OK;
fail:
  xl_model_free(m);
  return rc;
}

void xl_model_free(xl_model *m) {
  if (!m) return;
  free(m->layers);
  xl_arena_free(&m->arena);
  xl_tokenizer_free(m);
  char *st_path = (char *)m->st.path;
  xl_safetensors_close(&m->st);
  free(st_path);
  free(m);
}

const xl_config *xl_model_config(const xl_model *m) { return &m->cfg; }
size_t xl_model_param_count(const xl_model *m) { return m->n_params; }
uint64_t xl_model_fingerprint(const xl_model *m) { return m->fingerprint; }
const char *xl_model_dir(const xl_model *m) { return m->dir; }
xl_weights xl_model_weights(const xl_model *m) { return m->weights; }

const char *xl_model_weights_kernel(const xl_model *m) {
  if (m->weights == XL_WEIGHTS_F32)
    return m->cfg.n_layer && m->layers[0].qkv_w.panels ? "f32 panels" : "f32 GEMM";
  if (!m->cfg.n_layer || !m->layers[0].qkv_w.panels) return "widening";
  return m->weights == XL_WEIGHTS_BF16 ? "dot-product (vdpbf16ps)" : "dot-product (vpdpbusd)";
}

size_t xl_model_weight_bytes(const xl_model *m) {
  return (m->n_params - m->narrowed_params) * sizeof(float) + m->narrowed_bytes;
}

size_t xl_model_decode_table_bytes(const xl_model *m) {
  const xl_config *c = &m->cfg;
  /* the rows a step reads: distances 0..mem_len, clamped to the rows the table holds */
  size_t rows = (size_t)(m->n_pos_cached < c->mem_len + 1 ? m->n_pos_cached : c->mem_len + 1);
  /* a row: a key row as the memory stores one (half a position: keys and their scales), and a
   * bias term per head */
  size_t per_row = xl_kv_position_bytes(m, m->kv_dtype) / 2 + (size_t)c->n_head * sizeof(float);
  return (size_t)c->n_layer * rows * per_row;
}

size_t xl_model_state_bytes(const xl_model *m) {
  size_t layer = m->cfg.mem_len ? xl_kv_layer_bytes(m, m->kv_dtype, m->cfg.mem_len) : 0;
  return sizeof(struct xl_state) + (size_t)m->cfg.n_layer * layer;
}

size_t xl_model_state_bytes_per_token(const xl_model *m) {
  return (size_t)m->cfg.n_layer * xl_kv_position_bytes(m, m->kv_dtype);
}

xl_kv_dtype xl_model_kv_dtype(const xl_model *m) { return m->kv_dtype; }
