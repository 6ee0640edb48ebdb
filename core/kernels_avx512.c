/*
 * kernels_avx512.c: the AVX-512F family of the kernel table (kernels.h). The weight GEMM in
 * tiles of 4 rows x 4 outputs with a transposed fixed-order reduction (a lone decode row gets
 * the same sums as a row in a tile), long rows in slices of K whose four weight rows stay in
 * L1 across a block's tiles (each lane still sums in k order), a small batch's tiles sharing
 * the prefetch of the next weights, softmax max / exp-and-sum (the portable polynomial in
 * 16 lanes), the decode step's products over transposed key rows and value rows with their sums
 * held in registers, LayerNorm, ReLU and bias rows. Compiled with target attributes, chosen at
 * run time by cpu.c; x86-64 only. Any thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define ROW_BLOCK 64 /* rows of x kept hot while the weight rows stream past */
#ifndef K_SLICE
#define K_SLICE 1024 /* floats of K a block's tiles run before the next slice (4 KiB a row) */
#endif
/* Decode steps stream each weight once per forward, mostly from L3, with few rows of x to hide
 * the latency behind: so the kernel prefetches in software 8 KiB ahead in the weight rows (the
 * next groups of rows), far enough ahead that the lines arrive before they are read. */
#define PREFETCH_FLOATS 2048

#define T __attribute__((target("avx512f")))

/* ---- AVX-512: tiles of 4 rows x 4 outputs --------------------------------------------- */
/* Each output is the sum of one 16-lane accumulator, always by the same tree: lanes i + (i+8),
 * then + (i+4), then + (i+2), then + (i+1) (the order of _mm512_reduce_add_ps in GCC). The
 * steps below run that tree for 16 accumulators at once (a transposed reduction: 15 adds
 * instead of 64), or for 4, with the same pairings, so a lone row and a row in a tile of four
 * get identical sums. */

/* lanes 0-7: a[i] + a[i+8]; lanes 8-15: b[i] + b[i+8] */
T static inline __m512 fold_halves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

/* x, y from fold_halves: 128-bit lane k holds the 4 partial sums (i + (i+4)) of the k-th of
 * the four vectors folded into x (k = 0, 1) and y (k = 2, 3) */
T static inline __m512 fold_quarters(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

/* within each 128-bit lane: [p0+p2, p1+p3, q0+q2, q1+q3] */
T static inline __m512 fold_pairs(__m512 p, __m512 q) {
  return _mm512_add_ps(_mm512_shuffle_ps(p, q, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(p, q, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* within each 128-bit lane: [r0+r1, r2+r3, s0+s1, s2+s3] */
T static inline __m512 fold_last(__m512 r, __m512 s) {
  return _mm512_add_ps(_mm512_shuffle_ps(r, s, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(r, s, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* v[4j + i] is the accumulator of (row i, output j); lane 4i + j of the result is its sum */
T static inline __m512 sum_tile(const __m512 v[16]) {
  __m512 z0 = fold_quarters(fold_halves(v[0], v[1]), fold_halves(v[2], v[3]));
  __m512 z1 = fold_quarters(fold_halves(v[4], v[5]), fold_halves(v[6], v[7]));
  __m512 z2 = fold_quarters(fold_halves(v[8], v[9]), fold_halves(v[10], v[11]));
  __m512 z3 = fold_quarters(fold_halves(v[12], v[13]), fold_halves(v[14], v[15]));
  return fold_last(fold_pairs(z0, z1), fold_pairs(z2, z3));
}

/* the sums of c0..c3 (one row, outputs 0..3) in lanes 0, 4, 8, 12 */
T static inline __m512 sum_four(__m512 c0, __m512 c1, __m512 c2,
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

/* one column step of a 4 x 4 tile: four weight vectors, each row's vector times them */
#define TILE_STEP(k)                                                                       \
  do {                                                                                     \
    __m512 b0 = _mm512_loadu_ps(w0 + (k)), b1 = _mm512_loadu_ps(w1 + (k)),                 \
           b2 = _mm512_loadu_ps(w2 + (k)), b3 = _mm512_loadu_ps(w3 + (k));                 \
    __m512 v = _mm512_loadu_ps(a0 + (k));                                                  \
    FMA4(v, c00, c01, c02, c03);                                                           \
    v = _mm512_loadu_ps(a1 + (k));                                                         \
    FMA4(v, c10, c11, c12, c13);                                                           \
    v = _mm512_loadu_ps(a2 + (k));                                                         \
    FMA4(v, c20, c21, c22, c23);                                                           \
    v = _mm512_loadu_ps(a3 + (k));                                                         \
    FMA4(v, c30, c31, c32, c33);                                                           \
  } while (0)

/* addresses computed as integers: past the matrix's end they are hints, not pointers */
#define AHEAD (PREFETCH_FLOATS * sizeof(float))
#define PREFETCH_WEIGHTS(k)                                                               \
  do {                                                                                    \
    _mm_prefetch((const char *)((uintptr_t)(w0 + (k)) + AHEAD), _MM_HINT_T0);           \
    _mm_prefetch((const char *)((uintptr_t)(w1 + (k)) + AHEAD), _MM_HINT_T0);           \
    _mm_prefetch((const char *)((uintptr_t)(w2 + (k)) + AHEAD), _MM_HINT_T0);           \
    _mm_prefetch((const char *)((uintptr_t)(w3 + (k)) + AHEAD), _MM_HINT_T0);           \
  } while (0)

T static void mm_avx512(const float *x, int M, int K, int ldx,
                                                         const float *W, int N, int ldw,
                                                         float *y, int ldy) {
  const int kv = K & ~15;
  const __mmask16 tm = (__mmask16)((1u << (K & 15)) - 1u);
  /* a tile's 16 sums between slices of K: [tile of the row block][16 accumulators] */
  __m512 part[ROW_BLOCK / 4][16];
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    /* The block's tiles of 2-4 rows. With one or two (a batch of up to 9 rows) the weights'
     * stream from DRAM, not the arithmetic, bounds the block: each tile then prefetches a share
     * of the next slice's weight rows, so DRAM streams while every tile computes (bench_kernels'
     * "weights x 8 rows, from DRAM"). With more, the first tile prefetches ahead in its own
     * rows (sharing measured no faster at 10-17 rows, slower at 16). */
    const int tiles = (r1 - r0) / 4 + ((r1 - r0) % 4 >= 2), share = tiles <= 2;
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      const float *w0 = W + (size_t)o * ldw, *w1 = oc > 1 ? w0 + ldw : w0,
                  *w2 = oc > 2 ? w0 + 2 * (size_t)ldw : w0, *w3 = oc > 3 ? w0 + 3 * (size_t)ldw : w0;
      const float *const w[4] = {w0, w1, w2, w3};
      /* Tiles of 2-4 rows, K in slices of K_SLICE: a slice of the four weight rows stays in L1
       * while every tile of the block reads it; each lane's sum runs in k order across the
       * slices (its accumulator kept in `part`), so the sums are those of one pass. */
      int c0 = 0;
      do {
        const int c1 = kv - c0 > K_SLICE ? c0 + K_SLICE : kv, first = c0 == 0, last = c1 == kv;
        for (int r = r0; r < r1; r += 4) {
          int rc = r1 - r < 4 ? r1 - r : 4; /* rows past rc repeat row r (results discarded) */
          if (rc == 1) continue;            /* a lone row: below */
          const float *a0 = x + (size_t)r * ldx, *a1 = a0 + ldx,
                      *a2 = rc > 2 ? a0 + 2 * (size_t)ldx : a0, *a3 = rc > 3 ? a0 + 3 * (size_t)ldx : a0;
          __m512 *pt = part[(r - r0) / 4];
          __m512 c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33;
          if (first) {
            c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
            c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00,
            c31 = c00, c32 = c00, c33 = c00;
          } else {
            c00 = pt[0], c01 = pt[1], c02 = pt[2], c03 = pt[3], c10 = pt[4], c11 = pt[5],
            c12 = pt[6], c13 = pt[7], c20 = pt[8], c21 = pt[9], c22 = pt[10], c23 = pt[11],
            c30 = pt[12], c31 = pt[13], c32 = pt[14], c33 = pt[15];
          }
          if (!share) {
            const int first_tile = r == r0; /* later tiles find these weight rows in cache */
            for (int k = c0; k < c1; k += 16) {
              if (first_tile) PREFETCH_WEIGHTS(k);
              TILE_STEP(k);
            }
          } else {
            /* this tile's share of the next slice's four weight rows (the same rows further
             * on, or the next four outputs' first slice): rows tile, tile + tiles, ... */
            uintptr_t pf[4] = {0, 0, 0, 0}; /* pf[i] + 4 k bytes: the line at column k */
            int npf = 0;
            for (int j = (r - r0) / 4; j < 4; j += tiles)
              pf[npf++] = (last ? (uintptr_t)W + (size_t)(o + 4 + j) * (size_t)ldw * sizeof(float)
                                : (uintptr_t)(w[j] + c1)) - (uintptr_t)c0 * sizeof(float);
            for (int k = c0; k < c1; k += 16) {
              const uintptr_t at = (uintptr_t)k * sizeof(float);
              _mm_prefetch((const char *)(pf[0] + at), _MM_HINT_T0);
              _mm_prefetch((const char *)(pf[1] + at), _MM_HINT_T0);
              if (npf == 4) {
                _mm_prefetch((const char *)(pf[2] + at), _MM_HINT_T0);
                _mm_prefetch((const char *)(pf[3] + at), _MM_HINT_T0);
              }
              TILE_STEP(k);
            }
          }
          if (!last) {
            pt[0] = c00, pt[1] = c01, pt[2] = c02, pt[3] = c03, pt[4] = c10, pt[5] = c11,
            pt[6] = c12, pt[7] = c13, pt[8] = c20, pt[9] = c21, pt[10] = c22, pt[11] = c23,
            pt[12] = c30, pt[13] = c31, pt[14] = c32, pt[15] = c33;
            continue;
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
        c0 = c1;
      } while (c0 < kv);
      if ((r1 - r0) % 4 != 1) continue;
      /* a lone row (decode, or a block's last): same per-element arithmetic, a quarter of it */
      const int r = r1 - 1;
      const float *a0 = x + (size_t)r * ldx;
      __m512 c0v = _mm512_setzero_ps(), c1v = c0v, c2v = c0v, c3v = c0v;
      for (int k = 0; k < kv; k += 16) {
        PREFETCH_WEIGHTS(k);
        __m512 v = _mm512_loadu_ps(a0 + k);
        c0v = _mm512_fmadd_ps(v, _mm512_loadu_ps(w0 + k), c0v);
        c1v = _mm512_fmadd_ps(v, _mm512_loadu_ps(w1 + k), c1v);
        c2v = _mm512_fmadd_ps(v, _mm512_loadu_ps(w2 + k), c2v);
        c3v = _mm512_fmadd_ps(v, _mm512_loadu_ps(w3 + k), c3v);
      }
      if (tm) {
        __m512 v = _mm512_maskz_loadu_ps(tm, a0 + kv);
        c0v = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w0 + kv), c0v);
        c1v = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w1 + kv), c1v);
        c2v = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w2 + kv), c2v);
        c3v = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tm, w3 + kv), c3v);
      }
      float s1[16];
      _mm512_storeu_ps(s1, sum_four(c0v, c1v, c2v, c3v));
      for (int j = 0; j < oc; j++) y[(size_t)r * ldy + o + j] = s1[4 * j];
    }
  }
}
#undef TILE_STEP
#undef FMA4
#undef PREFETCH_WEIGHTS
#undef AHEAD

T static float max_avx512(const float *x, int n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  if (i < n) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, (__mmask16)((1u << (n - i)) - 1u), x + i));
  return _mm512_reduce_max_ps(m);
}

/* exp(x) as xl_exp_portable in 16 lanes: 0 below -87.3, +Inf above 88.72, NaN for NaN (the
 * special lanes blended in afterwards). IEEE arithmetic only, defined for every input. */
T static inline __m512 exp_avx512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72f), _CMP_GT_OQ);
  __m512 xin = x;
  x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.72f));
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
  p = _mm512_mask_mov_ps(p, over, _mm512_set1_ps(INFINITY));
  p = _mm512_mask_mov_ps(p, nan, xin);
  return _mm512_maskz_mov_ps((__mmask16)~under, p);
}

T static float exp_sum_avx512(float *x, int n, float shift) {
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

T static void axpy_avx512(float *y, float a, const float *x,
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


/* s[0..n) = sum_k q[k] * rows[k * ld + 0..n), k = 0..dh-1 in order, each sum started at 0 and
 * accumulated by FMA: the same arithmetic as n-long axpys over a zeroed s, with 64 sums held
 * in registers while the dh rows stream past (no read-modify-write of s per row). */
T static void dot_rows_avx512(const float *q, int dh,
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
  T static void mix_chunk_##NV(                              \
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
T static void mix_rows(float *out, const float *p, size_t p_stride, const float *rows, size_t ld,
                       int n, int H, int dh) {
  int hd = H * dh, e = 0;
  if (dh % 16 == 0) {
    for (; e + 256 <= hd; e += 256) mix_chunk_16(out, e, p, p_stride, rows, ld, n, dh);
    for (; e + 64 <= hd; e += 64) mix_chunk_4(out, e, p, p_stride, rows, ld, n, dh);
    for (; e < hd; e += 16) mix_chunk_1(out, e, p, p_stride, rows, ld, n, dh);
    return;
  }
  for (int j = 0; j < n; j++) /* one key at a time, every head */
    for (int h = 0; h < H; h++)
      axpy_avx512(out + (size_t)h * dh, p[(size_t)h * p_stride + j],
                  rows + (size_t)j * ld + (size_t)h * dh, dh);
}

/* dot_rows of 4 queries: each 64 columns of a row loaded once feed 16 accumulators (4 queries
 * x 4 vectors); every sum is dot_rows_avx512's chain of FMAs over k from 0. */
T static void dot_rows4_avx512(const float *q, size_t ldq, int dh, const float *rows, size_t ld,
                               int n, float *s, size_t lds) {
  const float *qi[4] = {q, q + ldq, q + 2 * ldq, q + 3 * ldq};
  int j = 0;
  for (; j + 64 <= n; j += 64) {
    __m512 a[4][4];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
      _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) a[i][v] = _mm512_setzero_ps();
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      /* the next block's lines of this row: the rows are far apart, so no hardware stream
       * finds them (integer addresses: past the end they are only hints) */
      _mm_prefetch((const char *)((uintptr_t)r + 256), _MM_HINT_T0);
      _mm_prefetch((const char *)((uintptr_t)r + 320), _MM_HINT_T0);
      _mm_prefetch((const char *)((uintptr_t)r + 384), _MM_HINT_T0);
      _mm_prefetch((const char *)((uintptr_t)r + 448), _MM_HINT_T0);
      const __m512 r0 = _mm512_loadu_ps(r), r1 = _mm512_loadu_ps(r + 16),
                   r2 = _mm512_loadu_ps(r + 32), r3 = _mm512_loadu_ps(r + 48);
      _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        const __m512 qk = _mm512_set1_ps(qi[i][k]);
        a[i][0] = _mm512_fmadd_ps(qk, r0, a[i][0]);
        a[i][1] = _mm512_fmadd_ps(qk, r1, a[i][1]);
        a[i][2] = _mm512_fmadd_ps(qk, r2, a[i][2]);
        a[i][3] = _mm512_fmadd_ps(qk, r3, a[i][3]);
      }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
      _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
        _mm512_storeu_ps(s + (size_t)i * lds + j + 16 * v, a[i][v]);
  }
  for (; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      const __m512 rv = _mm512_maskz_loadu_ps(m, r);
      _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
        a[i] = _mm512_fmadd_ps(_mm512_set1_ps(qi[i][k]), rv, a[i]);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) _mm512_mask_storeu_ps(s + (size_t)i * lds + j, m, a[i]);
  }
}

/* mix_rows of 4 queries, NV vectors of each (16 * NV floats from base): each value row's
 * vectors loaded once feed the 4 queries' accumulators; every sum is mix_chunk's chain of FMAs
 * over j from the output's value. */
#define MIX4_CHUNK(NV)                                                                         \
  T static void mix4_chunk_##NV(float *out, size_t ldo, int base, const float *p, size_t ldp,  \
                                size_t p_stride, const float *rows, size_t ld, int n, int dh) { \
    __m512 acc[4][NV];                                                                         \
    const float *ph[4][NV];                                                                    \
    for (int i = 0; i < 4; i++)                                                                \
      for (int v = 0; v < NV; v++) {                                                           \
        acc[i][v] = _mm512_loadu_ps(out + (size_t)i * ldo + base + 16 * v);                    \
        ph[i][v] = p + (size_t)i * ldp + (size_t)((base + 16 * v) / dh) * p_stride;            \
      }                                                                                        \
    const float *r = rows + base;                                                              \
    for (int j = 0; j < n; j++, r += ld) {                                                     \
      __m512 rv[NV];                                                                           \
      for (int v = 0; v < NV; v++) rv[v] = _mm512_loadu_ps(r + 16 * v);                        \
      for (int i = 0; i < 4; i++)                                                              \
        for (int v = 0; v < NV; v++)                                                           \
          acc[i][v] = _mm512_fmadd_ps(_mm512_set1_ps(ph[i][v][j]), rv[v], acc[i][v]);          \
    }                                                                                          \
    for (int i = 0; i < 4; i++)                                                                \
      for (int v = 0; v < NV; v++) _mm512_storeu_ps(out + (size_t)i * ldo + base + 16 * v, acc[i][v]); \
  }
MIX4_CHUNK(4)
MIX4_CHUNK(1)
#undef MIX4_CHUNK

T static void mix_rows4_avx512(float *out, size_t ldo, const float *p, size_t ldp, size_t p_stride,
                               const float *rows, size_t ld, int n, int H, int dh) {
  const int hd = H * dh;
  if (dh % 16) { /* heads off the lanes: mix_rows per query */
    for (int i = 0; i < 4; i++)
      mix_rows(out + (size_t)i * ldo, p + (size_t)i * ldp, p_stride, rows, ld, n, H, dh);
    return;
  }
  int e = 0;
  for (; e + 64 <= hd; e += 64) mix4_chunk_4(out, ldo, e, p, ldp, p_stride, rows, ld, n, dh);
  for (; e < hd; e += 16) mix4_chunk_1(out, ldo, e, p, ldp, p_stride, rows, ld, n, dh);
}

T static float sum_exp_avx512(const float *x, int n, float shift) {
  __m512 s = _mm512_setzero_ps(), sh = _mm512_set1_ps(shift);
  int i = 0;
  for (; i + 16 <= n; i += 16) s = _mm512_add_ps(s, exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh)));
  if (i < n) {
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
    __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), sh));
    s = _mm512_add_ps(s, _mm512_maskz_mov_ps(k, e));
  }
  return _mm512_reduce_add_ps(s);
}

/* LayerNorm of each row: mean and biased variance as 16-lane float sums reduced in a fixed
 * order, then (x - mean) * inv * g + b. */
T static void layer_norm(const float *x, int rows, int dim, const float *g, const float *b,
                         float eps, float *y) {
  const int dv = dim & ~15;
  const __mmask16 tm = (__mmask16)((1u << (dim & 15)) - 1u);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * dim;
    float *yr = y + (size_t)r * dim;
    __m512 s = _mm512_setzero_ps();
    for (int j = 0; j < dv; j += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(xr + j));
    if (tm) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(tm, xr + dv));
    const float mu = _mm512_reduce_add_ps(s) / (float)dim;
    const __m512 vmu = _mm512_set1_ps(mu);
    __m512 v = _mm512_setzero_ps();
    for (int j = 0; j < dv; j += 16) {
      __m512 d = _mm512_sub_ps(_mm512_loadu_ps(xr + j), vmu);
      v = _mm512_fmadd_ps(d, d, v);
    }
    if (tm) {
      __m512 d = _mm512_maskz_sub_ps(tm, _mm512_maskz_loadu_ps(tm, xr + dv), vmu);
      v = _mm512_fmadd_ps(d, d, v);
    }
    const float var = _mm512_reduce_add_ps(v) / (float)dim; /* biased, as torch */
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sqrt((double)var + eps)));
    for (int j = 0; j < dv; j += 16) {
      __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vmu), inv);
      _mm512_storeu_ps(yr + j, _mm512_fmadd_ps(d, _mm512_loadu_ps(g + j), _mm512_loadu_ps(b + j)));
    }
    if (tm) {
      __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tm, xr + dv), vmu), inv);
      _mm512_mask_storeu_ps(yr + dv, tm, _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(tm, g + dv),
                                                         _mm512_maskz_loadu_ps(tm, b + dv)));
    }
  }
}

T static void relu(float *x, size_t n) {
  const __m512 z = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) /* max(x, 0) keeps a NaN in x: maxps returns its 2nd operand */
    _mm512_storeu_ps(x + i, _mm512_max_ps(z, _mm512_loadu_ps(x + i)));
  for (; i < n; i++) x[i] = x[i] < 0.0f ? 0.0f : x[i];
}

T static void add_bias(float *y, int rows, int n, int ldy, const float *b) {
  const int nv = n & ~15;
  const __mmask16 tm = (__mmask16)((1u << (n & 15)) - 1u);
  for (int r = 0; r < rows; r++) {
    float *yr = y + (size_t)r * ldy;
    for (int j = 0; j < nv; j += 16)
      _mm512_storeu_ps(yr + j, _mm512_add_ps(_mm512_loadu_ps(yr + j), _mm512_loadu_ps(b + j)));
    if (tm)
      _mm512_mask_storeu_ps(yr + nv, tm, _mm512_add_ps(_mm512_maskz_loadu_ps(tm, yr + nv),
                                                       _mm512_maskz_loadu_ps(tm, b + nv)));
  }
}

/* 16 values of p and b a step, loaded from p - k - 15 and turned end for end in registers */
T static void add_reversed(float *s, const float *p, const float *b, int n, float scale) {
  const __m512i rev = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 sc = _mm512_set1_ps(scale);
  int k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 t = _mm512_add_ps(_mm512_permutexvar_ps(rev, _mm512_loadu_ps(p - k - 15)),
                             _mm512_permutexvar_ps(rev, _mm512_loadu_ps(b - k - 15)));
    _mm512_storeu_ps(s + k, _mm512_mul_ps(_mm512_add_ps(_mm512_loadu_ps(s + k), t), sc));
  }
  for (; k < n; k++) s[k] = (s[k] + (p[-k] + b[-k])) * scale;
}

const xl_kernels xl_kernels_avx512 = {
  .name = "avx512",
  .matmul_nt = mm_avx512,
  .max = max_avx512,
  .exp_sum = exp_sum_avx512,
  .sum_exp = sum_exp_avx512,
  .dot_rows = dot_rows_avx512,
  .mix_rows = mix_rows,
  .layer_norm = layer_norm,
  .relu = relu,
  .add_bias = add_bias,
  .add_reversed = add_reversed,
  .dot_rows4 = dot_rows4_avx512,
  .mix_rows4 = mix_rows4_avx512,
};
#undef T
#endif /* __x86_64__ */
