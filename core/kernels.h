/*
 * kernels.h: the table of the forward pass's inner loops, one table per CPU family (AVX-512,
 * AVX2+FMA, aarch64 NEON, portable C), each in its own file (kernels_*.c). cpu.c detects the
 * CPU and picks the table once per process (or as xl_cpu_select asks); the rest of core/ calls
 * the loops through xl_kern(). Every entry is a pure function of its arguments: any thread.
 *
 * Contract shared by all families:
 *   - Batch invariance: matmul_nt computes each output element by the same arithmetic whatever
 *     the number of rows M and wherever the row sits in the batch.
 *   - Defined for every float input: NaN, +-Inf and denormals go through IEEE arithmetic only
 *     (no float-to-int conversion of a value that is not finite).
 * Different families round differently (lane counts, reduction trees); each stays within the
 * reference's tolerance.
 */
#ifndef XL_KERNELS_H
#define XL_KERNELS_H

#include <stddef.h>

typedef struct xl_kernels {
  const char *name; /* "avx512", "avx2", "neon", "portable" */
  /* y[M, N] = x[M, K] W[N, K]^T, row strides ldx, ldw, ldy; M, N > 0 */
  void (*matmul_nt)(const float *x, int M, int K, int ldx, const float *W, int N, int ldw,
                    float *y, int ldy);
  /* max of x[0..n) (n >= 1; -Inf for none above it) */
  float (*max)(const float *x, int n);
  /* x[i] = exp(x[i] - shift), returns the sum */
  float (*exp_sum)(float *x, int n, float shift);
  /* sum_i exp(x[i] - shift), x unchanged (log-softmax) */
  float (*sum_exp)(const float *x, int n, float shift);
  /* s[0..n) = sum_k q[k] rows[k * ld + 0..n), k = 0..dh-1 in order, from 0 */
  void (*dot_rows)(const float *q, int dh, const float *rows, size_t ld, int n, float *s);
  /* out[h*dh + i] += sum_j p[h*p_stride + j] rows[j*ld + h*dh + i], j = 0..n-1 in order */
  void (*mix_rows)(float *out, const float *p, size_t p_stride, const float *rows, size_t ld,
                   int n, int H, int dh);
  /* dot_rows of 4 queries at once (each row read once for all 4): s[i * lds + j] =
   * sum_k q[i * ldq + k] rows[k * ld + j], i < 4, each sum exactly as dot_rows computes it.
   * NULL in a family without it (xl_vec_dot_rows4 then runs dot_rows per query). */
  void (*dot_rows4)(const float *q, size_t ldq, int dh, const float *rows, size_t ld, int n,
                    float *s, size_t lds);
  /* mix_rows of 4 queries at once: out + i * ldo += the mix of probabilities p + i * ldp, i < 4,
   * each sum exactly as mix_rows computes it (NULL: mix_rows per query) */
  void (*mix_rows4)(float *out, size_t ldo, const float *p, size_t ldp, size_t p_stride,
                    const float *rows, size_t ld, int n, int H, int dh);
  /* y[rows, dim] = LayerNorm(x) * g + b (biased variance, as torch) */
  void (*layer_norm)(const float *x, int rows, int dim, const float *g, const float *b, float eps,
                     float *y);
  /* x[i] = max(x[i], 0) (NaN stays NaN) */
  void (*relu)(float *x, size_t n);
  /* y[r * ldy + j] += b[j] for r < rows, j < n */
  void (*add_bias)(float *y, int rows, int n, int ldy, const float *b);
  /* s[k] = (s[k] + (p[-k] + b[-k])) * scale for k < n: p and b read backwards (a row of
   * attention scores' relative position term: a key's distance falls as its index rises).
   * Every family gives the bits of this expression (no fused operation in it). */
  void (*add_reversed)(float *s, const float *p, const float *b, int n, float scale);
} xl_kernels;

/* Tables of the families this build has (NULL where the architecture has no such family). */
extern const xl_kernels xl_kernels_portable;
#if defined(__x86_64__)
extern const xl_kernels xl_kernels_avx2;
extern const xl_kernels xl_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const xl_kernels xl_kernels_neon;
#endif

/* cpu.c: the table in use (the best one the CPU runs until xl_cpu_select chose another). */
const xl_kernels *xl_kern(void);
/* cpu.c: 1 when the CPU has AVX-512 F, BW and VNNI (the int8 dot-product kernel's needs). */
int xl_cpu_has_avx512_vnni(void);
/* cpu.c: 1 when the CPU has AVX-512 F, BW and BF16 (the bf16 dot-product kernel's needs). */
int xl_cpu_has_avx512_bf16(void);

/* Portable exp for softmax arguments, shared by the families' scalar tails:
 * 0 below -87.3, +Inf above 88.7, NaN for NaN; ~1 ulp elsewhere (Cephes polynomial). */
float xl_exp_portable(float x);

#endif /* XL_KERNELS_H */
