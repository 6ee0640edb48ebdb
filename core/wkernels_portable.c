/*
 * wkernels_portable.c: the portable C family of the narrow-weight kernels (wkernels.h): each
 * output a dot product in 8 fixed lanes (as the portable F32 GEMM), the weight widened (bf16)
 * or dequantised ((float)q * scale, int8) as it is read. The reference the vector families are
 * tested against. Any thread; pure functions.
 */
#include "wkernels.h"

/* weight k of a row as F32: bf16 bits widened, or int8 times its block's scale */
static inline float weight_at(int q8, const void *w, const float *s, int k) {
  if (!q8) return xl_bf16_to_f32(((const uint16_t *)w)[k]);
  return (float)((const int8_t *)w)[k] * s[k / XL_Q8_BLOCK];
}

static inline void matmul(int q8, const float *x, int M, int K, int ldx, const void *W,
                          const float *S, int N, int ldw, float *y, int ldy) {
  const int nb = xl_q8_blocks(ldw);
  for (int r = 0; r < M; r++)
    for (int o = 0; o < N; o++) {
      const float *a = x + (size_t)r * ldx;
      const void *w = q8 ? (const void *)((const int8_t *)W + (size_t)o * ldw)
                         : (const void *)((const uint16_t *)W + (size_t)o * ldw);
      const float *s = q8 ? S + (size_t)o * nb : NULL;
      float acc[8] = {0};
      int k = 0;
      for (; k + 8 <= K; k += 8) /* 8 divides the int8 block: one scale per chunk */
        if (q8) {
          const int8_t *qk = (const int8_t *)w + k;
          const float sc = s[k / XL_Q8_BLOCK];
          for (int l = 0; l < 8; l++) acc[l] += a[k + l] * ((float)qk[l] * sc);
        } else {
          for (int l = 0; l < 8; l++) acc[l] += a[k + l] * weight_at(0, w, s, k + l);
        }
      for (int l = 0; k < K; k++, l++) acc[l] += a[k] * weight_at(q8, w, s, k);
      y[(size_t)r * ldy + o] =
          ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}

static void matmul_bf16(const float *x, int M, int K, int ldx, const uint16_t *W, int N, int ldw,
                        float *y, int ldy) {
  matmul(0, x, M, K, ldx, W, NULL, N, ldw, y, ldy);
}

static void matmul_q8(const float *x, int M, int K, int ldx, const int8_t *W, const float *S,
                      int N, int ldw, float *y, int ldy) {
  matmul(1, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

const xl_wkernels xl_wkernels_portable = {"portable", matmul_bf16, matmul_q8};
