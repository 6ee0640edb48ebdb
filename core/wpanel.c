/*
 * wpanel.c: weights in panels (wpanel.h): packing from rows, reading a row back, the
 * activations' quantisation (int8, int4) or rounding (bf16) and the portable mirrors of the
 * dot-product kernels and of the F32 panel kernel. Pure functions: any thread.
 */
#include <math.h>
#include <string.h>

#include "f16.h"
#include "internal.h"
#include "wpanel.h"

int xl_q8p_wanted(void) {
#if defined(__x86_64__)
  return xl_kern() == &xl_kernels_avx512 && xl_cpu_has_avx512_vnni();
#else
  return 0;
#endif
}

/* the byte of (row r, column c) and the scale of (row r, block b) in the panel layout */
static size_t byte_at(int kp, int r, int c) {
  return ((size_t)(r / XL_Q8P_ROWS) * (kp / 4) + (size_t)(c / 4)) * (4 * XL_Q8P_ROWS) +
         (size_t)(r % XL_Q8P_ROWS) * 4 + (size_t)(c % 4);
}
static size_t scale_at(int nb, int r, int b) {
  return ((size_t)(r / XL_Q8P_ROWS) * nb + (size_t)b) * XL_Q8P_ROWS + (size_t)(r % XL_Q8P_ROWS);
}
/* the scale of (row r, block b), widened from its half */
static float scale_of(const uint16_t *S, int nb, int r, int b) {
  return xl_f16_to_f32(S[scale_at(nb, r, b)]);
}

void xl_q8p_pack(const int8_t *q, const float *s, int rows, int cols, uint8_t *P, uint16_t *S) {
  const int kp = xl_q8p_kp(cols), nb = xl_q8_blocks(cols);
  memset(P, 128, xl_q8p_bytes(rows, cols));
  memset(S, 0, xl_q8p_scale_count(rows, cols) * sizeof *S);
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++)
      P[byte_at(kp, r, c)] = (uint8_t)((int)q[(size_t)r * cols + c] + 128);
    for (int b = 0; b < nb; b++) S[scale_at(nb, r, b)] = xl_f32_to_f16(s[(size_t)r * nb + b]);
  }
}

void xl_q8p_row(const uint8_t *P, const uint16_t *S, int cols, int r, float *out) {
  const int kp = xl_q8p_kp(cols), nb = xl_q8_blocks(cols);
  for (int c = 0; c < cols; c++)
    out[c] = (float)((int)P[byte_at(kp, r, c)] - 128) * scale_of(S, nb, r, c / XL_Q8_BLOCK);
}

void xl_q8p_quantize_row(const float *x, int K, int8_t *xq, float *sx, int32_t *corr) {
  const int nb = xl_q8_blocks(K);
  for (int b = 0; b < nb; b++) {
    const int c0 = b * XL_Q8_BLOCK, n = K - c0 < XL_Q8_BLOCK ? K - c0 : XL_Q8_BLOCK;
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
      float a = fabsf(x[c0 + i]);
      amax = a > amax ? a : amax; /* NaN skipped, as the kernel's max */
    }
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < XL_Q8_BLOCK; i++) {
      float v = i < n ? nearbyintf(x[c0 + i] * inv) : 0.0f;
      if (!(v >= -127.0f && v <= 127.0f)) v = -127.0f; /* the kernel's conversion of NaN, Inf */
      xq[c0 + i] = (int8_t)v;
      sum += (int32_t)v;
    }
    sx[b] = amax / 127.0f;
    corr[b] = 128 * sum;
  }
}

/* y[M, N] = x[M, K] . W[row0 .. row0+N, K]^T from int8 panels (bits 8: bytes stored +128) or
 * int4 panels (bits 4: nibbles stored +8), as the dot-product kernels compute it: x quantised per
 * block of 32, exact integer block sums less the stored offset's share, scaled into F32. */
static void panel_matmul(int bits, const float *x, int M, int K, int ldx, const uint8_t *P,
                         const uint16_t *S, int row0, int N, float *y, int ldy);

void xl_q8p_matmul_portable(const float *x, int M, int K, int ldx, const uint8_t *P,
                            const uint16_t *S, int row0, int N, float *y, int ldy) {
  panel_matmul(8, x, M, K, ldx, P, S, row0, N, y, ldy);
}

/* ---- int4 ---- */

/* the byte holding (row r, column c) in the int4 panel layout, and whether in the high nibble */
static size_t q4_byte_at(int kp, int r, int c) {
  return ((size_t)(r / XL_Q8P_ROWS) * (kp / 8) + (size_t)(c / 8)) * (4 * XL_Q8P_ROWS) +
         (size_t)(r % XL_Q8P_ROWS) * 4 + (size_t)(c % 4);
}

void xl_q4p_pack(const uint8_t *q, const float *s, int rows, int cols, uint8_t *P, uint16_t *S) {
  const int kp = xl_q8p_kp(cols), nb = xl_q8_blocks(cols);
  const size_t rb = xl_q4_row_bytes(cols);
  memset(P, 0x88, xl_q4p_bytes(rows, cols));
  memset(S, 0, xl_q8p_scale_count(rows, cols) * sizeof *S);
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      uint8_t *b = &P[q4_byte_at(kp, r, c)];
      const int nib = xl_q4_at(q + (size_t)r * rb, c) + 8;
      *b = (uint8_t)(c % 8 >= 4 ? (*b & 0x0F) | (nib << 4) : (*b & 0xF0) | nib);
    }
    for (int b = 0; b < nb; b++) S[scale_at(nb, r, b)] = xl_f32_to_f16(s[(size_t)r * nb + b]);
  }
}

/* weight (row r, column c) of int4 panels, as its nibble (w + 8) */
static int q4_nibble(const uint8_t *P, int kp, int r, int c) {
  const uint8_t b = P[q4_byte_at(kp, r, c)];
  return c % 8 >= 4 ? b >> 4 : b & 15;
}

void xl_q4p_row(const uint8_t *P, const uint16_t *S, int cols, int r, float *out) {
  const int kp = xl_q8p_kp(cols), nb = xl_q8_blocks(cols);
  for (int c = 0; c < cols; c++)
    out[c] = (float)(q4_nibble(P, kp, r, c) - 8) * scale_of(S, nb, r, c / XL_Q8_BLOCK);
}

void xl_q4p_matmul_portable(const float *x, int M, int K, int ldx, const uint8_t *P,
                            const uint16_t *S, int row0, int N, float *y, int ldy) {
  panel_matmul(4, x, M, K, ldx, P, S, row0, N, y, ldy);
}

static void panel_matmul(int bits, const float *x, int M, int K, int ldx, const uint8_t *P,
                         const uint16_t *S, int row0, int N, float *y, int ldy) {
  enum { CHUNK = 128 }; /* blocks of a row quantised at a time */
  const int kp = xl_q8p_kp(K), nb = xl_q8_blocks(K);
  const int corr_div = bits == 4 ? 16 : 1; /* the offset 128 of corr is 8 x 16 for nibbles */
  int8_t xq[XL_Q8_BLOCK * CHUNK];
  float sx[CHUNK];
  int32_t corr[CHUNK];
  for (int r = 0; r < M; r++) {
    const float *xr = x + (size_t)r * ldx;
    float *yr = y + (size_t)r * ldy; /* [N]: the running sums, block after block */
    for (int o = 0; o < N; o++) yr[o] = 0.0f;
    for (int b0 = 0; b0 < nb; b0 += CHUNK) {
      const int nbc = nb - b0 < CHUNK ? nb - b0 : CHUNK, c0 = b0 * XL_Q8_BLOCK;
      xl_q8p_quantize_row(xr + c0, K - c0 < nbc * XL_Q8_BLOCK ? K - c0 : nbc * XL_Q8_BLOCK, xq,
                          sx, corr);
      for (int o = 0; o < N; o++) {
        const int w = row0 + o;
        float acc = yr[o];
        for (int b = 0; b < nbc; b++) {
          int32_t dot = 0;
          for (int i = 0; i < XL_Q8_BLOCK; i++) {
            const int c = c0 + b * XL_Q8_BLOCK + i;
            const int q = bits == 4 ? q4_nibble(P, kp, w, c) : P[byte_at(kp, w, c)];
            dot += (int32_t)q * xq[b * XL_Q8_BLOCK + i];
          }
          acc = fmaf((float)(dot - corr[b] / corr_div), scale_of(S, nb, w, b0 + b) * sx[b], acc);
        }
        yr[o] = acc;
      }
    }
  }
}

/* ---- bf16 ---- */

int xl_bf16p_wanted(void) {
#if defined(__x86_64__)
  return xl_kern() == &xl_kernels_avx512 && xl_cpu_has_avx512_bf16();
#else
  return 0;
#endif
}

static size_t bf16_at(int kp2, int r, int c) {
  return ((size_t)(r / XL_Q8P_ROWS) * (kp2 / 2) + (size_t)(c / 2)) * (2 * XL_Q8P_ROWS) +
         (size_t)(r % XL_Q8P_ROWS) * 2 + (size_t)(c % 2);
}

void xl_bf16p_pack(const uint16_t *w, int rows, int cols, uint16_t *P) {
  const int kp2 = xl_bf16p_kp(cols);
  memset(P, 0, xl_bf16p_count(rows, cols) * sizeof *P);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) P[bf16_at(kp2, r, c)] = w[(size_t)r * cols + c];
}

void xl_bf16p_row(const uint16_t *P, int cols, int r, float *out) {
  const int kp2 = xl_bf16p_kp(cols);
  for (int c = 0; c < cols; c++) out[c] = xl_bf16_to_f32(P[bf16_at(kp2, r, c)]);
}

uint16_t xl_bf16p_activation(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  if ((u & 0x7F800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);         /* DAZ */
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float flush(float v) { return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v; }

void xl_bf16p_matmul_portable(const float *x, int M, int K, int ldx, const uint16_t *P, int row0,
                              int N, float *y, int ldy) {
  const int kp2 = xl_bf16p_kp(K);
  for (int r = 0; r < M; r++) {
    const float *xr = x + (size_t)r * ldx;
    for (int o = 0; o < N; o++) {
      const int w = row0 + o;
      float acc = 0.0f;
      for (int c = 0; c < kp2; c += 2) {
        const float x0 = xl_bf16_to_f32(xl_bf16p_activation(xr[c]));
        const float x1 = c + 1 < K ? xl_bf16_to_f32(xl_bf16p_activation(xr[c + 1])) : 0.0f;
        acc = flush(acc + flush(x1 * flush(xl_bf16_to_f32(P[bf16_at(kp2, w, c + 1)]))));
        acc = flush(acc + flush(x0 * flush(xl_bf16_to_f32(P[bf16_at(kp2, w, c)]))));
      }
      y[(size_t)r * ldy + o] = acc;
    }
  }
}

/* ---- f32 ---- */

int xl_f32p_wanted(void) {
#if defined(__x86_64__)
  return xl_kern() == &xl_kernels_avx512 || xl_kern() == &xl_kernels_avx2;
#else
  return 0;
#endif
}

static size_t f32_at(int cols, int r, int c) {
  return ((size_t)(r / XL_Q8P_ROWS) * cols + (size_t)c) * XL_Q8P_ROWS + (size_t)(r % XL_Q8P_ROWS);
}

void xl_f32p_pack(const float *w, int rows, int cols, float *P) {
  /* panel by panel, column by column: the panel is written in order while its 16 rows are read
   * as 16 streams (scattering each row across its panel instead took twice as long at load) */
  for (int r0 = 0; r0 < rows; r0 += XL_Q8P_ROWS) {
    float *out = P + f32_at(cols, r0, 0);
    const int n = rows - r0 < XL_Q8P_ROWS ? rows - r0 : XL_Q8P_ROWS;
    for (int c = 0; c < cols; c++, out += XL_Q8P_ROWS) {
      for (int i = 0; i < n; i++) out[i] = w[(size_t)(r0 + i) * cols + c];
      for (int i = n; i < XL_Q8P_ROWS; i++) out[i] = 0.0f; /* missing rows */
    }
  }
}

void xl_f32p_row(const float *P, int cols, int r, float *out) {
  for (int c = 0; c < cols; c++) out[c] = P[f32_at(cols, r, c)];
}

void xl_f32p_matmul_portable(const float *x, int M, int K, int ldx, const float *P, int row0,
                             int N, float *y, int ldy) {
  for (int r = 0; r < M; r++) {
    const float *xr = x + (size_t)r * ldx;
    for (int o = 0; o < N; o++) {
      const float *w = P + f32_at(K, row0 + o, 0);
      float acc = 0.0f;
      for (int c = 0; c < K; c++) acc = fmaf(xr[c], w[(size_t)c * XL_Q8P_ROWS], acc);
      y[(size_t)r * ldy + o] = acc;
    }
  }
}
