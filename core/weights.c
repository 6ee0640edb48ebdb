/*
 * weights.c: binds the safetensors entries to the model's weight pointers by their
 * TransfoXLLMHeadModel names, checking each shape against the config, converting F16/BF16 to
 * F32 (and realigning unaligned F32) into owned buffers, copying every weight matrix into the
 * model's arena (huge pages; the file's pages given back), and resolving tied weights and
 * projections (stored once or twice). Called once at load (any thread).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigmem.h"
#include "f16.h"
#include "internal.h"
#include "wpanel.h"

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else { /* subnormal: normalise */
      int e = -1;
      do { man <<= 1; e++; } while (!(man & 0x400));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Looks up `name` with the expected shape (ndim 1 or 2; d1 ignored for ndim 1) and marks it
 * used. Missing and !required: *out = NULL, XL_OK. */
static xl_code lookup(xl_model *m, const char *name, int ndim, int64_t d0, int64_t d1,
                      int required, xl_tensor_entry **out, xl_error *err) {
  *out = NULL;
  xl_tensor_entry *t = xl_safetensors_find(&m->st, name);
  if (!t) {
    if (!required) return XL_OK;
    return xl_fail(err, XL_TENSOR, "%s: missing tensor '%s'", m->st.path, name);
  }
  int ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
  if (!ok) {
    char got[96] = "", want[64];
    int off = 0;
    for (int i = 0; i < t->ndim && off < 80; i++)
      off += snprintf(got + off, sizeof got - (size_t)off, "%s%lld", i ? ", " : "",
                      (long long)t->shape[i]);
    if (ndim == 1) snprintf(want, sizeof want, "%lld", (long long)d0);
    else snprintf(want, sizeof want, "%lld, %lld", (long long)d0, (long long)d1);
    return xl_fail(err, XL_TENSOR, "%s: tensor '%s' has shape [%s], the config needs [%s]",
                   m->st.path, name, got, want);
  }
  t->used = 1;
  *out = t;
  return XL_OK;
}

/* out[0..n) = elements [i0, i0 + n) of t as F32 */
static void entry_floats(const xl_tensor_entry *t, size_t i0, size_t n, float *out) {
  const uint8_t *p = t->data;
  for (size_t i = i0; i < i0 + n; i++) {
    uint32_t bits;
    if (t->dtype == XL_DT_F32) {
      memcpy(&out[i - i0], p + 4 * i, 4);
      continue;
    }
    uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
    if (t->dtype == XL_DT_F16) {
      out[i - i0] = half_to_float(h);
    } else {
      bits = (uint32_t)h << 16;
      memcpy(&out[i - i0], &bits, 4);
    }
  }
}

/* t's n values as F32 in the model's arena (converted from F16/BF16 where stored so). */
static xl_code arena_floats(xl_model *m, const char *name, const xl_tensor_entry *t, size_t n,
                            const float **out, xl_error *err) {
  float *f = xl_arena_alloc(&m->arena, n * sizeof *f);
  if (!f) return xl_fail(err, XL_NOMEM, "out of memory for tensor '%s'", name);
  entry_floats(t, 0, n, f);
  *out = f;
  return XL_OK;
}

/* `name` as F32: the mapping itself when it holds aligned F32, else an owned converted copy. */
static xl_code tensor(xl_model *m, const char *name, int ndim, int64_t d0, int64_t d1,
                      int required, const float **out, xl_error *err) {
  *out = NULL;
  xl_tensor_entry *t;
  xl_code rc = lookup(m, name, ndim, d0, d1, required, &t, err);
  if (rc || !t) return rc;
  size_t n = (size_t)d0 * (size_t)(ndim == 1 ? 1 : d1);
  if (t->dtype == XL_DT_F32 && ((uintptr_t)t->data & 3u) == 0) {
    *out = (const float *)(const void *)t->data;
    return XL_OK;
  }
  return arena_floats(m, name, t, n, out, err);
}

/* A weight matrix [rows, cols] in m->weights from its rows as F32 (from the file entry t, or
 * from src when t is NULL), narrowed one row at a time: no F32 copy of the whole matrix. Where
 * a dot-product kernel wants panels (wpanel.h), the rows are narrowed into a temporary and
 * packed into the model's arena; otherwise narrowed into the arena directly. */
static xl_code narrow(xl_model *m, const char *name, const xl_tensor_entry *t, const float *src,
                      int rows, int cols, xl_wmat *out, xl_error *err) {
  const int nb = xl_q8_blocks(cols);
  const size_t n = (size_t)rows * cols;
  const int q4 = m->weights == XL_WEIGHTS_INT4;
  const int q8 = m->weights == XL_WEIGHTS_INT8 || q4; /* block-scaled (int8 or int4) */
  const int panels = q8 ? xl_q8p_wanted() : xl_bf16p_wanted();
  size_t bytes = q4 ? (size_t)rows * xl_q4_row_bytes(cols) : n * (q8 ? 1 : 2);
  size_t scale_bytes = q8 ? (size_t)rows * nb * sizeof(float) : 0;
  void *data = panels ? malloc(bytes + 1) : xl_arena_alloc(&m->arena, bytes);
  float *scales = !q8      ? NULL
                  : panels ? malloc(scale_bytes + 1)
                           : xl_arena_alloc(&m->arena, scale_bytes);
  float *row = malloc((size_t)cols * sizeof *row + 1);
  xl_code rc = XL_OK;
  if (!data || (q8 && !scales) || !row)
    rc = xl_fail(err, XL_NOMEM, "out of memory narrowing tensor '%s'", name);
  for (int r = 0; r < rows && !rc; r++) {
    const float *x = row;
    if (t) entry_floats(t, (size_t)r * cols, (size_t)cols, row);
    else x = src + (size_t)r * cols;
    if (!q8) {
      uint16_t *h = (uint16_t *)data + (size_t)r * cols;
      for (int c = 0; c < cols; c++) h[c] = xl_f32_to_bf16(x[c]);
      continue;
    }
    for (int c = 0; c < cols; c++)
      if (!isfinite(x[c])) {
        rc = xl_fail(err, XL_TENSOR,
                     "%s: tensor '%s' holds a non-finite value (row %d, column %d); %s "
                     "weights need finite ones",
                     m->st.path, name, r, c, xl_weights_name(m->weights));
        break;
      }
    for (int b = 0; b < nb && !rc; b++) {
      int c0 = b * XL_Q8_BLOCK, w = cols - c0 < XL_Q8_BLOCK ? cols - c0 : XL_Q8_BLOCK;
      scales[(size_t)r * nb + b] =
          q4 ? xl_q4_block(x + c0, w,
                           (uint8_t *)data + (size_t)r * xl_q4_row_bytes(cols) +
                               (size_t)b * XL_Q4_BLOCK_BYTES)
             : xl_q8_block(x + c0, w, (int8_t *)data + (size_t)r * cols + c0);
      if (!(scales[(size_t)r * nb + b] <= XL_F16_MAX)) /* a half holds no larger scale */
        rc = xl_fail(err, XL_TENSOR,
                     "%s: tensor '%s' holds a weight too large for %s (row %d, columns %d-%d: "
                     "a block's scale above %g)",
                     m->st.path, name, xl_weights_name(m->weights), r, c0, c0 + w - 1,
                     (double)XL_F16_MAX);
    }
  }
  free(row);
  uint16_t *panel_scales = NULL;
  if (!rc && panels) { /* the dot-product kernel's layout, from the rows (temporaries) */
    void *rows_data = data;
    float *rows_scales = scales;
    scales = NULL;
    if (q8) { /* int8, int4: scales as halves (exact: xl_q8_block's and xl_q4_block's) */
      bytes = q4 ? xl_q4p_bytes(rows, cols) : xl_q8p_bytes(rows, cols);
      scale_bytes = xl_q8p_scale_count(rows, cols) * sizeof *panel_scales;
      data = xl_arena_alloc(&m->arena, bytes);
      panel_scales = xl_arena_alloc(&m->arena, scale_bytes);
      if (data && panel_scales && q4)
        xl_q4p_pack(rows_data, rows_scales, rows, cols, data, panel_scales);
      else if (data && panel_scales)
        xl_q8p_pack(rows_data, rows_scales, rows, cols, data, panel_scales);
    } else {
      bytes = xl_bf16p_count(rows, cols) * sizeof(uint16_t);
      data = xl_arena_alloc(&m->arena, bytes);
      if (data) xl_bf16p_pack(rows_data, rows, cols, data);
    }
    free(rows_data);
    free(rows_scales);
    if (!data || (q8 && !panel_scales))
      rc = xl_fail(err, XL_NOMEM, "out of memory narrowing tensor '%s'", name);
  } else if (panels) { /* failed: the temporaries go; arena memory goes with the model */
    free(data);
    free(scales);
  }
  if (rc) return rc;
  *out = (xl_wmat){m->weights, data, scales, cols, panels, 0, panel_scales};
  m->narrowed_bytes += bytes + scale_bytes;
  m->narrowed_params += n;
  return XL_OK;
}

/* `name` [d0, d1] as a weight matrix in m->weights: F32 as tensor(); bf16 in place when the
 * file holds aligned bf16, else narrowed row by row; int8 and int4 quantised row by row. */
static xl_code wtensor(xl_model *m, const char *name, int64_t d0, int64_t d1, int required,
                       xl_wmat *out, xl_error *err) {
  memset(out, 0, sizeof *out);
  xl_tensor_entry *t;
  xl_code rc = lookup(m, name, 2, d0, d1, required, &t, err);
  if (rc || !t) return rc;
  if (m->weights == XL_WEIGHTS_F32) {
    /* Copied, never used in place: the forward pass streams every matrix once a step, and
     * from the file's mapping (4 KiB pages, a page-table walk every 4 KiB, two levels of
     * tables in a virtual machine) that stream runs slower than from the arena (2 MiB pages
     * where the kernel gives them). The mapping's pages of it are given back at once: they
     * stay clean page cache the kernel may drop, and a later read of them (a tied matrix
     * bound twice) faults them in from the file again. */
    const float *f = NULL;
    const int panels = xl_f32p_wanted();
    if (panels) { /* the F32 panel kernel's layout (wpanel.h), from a temporary copy */
      float *rows = malloc((size_t)d0 * (size_t)d1 * sizeof *rows + 1);
      float *P = xl_arena_alloc(&m->arena, xl_f32p_count((int)d0, (int)d1) * sizeof *P);
      if (!rows || !P) {
        free(rows);
        return xl_fail(err, XL_NOMEM, "out of memory for tensor '%s'", name);
      }
      entry_floats(t, 0, (size_t)d0 * (size_t)d1, rows);
      xl_f32p_pack(rows, (int)d0, (int)d1, P);
      free(rows);
      f = P;
    } else if ((rc = arena_floats(m, name, t, (size_t)d0 * (size_t)d1, &f, err))) {
      return rc;
    }
    xl_safetensors_release(&m->st, t);
    *out = (xl_wmat){XL_WEIGHTS_F32, f, NULL, (int)d1, panels, 0, NULL};
    return XL_OK;
  }
  if (m->weights == XL_WEIGHTS_BF16 && t->dtype == XL_DT_BF16 && ((uintptr_t)t->data & 1u) == 0 &&
      !xl_bf16p_wanted()) { /* in place (where panels are wanted, narrow() packs a copy) */
    *out = (xl_wmat){XL_WEIGHTS_BF16, t->data, NULL, (int)d1, 0, 0, NULL};
    m->narrowed_bytes += t->nbytes;
    m->narrowed_params += (size_t)d0 * d1;
    return XL_OK;
  }
  return narrow(m, name, t, NULL, (int)d0, (int)d1, out, err);
}

/* An F32 matrix (a projection) in the weight type (F32: in panels where the family reads
 * panels, else src itself); counted in the weight bytes if `counted`. */
static xl_code wmat_of(xl_model *m, const char *what, const float *src, int rows, int cols,
                       int counted, xl_wmat *out, xl_error *err) {
  if (m->weights == XL_WEIGHTS_F32 && xl_f32p_wanted()) { /* a packed copy (wpanel.h) */
    float *P = xl_arena_alloc(&m->arena, xl_f32p_count(rows, cols) * sizeof *P);
    if (!P) return xl_fail(err, XL_NOMEM, "out of memory for %s", what);
    xl_f32p_pack(src, rows, cols, P);
    *out = (xl_wmat){XL_WEIGHTS_F32, P, NULL, cols, 1, 0, NULL};
    return XL_OK;
  }
  if (m->weights == XL_WEIGHTS_F32) {
    *out = (xl_wmat){XL_WEIGHTS_F32, src, NULL, cols, 0, 0, NULL};
    return XL_OK;
  }
  size_t b = m->narrowed_bytes, p = m->narrowed_params;
  xl_code rc = narrow(m, what, NULL, src, rows, cols, out, err);
  if (!counted) m->narrowed_bytes = b, m->narrowed_params = p;
  return rc;
}

/* out[cols, rows] = src[rows, cols]^T in the weight type, owned by the model (the F32
 * transposition is temporary unless the weights are F32 rows). */
static xl_code transposed(xl_model *m, const float *src, int rows, int cols, int counted,
                          xl_wmat *out, xl_error *err) {
  const size_t bytes = (size_t)rows * cols * sizeof(float);
  const int kept = m->weights == XL_WEIGHTS_F32 && !xl_f32p_wanted();
  float *t = kept ? xl_arena_alloc(&m->arena, bytes) : malloc(bytes + 1);
  if (!t) return xl_fail(err, XL_NOMEM, "out of memory transposing a projection");
  xl_transpose(src, rows, cols, t);
  if (kept) {
    *out = (xl_wmat){XL_WEIGHTS_F32, t, NULL, rows, 0, 0, NULL};
    return XL_OK;
  }
  xl_code rc = wmat_of(m, "a transposed projection", t, cols, rows, counted, out, err);
  free(t);
  return rc;
}

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

static xl_code bind_layer(xl_model *m, int l, const float *shared_u, const float *shared_v,
                          xl_error *err) {
  const xl_config *c = &m->cfg;
  xl_layer *L = &m->layers[l];
  char n[160];
  xl_code rc;
  const char *pre = "transformer.layers";
#define T(field, suffix, nd, a, b)                                                         \
  if ((rc = tensor(m, NAME(n, "%s.%d.%s", pre, l, suffix), nd, a, b, 1, &L->field, err)))  \
    return rc;
#define W(field, suffix, a, b)                                                             \
  if ((rc = wtensor(m, NAME(n, "%s.%d.%s", pre, l, suffix), a, b, 1, &L->field, err)))     \
    return rc;
  W(qkv_w, "dec_attn.qkv_net.weight", 3 * m->hd, c->d_model);
  W(o_w, "dec_attn.o_net.weight", c->d_model, m->hd);
  W(r_w, "dec_attn.r_net.weight", m->hd, c->d_model);
  T(attn_ln_g, "dec_attn.layer_norm.weight", 1, c->d_model, 0);
  T(attn_ln_b, "dec_attn.layer_norm.bias", 1, c->d_model, 0);
  W(ff1_w, "pos_ff.CoreNet.0.weight", c->d_inner, c->d_model);
  T(ff1_b, "pos_ff.CoreNet.0.bias", 1, c->d_inner, 0);
  W(ff2_w, "pos_ff.CoreNet.3.weight", c->d_model, c->d_inner);
  T(ff2_b, "pos_ff.CoreNet.3.bias", 1, c->d_model, 0);
  T(ff_ln_g, "pos_ff.layer_norm.weight", 1, c->d_model, 0);
  T(ff_ln_b, "pos_ff.layer_norm.bias", 1, c->d_model, 0);
  if (c->untie_r) {
    T(r_w_bias, "dec_attn.r_w_bias", 2, c->n_head, c->d_head);
    T(r_r_bias, "dec_attn.r_r_bias", 2, c->n_head, c->d_head);
  } else {
    /* Shared biases: HF also lists them under every layer; mark those copies as used. */
    const float *ignored;
    if ((rc = tensor(m, NAME(n, "%s.%d.dec_attn.r_w_bias", pre, l), 2, c->n_head, c->d_head, 0,
                     &ignored, err)) ||
        (rc = tensor(m, NAME(n, "%s.%d.dec_attn.r_r_bias", pre, l), 2, c->n_head, c->d_head, 0,
                     &ignored, err)))
      return rc;
    L->r_w_bias = shared_u;
    L->r_r_bias = shared_v;
  }
#undef T
#undef W
  return XL_OK;
}

static xl_code bind_embedding(xl_model *m, xl_error *err) {
  const xl_config *c = &m->cfg;
  char n[160];
  xl_code rc;
  int ends[XL_MAX_CLUSTERS + 2];
  ends[0] = 0;
  for (int i = 0; i < c->n_cutoffs; i++) ends[i + 1] = c->cutoffs[i];
  ends[c->n_cutoffs + 1] = c->vocab_size;
  if (c->div_val == 1) {
    m->n_emb_clusters = 1;
    xl_emb_cluster *e = &m->emb[0];
    e->begin = 0;
    e->end = c->vocab_size;
    e->d_emb = c->d_embed;
    if ((rc = wtensor(m, "transformer.word_emb.emb_layers.0.weight", c->vocab_size, c->d_embed,
                      1, &e->table, err)))
      return rc;
    if (c->d_embed != c->d_model &&
        ((rc = tensor(m, "transformer.word_emb.emb_projs.0", 2, c->d_model, c->d_embed, 1,
                      &e->proj_f32, err)) ||
         (rc = wmat_of(m, "transformer.word_emb.emb_projs.0", e->proj_f32, c->d_model,
                       c->d_embed, 1, &e->proj, err))))
      return rc;
  } else {
    m->n_emb_clusters = c->n_cutoffs + 1;
    int d = c->d_embed;
    for (int i = 0; i < m->n_emb_clusters; i++, d /= c->div_val) {
      xl_emb_cluster *e = &m->emb[i];
      e->begin = ends[i];
      e->end = ends[i + 1];
      e->d_emb = d;
      if ((rc = wtensor(m, NAME(n, "transformer.word_emb.emb_layers.%d.weight", i),
                        e->end - e->begin, d, 1, &e->table, err)) ||
          (rc = tensor(m, NAME(n, "transformer.word_emb.emb_projs.%d", i), 2, c->d_model, d, 1,
                       &e->proj_f32, err)) ||
          (rc = wmat_of(m, n, e->proj_f32, c->d_model, d, 1, &e->proj, err)))
        return rc;
    }
  }
  return XL_OK;
}

/* A softmax cluster's weight: bound, or with tied embeddings only checked if stored (the
 * embedding table is used; a stored copy is not converted). */
static xl_code out_weight(xl_model *m, const char *name, int rows, int cols, xl_wmat *out,
                          xl_error *err) {
  memset(out, 0, sizeof *out);
  if (!m->cfg.tie_word_embeddings) return wtensor(m, name, rows, cols, 1, out, err);
  xl_tensor_entry *ignored;
  return lookup(m, name, 2, rows, cols, 0, &ignored, err);
}

static xl_code bind_softmax(xl_model *m, xl_error *err) {
  const xl_config *c = &m->cfg;
  char n[160];
  xl_code rc;
  m->n_out_clusters = c->n_cutoffs + 1;
  int ends[XL_MAX_CLUSTERS + 2];
  ends[0] = 0;
  for (int i = 0; i < c->n_cutoffs; i++) ends[i + 1] = c->cutoffs[i];
  ends[c->n_cutoffs + 1] = c->vocab_size;

  xl_wmat w_all = {0}; /* div_val == 1: one Linear(d_embed, vocab) */
  const float *b_all = NULL;
  if (c->div_val == 1) {
    xl_wmat stored;
    if ((rc = out_weight(m, "crit.out_layers.0.weight", c->vocab_size, c->d_embed, &stored, err)))
      return rc;
    w_all = c->tie_word_embeddings ? m->emb[0].table : stored;
    if ((rc = tensor(m, "crit.out_layers.0.bias", 1, c->vocab_size, 0, 1, &b_all, err)))
      return rc;
  }
  int d = c->d_embed;
  for (int i = 0; i < m->n_out_clusters; i++) {
    xl_out_cluster *o = &m->out[i];
    o->begin = ends[i];
    o->end = ends[i + 1];
    if (c->div_val == 1) {
      o->d_emb = c->d_embed;
      o->weight = xl_wmat_from_row(&w_all, o->begin);
      o->bias = b_all + o->begin;
    } else {
      o->d_emb = d;
      xl_wmat stored;
      if ((rc = out_weight(m, NAME(n, "crit.out_layers.%d.weight", i), o->end - o->begin, d,
                           &stored, err)) ||
          (rc = tensor(m, NAME(n, "crit.out_layers.%d.bias", i), 1, o->end - o->begin, 0, 1,
                       &o->bias, err)))
        return rc;
      o->weight = c->tie_word_embeddings ? m->emb[i].table : stored;
      d /= c->div_val;
    }
    int has_proj = c->div_val > 1 || c->d_embed != c->d_model;
    if (has_proj) {
      const float *stored;
      int tied = c->tie_projs[i];
      if ((rc = tensor(m, NAME(n, "crit.out_projs.%d", i), 2, c->d_model, o->d_emb, !tied,
                       &stored, err)))
        return rc;
      o->proj = tied ? m->emb[c->div_val == 1 ? 0 : i].proj_f32 : stored;
      if ((rc = transposed(m, o->proj, c->d_model, o->d_emb, !tied, &o->proj_t, err))) return rc;
    }
  }
  if (c->n_cutoffs > 0) {
    if ((rc = tensor(m, "crit.cluster_weight", 2, c->n_cutoffs, c->d_embed, 1, &m->cluster_weight,
                     err)) ||
        (rc = tensor(m, "crit.cluster_bias", 1, c->n_cutoffs, 0, 1, &m->cluster_bias, err)))
      return rc;
  }
  return XL_OK;
}

xl_code xl_weights_bind(xl_model *m, xl_error *err) {
  const xl_config *c = &m->cfg;
  xl_code rc;
  if ((rc = bind_embedding(m, err)) || (rc = bind_softmax(m, err))) return rc;
  const float *u = NULL, *v = NULL;
  if (!c->untie_r) {
    /* Prefer the model-level name; HF may have kept only a layer's alias when saving. */
    if ((rc = tensor(m, "transformer.r_w_bias", 2, c->n_head, c->d_head, 0, &u, err)) ||
        (rc = tensor(m, "transformer.r_r_bias", 2, c->n_head, c->d_head, 0, &v, err)))
      return rc;
    if (!u && (rc = tensor(m, "transformer.layers.0.dec_attn.r_w_bias", 2, c->n_head, c->d_head,
                           0, &u, err)))
      return rc;
    if (!v && (rc = tensor(m, "transformer.layers.0.dec_attn.r_r_bias", 2, c->n_head, c->d_head,
                           0, &v, err)))
      return rc;
    if (!u || !v)
      return xl_fail(err, XL_TENSOR, "%s: missing tensor 'transformer.%s'", m->st.path,
                     u ? "r_r_bias" : "r_w_bias");
  }
  m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
  if (!m->layers) return xl_fail(err, XL_NOMEM, "out of memory");
  for (int l = 0; l < c->n_layer; l++)
    if ((rc = bind_layer(m, l, u, v, err))) return rc;

  /* Every stored tensor must be one we understand: a stray name means a different model. */
  for (int i = 0; i < m->st.n_tensors; i++) {
    xl_tensor_entry *t = &m->st.tensors[i];
    if (t->used) continue;
    int tied_copy = (c->tie_word_embeddings && !strncmp(t->name, "crit.out_layers.", 16)) ||
                    !strncmp(t->name, "crit.out_projs.", 15);
    if (!tied_copy && strcmp(t->name, "transformer.pos_emb.inv_freq"))
      return xl_fail(err, XL_TENSOR, "%s: unexpected tensor '%s' (not part of this config)",
                     m->st.path, t->name);
  }
  return XL_OK;
}
