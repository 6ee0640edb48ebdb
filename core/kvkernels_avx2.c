/*
 * kvkernels_avx2.c: the AVX2 + FMA family of the narrow-memory table (kvkernels.h): the decode
 * step's key products and value mixes over bf16 or int8 memory, widened to F32 in registers
 * (8 lanes) and accumulated with fused multiply-adds; ragged tails in scalar fmaf. Compiled
 * with target attributes, chosen at run time with the kernel family (cpu.c); x86-64 only.
 * Any thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "kvkernels.h"

#define T __attribute__((target("avx2,fma")))

T static inline __m256 widen_bf16(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
T static inline __m256 widen_i8(const int8_t *p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

/* s[j0 .. j0 + 8*NV) for one block of keys, NV accumulators of 8 lanes */
#define DOT_BLOCK(WIDEN, NV, FINISH)                                                     \
  do {                                                                                  \
    __m256 a[NV];                                                                       \
    for (int v = 0; v < NV; v++) a[v] = _mm256_setzero_ps();                            \
    __typeof__(rows) r = rows + j;                                                \
    for (int k = 0; k < dh; k++, r += ld) {                                             \
      __m256 qk = _mm256_set1_ps(q[k]);                                                 \
      for (int v = 0; v < NV; v++) a[v] = _mm256_fmadd_ps(qk, WIDEN(r + 8 * v), a[v]);  \
    }                                                                                   \
    for (int v = 0; v < NV; v++) _mm256_storeu_ps(s + j + 8 * v, FINISH(a[v], j + 8 * v)); \
  } while (0)

#define NO_SCALE(acc, at) (acc)
#define BY_SCALE(acc, at) _mm256_mul_ps((acc), _mm256_loadu_ps(scale + (at)))

T static void dot_rows_bf16(const float *q, int dh, const uint16_t *rows, size_t ld, int n,
                            float *s) {
  int j = 0;
  for (; j + 32 <= n; j += 32) DOT_BLOCK(widen_bf16, 4, NO_SCALE);
  for (; j + 8 <= n; j += 8) DOT_BLOCK(widen_bf16, 1, NO_SCALE);
  for (; j < n; j++) {
    float a = 0.0f;
    for (int k = 0; k < dh; k++) a = fmaf(q[k], xl_bf16_to_f32(rows[(size_t)k * ld + j]), a);
    s[j] = a;
  }
}

T static void dot_rows_i8(const float *q, int dh, const int8_t *rows, size_t ld, const float *scale,
                          int n, float *s) {
  int j = 0;
  for (; j + 32 <= n; j += 32) DOT_BLOCK(widen_i8, 4, BY_SCALE);
  for (; j + 8 <= n; j += 8) DOT_BLOCK(widen_i8, 1, BY_SCALE);
  for (; j < n; j++) {
    float a = 0.0f;
    for (int k = 0; k < dh; k++) a = fmaf(q[k], (float)rows[(size_t)k * ld + j], a);
    s[j] = a * scale[j];
  }
}

/* One head's outputs o[0..dh) accumulated over n rows in registers, 32 / 8 lanes at a time;
 * WEIGHT is row j's weight. Scalar fmaf when dh is not a multiple of 8. */
#define MIX_HEAD(WIDEN, SCALAR, WEIGHT)                                                      \
  do {                                                                                      \
    int e = 0;                                                                              \
    if (dh % 8 == 0) {                                                                      \
      for (; e + 32 <= dh; e += 32) {                                                       \
        __m256 a[4];                                                                        \
        for (int v = 0; v < 4; v++) a[v] = _mm256_loadu_ps(o + e + 8 * v);                  \
        for (int j = 0; j < n; j++) {                                                       \
          __typeof__(rows) r = rows + (size_t)j * ld + hoff + e;                      \
          __m256 w = _mm256_set1_ps(WEIGHT);                                                \
          for (int v = 0; v < 4; v++) a[v] = _mm256_fmadd_ps(w, WIDEN(r + 8 * v), a[v]);    \
        }                                                                                   \
        for (int v = 0; v < 4; v++) _mm256_storeu_ps(o + e + 8 * v, a[v]);                  \
      }                                                                                     \
      for (; e < dh; e += 8) {                                                              \
        __m256 a = _mm256_loadu_ps(o + e);                                                  \
        for (int j = 0; j < n; j++)                                                         \
          a = _mm256_fmadd_ps(_mm256_set1_ps(WEIGHT), WIDEN(rows + (size_t)j * ld + hoff + e), \
                              a);                                                           \
        _mm256_storeu_ps(o + e, a);                                                         \
      }                                                                                     \
    }                                                                                       \
    for (; e < dh; e++) {                                                                   \
      float a = o[e];                                                                       \
      for (int j = 0; j < n; j++) a = fmaf(WEIGHT, SCALAR(rows[(size_t)j * ld + hoff + e]), a); \
      o[e] = a;                                                                             \
    }                                                                                       \
  } while (0)

#define AS_FLOAT(x) ((float)(x))

T static void mix_rows_bf16(float *out, const float *p, size_t p_stride, const uint16_t *rows,
                            size_t ld, int n, int H, int dh) {
  for (int h = 0; h < H; h++) {
    float *o = out + (size_t)h * dh;
    const float *ph = p + (size_t)h * p_stride;
    size_t hoff = (size_t)h * dh;
    MIX_HEAD(widen_bf16, xl_bf16_to_f32, ph[j]);
  }
}

T static void mix_rows_i8(float *out, const float *p, size_t p_stride, const int8_t *rows,
                          size_t ld, const float *scale, size_t s_stride, int n, int H, int dh) {
  for (int h = 0; h < H; h++) {
    float *o = out + (size_t)h * dh;
    const float *ph = p + (size_t)h * p_stride;
    const float *sh = scale + h;
    size_t hoff = (size_t)h * dh;
    MIX_HEAD(widen_i8, AS_FLOAT, ph[j] * sh[(size_t)j * s_stride]);
  }
}

const xl_kv_kernels xl_kv_kernels_avx2 = {"avx2", dot_rows_bf16, dot_rows_i8, mix_rows_bf16,
                                          mix_rows_i8};
#undef T
#endif /* __x86_64__ */
