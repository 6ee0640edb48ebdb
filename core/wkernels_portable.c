/*
 * wkernels_portable.c: the portable C family of the narrow-weight kernels (wkernels.h): each
 * output a dot product in 8 fixed lanes (as the portable F32 GEMM), the weight widened (bf16)
 * or dequantised ((float)q * scale: int8, int4) as it is read. The reference the vector
 * families are tested against. Any thread; pure functions.
 */
#include "wkernels.h"

enum { BF16 = 0, Q8 = 1, Q4 = 2 };

/* weight k of a row as F32: bf16 bits widened, or int8/int4 times its block's scale */
static inline float weight_at(int type, const void *w, const float *s, int k) {
  if (type == BF16) return xl_bf16_to_f32(((const uint16_t *)w)[k]);
  if (type == Q8) return (float)((const int8_t *)w)[k] * s[k / XL_Q8_BLOCK];
  return (float)xl_q4_at(w, k) * s[k / XL_Q8_BLOCK];
}

static inline void matmul(int type, const float *x, int M, int K, int ldx, const void *W,
                          const float *S, int N, int ldw, float *y, int ldy) {
  const int nb = xl_q8_blocks(ldw);
  const size_t row_bytes = type == Q4 ? xl_q4_row_bytes(ldw) : (size_t)ldw * (type == Q8 ? 1 : 2);
  for (int r = 0; r < M; r++)
    for (int o = 0; o < N; o++) {
      const float *a = x + (size_t)r * ldx;
      const void *w = (const char *)W + (size_t)o * row_bytes;
      const float *s = type != BF16 ? S + (size_t)o * nb : NULL;
      float acc[8] = {0};
      int k = 0;
      for (; k + 8 <= K; k += 8) /* 8 divides the block: one scale per chunk */
        if (type == Q8) {
          const int8_t *qk = (const int8_t *)w + k;
          const float sc = s[k / XL_Q8_BLOCK];
          for (int l = 0; l < 8; l++) acc[l] += a[k + l] * ((float)qk[l] * sc);
        } else {
          for (int l = 0; l < 8; l++) acc[l] += a[k + l] * weight_at(type, w, s, k + l);
        }
      for (int l = 0; k < K; k++, l++) acc[l] += a[k] * weight_at(type, w, s, k);
      y[(size_t)r * ldy + o] =
          ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}

static void matmul_bf16(const float *x, int M, int K, int ldx, const uint16_t *W, int N, int ldw,
                        float *y, int ldy) {
  matmul(BF16, x, M, K, ldx, W, NULL, N, ldw, y, ldy);
}

static void matmul_q8(const float *x, int M, int K, int ldx, const int8_t *W, const float *S,
                      int N, int ldw, float *y, int ldy) {
  matmul(Q8, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

static void matmul_q4(const float *x, int M, int K, int ldx, const uint8_t *W, const float *S,
                      int N, int ldw, float *y, int ldy) {
  matmul(Q4, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

const xl_wkernels xl_wkernels_portable = {"portable", matmul_bf16, matmul_q8, matmul_q4};
