/*
 * kvkernels_avx512.c: the AVX-512F family of the narrow-memory table (kvkernels.h): the decode
 * step's key products and value mixes over bf16 or int8 memory, widened to F32 in registers
 * (16 lanes) and accumulated with fused multiply-adds, the memory prefetched in software;
 * ragged tails in scalar fmaf. Compiled with target attributes, chosen at run time with the
 * kernel family (cpu.c); x86-64 only. Any thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "kvkernels.h"

#define T __attribute__((target("avx512f")))
/* Software prefetch (integer addresses: past the memory's end only a hint). Both loops read
 * the memory in passes over a few rows at a time (KEY_ROWS, VALUE_ROWS below) and fetch, as
 * they go, the same part of the rows the next pass (keys) or PF_VALS rows ahead (values)
 * will read (the hardware prefetcher alone left the value mix at under half the bandwidth of
 * a sequential read when the memory streams from DRAM). */
#define PF_VALS 8 /* value rows ahead */
#define PREFETCH(p, bytes)                                                                    \
  _mm_prefetch((const char *)((uintptr_t)(const void *)(p) + (bytes)), _MM_HINT_T0)

T static inline __m512 widen_bf16(const uint16_t *p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
T static inline __m512 widen_i8(const int8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

/* Key products: s[j] is kept in memory (L1: one head's positions) and updated by a pass over
 * KEY_ROWS key rows at a time, so the memory is read as KEY_ROWS sequential streams (the rows
 * of a head lie one after the other) instead of one stream per head dimension. Each s[j] still
 * gets its fused multiply-adds in the order k = 0, 1, .., dh-1 from 0, as the portable
 * reference. */
#define KEY_ROWS 8
#define DOT_ROWS(WIDEN, SCALAR)                                                               \
  do {                                                                                        \
    const int nv = n & ~15;                                                                   \
    for (int j = 0; j < n; j++) s[j] = 0.0f;                                                  \
    int k = 0;                                                                                \
    for (; k + KEY_ROWS <= dh; k += KEY_ROWS) {                                               \
      __m512 qk[KEY_ROWS];                                                                    \
      __typeof__(rows) r[KEY_ROWS];                                                           \
      for (int i = 0; i < KEY_ROWS; i++) {                                                    \
        qk[i] = _mm512_set1_ps(q[k + i]);                                                     \
        r[i] = rows + (size_t)(k + i) * ld;                                                   \
      }                                                                                       \
      for (int j = 0; j < nv; j += 16) {                                                      \
        if (!((j * sizeof *rows) & 63)) /* the next KEY_ROWS rows, once per 64-byte line */    \
          for (int i = 0; i < KEY_ROWS; i++) PREFETCH(r[i] + j, KEY_ROWS * ld * sizeof *rows);  \
        __m512 a = _mm512_loadu_ps(s + j);                                                    \
        for (int i = 0; i < KEY_ROWS; i++) a = _mm512_fmadd_ps(qk[i], WIDEN(r[i] + j), a);    \
        _mm512_storeu_ps(s + j, a);                                                           \
      }                                                                                       \
      for (int j = nv; j < n; j++) {                                                          \
        float a = s[j];                                                                       \
        for (int i = 0; i < KEY_ROWS; i++) a = fmaf(q[k + i], SCALAR(r[i][j]), a);            \
        s[j] = a;                                                                             \
      }                                                                                       \
    }                                                                                         \
    for (; k < dh; k++) {                                                                     \
      __m512 qk = _mm512_set1_ps(q[k]);                                                       \
      __typeof__(rows) r = rows + (size_t)k * ld;                                             \
      for (int j = 0; j < nv; j += 16)                                                        \
        _mm512_storeu_ps(s + j, _mm512_fmadd_ps(qk, WIDEN(r + j), _mm512_loadu_ps(s + j)));   \
      for (int j = nv; j < n; j++) s[j] = fmaf(q[k], SCALAR(r[j]), s[j]);                     \
    }                                                                                         \
  } while (0)

#define AS_FLOAT(x) ((float)(x))

T static void dot_rows_bf16(const float *q, int dh, const uint16_t *rows, size_t ld, int n,
                            float *s) {
  DOT_ROWS(widen_bf16, xl_bf16_to_f32);
}

T static void dot_rows_i8(const float *q, int dh, const int8_t *rows, size_t ld, const float *scale,
                          int n, float *s) {
  DOT_ROWS(widen_i8, AS_FLOAT);
  int j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), _mm512_loadu_ps(scale + j)));
  for (; j < n; j++) s[j] *= scale[j];
}

/* Value mixes. With dh a multiple of 16 and at most MIX_MAX_HEADS heads: VALUE_ROWS value
 * rows at a time (contiguous memory, read in order), each row's weight per head computed
 * first, then for every 16 outputs one load, VALUE_ROWS fused multiply-adds and one store.
 * Otherwise one head at a time, scalar fmaf when dh is not a multiple of 16. Either way each
 * output gets its fused multiply-adds in the order j = 0, 1, .., n-1. w(j, h): row j's
 * weight in head h. */
#define VALUE_ROWS 8
#define MIX_MAX_HEADS 64
#define MIX_ROWS(WIDEN, SCALAR, WEIGHT)                                                       \
  do {                                                                                        \
    if (dh % 16 == 0 && H <= MIX_MAX_HEADS) {                                                 \
      float w[VALUE_ROWS][MIX_MAX_HEADS];                                                     \
      for (int j0 = 0; j0 < n; j0 += VALUE_ROWS) {                                            \
        const int nr = n - j0 < VALUE_ROWS ? n - j0 : VALUE_ROWS;                             \
        for (int i = 0; i < nr; i++)                                                          \
          for (int h = 0; h < H; h++) {                                                       \
            const int j = j0 + i;                                                             \
            w[i][h] = WEIGHT;                                                                 \
          }                                                                                   \
        const __typeof__(rows) r0 = rows + (size_t)j0 * ld;                                   \
        for (int h = 0; h < H; h++) {                                                         \
          __m512 wh[VALUE_ROWS];                                                              \
          for (int i = 0; i < nr; i++) wh[i] = _mm512_set1_ps(w[i][h]);                       \
          for (int i = 0; i < VALUE_ROWS; i++) /* this head's part of the rows PF_VALS ahead */ \
            for (size_t b = 0; b < dh * sizeof *rows; b += 64)                                \
              PREFETCH(r0 + (size_t)(PF_VALS + i) * ld + (size_t)h * dh, b);                  \
          for (int e = h * dh; e < (h + 1) * dh; e += 16) {                                   \
            __m512 a = _mm512_loadu_ps(out + e);                                              \
            if (nr == VALUE_ROWS)                                                             \
              for (int i = 0; i < VALUE_ROWS; i++)                                            \
                a = _mm512_fmadd_ps(wh[i], WIDEN(r0 + (size_t)i * ld + e), a);                \
            else                                                                              \
              for (int i = 0; i < nr; i++)                                                    \
                a = _mm512_fmadd_ps(wh[i], WIDEN(r0 + (size_t)i * ld + e), a);                \
            _mm512_storeu_ps(out + e, a);                                                     \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
      return;                                                                                 \
    }                                                                                         \
    for (int h = 0; h < H; h++)                                                               \
      for (int e = h * dh; e < (h + 1) * dh; e++) {                                           \
        float a = out[e];                                                                     \
        for (int j = 0; j < n; j++) a = fmaf(WEIGHT, SCALAR(rows[(size_t)j * ld + e]), a);    \
        out[e] = a;                                                                           \
      }                                                                                       \
  } while (0)

T static void mix_rows_bf16(float *out, const float *p, size_t p_stride, const uint16_t *rows,
                            size_t ld, int n, int H, int dh) {
  MIX_ROWS(widen_bf16, xl_bf16_to_f32, p[(size_t)h * p_stride + j]);
}

T static void mix_rows_i8(float *out, const float *p, size_t p_stride, const int8_t *rows,
                          size_t ld, const float *scale, size_t s_stride, int n, int H, int dh) {
  MIX_ROWS(widen_i8, AS_FLOAT, p[(size_t)h * p_stride + j] * scale[(size_t)j * s_stride + h]);
}

const xl_kv_kernels xl_kv_kernels_avx512 = {"avx512", dot_rows_bf16, dot_rows_i8, mix_rows_bf16,
                                            mix_rows_i8};
#undef T
#endif /* __x86_64__ */
