/*
 * wpanel.h: weights in panels, the layouts read by the dot-product kernels
 * (wkernels_dot_avx512.c: int8 and int4 with AVX-512 VNNI, bf16 with AVX-512 BF16) and by the
 * F32 panel kernel (wkernels_f32p_avx512.c), and the
 * arithmetic those kernels share with their portable mirrors here. Output rows side by side,
 * so that one 64-byte load feeds 16 outputs' lanes: no horizontal sums.
 *
 * int8 (below); bf16: panels of 16 rows, kp2 = cols rounded up to even; panel p holds
 *   [kp2 / 2][16][2] bf16: each pair of columns of each of the 16 rows (missing ones 0).
 *   Each activation is rounded to bf16 as VCVTNE2PS2BF16 does (nearest even; a denormal becomes
 *   a zero of its sign; NaN a quiet NaN), and each output lane gets, pair after pair,
 *   acc += x[2i+1] w[2i+1]; acc += x[2i] w[2i] (VDPBF16PS: products exact, sums rounded to
 *   nearest even, denormal results flushed). The portable mirror follows that description;
 *   a CPU's instruction may differ from it in the last bits (tests bound the difference).
 *
 * int8:
 * Layout of a matrix [rows, cols] (int8 per 32-block scales, as wkernels.h): panels of
 * XL_Q8P_ROWS = 16 rows; kp = cols rounded up to a whole block. Panel p holds rows 16p..16p+15:
 *   bytes  [kp / 4][16][4]: for each group of 4 columns, the 4 weights of each of the 16 rows,
 *          stored as unsigned (w + 128); a missing row or column holds weight 0 (byte 128);
 *   scales [kp / 32][16]: for each block, the 16 rows' scales as halves (f16.h; the quantiser
 *          gives only scales a half holds, so they are exact; 0 for a missing row): 2 bytes a
 *          block of 32 weights, as GGML's Q8_0 and Q4_0 keep theirs.
 * One 64-byte load then gives 16 rows x 4 weights: a vpdpbusd lane per output row; one 32-byte
 * load of scales, widened (VCVTPH2PS), the 16 rows' scales of a block.
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

/* 1 when int8 (and int4) weights are to be held in panels: the kernel family in use is AVX-512 and the CPU
 * has AVX512_VNNI (the dot-product kernel runs). Decided at load. */
int xl_q8p_wanted(void);

/* P[xl_q8p_bytes], S[xl_q8p_scale_count] (halves) from row-major q[rows, cols] with scales
 * s[rows, xl_q8_blocks(cols)] (values a half holds: xl_q8_block's). */
void xl_q8p_pack(const int8_t *q, const float *s, int rows, int cols, uint8_t *P, uint16_t *S);

/* out[0..cols) = row r (of the whole matrix) as F32: (float)w * scale. */
void xl_q8p_row(const uint8_t *P, const uint16_t *S, int cols, int r, float *out);

/* One row of activations quantised as the kernel does: xq[0..kp) (zeros past K), and per block
 * sx[b] (its scale) and corr[b] = 128 * sum of its xq. */
void xl_q8p_quantize_row(const float *x, int K, int8_t *xq, float *sx, int32_t *corr);

/* y[M, N] = x[M, K] W^T for W in panels, outputs the rows row0..row0+N of it (cols = K):
 * the portable mirror of the kernel (the reference of its test; the kernel of every family
 * other than AVX-512 with VNNI, should one meet panels). */
void xl_q8p_matmul_portable(const float *x, int M, int K, int ldx, const uint8_t *P,
                            const uint16_t *S, int row0, int N, float *y, int ldy);

/* int4 panels (wanted where int8's are: xl_q8p_wanted): panels of 16 rows as int8's, kp = cols
 * rounded up to a whole block; panel p holds [kp / 8][16][4] bytes: for each group of 8 columns
 * c..c+7, each of the 16 rows' 4 bytes, byte t = (w[c+t] + 8) | (w[c+4+t] + 8) << 4 (a missing
 * row or column: weight 0, nibble 8); scales as int8's panels. One 64-byte load, split into low
 * and high nibbles, gives two vpdpbusd operands (columns c..c+3 and c+4..c+7 of 16 rows).
 * Arithmetic: int8's (above), the nibble (w + 8) in place of the byte (w + 128) and the
 * correction 8 sum xq (corr / 16) in place of 128 sum xq; bit for bit the same in the kernel
 * and in xl_q4p_matmul_portable. */
static inline size_t xl_q4p_bytes(int rows, int cols) { return xl_q8p_bytes(rows, cols) / 2; }
/* P[xl_q4p_bytes], S[xl_q8p_scale_count] (halves) from int4 rows (wkernels.h layout) q[rows,
 * xl_q4_row_bytes(cols)] with scales s[rows, xl_q8_blocks(cols)] (xl_q4_block's). */
void xl_q4p_pack(const uint8_t *q, const float *s, int rows, int cols, uint8_t *P, uint16_t *S);
void xl_q4p_row(const uint8_t *P, const uint16_t *S, int cols, int r, float *out);
void xl_q4p_matmul_portable(const float *x, int M, int K, int ldx, const uint8_t *P,
                            const uint16_t *S, int row0, int N, float *y, int ldy);

/* bf16 panels: bytes, whether they are wanted (AVX-512 family on a CPU with AVX512_BF16),
 * packing from row-major bf16 w[rows, cols], a row read back, the activation rounding, the
 * portable mirror of the kernel. */
static inline int xl_bf16p_kp(int cols) { return (cols + 1) & ~1; }
static inline size_t xl_bf16p_count(int rows, int cols) {
  return (size_t)xl_q8p_panels(rows) * XL_Q8P_ROWS * xl_bf16p_kp(cols);
}
int xl_bf16p_wanted(void);
void xl_bf16p_pack(const uint16_t *w, int rows, int cols, uint16_t *P);
void xl_bf16p_row(const uint16_t *P, int cols, int r, float *out);
uint16_t xl_bf16p_activation(float f);
void xl_bf16p_matmul_portable(const float *x, int M, int K, int ldx, const uint16_t *P, int row0,
                              int N, float *y, int ldy);

/* F32 panels (wanted where the AVX-512 or AVX2 family runs: xl_f32p_wanted): panels of 16
 * rows; panel p holds [cols][16] floats: column c of each of its 16 rows side by side (a missing
 * row 0). One 64-byte load (two 32-byte ones on AVX2) gives one column of 16 outputs, multiplied
 * by one activation broadcast: a lane per output, no horizontal sums, and each output's sum runs
 * through its columns in order,
 *   acc = fma(x[c], w[c], acc) for c = 0, 1, ..., cols - 1 (from acc = +0),
 * in both kernels and in xl_f32p_matmul_portable alike (fmaf), bit for bit, whatever the batch
 * (and so the same bits on the AVX-512 and AVX2 paths). */
static inline size_t xl_f32p_count(int rows, int cols) {
  return (size_t)xl_q8p_panels(rows) * XL_Q8P_ROWS * (size_t)cols;
}
int xl_f32p_wanted(void);
void xl_f32p_pack(const float *w, int rows, int cols, float *P);
void xl_f32p_row(const float *P, int cols, int r, float *out);
void xl_f32p_matmul_portable(const float *x, int M, int K, int ldx, const float *P, int row0,
                             int N, float *y, int ldy);

#if defined(__x86_64__)
/* The AVX-512 dot-product kernels (wkernels_dot_avx512.c); only when xl_*p_wanted(). */
void xl_q8p_matmul_vnni(const float *x, int M, int K, int ldx, const uint8_t *P,
                        const uint16_t *S, int row0, int N, float *y, int ldy);
void xl_bf16p_matmul_avx512(const float *x, int M, int K, int ldx, const uint16_t *P, int row0,
                            int N, float *y, int ldy);
void xl_q4p_matmul_vnni(const float *x, int M, int K, int ldx, const uint8_t *P,
                        const uint16_t *S, int row0, int N, float *y, int ldy);
/* The F32 panel kernels (wkernels_f32p_avx512.c, wkernels_f32p_avx2.c); only where their
 * family is the one in use. */
void xl_f32p_matmul_avx512(const float *x, int M, int K, int ldx, const float *P, int row0, int N,
                           float *y, int ldy);
void xl_f32p_matmul_avx2(const float *x, int M, int K, int ldx, const float *P, int row0, int N,
                         float *y, int ldy);
#endif

#endif /* XL_WPANEL_H */
