/*
 * wpanel.h: int8 weights in panels, the layout read by the integer dot-product kernel
 * (wkernels_vnni.c, AVX-512 VNNI), and the arithmetic that kernel shares with its portable
 * mirror here.
 *
 * Layout of a matrix [rows, cols] (int8 per 32-block scales, as wkernels.h): panels of
 * XL_Q8P_ROWS = 16 rows; kp = cols rounded up to a whole block. Panel p holds rows 16p..16p+15:
 *   bytes  [kp / 4][16][4]: for each group of 4 columns, the 4 weights of each of the 16 rows,
 *          stored as unsigned (w + 128); a missing row or column holds weight 0 (byte 128);
 *   scales [kp / 32][16]: for each block, the 16 rows' scales (0 for a missing row).
 * One 64-byte load then gives 16 rows x 4 weights: a vpdpbusd lane per output row.
 *
 * Arithmetic (bit for bit the same in the kernel and in xl_q8p_matmul_portable): each row of
 * the activations is quantised per block of 32 (xl_q8p_quantize_row: amax = max |x|,
 * xq = round-to-even(x * (127 / amax)) in [-127, 127], scale sx = amax / 127, a non-finite
 * product giving -127); for each output and block in order,
 *   acc = fma((float)(sum_k (w_k + 128) xq_k - 128 sum_k xq_k), sw * sx, acc)
 * (the integer sum is exact), and the output is acc. A row's outputs do not depend on the other
 * rows of the batch. Pure functions: any thread.
 */
#ifndef XL_WPANEL_H
#define XL_WPANEL_H

#include <stddef.h>
#include <stdint.h>

#include "wkernels.h"

#define XL_Q8P_ROWS 16

static inline int xl_q8p_kp(int cols) { return xl_q8_blocks(cols) * XL_Q8_BLOCK; }
static inline int xl_q8p_panels(int rows) { return (rows + XL_Q8P_ROWS - 1) / XL_Q8P_ROWS; }
/* bytes of the panel layout's weights and of its scales */
static inline size_t xl_q8p_bytes(int rows, int cols) {
  return (size_t)xl_q8p_panels(rows) * XL_Q8P_ROWS * xl_q8p_kp(cols);
}
static inline size_t xl_q8p_scale_count(int rows, int cols) {
  return (size_t)xl_q8p_panels(rows) * XL_Q8P_ROWS * xl_q8_blocks(cols);
}

/* 1 when int8 weights are to be held in panels: the kernel family in use is AVX-512 and the CPU
 * has AVX512_VNNI (the dot-product kernel runs). Decided at load. */
int xl_q8p_wanted(void);

/* P[xl_q8p_bytes], S[xl_q8p_scale_count] from row-major q[rows, cols] with scales
 * s[rows, xl_q8_blocks(cols)]. */
void xl_q8p_pack(const int8_t *q, const float *s, int rows, int cols, uint8_t *P, float *S);

/* out[0..cols) = row r (of the whole matrix) as F32: (float)w * scale. */
void xl_q8p_row(const uint8_t *P, const float *S, int cols, int r, float *out);

/* One row of activations quantised as the kernel does: xq[0..kp) (zeros past K), and per block
 * sx[b] (its scale) and corr[b] = 128 * sum of its xq. */
void xl_q8p_quantize_row(const float *x, int K, int8_t *xq, float *sx, int32_t *corr);

/* y[M, N] = x[M, K] W^T for W in panels, outputs the rows row0..row0+N of it (cols = K):
 * the portable mirror of the kernel (the reference of its test; the kernel of every family
 * other than AVX-512 with VNNI, should one meet panels). */
void xl_q8p_matmul_portable(const float *x, int M, int K, int ldx, const uint8_t *P,
                            const float *S, int row0, int N, float *y, int ldy);

#if defined(__x86_64__)
/* The AVX-512 VNNI kernel (wkernels_vnni.c); only when xl_q8p_wanted(). */
void xl_q8p_matmul_vnni(const float *x, int M, int K, int ldx, const uint8_t *P, const float *S,
                        int row0, int N, float *y, int ldy);
#endif

#endif /* XL_WPANEL_H */
