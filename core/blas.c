/*
 * blas.c: what xlserve asks of the BLAS library (OpenBLAS) itself: its thread count
 * (xl_set_blas_threads), the kernel family it chose (xl_blas_core), and a correctness check of
 * one SGEMM against xlserve's own F32 kernel (xl_blas_self_check, used when the CLI makes
 * OpenBLAS take another kernel family), xlserve's own F32 GEMM in the weights' layout for the
 * bench to set beside SGEMM (xl_f32_weights_new, xl_matmul_f32), and the note of what was done
 * (xl_blas_note). Main thread, at start, before any forward pass (xl_matmul_f32 and
 * xl_blas_note: any thread).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "internal.h"
#include "wpanel.h"

void xl_set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

const char *xl_blas_core(void) {
  const char *name = openblas_get_corename();
  return name && *name ? name : "unknown";
}

struct xl_f32_weights {
  xl_wmat w;
  int n;
  float *data; /* owned: panels or rows */
};

xl_f32_weights *xl_f32_weights_new(const float *W, int N, int K) {
  xl_f32_weights *f = malloc(sizeof *f);
  const int panels = xl_f32p_wanted();
  const size_t count = panels ? xl_f32p_count(N, K) : (size_t)N * K;
  float *data = f ? malloc(count * sizeof *data + 1) : NULL;
  if (!data) {
    free(f);
    return NULL;
  }
  if (panels) xl_f32p_pack(W, N, K, data);
  else memcpy(data, W, count * sizeof *data);
  *f = (xl_f32_weights){{XL_WEIGHTS_F32, data, NULL, K, panels, 0, NULL}, N, data};
  return f;
}

void xl_f32_weights_free(xl_f32_weights *w) {
  if (w) free(w->data);
  free(w);
}

void xl_matmul_f32(const float *x, int M, int ldx, const xl_f32_weights *W, float *y, int ldy) {
  xl_matmul_w(x, M, W->w.cols, ldx, &W->w, W->n, y, ldy);
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
