/*
 * kernels_portable.c: the portable C family of the kernel table (kernels.h): plain loops with
 * fixed-order lane sums, for any CPU. Also the scalar exp the vector families' tails share.
 * Any thread; pure functions.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"

/* exp(x): 0 below -87.3 (and for -Inf), +Inf above 88.72, NaN for NaN, else a Cephes-style
 * polynomial (~1 ulp) scaled by 2^n. The range checks come first, so the float-to-int
 * conversion only ever sees |n| <= 128. */
float xl_exp_portable(float x) {
  if (x != x) return x;
  if (x < -87.3f) return 0.0f;
  if (x > 88.72f) return INFINITY;
  float n = nearbyintf(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f; /* ln2 split into hi + lo */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return ldexpf(p, (int)n);
}

static void matmul_nt(const float *x, int M, int K, int ldx, const float *W, int N, int ldw,
                      float *y, int ldy) {
  for (int r = 0; r < M; r++)
    for (int o = 0; o < N; o++) {
      const float *a = x + (size_t)r * ldx, *b = W + (size_t)o * ldw;
      float acc[8] = {0};
      int k = 0;
      for (; k + 8 <= K; k += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[k + l] * b[k + l];
      for (int l = 0; k < K; k++, l++) acc[l] += a[k] * b[k];
      y[(size_t)r * ldy + o] =
          ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}

static float vmax(const float *x, int n) { /* NaN-blind: a NaN never wins a comparison */
  float m = -INFINITY;
  for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

static float exp_sum(float *x, int n, float shift) {
  float lanes[16] = {0};
  for (int i = 0; i < n; i++) {
    x[i] = xl_exp_portable(x[i] - shift);
    lanes[i & 15] += x[i];
  }
  float s = 0.0f;
  for (int l = 0; l < 16; l++) s += lanes[l];
  return s;
}

static float sum_exp(const float *x, int n, float shift) {
  float lanes[16] = {0};
  for (int i = 0; i < n; i++) lanes[i & 15] += xl_exp_portable(x[i] - shift);
  float s = 0.0f;
  for (int l = 0; l < 16; l++) s += lanes[l];
  return s;
}

static void axpy(float *y, float a, const float *x, int n) {
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void dot_rows(const float *q, int dh, const float *rows, size_t ld, int n, float *s) {
  memset(s, 0, (size_t)n * sizeof *s);
  for (int k = 0; k < dh; k++) axpy(s, q[k], rows + (size_t)k * ld, n);
}

static void mix_rows(float *out, const float *p, size_t p_stride, const float *rows, size_t ld,
                     int n, int H, int dh) {
  for (int j = 0; j < n; j++) /* one key at a time, every head */
    for (int h = 0; h < H; h++)
      axpy(out + (size_t)h * dh, p[(size_t)h * p_stride + j], rows + (size_t)j * ld + (size_t)h * dh,
           dh);
}

static void layer_norm(const float *x, int rows, int dim, const float *g, const float *b,
                       float eps, float *y) {
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

static void relu(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] < 0.0f ? 0.0f : x[i];
}

static void add_bias(float *y, int rows, int n, int ldy, const float *b) {
  for (int r = 0; r < rows; r++) {
    float *yr = y + (size_t)r * ldy;
    for (int j = 0; j < n; j++) yr[j] += b[j];
  }
}

static void add_reversed(float *s, const float *p, const float *b, int n, float scale) {
  for (int k = 0; k < n; k++) s[k] = (s[k] + (p[-k] + b[-k])) * scale;
}

const xl_kernels xl_kernels_portable = {
  .name = "portable",
  .matmul_nt = matmul_nt,
  .max = vmax,
  .exp_sum = exp_sum,
  .sum_exp = sum_exp,
  .dot_rows = dot_rows,
  .mix_rows = mix_rows,
  .layer_norm = layer_norm,
  .relu = relu,
  .add_bias = add_bias,
  .add_reversed = add_reversed,
};
