/*
 * blas.c: what xlserve asks of the BLAS library (OpenBLAS) itself: its thread count
 * (xl_set_blas_threads), the kernel family it chose (xl_blas_core), and a correctness check of
 * one SGEMM against xlserve's own F32 kernel (xl_blas_self_check, used when the CLI makes
 * OpenBLAS take another kernel family; xl_matmul_f32 gives the bench that kernel), and the
 * note of what was done (xl_blas_note). Main thread, at start, before any forward pass
 * (xl_matmul_f32 and xl_blas_note: any thread).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cblas.h>

#include "internal.h"

void xl_set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

const char *xl_blas_core(void) {
  const char *name = openblas_get_corename();
  return name && *name ? name : "unknown";
}

void xl_matmul_f32(const float *x, int M, int K, int ldx, const float *W, int N, int ldw,
                   float *y, int ldy) {
  xl_matmul_nt(x, M, K, ldx, W, N, ldw, y, ldy);
}

double xl_blas_self_check(void) {
  enum { M = 23, N = 41, K = 259 }; /* odd sizes: every kernel's edges */
  float *a = malloc(sizeof(float) * (M * K + N * K + 2 * M * N));
  if (!a) return INFINITY;
  float *b = a + M * K, *c = b + N * K, *r = c + M * N; /* a[M, K], b[N, K], c, r[M, N] */
  uint32_t s = 12345u;
  for (int i = 0; i < M * K + N * K; i++) {
    s = s * 1664525u + 1013904223u;
    a[i] = (float)((int)(s >> 9) - (1 << 22)) / (float)(1 << 22); /* [-1, 1) */
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
  xl_matmul_nt(a, M, K, K, b, N, K, r, N);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double mag = 1e-30;
      for (int k = 0; k < K; k++) mag += fabs((double)a[i * K + k] * b[j * K + k]);
      double d = fabs((double)c[i * N + j] - r[i * N + j]) / mag;
      if (!(d <= worst)) worst = d; /* NaN counts as worst */
    }
  free(a);
  return worst;
}

static char blas_note[512];

void xl_blas_set_note(const char *note) {
  snprintf(blas_note, sizeof blas_note, "%s", note ? note : "");
}

const char *xl_blas_note(void) { return blas_note; }
