/*
 * matmul.c: y = x W^T for the weight matrices (a torch Linear), written so that every output
 * element is computed the same way whatever the number of rows: per (row, output) pair the
 * products are accumulated over k in SIMD lanes in a fixed order, then reduced in a fixed
 * order. A session's results are therefore identical bit for bit alone or in any batch, and
 * small batches (decode steps) stream each weight row once for all rows.
 * Paths: AVX-512, AVX2+FMA, portable C; chosen once per process from the CPU. Any thread.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define ROW_BLOCK 64 /* rows of x kept hot while the weight rows stream past */
/* Decode steps stream each weight once per forward, mostly from L3, with few rows of x to hide
 * the latency behind: so the kernel prefetches in software 8 KiB ahead in the weight rows (the
 * next groups of rows), far enough ahead that the lines arrive before they are read. */
#define PREFETCH_FLOATS 2048

/* ---- portable ------------------------------------------------------------------------ */
static void mm_scalar(const float *x, int M, int K, int ldx, const float *W, int N, int ldw,
                      float *y, int ldy) {
  for (int r = 0; r < M; r++)
    for (int o = 0; o < N; o++) {
      const float *a = x + (size_t)r * ldx, *b = W + (size_t)o * ldw;
      float acc[8] = {0};
      int k = 0;
      for (; k + 8 <= K; k += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[k + l] * b[k + l];
      for (int l = 0; k < K; k++, l++) acc[l] += a[k] * b[k];
      y[(size_t)r * ldy + o] =
          ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}

#if defined(__x86_64__) || defined(__i386__) /* x86 kernels; elsewhere the portable C path */
/* ---- AVX2 + FMA: tiles of 2 rows x 4 outputs ---------------------------------------- */
__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static void mm_avx2(const float *x, int M, int K, int ldx,
                                                        const float *W, int N, int ldw, float *y,
                                                        int ldy) {
  const int kv = K & ~7, tail = K & 7;
  __m256i tmask = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      const float *w[4];
      for (int j = 0; j < 4; j++) w[j] = W + (size_t)(o + (j < oc ? j : 0)) * ldw;
      for (int r = r0; r < r1; r += 2) {
        int rc = r1 - r < 2 ? 1 : 2;
        const float *a0 = x + (size_t)r * ldx, *a1 = rc > 1 ? a0 + ldx : a0;
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
               c12 = c00, c13 = c00;
        for (int k = 0; k < kv; k += 8) {
          __m256 b0 = _mm256_loadu_ps(w[0] + k), b1 = _mm256_loadu_ps(w[1] + k),
                 b2 = _mm256_loadu_ps(w[2] + k), b3 = _mm256_loadu_ps(w[3] + k);
          __m256 v = _mm256_loadu_ps(a0 + k);
          c00 = _mm256_fmadd_ps(v, b0, c00); c01 = _mm256_fmadd_ps(v, b1, c01);
          c02 = _mm256_fmadd_ps(v, b2, c02); c03 = _mm256_fmadd_ps(v, b3, c03);
          v = _mm256_loadu_ps(a1 + k);
          c10 = _mm256_fmadd_ps(v, b0, c10); c11 = _mm256_fmadd_ps(v, b1, c11);
          c12 = _mm256_fmadd_ps(v, b2, c12); c13 = _mm256_fmadd_ps(v, b3, c13);
        }
        if (tail) {
          __m256 b0 = _mm256_maskload_ps(w[0] + kv, tmask), b1 = _mm256_maskload_ps(w[1] + kv, tmask),
                 b2 = _mm256_maskload_ps(w[2] + kv, tmask), b3 = _mm256_maskload_ps(w[3] + kv, tmask);
          __m256 v = _mm256_maskload_ps(a0 + kv, tmask);
          c00 = _mm256_fmadd_ps(v, b0, c00); c01 = _mm256_fmadd_ps(v, b1, c01);
          c02 = _mm256_fmadd_ps(v, b2, c02); c03 = _mm256_fmadd_ps(v, b3, c03);
          v = _mm256_maskload_ps(a1 + kv, tmask);
          c10 = _mm256_fmadd_ps(v, b0, c10); c11 = _mm256_fmadd_ps(v, b1, c11);
          c12 = _mm256_fmadd_ps(v, b2, c12); c13 = _mm256_fmadd_ps(v, b3, c13);
        }
        float s0[4] = {hsum256(c00), hsum256(c01), hsum256(c02), hsum256(c03)};
        float s1[4] = {hsum256(c10), hsum256(c11), hsum256(c12), hsum256(c13)};
        for (int j = 0; j < oc; j++) y[(size_t)r * ldy + o + j] = s0[j];
        if (rc > 1)
          for (int j = 0; j < oc; j++) y[(size_t)(r + 1) * ldy + o + j] = s1[j];
      }
    }
  }
}

/* ---- AVX-512: tiles of 4 rows x 4 outputs --------------------------------------------- */
/* Each output is the sum of one 16-lane accumulator, always by the same tree: lanes i + (i+8),
 * then + (i+4), then + (i+2), then + (i+1) (the order of _mm512_reduce_add_ps in GCC). The
 * steps below run that tree for 16 accumulators at once (a transposed reduction: 15 adds
 * instead of 64), or for 4, with the same pairings, so a lone row and a row in a tile of four
 * get identical sums. */

/* lanes 0-7: a[i] + a[i+8]; lanes 8-15: b[i] + b[i+8] */
__attribute__((target("avx512f"))) static inline __m512 fold_halves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

/* x, y from fold_halves: 128-bit lane k holds the 4 partial sums (i + (i+4)) of the k-th of
 * the four vectors folded into x (k = 0, 1) and y (k = 2, 3) */
__attribute__((target("avx512f"))) static inline __m512 fold_quarters(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

/* within each 128-bit lane: [p0+p2, p1+p3, q0+q2, q1+q3] */
__attribute__((target("avx512f"))) static inline __m512 fold_pairs(__m512 p, __m512 q) {
  return _mm512_add_ps(_mm512_shuffle_ps(p, q, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(p, q, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* within each 128-bit lane: [r0+r1, r2+r3, s0+s1, s2+s3] */
__attribute__((target("avx512f"))) static inline __m512 fold_last(__m512 r, __m512 s) {
  return _mm512_add_ps(_mm512_shuffle_ps(r, s, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(r, s, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* v[4j + i] is the accumulator of (row i, output j); lane 4i + j of the result is its sum */
__attribute__((target("avx512f"))) static inline __m512 sum_tile(const __m512 v[16]) {
  __m512 z0 = fold_quarters(fold_halves(v[0], v[1]), fold_halves(v[2], v[3]));
  __m512 z1 = fold_quarters(fold_halves(v[4], v[5]), fold_halves(v[6], v[7]));
  __m512 z2 = fold_quarters(fold_halves(v[8], v[9]), fold_halves(v[10], v[11]));
  __m512 z3 = fold_quarters(fold_halves(v[12], v[13]), fold_halves(v[14], v[15]));
  return fold_last(fold_pairs(z0, z1), fold_pairs(z2, z3));
}

/* the sums of c0..c3 (one row, outputs 0..3) in lanes 0, 4, 8, 12 */
__attribute__((target("avx512f"))) static inline __m512 sum_four(__m512 c0, __m512 c1, __m512 c2,
                                                                  __m512 c3) {
  __m512 z = fold_quarters(fold_halves(c0, c1), fold_halves(c2, c3));
  __m512 r = fold_pairs(z, z);
  return fold_last(r, r);
}

#define FMA4(v, c0, c1, c2, c3)                                                            \
  c0 = _mm512_fmadd_ps(v, b0, c0);                                                         \
  c1 = _mm512_fmadd_ps(v, b1, c1);                                                         \
  c2 = _mm512_fmadd_ps(v, b2, c2);                                                         \
  c3 = _mm512_fmadd_ps(v, b3, c3)

/* addresses computed as integers: past the matrix's end they are hints, not pointers */
#define AHEAD (PREFETCH_FLOATS * sizeof(float))
#define PREFETCH_WEIGHTS(k)                                                               \
  do {                                                                                    \
    _mm_prefetch((const char *)((uintptr_t)(w0 + (k)) + AHEAD), _MM_HINT_T0);           \
    _mm_prefetch((const char *)((uintptr_t)(w1 + (k)) + AHEAD), _MM_HINT_T0);           \
    _mm_prefetch((const char *)((uintptr_t)(w2 + (k)) + AHEAD), _MM_HINT_T0);           \
    _mm_prefetch((const char *)((uintptr_t)(w3 + (k)) + AHEAD), _MM_HINT_T0);           \
  } while (0)

__attribute__((target("avx512f"))) static void mm_avx512(const float *x, int M, int K, int ldx,
                                                         const float *W, int N, int ldw,
                                                         float *y, int ldy) {
  const int kv = K & ~15;
  const __mmask16 tm = (__mmask16)((1u << (K & 15)) - 1u);
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      const float *w0 = W + (size_t)o * ldw, *w1 = oc > 1 ? w0 + ldw : w0,
                  *w2 = oc > 2 ? w0 + 2 * (size_t)ldw : w0, *w3 = oc > 3 ? w0 + 3 * (size_t)ldw : w0;
      for (int r = r0; r < r1; r += 4) {
        int rc = r1 - r < 4 ? r1 - r : 4; /* rows past rc repeat row r (results discarded) */
        if (rc == 1) { /* a lone row (decode): same per-element arithmetic, a quarter of it */
          const float *a0 = x + (size_t)r * ldx;
          __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
          for (int k = 0; k < kv; k += 16) {
            PREFETCH_WEIGHTS(k);
            __m512 v = _mm512_loadu_ps(a0 + k);
            c0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(w0 + k), c0);
            c1 = _mm512_fmadd_ps(v, _mm512_loadu_ps(w1 + k), c1);
            c2 = _mm512_fmadd_ps(v, _mm512_loadu_ps(w2 + k), c2);
            c3 = _mm512_fmadd_ps(v, _mm512_loadu_ps(w3 + k), c3);
          }
          if (tm) {
            __m512 v = _mm512_maskz_loadu_ps(tm, a0 + kv);
            c0 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w0 + kv), c0);
            c1 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w1 + kv), c1);
            c2 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w2 + kv), c2);
            c3 = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w3 + kv), c3);
          }
          float s1[16];
          _mm512_storeu_ps(s1, sum_four(c0, c1, c2, c3));
          for (int j = 0; j < oc; j++) y[(size_t)r * ldy + o + j] = s1[4 * j];
          continue;
        }
        const float *a0 = x + (size_t)r * ldx, *a1 = rc > 1 ? a0 + ldx : a0,
                    *a2 = rc > 2 ? a0 + 2 * (size_t)ldx : a0, *a3 = rc > 3 ? a0 + 3 * (size_t)ldx : a0;
        __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
               c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00,
               c31 = c00, c32 = c00, c33 = c00;
        const int first_tile = r == r0; /* later tiles find these weight rows in cache */
        for (int k = 0; k < kv; k += 16) {
          if (first_tile) PREFETCH_WEIGHTS(k);
          __m512 b0 = _mm512_loadu_ps(w0 + k), b1 = _mm512_loadu_ps(w1 + k),
                 b2 = _mm512_loadu_ps(w2 + k), b3 = _mm512_loadu_ps(w3 + k);
          __m512 v = _mm512_loadu_ps(a0 + k);
          FMA4(v, c00, c01, c02, c03);
          v = _mm512_loadu_ps(a1 + k);
          FMA4(v, c10, c11, c12, c13);
          v = _mm512_loadu_ps(a2 + k);
          FMA4(v, c20, c21, c22, c23);
          v = _mm512_loadu_ps(a3 + k);
          FMA4(v, c30, c31, c32, c33);
        }
        if (tm) {
          __m512 b0 = _mm512_maskz_loadu_ps(tm, w0 + kv), b1 = _mm512_maskz_loadu_ps(tm, w1 + kv),
                 b2 = _mm512_maskz_loadu_ps(tm, w2 + kv), b3 = _mm512_maskz_loadu_ps(tm, w3 + kv);
          __m512 v = _mm512_maskz_loadu_ps(tm, a0 + kv);
          FMA4(v, c00, c01, c02, c03);
          v = _mm512_maskz_loadu_ps(tm, a1 + kv);
          FMA4(v, c10, c11, c12, c13);
          v = _mm512_maskz_loadu_ps(tm, a2 + kv);
          FMA4(v, c20, c21, c22, c23);
          v = _mm512_maskz_loadu_ps(tm, a3 + kv);
          FMA4(v, c30, c31, c32, c33);
        }
        const __m512 acc[16] = {c00, c10, c20, c30, c01, c11, c21, c31,
                                c02, c12, c22, c32, c03, c13, c23, c33};
        float s[16];
        _mm512_storeu_ps(s, sum_tile(acc));
        for (int i = 0; i < rc; i++)
          for (int j = 0; j < oc; j++) y[(size_t)(r + i) * ldy + o + j] = s[4 * i + j];
      }
    }
  }
}
#undef FMA4
#undef PREFETCH_WEIGHTS
#undef AHEAD
#endif /* x86 */

typedef void (*mm_fn)(const float *, int, int, int, const float *, int, int, float *, int);

static mm_fn pick(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (xl_cpu_has_avx512()) return mm_avx512;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return mm_avx2;
#endif
  return mm_scalar;
}

void xl_matmul_nt(const float *x, int M, int K, int ldx, const float *W, int N, int ldw, float *y,
                  int ldy) {
  static mm_fn fn; /* racing first calls store the same pointer */
  mm_fn f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
  if (!f) {
    f = pick();
    __atomic_store_n(&fn, f, __ATOMIC_RELAXED);
  }
  if (M > 0 && N > 0) f(x, M, K, ldx, W, N, ldw, y, ldy);
}
