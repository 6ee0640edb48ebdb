/*
 * kernels_avx2.c: the AVX2+FMA family of the kernel table (kernels.h), for x86-64 CPUs without
 * AVX-512 (or forced with --cpu avx2). The weight GEMM in tiles of 3 rows x 4 outputs (12
 * accumulators of the 16 registers; a block of many rows reads its 4 weight rows from an aligned
 * copy on the stack; in a block of up to 18 rows every tile prefetches a share of the next
 * weight rows), a lone decode row 8 outputs at a time with software prefetch of the weight rows; every output is one 8-lane accumulator advanced over k in
 * order and reduced by one fixed tree (hsum4), so a row's sums never depend on its batch.
 * Softmax max / exp-and-sum (the portable polynomial in 8 lanes), the decode step's products
 * over transposed key rows and value rows with the sums held in registers, LayerNorm, ReLU and
 * bias rows. Compiled with target attributes, chosen at run time by cpu.c; x86-64 only.
 * Any thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define T __attribute__((target("avx2,fma")))

/* Rows of x kept hot in L2 (about this many bytes of them) while the weights stream past: each
 * block reads every weight row once more, from L3 or memory, so the blocks are as few as fit;
 * but never fewer than MIN_BLOCK_ROWS rows (long rows: a few more passes over x from L3 cost
 * less than many over a large weight matrix from memory). */
#define X_BLOCK_BYTES (256 * 1024)
#define MIN_BLOCK_ROWS 48
/* In a block of at least PACK_MIN_ROWS rows, the first tile also stores the 4 weight rows it
 * reads (K <= PACK_MAX_K) into a 64-byte-aligned panel on the stack, and the block's later
 * tiles read the panel: weights mapped from a file often start off a 32-byte boundary, and then
 * every other 8-lane load of them straddles two cache lines, in the loop that reads each weight
 * once per row. The copy changes where the floats are read from, not the arithmetic: packed or
 * not, every output gets the same sums. */
#define PACK_MIN_ROWS 6
#define PACK_MAX_K 4096 /* a 64 KiB panel */
/* A decode row streams every weight once from L2/L3: prefetch 8 KiB ahead in each of the 8
 * weight rows in flight, one line per row every 16 floats. */
#define PREFETCH_BYTES (2048 * sizeof(float))
#define SHARE_MAX_TILES 6 /* blocks of up to 18 rows share the prefetch of the next weights */

/* lane mask of the first n (0..8) lanes, for maskload/maskstore */
T static inline __m256i lanes_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The sums of four 8-lane accumulators, each by the same tree: (i + (i+4)) folds the halves,
 * then pairs (0+1), (2+3), then the two pair sums. Result lane j = sum of c_j. */
T static inline __m128 hsum4(__m256 c0, __m256 c1, __m256 c2, __m256 c3) {
  __m128 x0 = _mm_add_ps(_mm256_castps256_ps128(c0), _mm256_extractf128_ps(c0, 1));
  __m128 x1 = _mm_add_ps(_mm256_castps256_ps128(c1), _mm256_extractf128_ps(c1, 1));
  __m128 x2 = _mm_add_ps(_mm256_castps256_ps128(c2), _mm256_extractf128_ps(c2, 1));
  __m128 x3 = _mm_add_ps(_mm256_castps256_ps128(c3), _mm256_extractf128_ps(c3, 1));
  return _mm_hadd_ps(_mm_hadd_ps(x0, x1), _mm_hadd_ps(x2, x3));
}

T static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(_mm_hadd_ps(s, s)); /* the same tree as one lane of hsum4 */
}

T static inline void store_outputs(float *y, __m128 s, int oc) {
  if (oc == 4) _mm_storeu_ps(y, s);
  else {
    float t[4];
    _mm_storeu_ps(t, s);
    for (int j = 0; j < oc; j++) y[j] = t[j];
  }
}

/* ---- weight GEMM ------------------------------------------------------------------------ */

#define FMA4(v, c0, c1, c2, c3)                                                            \
  c0 = _mm256_fmadd_ps(v, b0, c0);                                                         \
  c1 = _mm256_fmadd_ps(v, b1, c1);                                                         \
  c2 = _mm256_fmadd_ps(v, b2, c2);                                                         \
  c3 = _mm256_fmadd_ps(v, b3, c3)

/* y[r, o..o+oc) for a lone row: 8 outputs per pass (2 hsum4 groups), weights prefetched. */
T static void mm_row(const float *a, int K, const float *W, int N, int ldw, float *y) {
  const int kv = K & ~7, tail = K & 7;
  const __m256i tmask = lanes_mask(tail);
  for (int o = 0; o < N; o += 8) {
    int oc = N - o < 8 ? N - o : 8;
    const float *w[8]; /* outputs past oc repeat output o (results discarded) */
    for (int j = 0; j < 8; j++) w[j] = W + (size_t)(o + (j < oc ? j : 0)) * ldw;
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    for (int k = 0; k < kv; k += 8) {
      if (!(k & 15))
        for (int j = 0; j < 8; j++) /* integer addresses: past the matrix they are only hints */
          _mm_prefetch((const char *)((uintptr_t)(w[j] + k) + PREFETCH_BYTES), _MM_HINT_T0);
      __m256 v = _mm256_loadu_ps(a + k);
      c0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[0] + k), c0);
      c1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[1] + k), c1);
      c2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[2] + k), c2);
      c3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[3] + k), c3);
      c4 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[4] + k), c4);
      c5 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[5] + k), c5);
      c6 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[6] + k), c6);
      c7 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w[7] + k), c7);
    }
    if (tail) {
      __m256 v = _mm256_maskload_ps(a + kv, tmask);
      c0 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[0] + kv, tmask), c0);
      c1 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[1] + kv, tmask), c1);
      c2 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[2] + kv, tmask), c2);
      c3 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[3] + kv, tmask), c3);
      c4 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[4] + kv, tmask), c4);
      c5 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[5] + kv, tmask), c5);
      c6 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[6] + kv, tmask), c6);
      c7 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w[7] + kv, tmask), c7);
    }
    store_outputs(y + o, hsum4(c0, c1, c2, c3), oc < 4 ? oc : 4);
    if (oc > 4) store_outputs(y + o + 4, hsum4(c4, c5, c6, c7), oc - 4);
  }
}

/* One tile: rows a0..a2 by weight rows w0..w3, k in order; sums by hsum4 into s[0..2]. With
 * `npf` streams it prefetches the lines pf[i] + 4 k bytes (npf 0, 1, 2 or 4); with `copy` each
 * weight vector read is also stored to the panel rows p0..p3 (aligned; the tail's masked lanes
 * store zeros). */
T static inline __attribute__((always_inline)) void
tile_3x4(const float *a0, const float *a1, const float *a2, const float *w0, const float *w1,
         const float *w2, const float *w3, int kv, int tail, __m256i tmask, int npf,
         const uintptr_t pf[4], int copy, float *p0, float *p1, float *p2, float *p3,
         __m128 s[3]) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
         c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00;
  for (int k = 0; k < kv; k += 8) {
    if (npf && !(k & 15)) { /* integer addresses: past the matrix they are only hints */
      const uintptr_t at = (uintptr_t)k * sizeof(float);
      _mm_prefetch((const char *)(pf[0] + at), _MM_HINT_T0);
      if (npf > 1) _mm_prefetch((const char *)(pf[1] + at), _MM_HINT_T0);
      if (npf > 2) {
        _mm_prefetch((const char *)(pf[2] + at), _MM_HINT_T0);
        _mm_prefetch((const char *)(pf[3] + at), _MM_HINT_T0);
      }
    }
    __m256 b0 = _mm256_loadu_ps(w0 + k), b1 = _mm256_loadu_ps(w1 + k),
           b2 = _mm256_loadu_ps(w2 + k), b3 = _mm256_loadu_ps(w3 + k);
    if (copy) {
      _mm256_store_ps(p0 + k, b0);
      _mm256_store_ps(p1 + k, b1);
      _mm256_store_ps(p2 + k, b2);
      _mm256_store_ps(p3 + k, b3);
    }
    __m256 v = _mm256_loadu_ps(a0 + k);
    FMA4(v, c00, c01, c02, c03);
    v = _mm256_loadu_ps(a1 + k);
    FMA4(v, c10, c11, c12, c13);
    v = _mm256_loadu_ps(a2 + k);
    FMA4(v, c20, c21, c22, c23);
  }
  if (tail) {
    __m256 b0 = _mm256_maskload_ps(w0 + kv, tmask), b1 = _mm256_maskload_ps(w1 + kv, tmask),
           b2 = _mm256_maskload_ps(w2 + kv, tmask), b3 = _mm256_maskload_ps(w3 + kv, tmask);
    if (copy) {
      _mm256_store_ps(p0 + kv, b0);
      _mm256_store_ps(p1 + kv, b1);
      _mm256_store_ps(p2 + kv, b2);
      _mm256_store_ps(p3 + kv, b3);
    }
    __m256 v = _mm256_maskload_ps(a0 + kv, tmask);
    FMA4(v, c00, c01, c02, c03);
    v = _mm256_maskload_ps(a1 + kv, tmask);
    FMA4(v, c10, c11, c12, c13);
    v = _mm256_maskload_ps(a2 + kv, tmask);
    FMA4(v, c20, c21, c22, c23);
  }
  s[0] = hsum4(c00, c01, c02, c03);
  s[1] = hsum4(c10, c11, c12, c13);
  s[2] = hsum4(c20, c21, c22, c23);
}

/* M >= 2 rows in blocks of 3-row tiles (its own function: only it has the panel's frame) */
T __attribute__((noinline)) static void mm_tiles(const float *x, int M, int K, int ldx,
                                                 const float *W, int N, int ldw, float *y,
                                                 int ldy) {
  const int kv = K & ~7, tail = K & 7;
  const __m256i tmask = lanes_mask(tail);
  /* the packed panel: 4 weight rows [4, kp], kp = K rounded up to 16 floats (whole lines) */
  _Alignas(64) float panel[4 * PACK_MAX_K];
  const size_t kp = ((size_t)K + 15) & ~(size_t)15;
  /* M rows in equal blocks of a multiple of 3 rows (whole tiles), each at most about
   * X_BLOCK_BYTES of x or MIN_BLOCK_ROWS rows, the larger */
  size_t max_rows = X_BLOCK_BYTES / ((size_t)K * sizeof(float));
  if (max_rows < MIN_BLOCK_ROWS) max_rows = MIN_BLOCK_ROWS;
  const size_t n_blocks = ((size_t)M + max_rows - 1) / max_rows;
  const int block = (int)(((size_t)M + n_blocks - 1) / n_blocks + 2) / 3 * 3;
  for (int r0 = 0; r0 < M; r0 += block) {
    int r1 = r0 + block < M ? r0 + block : M;
    /* (such a block's first tile has 3 rows: it reads the whole weight rows) */
    const int pack = r1 - r0 >= PACK_MIN_ROWS && K <= PACK_MAX_K;
    /* With at most SHARE_MAX_TILES tiles of 2-3 rows (a decode batch, a short prompt) the
     * weights' stream from DRAM, not the arithmetic, bounds the block: each tile prefetches a
     * share of the next four weight rows, so DRAM streams while every tile computes
     * (bench_kernels --cpu avx2, "weights x 8 rows" and "x 16 rows, from DRAM"). With more,
     * the first tile prefetches ahead in its own rows and the later ones read them from cache
     * (sharing measured no faster at 24 rows and more). */
    const int tiles = (r1 - r0) / 3 + ((r1 - r0) % 3 >= 2), share = tiles <= SHARE_MAX_TILES;
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      const float *w0 = W + (size_t)o * ldw, *w1 = oc > 1 ? w0 + ldw : w0,
                  *w2 = oc > 2 ? w0 + 2 * (size_t)ldw : w0, *w3 = oc > 3 ? w0 + 3 * (size_t)ldw : w0;
      const float *const w[4] = {w0, w1, w2, w3};
      /* the panel rows of w0..w3 (outputs past oc repeat output o, as the source rows do) */
      float *p0 = panel, *p1 = oc > 1 ? panel + kp : panel, *p2 = oc > 2 ? panel + 2 * kp : panel,
            *p3 = oc > 3 ? panel + 3 * kp : panel;
      for (int r = r0; r < r1; r += 3) {
        int rc = r1 - r < 3 ? r1 - r : 3; /* rows past rc repeat row r (results discarded) */
        if (rc == 1) { /* a last lone row: the same per-output arithmetic, a third of the work */
          const float *a0 = x + (size_t)r * ldx;
          __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
          for (int k = 0; k < kv; k += 8) {
            __m256 v = _mm256_loadu_ps(a0 + k);
            c0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w0 + k), c0);
            c1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w1 + k), c1);
            c2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w2 + k), c2);
            c3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w3 + k), c3);
          }
          if (tail) {
            __m256 v = _mm256_maskload_ps(a0 + kv, tmask);
            c0 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w0 + kv, tmask), c0);
            c1 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w1 + kv, tmask), c1);
            c2 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w2 + kv, tmask), c2);
            c3 = _mm256_fmadd_ps(v, _mm256_maskload_ps(w3 + kv, tmask), c3);
          }
          store_outputs(y + (size_t)r * ldy + o, hsum4(c0, c1, c2, c3), oc);
          continue;
        }
        const float *a0 = x + (size_t)r * ldx, *a1 = rc > 1 ? a0 + ldx : a0,
                    *a2 = rc > 2 ? a0 + 2 * (size_t)ldx : a0;
        __m128 s[3];
        uintptr_t pf[4] = {0, 0, 0, 0};
        int npf = 0;
        if (share) /* the next four outputs' rows tile, tile + tiles, ... */
          for (int j = (r - r0) / 3; j < 4; j += tiles)
            pf[npf++] = (uintptr_t)W + (size_t)(o + 4 + j) * (size_t)ldw * sizeof(float);
        else if (r == r0)
          for (; npf < 4; npf++) pf[npf] = (uintptr_t)w[npf] + PREFETCH_BYTES;
        if (r > r0) /* later tiles find these weight rows (or their panel) in L1 */
          tile_3x4(a0, a1, a2, w0, w1, w2, w3, kv, tail, tmask, npf, pf, 0, p0, p1, p2, p3, s);
        else if (pack) /* the first tile also writes the panel the later ones read */
          tile_3x4(a0, a1, a2, w0, w1, w2, w3, kv, tail, tmask, npf, pf, 1, p0, p1, p2, p3, s);
        else
          tile_3x4(a0, a1, a2, w0, w1, w2, w3, kv, tail, tmask, npf, pf, 0, p0, p1, p2, p3, s);
        if (pack && r == r0) w0 = p0, w1 = p1, w2 = p2, w3 = p3;
        store_outputs(y + (size_t)r * ldy + o, s[0], oc);
        if (rc > 1) store_outputs(y + (size_t)(r + 1) * ldy + o, s[1], oc);
        if (rc > 2) store_outputs(y + (size_t)(r + 2) * ldy + o, s[2], oc);
      }
    }
  }
}

T static void mm_avx2(const float *x, int M, int K, int ldx, const float *W, int N, int ldw,
                      float *y, int ldy) {
  if (M == 1)
    mm_row(x, K, W, N, ldw, y);
  else
    mm_tiles(x, M, K, ldx, W, N, ldw, y, ldy);
}
#undef FMA4

/* ---- softmax ---------------------------------------------------------------------------- */

T static float max_avx2(const float *x, int n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

/* exp(x) as xl_exp_portable in 8 lanes: 0 below -87.3, +Inf above 88.72, NaN for NaN. The
 * argument is clamped to [-87.3, 88] before the float-to-int conversion, so 2^n is always a
 * normal float built from its exponent bits; the special lanes are blended in afterwards. */
T static inline __m256 exp_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.72f), _CMP_GT_OQ);
  __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  __m256 xin = x;
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f)); /* NaN lanes become -87.3 */
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(e)); /* n in [-126, 127]: 2^n is normal */
  p = _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), over);
  p = _mm256_blendv_ps(p, xin, nan);
  return _mm256_andnot_ps(under, p);
}

T static float exp_sum_avx2(float *x, int n, float shift) {
  __m256 s = _mm256_setzero_ps(), sh = _mm256_set1_ps(shift);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    _mm256_storeu_ps(x + i, e);
    s = _mm256_add_ps(s, e);
  }
  if (i < n) {
    __m256i k = lanes_mask(n - i);
    __m256 e = exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), sh));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(k));
    _mm256_maskstore_ps(x + i, k, e);
    s = _mm256_add_ps(s, e);
  }
  return hsum(s);
}

T static float sum_exp_avx2(const float *x, int n, float shift) {
  __m256 s = _mm256_setzero_ps(), sh = _mm256_set1_ps(shift);
  int i = 0;
  for (; i + 8 <= n; i += 8) s = _mm256_add_ps(s, exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh)));
  if (i < n) {
    __m256i k = lanes_mask(n - i);
    __m256 e = exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), sh));
    s = _mm256_add_ps(s, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
  }
  return hsum(s);
}

/* ---- decode-step attention products ----------------------------------------------------- */

/* s[0..n) = sum_k q[k] * rows[k * ld + 0..n), k in order, each sum started at 0 and advanced
 * by FMA: 64 sums held in registers while the dh rows stream past. */
#define DOT_AHEAD 4
T static void dot_rows_avx2(const float *q, int dh, const float *rows, size_t ld, int n, float *s) {
  int j = 0;
  for (; j + 64 <= n; j += 64) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      /* the 4 lines of the row DOT_AHEAD rows on (rows are ld apart: a late stride for the
       * hardware prefetchers); past the last row they are only hints */
      const char *ahead = (const char *)((uintptr_t)r + DOT_AHEAD * ld * sizeof(float));
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
      _mm_prefetch(ahead + 128, _MM_HINT_T0);
      _mm_prefetch(ahead + 192, _MM_HINT_T0);
      __m256 qk = _mm256_broadcast_ss(q + k);
      a0 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r), a0);
      a1 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 8), a1);
      a2 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 16), a2);
      a3 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 24), a3);
      a4 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 32), a4);
      a5 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 40), a5);
      a6 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 48), a6);
      a7 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 56), a7);
    }
    _mm256_storeu_ps(s + j, a0);
    _mm256_storeu_ps(s + j + 8, a1);
    _mm256_storeu_ps(s + j + 16, a2);
    _mm256_storeu_ps(s + j + 24, a3);
    _mm256_storeu_ps(s + j + 32, a4);
    _mm256_storeu_ps(s + j + 40, a5);
    _mm256_storeu_ps(s + j + 48, a6);
    _mm256_storeu_ps(s + j + 56, a7);
  }
  for (; j + 16 <= n; j += 16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      __m256 qk = _mm256_broadcast_ss(q + k);
      a0 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r), a0);
      a1 = _mm256_fmadd_ps(qk, _mm256_loadu_ps(r + 8), a1);
    }
    _mm256_storeu_ps(s + j, a0);
    _mm256_storeu_ps(s + j + 8, a1);
  }
  for (; j < n; j += 8) {
    __m256i m = lanes_mask(n - j);
    __m256 a = _mm256_setzero_ps();
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld)
      a = _mm256_fmadd_ps(_mm256_broadcast_ss(q + k), _mm256_maskload_ps(r, m), a);
    _mm256_maskstore_ps(s + j, m, a);
  }
}

/* 8 vectors (64 floats from out + base; dh a multiple of 32) accumulated in registers over n
 * rows: out[e] +=
 * p[head(e) * p_stride + j] * rows[j * ld + e], j = 0..n-1 in order, one FMA per term. Named
 * accumulators, not an array: GCC keeps an array's copy in memory up to date every row. */
#define MIX_AHEAD 8
T static void mix_chunk_8(float *out, int base, const float *p, size_t p_stride,
                          const float *rows, size_t ld, int n, int dh) {
  float *o = out + base;
  __m256 a0 = _mm256_loadu_ps(o), a1 = _mm256_loadu_ps(o + 8), a2 = _mm256_loadu_ps(o + 16),
         a3 = _mm256_loadu_ps(o + 24), a4 = _mm256_loadu_ps(o + 32), a5 = _mm256_loadu_ps(o + 40),
         a6 = _mm256_loadu_ps(o + 48), a7 = _mm256_loadu_ps(o + 56);
  /* dh % 32 == 0 (the caller's condition): vectors 0-3 share one head, 4-7 one head */
  const float *p0 = p + (size_t)(base / dh) * p_stride, *p4 = p + (size_t)((base + 32) / dh) * p_stride;
  const float *r = rows + base;
  for (int j = 0; j < n; j++, r += ld) {
    /* the chunk's 4 lines of a row MIX_AHEAD rows on: rows are far apart (a full H*dh row
     * each), a stride the hardware prefetchers follow late */
    const char *ahead = (const char *)((uintptr_t)r + MIX_AHEAD * ld * sizeof(float));
    _mm_prefetch(ahead, _MM_HINT_T0);
    _mm_prefetch(ahead + 64, _MM_HINT_T0);
    _mm_prefetch(ahead + 128, _MM_HINT_T0);
    _mm_prefetch(ahead + 192, _MM_HINT_T0);
    const __m256 b0 = _mm256_broadcast_ss(p0 + j), b4 = _mm256_broadcast_ss(p4 + j);
    a0 = _mm256_fmadd_ps(b0, _mm256_loadu_ps(r), a0);
    a1 = _mm256_fmadd_ps(b0, _mm256_loadu_ps(r + 8), a1);
    a2 = _mm256_fmadd_ps(b0, _mm256_loadu_ps(r + 16), a2);
    a3 = _mm256_fmadd_ps(b0, _mm256_loadu_ps(r + 24), a3);
    a4 = _mm256_fmadd_ps(b4, _mm256_loadu_ps(r + 32), a4);
    a5 = _mm256_fmadd_ps(b4, _mm256_loadu_ps(r + 40), a5);
    a6 = _mm256_fmadd_ps(b4, _mm256_loadu_ps(r + 48), a6);
    a7 = _mm256_fmadd_ps(b4, _mm256_loadu_ps(r + 56), a7);
  }
  _mm256_storeu_ps(o, a0);
  _mm256_storeu_ps(o + 8, a1);
  _mm256_storeu_ps(o + 16, a2);
  _mm256_storeu_ps(o + 24, a3);
  _mm256_storeu_ps(o + 32, a4);
  _mm256_storeu_ps(o + 40, a5);
  _mm256_storeu_ps(o + 48, a6);
  _mm256_storeu_ps(o + 56, a7);
}

/* one vector (8 floats from out + base) of the same sums */
T static void mix_chunk_1(float *out, int base, const float *p, size_t p_stride,
                          const float *rows, size_t ld, int n, int dh) {
  __m256 a = _mm256_loadu_ps(out + base);
  const float *ph = p + (size_t)(base / dh) * p_stride, *r = rows + base;
  for (int j = 0; j < n; j++, r += ld)
    a = _mm256_fmadd_ps(_mm256_broadcast_ss(ph + j), _mm256_loadu_ps(r), a);
  _mm256_storeu_ps(out + base, a);
}

T static void axpy_avx2(float *y, float a, const float *x, int n) {
  __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

T static void mix_rows_avx2(float *out, const float *p, size_t p_stride, const float *rows,
                            size_t ld, int n, int H, int dh) {
  int hd = H * dh, e = 0;
  if (dh % 8 == 0) {
    if (dh % 32 == 0)
      for (; e + 64 <= hd; e += 64) mix_chunk_8(out, e, p, p_stride, rows, ld, n, dh);
    for (; e < hd; e += 8) mix_chunk_1(out, e, p, p_stride, rows, ld, n, dh);
    return;
  }
  for (int j = 0; j < n; j++) /* one key at a time, every head */
    for (int h = 0; h < H; h++)
      axpy_avx2(out + (size_t)h * dh, p[(size_t)h * p_stride + j],
                rows + (size_t)j * ld + (size_t)h * dh, dh);
}

/* ---- LayerNorm, ReLU, bias -------------------------------------------------------------- */

/* Mean and biased variance as 8-lane float sums reduced by hsum, then (x - mean) * inv * g + b. */
T static void layer_norm_avx2(const float *x, int rows, int dim, const float *g, const float *b,
                              float eps, float *y) {
  const int dv = dim & ~7, tail = dim & 7;
  const __m256i tm = lanes_mask(tail);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * dim;
    float *yr = y + (size_t)r * dim;
    __m256 s = _mm256_setzero_ps();
    for (int j = 0; j < dv; j += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(xr + j));
    if (tail) s = _mm256_add_ps(s, _mm256_maskload_ps(xr + dv, tm));
    const float mu = hsum(s) / (float)dim;
    const __m256 vmu = _mm256_set1_ps(mu);
    __m256 v = _mm256_setzero_ps();
    for (int j = 0; j < dv; j += 8) {
      __m256 d = _mm256_sub_ps(_mm256_loadu_ps(xr + j), vmu);
      v = _mm256_fmadd_ps(d, d, v);
    }
    if (tail) {
      __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + dv, tm), vmu),
                               _mm256_castsi256_ps(tm));
      v = _mm256_fmadd_ps(d, d, v);
    }
    const float var = hsum(v) / (float)dim; /* biased, as torch */
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sqrt((double)var + eps)));
    for (int j = 0; j < dv; j += 8) {
      __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + j), vmu), inv);
      _mm256_storeu_ps(yr + j, _mm256_fmadd_ps(d, _mm256_loadu_ps(g + j), _mm256_loadu_ps(b + j)));
    }
    if (tail) {
      __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + dv, tm), vmu), inv);
      _mm256_maskstore_ps(yr + dv, tm, _mm256_fmadd_ps(d, _mm256_maskload_ps(g + dv, tm),
                                                       _mm256_maskload_ps(b + dv, tm)));
    }
  }
}

T static void relu_avx2(float *x, size_t n) {
  const __m256 z = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) /* max(0, x) keeps a NaN in x: maxps returns its 2nd operand */
    _mm256_storeu_ps(x + i, _mm256_max_ps(z, _mm256_loadu_ps(x + i)));
  for (; i < n; i++) x[i] = x[i] < 0.0f ? 0.0f : x[i];
}

T static void add_bias_avx2(float *y, int rows, int n, int ldy, const float *b) {
  for (int r = 0; r < rows; r++) {
    float *yr = y + (size_t)r * ldy;
    int j = 0;
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(yr + j, _mm256_add_ps(_mm256_loadu_ps(yr + j), _mm256_loadu_ps(b + j)));
    for (; j < n; j++) yr[j] += b[j];
  }
}

/* 8 values of p and b a step, loaded from p - k - 7 and turned end for end in registers */
T static void add_reversed_avx2(float *s, const float *p, const float *b, int n, float scale) {
  const __m256i rev = _mm256_set_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 sc = _mm256_set1_ps(scale);
  int k = 0;
  for (; k + 8 <= n; k += 8) {
    __m256 t = _mm256_add_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(p - k - 7), rev),
                             _mm256_permutevar8x32_ps(_mm256_loadu_ps(b - k - 7), rev));
    _mm256_storeu_ps(s + k, _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(s + k), t), sc));
  }
  for (; k < n; k++) s[k] = (s[k] + (p[-k] + b[-k])) * scale;
}

const xl_kernels xl_kernels_avx2 = {
  .name = "avx2",
  .matmul_nt = mm_avx2,
  .max = max_avx2,
  .exp_sum = exp_sum_avx2,
  .sum_exp = sum_exp_avx2,
  .dot_rows = dot_rows_avx2,
  .mix_rows = mix_rows_avx2,
  .layer_norm = layer_norm_avx2,
  .relu = relu_avx2,
  .add_bias = add_bias_avx2,
  .add_reversed = add_reversed_avx2,
};
#undef T
#endif /* __x86_64__ */
