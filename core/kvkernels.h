/*
 * kvkernels.h: the table of the decode step's loops over a session memory stored narrower than
 * F32 (bf16, or int8 with a scale per position and head), one table per CPU family
 * (kvkernels_*.c), picked to match the family of kernels.h in use (xl_kv_kern()). They are the
 * F32 table's dot_rows and mix_rows with the memory widened as it is read. Every entry is a pure
 * function of its arguments: any thread.
 *
 * Contract (as kernels.h): each output element is computed by the same arithmetic whatever the
 * batch (batch invariance); sums run over k (dot) or j (mix) in order from the first.
 * Families differ from the portable reference in the last bits only (fused multiply-adds).
 */
#ifndef XL_KVKERNELS_H
#define XL_KVKERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "bf16.h"

typedef struct xl_kv_kernels {
  const char *name; /* the family: "avx512", "avx2", "neon", "portable" */
  /* s[j] = sum_k q[k] * bf16(rows[k * ld + j]), j < n, k = 0..dh-1 in order */
  void (*dot_rows_bf16)(const float *q, int dh, const uint16_t *rows, size_t ld, int n,
                        float *s);
  /* s[j] = scale[j] * sum_k q[k] * rows[k * ld + j] */
  void (*dot_rows_i8)(const float *q, int dh, const int8_t *rows, size_t ld, const float *scale,
                      int n, float *s);
  /* out[h*dh + i] += sum_j p[h*p_stride + j] * bf16(rows[j*ld + h*dh + i]), j = 0..n-1 in order */
  void (*mix_rows_bf16)(float *out, const float *p, size_t p_stride, const uint16_t *rows,
                        size_t ld, int n, int H, int dh);
  /* out[h*dh + i] += sum_j (p[h*p_stride + j] * scale[j*s_stride + h]) * rows[j*ld + h*dh + i] */
  void (*mix_rows_i8)(float *out, const float *p, size_t p_stride, const int8_t *rows, size_t ld,
                      const float *scale, size_t s_stride, int n, int H, int dh);
  /* The same for 4 queries at once, each row widened once for the four: queries q + i * ldq,
   * sums into s + i * lds (dot), outputs out + i * ldo with probabilities p + i * ldp (mix),
   * i < 4; each number exactly as the single-query entry computes it. NULL in a family without
   * them (the caller then runs the single-query entry per query). */
  void (*dot_rows4_bf16)(const float *q, size_t ldq, int dh, const uint16_t *rows, size_t ld,
                         int n, float *s, size_t lds);
  void (*dot_rows4_i8)(const float *q, size_t ldq, int dh, const int8_t *rows, size_t ld,
                       const float *scale, int n, float *s, size_t lds);
  void (*mix_rows4_bf16)(float *out, size_t ldo, const float *p, size_t ldp, size_t p_stride,
                         const uint16_t *rows, size_t ld, int n, int H, int dh);
  void (*mix_rows4_i8)(float *out, size_t ldo, const float *p, size_t ldp, size_t p_stride,
                       const int8_t *rows, size_t ld, const float *scale, size_t s_stride, int n,
                       int H, int dh);
} xl_kv_kernels;

extern const xl_kv_kernels xl_kv_kernels_portable;
#if defined(__x86_64__)
extern const xl_kv_kernels xl_kv_kernels_avx2;
extern const xl_kv_kernels xl_kv_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const xl_kv_kernels xl_kv_kernels_neon;
#endif

/* The table of the family xl_kern() names (kvkernels_portable.c). Any thread. */
const xl_kv_kernels *xl_kv_kern(void);

#endif /* XL_KVKERNELS_H */
