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
/* Software prefetch distances (integer addresses: past the memory's end only a hint). The key
 * loops walk dh rows of positions at once (one stream per row: more than the hardware tracks),
 * the value loops one position row per step at a stride of the whole memory row. */
#define PF_KEYS 512 /* bytes ahead in each key row */
#define PF_VALS 4   /* value rows ahead */
#define PREFETCH(p, bytes)                                                                    \
  _mm_prefetch((const char *)((uintptr_t)(const void *)(p) + (bytes)), _MM_HINT_T0)

T static inline __m512 widen_bf16(const uint16_t *p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
T static inline __m512 widen_i8(const int8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

T static void dot_rows_bf16(const float *q, int dh, const uint16_t *rows, size_t ld, int n,
                            float *s) {
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    const uint16_t *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      __m512 qk = _mm512_set1_ps(q[k]);
      PREFETCH(r, PF_KEYS);
      a0 = _mm512_fmadd_ps(qk, widen_bf16(r), a0);
      a1 = _mm512_fmadd_ps(qk, widen_bf16(r + 16), a1);
    }
    _mm512_storeu_ps(s + j, a0);
    _mm512_storeu_ps(s + j + 16, a1);
  }
  for (; j + 16 <= n; j += 16) {
    __m512 a = _mm512_setzero_ps();
    const uint16_t *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) a = _mm512_fmadd_ps(_mm512_set1_ps(q[k]), widen_bf16(r), a);
    _mm512_storeu_ps(s + j, a);
  }
  for (; j < n; j++) {
    float a = 0.0f;
    for (int k = 0; k < dh; k++) a = fmaf(q[k], xl_bf16_to_f32(rows[(size_t)k * ld + j]), a);
    s[j] = a;
  }
}

T static void dot_rows_i8(const float *q, int dh, const int8_t *rows, size_t ld, const float *scale,
                          int n, float *s) {
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    const int8_t *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      __m512 qk = _mm512_set1_ps(q[k]);
      if (!(j & 32)) PREFETCH(r, PF_KEYS); /* once per 64-byte line */
      a0 = _mm512_fmadd_ps(qk, widen_i8(r), a0);
      a1 = _mm512_fmadd_ps(qk, widen_i8(r + 16), a1);
    }
    _mm512_storeu_ps(s + j, _mm512_mul_ps(a0, _mm512_loadu_ps(scale + j)));
    _mm512_storeu_ps(s + j + 16, _mm512_mul_ps(a1, _mm512_loadu_ps(scale + j + 16)));
  }
  for (; j + 16 <= n; j += 16) {
    __m512 a = _mm512_setzero_ps();
    const int8_t *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) a = _mm512_fmadd_ps(_mm512_set1_ps(q[k]), widen_i8(r), a);
    _mm512_storeu_ps(s + j, _mm512_mul_ps(a, _mm512_loadu_ps(scale + j)));
  }
  for (; j < n; j++) {
    float a = 0.0f;
    for (int k = 0; k < dh; k++) a = fmaf(q[k], (float)rows[(size_t)k * ld + j], a);
    s[j] = a * scale[j];
  }
}

/* One head's outputs o[0..dh) accumulated over n rows in registers, 64 / 16 lanes at a time;
 * w(j) is the row's weight. Scalar fmaf when dh is not a multiple of 16. */
#define MIX_HEAD(WIDEN, SCALAR, WEIGHT)                                                        \
  do {                                                                                        \
    int e = 0;                                                                                \
    if (dh % 16 == 0) {                                                                       \
      for (; e + 64 <= dh; e += 64) {                                                         \
        __m512 a0 = _mm512_loadu_ps(o + e), a1 = _mm512_loadu_ps(o + e + 16);                 \
        __m512 a2 = _mm512_loadu_ps(o + e + 32), a3 = _mm512_loadu_ps(o + e + 48);            \
        for (int j = 0; j < n; j++) {                                                         \
          __typeof__(rows) r = rows + (size_t)j * ld + hoff + e;                              \
          PREFETCH(r, PF_VALS * ld * sizeof *r);                                              \
          __m512 w = _mm512_set1_ps(WEIGHT);                                                  \
          a0 = _mm512_fmadd_ps(w, WIDEN(r), a0);                                              \
          a1 = _mm512_fmadd_ps(w, WIDEN(r + 16), a1);                                         \
          a2 = _mm512_fmadd_ps(w, WIDEN(r + 32), a2);                                         \
          a3 = _mm512_fmadd_ps(w, WIDEN(r + 48), a3);                                         \
        }                                                                                     \
        _mm512_storeu_ps(o + e, a0);                                                          \
        _mm512_storeu_ps(o + e + 16, a1);                                                     \
        _mm512_storeu_ps(o + e + 32, a2);                                                     \
        _mm512_storeu_ps(o + e + 48, a3);                                                     \
      }                                                                                       \
      for (; e < dh; e += 16) {                                                               \
        __m512 a = _mm512_loadu_ps(o + e);                                                    \
        for (int j = 0; j < n; j++)                                                           \
          a = _mm512_fmadd_ps(_mm512_set1_ps(WEIGHT), WIDEN(rows + (size_t)j * ld + hoff + e), \
                              a);                                                             \
        _mm512_storeu_ps(o + e, a);                                                           \
      }                                                                                       \
    }                                                                                         \
    for (; e < dh; e++) {                                                                     \
      float a = o[e];                                                                         \
      for (int j = 0; j < n; j++) a = fmaf(WEIGHT, SCALAR(rows[(size_t)j * ld + hoff + e]), a); \
      o[e] = a;                                                                               \
    }                                                                                         \
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

const xl_kv_kernels xl_kv_kernels_avx512 = {"avx512", dot_rows_bf16, dot_rows_i8, mix_rows_bf16,
                                            mix_rows_i8};
#undef T
#endif /* __x86_64__ */
