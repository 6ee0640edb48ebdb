/*
 * weights.c: binds the safetensors entries to the model's weight pointers by their
 * TransfoXLLMHeadModel names, checking each shape against the config, converting F16/BF16 to
 * F32 (and realigning unaligned F32) into owned buffers, and resolving tied weights and
 * projections (stored once or twice). Called once at load (any thread).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

static xl_code own(xl_model *m, void *p, xl_error *err) {
  if (m->n_owned == m->cap_owned) {
    int cap = m->cap_owned ? 2 * m->cap_owned : 64;
    void **o = realloc(m->owned, (size_t)cap * sizeof *o);
    if (!o) {
      free(p);
      return xl_fail(err, XL_NOMEM, "out of memory binding weights");
    }
    m->owned = o;
    m->cap_owned = cap;
  }
  m->owned[m->n_owned++] = p;
  return XL_OK;
}

/* Looks up `name` with the expected shape (ndim 1 or 2; d1 ignored for ndim 1). Missing and
 * !required: *out = NULL, XL_OK. */
static xl_code tensor(xl_model *m, const char *name, int ndim, int64_t d0, int64_t d1,
                      int required, const float **out, xl_error *err) {
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
  size_t n = (size_t)d0 * (size_t)(ndim == 1 ? 1 : d1);
  if (t->dtype == XL_DT_F32 && ((uintptr_t)t->data & 3u) == 0) {
    *out = (const float *)(const void *)t->data;
    return XL_OK;
  }
  float *f = malloc(n * sizeof *f + 1);
  if (!f) return xl_fail(err, XL_NOMEM, "out of memory converting tensor '%s'", name);
  const uint8_t *p = t->data;
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    if (t->dtype == XL_DT_F32) {
      memcpy(&f[i], p + 4 * i, 4);
      continue;
    }
    uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
    if (t->dtype == XL_DT_F16) {
      f[i] = half_to_float(h);
    } else {
      bits = (uint32_t)h << 16;
      memcpy(&f[i], &bits, 4);
    }
  }
  *out = f;
  return own(m, f, err);
}

/* out[cols, rows] = src[rows, cols]^T, owned by the model. */
static xl_code transposed(xl_model *m, const float *src, int rows, int cols, const float **out,
                          xl_error *err) {
  float *t = malloc((size_t)rows * cols * sizeof *t + 1);
  if (!t) return xl_fail(err, XL_NOMEM, "out of memory transposing a projection");
  xl_transpose(src, rows, cols, t);
  *out = t;
  return own(m, t, err);
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
  T(qkv_w, "dec_attn.qkv_net.weight", 2, 3 * m->hd, c->d_model);
  T(o_w, "dec_attn.o_net.weight", 2, c->d_model, m->hd);
  T(r_w, "dec_attn.r_net.weight", 2, m->hd, c->d_model);
  T(attn_ln_g, "dec_attn.layer_norm.weight", 1, c->d_model, 0);
  T(attn_ln_b, "dec_attn.layer_norm.bias", 1, c->d_model, 0);
  T(ff1_w, "pos_ff.CoreNet.0.weight", 2, c->d_inner, c->d_model);
  T(ff1_b, "pos_ff.CoreNet.0.bias", 1, c->d_inner, 0);
  T(ff2_w, "pos_ff.CoreNet.3.weight", 2, c->d_model, c->d_inner);
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
    if ((rc = tensor(m, "transformer.word_emb.emb_layers.0.weight", 2, c->vocab_size, c->d_embed,
                     1, &e->table, err)))
      return rc;
    if (c->d_embed != c->d_model &&
        (rc = tensor(m, "transformer.word_emb.emb_projs.0", 2, c->d_model, c->d_embed, 1,
                     &e->proj, err)))
      return rc;
  } else {
    m->n_emb_clusters = c->n_cutoffs + 1;
    int d = c->d_embed;
    for (int i = 0; i < m->n_emb_clusters; i++, d /= c->div_val) {
      xl_emb_cluster *e = &m->emb[i];
      e->begin = ends[i];
      e->end = ends[i + 1];
      e->d_emb = d;
      if ((rc = tensor(m, NAME(n, "transformer.word_emb.emb_layers.%d.weight", i), 2,
                       e->end - e->begin, d, 1, &e->table, err)) ||
          (rc = tensor(m, NAME(n, "transformer.word_emb.emb_projs.%d", i), 2, c->d_model, d, 1,
                       &e->proj, err)))
        return rc;
    }
  }
  return XL_OK;
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

  const float *w_all = NULL, *b_all = NULL; /* div_val == 1: one Linear(d_embed, vocab) */
  if (c->div_val == 1) {
    const float *stored;
    if ((rc = tensor(m, "crit.out_layers.0.weight", 2, c->vocab_size, c->d_embed,
                     !c->tie_word_embeddings, &stored, err)))
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
      o->weight = w_all + (size_t)o->begin * c->d_embed;
      o->bias = b_all + o->begin;
    } else {
      o->d_emb = d;
      const float *stored;
      if ((rc = tensor(m, NAME(n, "crit.out_layers.%d.weight", i), 2, o->end - o->begin, d,
                       !c->tie_word_embeddings, &stored, err)) ||
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
      o->proj = tied ? m->emb[c->div_val == 1 ? 0 : i].proj : stored;
      if ((rc = transposed(m, o->proj, c->d_model, o->d_emb, &o->proj_t, err))) return rc;
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
