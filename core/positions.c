/*
 * positions.c: the relative positional encoding. R_d is the sinusoid of distance d (the
 * reference's PositionalEmbedding, computed in float32 exactly as torch does), projected per
 * layer by W_r into pos_k[d] = W_r R_d, plus pos_bias[h][d] = v_h . pos_k[d]_h (the position
 * bias term of the score). These depend only on distance, so the model computes them once at
 * load for every distance a step can need (any thread; pure functions).
 */
#include <math.h>

#include "internal.h"

void xl_sinusoid(int d_model, int n_rows, float *out) {
  int half = d_model / 2;
  for (int k = 0; k < half; k++) {
    /* torch: 1 / (10000 ** (arange(0.0, d, 2.0) / d)), all float32 */
    float expo = (float)(2 * k) / (float)d_model;
    float inv_freq = 1.0f / powf(10000.0f, expo);
    for (int d = 0; d < n_rows; d++) {
      float angle = (float)d * inv_freq; /* torch.ger in float32: one rounding */
      out[(size_t)d * d_model + k] = (float)sin((double)angle);
      out[(size_t)d * d_model + half + k] = (float)cos((double)angle);
    }
  }
}

void xl_positional_project(const xl_model *m, int l, int n_rows, float *pos_k, float *pos_bias,
                           float *scratch_r) {
  const xl_config *c = &m->cfg;
  const xl_layer *L = &m->layers[l];
  int hd = m->hd, dh = c->d_head;
  xl_sinusoid(c->d_model, n_rows, scratch_r);                   /* R: [n_rows, d_model] */
  xl_linear_w(scratch_r, n_rows, c->d_model, &L->r_w, NULL, hd, pos_k, hd); /* [n_rows, H*Dh] */
  for (int h = 0; h < c->n_head; h++) {
    const float *v = L->r_r_bias + (size_t)h * dh;
    float *pb = pos_bias + (size_t)h * n_rows;                  /* [H, n_rows] */
    for (int d = 0; d < n_rows; d++) {
      const float *pk = pos_k + (size_t)d * hd + (size_t)h * dh;
      float s = 0.0f;
      for (int j = 0; j < dh; j++) s += v[j] * pk[j];
      pb[d] = s;
    }
  }
}
