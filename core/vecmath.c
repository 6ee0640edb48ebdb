/*
 * vecmath.c: the vector loops of attention: max, exp-and-sum (a Cephes-style polynomial exp,
 * ~1 ulp, deterministic) for the softmax, and the products of a decode step (scores over
 * transposed key rows, probabilities times value rows) with their sums held in registers. AVX-512 when the CPU has
 * it, else portable C (the same polynomial). Any thread; pure functions.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define XL_VEC_X86 1 /* the AVX-512 loops below; other CPUs use the portable C ones */
#else
#define XL_VEC_X86 0
#endif
#include <math.h>

#include "internal.h"

/* exp(x) for x <= 0 (softmax inputs after subtracting the max); 0 below -87.3. */
static inline float exp_poly(float x) {
  if (x < -87.3f) return 0.0f;
  float n = nearbyintf(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f; /* ln2 split into hi + lo */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return ldexpf(p, (int)n);
}

static float max_scalar(const float *x, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

static float exp_sum_scalar(float *x, int n, float shift) {
  float lanes[16] = {0};
  for (int i = 0; i < n; i++) {
    x[i] = exp_poly(x[i] - shift);
    lanes[i & 15] += x[i];
  }
  float s = 0.0f;
  for (int l = 0; l < 16; l++) s += lanes[l];
  return s;
}

#if XL_VEC_X86
__attribute__((target("avx512f"))) static float max_avx512(const float *x, int n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  if (i < n) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, (__mmask16)((1u << (n - i)) - 1u), x + i));
  return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx512f"))) static inline __m512 exp_avx512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  p = _mm512_scalef_ps(p, n);
  return _mm512_maskz_mov_ps((__mmask16)~under, p);
}

__attribute__((target("avx512f"))) static float exp_sum_avx512(float *x, int n, float shift) {
  __m512 s = _mm512_setzero_ps(), sh = _mm512_set1_ps(shift);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh));
    _mm512_storeu_ps(x + i, e);
    s = _mm512_add_ps(s, e);
  }
  if (i < n) {
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
    __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), sh));
    e = _mm512_maskz_mov_ps(k, e);
    _mm512_mask_storeu_ps(x + i, k, e);
    s = _mm512_add_ps(s, e);
  }
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f"))) static void axpy_avx512(float *y, float a, const float *x,
                                                           int n) {
  __m512 va = _mm512_set1_ps(a);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(k, x + i),
                                                   _mm512_maskz_loadu_ps(k, y + i)));
  }
}

#endif /* XL_VEC_X86 */

static void axpy_scalar(float *y, float a, const float *x, int n) {
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}

#if XL_VEC_X86
/* s[0..n) = sum_k q[k] * rows[k * ld + 0..n), k = 0..dh-1 in order, each sum started at 0 and
 * accumulated by FMA: the same arithmetic as n-long axpys over a zeroed s, with 64 sums held
 * in registers while the dh rows stream past (no read-modify-write of s per row). */
__attribute__((target("avx512f"))) static void dot_rows_avx512(const float *q, int dh,
                                                               const float *rows, size_t ld,
                                                               int n, float *s) {
  int j = 0;
  for (; j + 64 <= n; j += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      __m512 qk = _mm512_set1_ps(q[k]);
      a0 = _mm512_fmadd_ps(qk, _mm512_loadu_ps(r), a0);
      a1 = _mm512_fmadd_ps(qk, _mm512_loadu_ps(r + 16), a1);
      a2 = _mm512_fmadd_ps(qk, _mm512_loadu_ps(r + 32), a2);
      a3 = _mm512_fmadd_ps(qk, _mm512_loadu_ps(r + 48), a3);
    }
    _mm512_storeu_ps(s + j, a0);
    _mm512_storeu_ps(s + j + 16, a1);
    _mm512_storeu_ps(s + j + 32, a2);
    _mm512_storeu_ps(s + j + 48, a3);
  }
  for (; j < n; j += 16) {
    __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
    __m512 a = _mm512_setzero_ps();
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld)
      a = _mm512_fmadd_ps(_mm512_set1_ps(q[k]), _mm512_maskz_loadu_ps(m, r), a);
    _mm512_mask_storeu_ps(s + j, m, a);
  }
}

/* NV vectors (16 * NV floats from out + base) accumulated in registers over n rows: out[e] +=
 * p[head(e) * p_stride + j] * rows[j * ld + e], j = 0..n-1 in order, one FMA per term. */
#define MIX_CHUNK(NV)                                                                         \
  __attribute__((target("avx512f"))) static void mix_chunk_##NV(                              \
      float *out, int base, const float *p, size_t p_stride, const float *rows, size_t ld,   \
      int n, int dh) {                                                                        \
    __m512 acc[NV];                                                                           \
    const float *ph[NV];                                                                      \
    for (int v = 0; v < NV; v++) {                                                            \
      acc[v] = _mm512_loadu_ps(out + base + 16 * v);                                          \
      ph[v] = p + (size_t)((base + 16 * v) / dh) * p_stride;                                  \
    }                                                                                         \
    const float *r = rows + base;                                                             \
    for (int j = 0; j < n; j++, r += ld)                                                      \
      for (int v = 0; v < NV; v++)                                                            \
        acc[v] = _mm512_fmadd_ps(_mm512_set1_ps(ph[v][j]), _mm512_loadu_ps(r + 16 * v), acc[v]); \
    for (int v = 0; v < NV; v++) _mm512_storeu_ps(out + base + 16 * v, acc[v]);             \
  }
MIX_CHUNK(16)
MIX_CHUNK(4)
MIX_CHUNK(1)
#undef MIX_CHUNK
#endif /* XL_VEC_X86 */

int xl_cpu_has_avx512(void) {
  static int cached = -1; /* racing first calls store the same value */
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
#if XL_VEC_X86
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
    c = 0;
#endif
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
}

float xl_vec_max(const float *x, int n) {
#if XL_VEC_X86
  if (xl_cpu_has_avx512()) return max_avx512(x, n);
#endif
  return max_scalar(x, n);
}

float xl_vec_exp_sum(float *x, int n, float shift) {
#if XL_VEC_X86
  if (xl_cpu_has_avx512()) return exp_sum_avx512(x, n, shift);
#endif
  return exp_sum_scalar(x, n, shift);
}

static void vec_axpy(float *y, float a, const float *x, int n) { /* y += a x */
#if XL_VEC_X86
  if (xl_cpu_has_avx512()) {
    axpy_avx512(y, a, x, n);
    return;
  }
#endif
  axpy_scalar(y, a, x, n);
}

void xl_vec_dot_rows(const float *q, int dh, const float *rows, size_t ld, int n, float *s) {
#if XL_VEC_X86
  if (xl_cpu_has_avx512()) {
    dot_rows_avx512(q, dh, rows, ld, n, s);
    return;
  }
#endif
  for (int j = 0; j < n; j++) s[j] = 0.0f;
  for (int k = 0; k < dh; k++) axpy_scalar(s, q[k], rows + (size_t)k * ld, n);
}

void xl_vec_mix_rows(float *out, const float *p, size_t p_stride, const float *rows, size_t ld,
                     int n, int H, int dh) {
#if XL_VEC_X86
  int hd = H * dh, e = 0;
  if (xl_cpu_has_avx512() && dh % 16 == 0) {
    for (; e + 256 <= hd; e += 256) mix_chunk_16(out, e, p, p_stride, rows, ld, n, dh);
    for (; e + 64 <= hd; e += 64) mix_chunk_4(out, e, p, p_stride, rows, ld, n, dh);
    for (; e < hd; e += 16) mix_chunk_1(out, e, p, p_stride, rows, ld, n, dh);
    return;
  }
#endif
  for (int j = 0; j < n; j++) /* one key at a time, every head */
    for (int h = 0; h < H; h++)
      vec_axpy(out + (size_t)h * dh, p[(size_t)h * p_stride + j],
               rows + (size_t)j * ld + (size_t)h * dh, dh);
}
