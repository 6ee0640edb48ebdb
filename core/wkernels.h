/*
 * wkernels.h: weight matrices stored narrower than F32 (bf16; int8 with one scale per block of
 * 32 weights along a row; int4 with one scale per block of 32, two weights a byte; a scale is a
 * value a half holds, kept as F32 in rows and as a half in panels) and the table of kernels
 * that multiply F32 activations by
 * them, one table per CPU family (wkernels_*.c), following the family cpu.c chose for the F32
 * kernels. Activations and sums stay F32: a bf16 weight is widened exactly, an int8 weight
 * becomes (float)q * scale (one rounding); then the same fused multiply-adds as the F32 GEMM.
 * Every entry is a pure function of its arguments: any thread.
 *
 * Contract shared by all families (as kernels.h): batch invariance (a row's outputs are
 * computed by the same arithmetic whatever M is and wherever the row sits), and IEEE
 * arithmetic only on the activations (no float-to-int conversion of activations).
 */
#ifndef XL_WKERNELS_H
#define XL_WKERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "bf16.h"

#include "xl.h"

#define XL_Q8_BLOCK 32 /* int8 (and int4) weights per scale, along a row */

/* int4 layout: each row is padded to whole blocks of 32 and each block is 16 bytes, byte j
 * holding weight j of the block in its low nibble and weight j + 16 in its high nibble, each
 * nibble the weight plus 8 (weights -7..7 symmetric, so nibble 8 is zero; padding is 0x88).
 * Weight k of a row: byte (k / 32) * 16 + k % 16, nibble k % 32 >= 16. A row's scales are F32
 * (values a half holds), one per block, as int8's: value = (float)(nibble - 8) * scale. */
#define XL_Q4_BLOCK_BYTES 16
static inline size_t xl_q4_row_bytes(int cols) {
  return (size_t)((cols + XL_Q8_BLOCK - 1) / XL_Q8_BLOCK) * XL_Q4_BLOCK_BYTES;
}
/* weight k of an int4 row as its signed value -7..7 */
static inline int xl_q4_at(const uint8_t *row, int k) {
  const uint8_t b = row[(k / XL_Q8_BLOCK) * XL_Q4_BLOCK_BYTES + k % 16];
  return (k % XL_Q8_BLOCK >= 16 ? b >> 4 : b & 15) - 8;
}

/* One weight matrix [rows, cols] (a torch Linear's [out, in]) in the model's weight type. */
typedef struct xl_wmat {
  xl_weights type;       /* XL_WEIGHTS_F32, _BF16, _INT8 or _INT4 */
  const void *data;      /* [rows, cols]: float, uint16_t (bf16 bits) or int8_t; int4:
                            [rows, xl_q4_row_bytes(cols)] bytes */
  const float *scales;   /* int8, int4 in rows: [rows, xl_q8_blocks(cols)]; else NULL */
  int cols;              /* elements per row (the row stride too) */
  int panels;            /* 1 when data (and panel_scales) are in panels (wpanel.h), whole
                            matrix, and this view starts at its row `row0` */
  int row0;
  const uint16_t *panel_scales; /* int8, int4 in panels: the halves (wpanel.h); else NULL */
} xl_wmat;

static inline int xl_q8_blocks(int cols) { return (cols + XL_Q8_BLOCK - 1) / XL_Q8_BLOCK; }

typedef struct xl_wkernels {
  const char *name;
  /* y[M, N] = x[M, K] W[N, K]^T, W bf16 with row stride ldw; M, N > 0 */
  void (*matmul_bf16)(const float *x, int M, int K, int ldx, const uint16_t *W, int N, int ldw,
                      float *y, int ldy);
  /* the same with W int8, row o's block b scaled by S[o * xl_q8_blocks(ldw) + b] */
  void (*matmul_q8)(const float *x, int M, int K, int ldx, const int8_t *W, const float *S, int N,
                    int ldw, float *y, int ldy);
  /* the same with W int4 (the layout above; row o at W + o * xl_q4_row_bytes(ldw)), K <= ldw;
   * the weights of a block past K are read but multiplied by zeros */
  void (*matmul_q4)(const float *x, int M, int K, int ldx, const uint8_t *W, const float *S,
                    int N, int ldw, float *y, int ldy);
} xl_wkernels;

extern const xl_wkernels xl_wkernels_portable;
#if defined(__x86_64__)
extern const xl_wkernels xl_wkernels_avx2;
extern const xl_wkernels xl_wkernels_avx512;
#endif
#if defined(__aarch64__)
extern const xl_wkernels xl_wkernels_neon;
#endif

/* The table of the family in use (the one xl_kern() returns). */
const xl_wkernels *xl_wkern(void);

/* y[M, N] = x[M, K] W[N, K]^T for any weight type (F32 goes to the F32 kernels, unchanged). */
void xl_matmul_w(const float *x, int M, int K, int ldx, const xl_wmat *W, int N, float *y,
                 int ldy);
/* y[rows, out] = x[rows, in] W^T (+ b), W [out, in]. */
void xl_linear_w(const float *x, int rows, int in, const xl_wmat *W, const float *b, int out,
                 float *y, int ldy);
struct xl_pool;
/* xl_linear_w with x's row stride ldx, the output rows split over the pool's threads
 * (wsplit.c): bit for bit what one thread computes. Called by the pool's owner. */
void xl_par_linear_w(struct xl_pool *pool, const float *x, int M, int K, int ldx,
                     const xl_wmat *W, const float *b, int N, float *y, int ldy);
/* out[0..cols) = row r of W as F32. */
void xl_wmat_row(const xl_wmat *W, int r, float *out);
/* The view of W from row r on. */
xl_wmat xl_wmat_from_row(const xl_wmat *W, int r);

/* int8 of one block of n <= 32 finite values: q[i] = round(x[i] / s) in [-127, 127] with
 * s = max|x| / 127 rounded up to a half (f16.h: a half holds every scale exactly, so the panels
 * keep them as halves; 0 for an all-zero block, Inf when max|x| > 127 x 65504); returns s. */
float xl_q8_block(const float *x, int n, int8_t *q);
/* int4 of one block of n <= 32 finite values into q[16] (the layout above; missing weights 0):
 * weight i = round(x[i] / s) in [-7, 7] with s = max|x| / 7 rounded up to a half (as int8's;
 * Inf when max|x| > 7 x 65504); returns s. */
float xl_q4_block(const float *x, int n, uint8_t *q);

#endif /* XL_WKERNELS_H */
