/*
 * mathops.c: the dense kernels the forward pass is written in: Linear (matmul.c, batch-invariant),
 * LayerNorm and log-softmax, and the transpose of the load-time tables (any thread; pure
 * functions of their arguments).
 */
#include <math.h>

#include "internal.h"

void xl_linear(const float *x, int rows, int in, const float *w, const float *b, int out,
               float *y, int ldy) {
  xl_matmul_nt(x, rows, in, in, w, out, in, y, ldy); /* y[rows, out] = x[rows, in] W^T */
  if (b)
    for (int r = 0; r < rows; r++) {
      float *yr = y + (size_t)r * ldy;
      for (int j = 0; j < out; j++) yr[j] += b[j];
    }
}

void xl_transpose(const float *src, int rows, int cols, float *dst) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

void xl_layer_norm(const float *x, int rows, int dim, const float *g, const float *b, float eps,
                   float *y) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * dim;
    float *yr = y + (size_t)r * dim;
    double mean = 0.0, var = 0.0;
    for (int j = 0; j < dim; j++) mean += xr[j];
    mean /= dim;
    for (int j = 0; j < dim; j++) {
      double d = xr[j] - mean;
      var += d * d;
    }
    var /= dim; /* biased, as torch.nn.LayerNorm */
    float inv = (float)(1.0 / sqrt(var + eps)), mu = (float)mean;
    for (int j = 0; j < dim; j++) yr[j] = (xr[j] - mu) * inv * g[j] + b[j];
  }
}

void xl_log_softmax_inplace(float *x, int n) {
  float mx = -INFINITY;
  for (int i = 0; i < n; i++)
    if (x[i] > mx) mx = x[i];
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += exp((double)(x[i] - mx));
  float lse = mx + (float)log(sum);
  for (int i = 0; i < n; i++) x[i] -= lse;
}
