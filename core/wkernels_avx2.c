/*
 * wkernels_avx2.c: the AVX2+FMA family of the narrow-weight kernels (wkernels.h). Tiles of up
 * to 4 rows x 2 outputs (a lone decode row: 1 row x 4 outputs), 16 registers being what AVX2
 * has: each 8-weight chunk of the weight rows is widened (bf16) or dequantised (int8, times
 * the block's scale; int4: a block's 16 bytes at a time, low then high nibbles, minus 8,
 * times the scale) once and multiplied into the rows' accumulators; each (row, output)
 * accumulator is summed by the same tree, run for 4 accumulators at once (sum4), so a
 * row's result does not depend on the batch and small-K matrices do not spend their time on
 * reductions. Weights are prefetched in software one tile ahead (AHEAD_MIN bytes at least),
 * one prefetch per cache line along the matrix's bytes, whatever the element size. Compiled
 * with target attributes, chosen at run time with the AVX2 F32 family; x86-64 only. Any
 * thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "wkernels.h"

#define T __attribute__((target("avx2,fma"), always_inline)) static inline
#define ROW_BLOCK 64   /* rows of x kept hot while the weight rows stream past */
#define AHEAD_MIN 4096 /* least prefetch distance in bytes (the next tile's when it is larger) */
#define LINE 64        /* cache line bytes */
#define L 8            /* lanes */

enum { BF16 = 0, Q8 = 1, Q4 = 2 }; /* the weight types (compile-time constants below) */

/* L weights of a row from column k as F32; s: the row's block scales (int8, int4) */
T __m256 load_w(int type, const void *w, const float *s, int k) {
  if (type == Q4) { /* k is a multiple of 8: 8 bytes of the block, one nibble of each */
    const int j = k % XL_Q8_BLOCK;
    const __m128i b = _mm_loadl_epi64((const __m128i *)((const uint8_t *)w +
                                                        (k / XL_Q8_BLOCK) * XL_Q4_BLOCK_BYTES +
                                                        (j & 15)));
    __m256i v = _mm256_cvtepu8_epi32(b);
    v = j >= 16 ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, _mm256_set1_epi32(15));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, _mm256_set1_epi32(8))),
                         _mm256_set1_ps(s[k / XL_Q8_BLOCK]));
  }
  if (type == BF16) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  __m128i q = _mm_loadl_epi64((const __m128i *)((const int8_t *)w + k));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
                       _mm256_set1_ps(s[k / XL_Q8_BLOCK]));
}

/* An int4 block's 32 weights of a row as four chunks of L, in the order of k: bytes 0-7 and
 * 8-15 low nibbles, then the same bytes' high nibbles (one 16-byte load for the four). Each
 * weight is (q - 8) * s rounded once, as load_w makes it: fma(q, s, -8 s) rounds the same
 * exact product (q and -8 s are exact), one operation fewer than a subtraction and a product. */
T void load_q4_block(const uint8_t *blk, float s, __m256 out[4]) {
  const __m128i b = _mm_loadu_si128((const __m128i *)blk);
  const __m256i lo = _mm256_cvtepu8_epi32(b), hi = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b));
  const __m256i m = _mm256_set1_epi32(15);
  const __m256 sv = _mm256_set1_ps(s), off = _mm256_set1_ps(-8.0f * s);
  out[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(lo, m)), sv, off);
  out[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(hi, m)), sv, off);
  out[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(lo, 4)), sv, off);
  out[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(hi, 4)), sv, off);
}

/* lane j = the sum of the 8 lanes of c[j], by one fixed tree: halves (i + (i+4)), then
 * (0 + 2) and (1 + 3), then those two; four accumulators at once */
T __m128 sum4(__m256 c0, __m256 c1, __m256 c2, __m256 c3) {
  __m128 x0 = _mm_add_ps(_mm256_castps256_ps128(c0), _mm256_extractf128_ps(c0, 1));
  __m128 x1 = _mm_add_ps(_mm256_castps256_ps128(c1), _mm256_extractf128_ps(c1, 1));
  __m128 x2 = _mm_add_ps(_mm256_castps256_ps128(c2), _mm256_extractf128_ps(c2, 1));
  __m128 x3 = _mm_add_ps(_mm256_castps256_ps128(c3), _mm256_extractf128_ps(c3, 1));
  /* [x0_0 + x0_2, x0_1 + x0_3, x1_0 + x1_2, x1_1 + x1_3], the same for x2, x3 */
  __m128 p01 = _mm_add_ps(_mm_shuffle_ps(x0, x1, _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm_shuffle_ps(x0, x1, _MM_SHUFFLE(3, 2, 3, 2)));
  __m128 p23 = _mm_add_ps(_mm_shuffle_ps(x2, x3, _MM_SHUFFLE(1, 0, 1, 0)),
                          _mm_shuffle_ps(x2, x3, _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm_add_ps(_mm_shuffle_ps(p01, p23, _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm_shuffle_ps(p01, p23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* y[r + i, o + j] for i < rc, j < oc (rc <= RB, oc <= OB; missing ones repeat the first) */
T void tile(int type, int RB, int OB, const float *x, int rc, int ldx, const void *W,
            const float *S, int nb, int ldw, int o, int oc, int K, int prefetch, float *y,
            int ldy) {
  const float *a[4];
  const char *w[4];
  const float *s[4];
  const size_t esz = type == BF16 ? 2 : 1; /* bytes per weight (int4: per two) */
  const size_t row_bytes = type == Q4 ? xl_q4_row_bytes(ldw) : (size_t)ldw * esz;
  const size_t chunk_bytes = type == Q4 ? L / 2 : L * esz;
  for (int i = 0; i < RB; i++) a[i] = x + (size_t)(i < rc ? i : 0) * ldx;
  for (int j = 0; j < OB; j++) {
    size_t row = (size_t)o + (j < oc ? j : 0);
    w[j] = (const char *)W + row * row_bytes;
    s[j] = type != BF16 ? S + row * nb : NULL;
  }
  /* the prefetch stream: the lines the tile reads, as it reads them, a tile or more ahead */
  const size_t tile_bytes = (size_t)OB * row_bytes, step = (size_t)OB * chunk_bytes;
  uintptr_t pf = (uintptr_t)w[0] + (tile_bytes > AHEAD_MIN ? tile_bytes : AHEAD_MIN), pf_end = pf;
  __m256 acc[4][4];
  for (int i = 0; i < RB; i++)
    for (int j = 0; j < OB; j++) acc[i][j] = _mm256_setzero_ps();
  const int kv = K & ~(L - 1);
  int k0 = 0;
  if (type == Q4) /* whole blocks: the same products in the same order, four chunks a load */
    for (; k0 + XL_Q8_BLOCK <= kv; k0 += XL_Q8_BLOCK) {
      if (prefetch)
        for (pf_end += 4 * step; pf < pf_end; pf += LINE)
          _mm_prefetch((const char *)pf, _MM_HINT_T0);
      for (int j = 0; j < OB; j++) { /* an output at a time: 4 weight registers, not 4 x OB */
        __m256 b[4];
        load_q4_block((const uint8_t *)w[j] + (k0 / XL_Q8_BLOCK) * XL_Q4_BLOCK_BYTES,
                      s[j][k0 / XL_Q8_BLOCK], b);
        for (int c = 0; c < 4; c++)
          for (int i = 0; i < RB; i++)
            acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(a[i] + k0 + c * L), b[c], acc[i][j]);
      }
    }
  for (int k = k0; k < kv; k += L) {
    __m256 b[4];
    if (prefetch) /* integer addresses: past the matrix's end they are only hints */
      for (pf_end += step; pf < pf_end; pf += LINE) _mm_prefetch((const char *)pf, _MM_HINT_T0);
    for (int j = 0; j < OB; j++) b[j] = load_w(type, w[j], s[j], k);
    for (int i = 0; i < RB; i++) {
      __m256 v = _mm256_loadu_ps(a[i] + k);
      for (int j = 0; j < OB; j++) acc[i][j] = _mm256_fmadd_ps(v, b[j], acc[i][j]);
    }
  }
  if (kv < K) { /* the tail, zero-padded to L lanes */
    __m256 b[4];
    for (int j = 0; j < OB; j++) {
      _Alignas(32) char pad[2 * L] = {0};
      if (type == Q4) { /* rows are whole blocks: the chunk is there, the x lanes past K 0 */
        b[j] = load_w(type, w[j], s[j], kv);
        continue;
      }
      memcpy(pad, w[j] + kv * esz, (size_t)(K - kv) * esz);
      b[j] = load_w(type, pad, type == Q8 ? s[j] + kv / XL_Q8_BLOCK : NULL, 0);
    }
    for (int i = 0; i < RB; i++) {
      _Alignas(32) float xp[L] = {0};
      memcpy(xp, a[i] + kv, (size_t)(K - kv) * sizeof *xp);
      __m256 v = _mm256_load_ps(xp);
      for (int j = 0; j < OB; j++) acc[i][j] = _mm256_fmadd_ps(v, b[j], acc[i][j]);
    }
  }
  float sums[16]; /* sums[i * OB + j]: row i, output j; four accumulators at a time */
  _Pragma("GCC unroll 4")
  for (int n = 0; n < RB * OB; n += 4)
    _mm_storeu_ps(sums + n, sum4(acc[n / OB][n % OB], acc[(n + 1) / OB][(n + 1) % OB],
                                 acc[(n + 2) / OB][(n + 2) % OB], acc[(n + 3) / OB][(n + 3) % OB]));
  for (int i = 0; i < rc; i++)
    for (int j = 0; j < oc; j++) y[(size_t)i * ldy + o + j] = sums[i * OB + j];
}

T void matmul(int type, const float *x, int M, int K, int ldx, const void *W, const float *S,
              int N, int ldw, float *y, int ldy) {
  const int nb = xl_q8_blocks(ldw);
  if (M == 1) { /* a lone row (decode): 4 weight rows at a time, the same per-element sums */
    for (int o = 0; o < N; o += 4)
      tile(type, 1, 4, x, 1, ldx, W, S, nb, ldw, o, N - o < 4 ? N - o : 4, K, 1, y, ldy);
    return;
  }
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    for (int o = 0; o < N; o += 2) {
      int oc = N - o < 2 ? N - o : 2;
      for (int r = r0; r < r1; r += 4) {
        int rc = r1 - r < 4 ? r1 - r : 4;
        tile(type, 4, 2, x + (size_t)r * ldx, rc, ldx, W, S, nb, ldw, o, oc, K, r == r0,
             y + (size_t)r * ldy, ldy);
      }
    }
  }
}

__attribute__((target("avx2,fma"))) static void matmul_bf16(const float *x, int M, int K,
                                                            int ldx, const uint16_t *W, int N,
                                                            int ldw, float *y, int ldy) {
  matmul(BF16, x, M, K, ldx, W, NULL, N, ldw, y, ldy);
}

__attribute__((target("avx2,fma"))) static void matmul_q8(const float *x, int M, int K, int ldx,
                                                          const int8_t *W, const float *S, int N,
                                                          int ldw, float *y, int ldy) {
  matmul(Q8, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

__attribute__((target("avx2,fma"))) static void matmul_q4(const float *x, int M, int K, int ldx,
                                                          const uint8_t *W, const float *S, int N,
                                                          int ldw, float *y, int ldy) {
  matmul(Q4, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

const xl_wkernels xl_wkernels_avx2 = {"avx2", matmul_bf16, matmul_q8, matmul_q4};
#undef T
#endif /* __x86_64__ */
