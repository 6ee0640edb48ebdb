/*
 * wkernels_neon.c: the aarch64 NEON family of the narrow-weight kernels (wkernels.h). Tiles of
 * up to 4 rows x 4 outputs over 8-weight chunks: each chunk of the 4 weight rows is widened
 * (bf16: shift into the high half) or dequantised (int8: sign-extend, convert, times the
 * block's scale; int4: 8 bytes of the block, low or high nibbles, minus 8, times the scale)
 * once into two 4-lane vectors and multiplied into the rows' accumulators; each
 * (row, output) accumulator is summed by the same reduction, so a lone decode row gets the
 * same result as a row in a tile. aarch64 only (NEON is always there). Any thread.
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "wkernels.h"

#define T __attribute__((always_inline)) static inline
#define ROW_BLOCK 64 /* rows of x kept hot while the weight rows stream past */
#define L 8          /* weights per chunk (two 4-lane vectors) */

enum { BF16 = 0, Q8 = 1, Q4 = 2 }; /* the weight types (compile-time constants below) */

/* L weights of a row from column k as F32 (lo, hi); s: the row's block scales (int8, int4) */
T void load_w(int type, const void *w, const float *s, int k, float32x4_t *lo, float32x4_t *hi) {
  if (type == Q4) { /* k is a multiple of 8: 8 bytes of the block, one nibble of each */
    const int j = k % XL_Q8_BLOCK;
    uint8x8_t b = vld1_u8((const uint8_t *)w + (k / XL_Q8_BLOCK) * XL_Q4_BLOCK_BYTES + (j & 15));
    b = j >= 16 ? vshr_n_u8(b, 4) : vand_u8(b, vdup_n_u8(15));
    int16x8_t q = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(b)), vdupq_n_s16(8));
    float32x4_t sc = vdupq_n_f32(s[k / XL_Q8_BLOCK]);
    *lo = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), sc);
    *hi = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q)), sc);
    return;
  }
  if (type == BF16) {
    uint16x8_t h = vld1q_u16((const uint16_t *)w + k);
    *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    return;
  }
  int16x8_t q = vmovl_s8(vld1_s8((const int8_t *)w + k));
  float32x4_t sc = vdupq_n_f32(s[k / XL_Q8_BLOCK]);
  *lo = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), sc);
  *hi = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q)), sc);
}

/* y[r + i, o + j] for i < rc, j < oc (rc <= RB, oc <= 4; missing ones repeat the first) */
T void tile(int type, int RB, const float *x, int rc, int ldx, const void *W, const float *S,
            int nb, int ldw, int o, int oc, int K, float *y, int ldy) {
  const float *a[4];
  const char *w[4];
  const float *s[4];
  const size_t esz = type == BF16 ? 2 : 1; /* bytes per weight (int4: per two) */
  const size_t row_bytes = type == Q4 ? xl_q4_row_bytes(ldw) : (size_t)ldw * esz;
  for (int i = 0; i < RB; i++) a[i] = x + (size_t)(i < rc ? i : 0) * ldx;
  for (int j = 0; j < 4; j++) {
    size_t row = (size_t)o + (j < oc ? j : 0);
    w[j] = (const char *)W + row * row_bytes;
    s[j] = type != BF16 ? S + row * nb : NULL;
  }
  float32x4_t acc[4][4];
  for (int i = 0; i < RB; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = vdupq_n_f32(0.0f);
  const int kv = K & ~(L - 1);
  for (int k = 0; k < kv; k += L) {
    float32x4_t lo[4], hi[4];
    for (int j = 0; j < 4; j++) load_w(type, w[j], s[j], k, &lo[j], &hi[j]);
    for (int i = 0; i < RB; i++) {
      float32x4_t vl = vld1q_f32(a[i] + k), vh = vld1q_f32(a[i] + k + 4);
      for (int j = 0; j < 4; j++) acc[i][j] = vfmaq_f32(vfmaq_f32(acc[i][j], vl, lo[j]), vh, hi[j]);
    }
  }
  if (kv < K) { /* the tail, zero-padded to L weights */
    float32x4_t lo[4], hi[4];
    for (int j = 0; j < 4; j++) {
      char pad[2 * L] = {0};
      if (type == Q4) { /* rows are whole blocks: the chunk is there, the x lanes past K 0 */
        load_w(type, w[j], s[j], kv, &lo[j], &hi[j]);
        continue;
      }
      memcpy(pad, w[j] + kv * esz, (size_t)(K - kv) * esz);
      load_w(type, pad, type == Q8 ? s[j] + kv / XL_Q8_BLOCK : NULL, 0, &lo[j], &hi[j]);
    }
    for (int i = 0; i < RB; i++) {
      float xp[L] = {0};
      memcpy(xp, a[i] + kv, (size_t)(K - kv) * sizeof *xp);
      float32x4_t vl = vld1q_f32(xp), vh = vld1q_f32(xp + 4);
      for (int j = 0; j < 4; j++) acc[i][j] = vfmaq_f32(vfmaq_f32(acc[i][j], vl, lo[j]), vh, hi[j]);
    }
  }
  for (int i = 0; i < rc; i++)
    for (int j = 0; j < oc; j++) y[(size_t)i * ldy + o + j] = vaddvq_f32(acc[i][j]);
}

T void matmul(int type, const float *x, int M, int K, int ldx, const void *W, const float *S,
                   int N, int ldw, float *y, int ldy) {
  const int nb = xl_q8_blocks(ldw);
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      for (int r = r0; r < r1; r += 4) {
        int rc = r1 - r < 4 ? r1 - r : 4;
        const float *xr = x + (size_t)r * ldx;
        float *yr = y + (size_t)r * ldy;
        if (rc == 1) tile(type, 1, xr, 1, ldx, W, S, nb, ldw, o, oc, K, yr, ldy);
        else tile(type, 4, xr, rc, ldx, W, S, nb, ldw, o, oc, K, yr, ldy);
      }
    }
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

const xl_wkernels xl_wkernels_neon = {"neon", matmul_bf16, matmul_q8, matmul_q4};
#undef T
#endif /* __aarch64__ */
