/*
 * mathops.c: the dense operations the forward pass is written in: Linear (batch-invariant GEMM
 * plus bias), LayerNorm and log-softmax, each by the kernel family in use (kernels.h), and the
 * transpose of the load-time tables (any thread; pure functions of their arguments).
 */
#include <math.h>

#include "internal.h"

void xl_linear(const float *x, int rows, int in, const float *w, const float *b, int out,
               float *y, int ldy) {
  xl_matmul_nt(x, rows, in, in, w, out, in, y, ldy); /* y[rows, out] = x[rows, in] W^T */
  if (b && rows > 0) xl_kern()->add_bias(y, rows, out, ldy, b);
}

void xl_transpose(const float *src, int rows, int cols, float *dst) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

void xl_layer_norm(const float *x, int rows, int dim, const float *g, const float *b, float eps,
                   float *y) {
  xl_kern()->layer_norm(x, rows, dim, g, b, eps, y);
}

/* x - log(sum exp x), the max subtracted first; the sum by the family's exp (float lanes). */
void xl_log_softmax_shift(const float *x, int n, float shift, float *y) {
  if (n <= 0) return;
  const xl_kernels *k = xl_kern();
  float mx = k->max(x, n);
  float lse = mx + logf(k->sum_exp(x, n, mx));
  for (int i = 0; i < n; i++) y[i] = (x[i] - lse) + shift;
}

void xl_log_softmax_inplace(float *x, int n) { xl_log_softmax_shift(x, n, 0.0f, x); }
