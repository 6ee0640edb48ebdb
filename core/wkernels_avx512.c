/*
 * wkernels_avx512.c: the AVX-512F family of the narrow-weight kernels (wkernels.h). Each
 * 16-weight chunk of a weight row is widened (bf16: shift into the high half) or dequantised
 * (int8: sign-extend, convert, times the block's scale; int4: a whole block of 32 at a time,
 * its nibbles looked up in a 16-entry table of (n - 8) * scale by vpermps) once and multiplied into the
 * accumulators of the rows of x in the tile (4 rows x 4 outputs; a lone decode row 1 x 4);
 * each (row, output) accumulator is summed by one fixed tree (the order of
 * _mm512_reduce_add_ps), run for the tile's 16 or 4 accumulators at once as a transposed
 * reduction, so small-K matrices (the adaptive softmax's tail clusters, K = 16 or 64) spend
 * their time on loads rather than on reductions, and a lone row's result equals that row's
 * result in any batch. Weights are prefetched in software one tile ahead (AHEAD_MIN bytes at
 * least), one prefetch per cache line along the matrix's bytes, so the distance suits every
 * element size and row length. Compiled with target attributes, chosen at run time
 * with the AVX-512 F32 family; x86-64 only. Any thread.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "wkernels.h"

#define T __attribute__((target("avx512f"), always_inline)) static inline
#define ROW_BLOCK 64  /* rows of x kept hot while the weight rows stream past */
#define AHEAD_MIN 4096 /* least prefetch distance in bytes (the next tile's when it is larger) */
#define LINE 64       /* cache line bytes */
#define L 16          /* lanes */

enum { BF16 = 0, Q8 = 1, Q4 = 2 }; /* the weight types (compile-time constants below) */

/* ---- the fixed reduction tree: lanes i + (i+8), then + (i+4), then + (i+2), then + (i+1) --- */

/* lanes 0-7: a[i] + a[i+8]; lanes 8-15: b[i] + b[i+8] */
T __m512 fold_halves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

/* x, y from fold_halves: 128-bit lane k holds the 4 partial sums (i + (i+4)) of the k-th of
 * the four vectors folded into x (k = 0, 1) and y (k = 2, 3) */
T __m512 fold_quarters(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

/* within each 128-bit lane: [p0+p2, p1+p3, q0+q2, q1+q3] */
T __m512 fold_pairs(__m512 p, __m512 q) {
  return _mm512_add_ps(_mm512_shuffle_ps(p, q, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(p, q, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* within each 128-bit lane: [r0+r1, r2+r3, s0+s1, s2+s3] */
T __m512 fold_last(__m512 r, __m512 s) {
  return _mm512_add_ps(_mm512_shuffle_ps(r, s, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(r, s, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* the sums of 16 accumulators: lane n holds the sum of acc[n] */
T __m512 sum16(const __m512 acc[16]) {
  __m512 v[16]; /* v[4 (n % 4) + n / 4] = acc[n]: the transposed tree puts v[4j + i] in 4i + j */
  _Pragma("GCC unroll 16")
  for (int n = 0; n < 16; n++) v[4 * (n & 3) + (n >> 2)] = acc[n];
  __m512 z0 = fold_quarters(fold_halves(v[0], v[1]), fold_halves(v[2], v[3]));
  __m512 z1 = fold_quarters(fold_halves(v[4], v[5]), fold_halves(v[6], v[7]));
  __m512 z2 = fold_quarters(fold_halves(v[8], v[9]), fold_halves(v[10], v[11]));
  __m512 z3 = fold_quarters(fold_halves(v[12], v[13]), fold_halves(v[14], v[15]));
  return fold_last(fold_pairs(z0, z1), fold_pairs(z2, z3));
}

/* the sums of 4 accumulators in lanes 0, 4, 8, 12 (the same tree) */
T __m512 sum4(const __m512 acc[4]) {
  __m512 z = fold_quarters(fold_halves(acc[0], acc[1]), fold_halves(acc[2], acc[3]));
  __m512 r = fold_pairs(z, z);
  return fold_last(r, r);
}

/* L weights of a row from column k as F32; s: the row's block scales (int8, int4) */
T __m512 load_w(int type, const void *w, const float *s, int k) {
  if (type == BF16) { /* (int4 goes through q4_block) */
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  __m128i q = _mm_loadu_si128((const __m128i *)((const int8_t *)w + k));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)),
                       _mm512_set1_ps(s[k / XL_Q8_BLOCK]));
}

/* int4: one block (32 weights, 16 bytes) of each of the tile's OB weight rows, dequantised
 * through a table (lane n of lut: (float)(n - 8) * scale, the value the generic path computes)
 * looked up by vpermps, which reads only an index's low 4 bits: the low nibbles need no mask.
 * Adds the block's two chunks into the accumulators in the generic path's order (weights 0-15,
 * then 16-31), so the sums are the same; lanes of x past K (n < 32) are zeros. */
T void q4_block(int RB, int OB, const float *const *a, const char *const *w,
                const float *const *s, int k, int n, __m512 *acc) {
  const __m512 iota = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
  const __mmask16 m0 = n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1u);
  const __mmask16 m1 = n >= 32 ? 0xFFFF : n > 16 ? (__mmask16)((1u << (n - 16)) - 1u) : 0;
  __m512 lo[4], hi[4];
  _Pragma("GCC unroll 16")
  for (int j = 0; j < OB; j++) {
    const __m512i v = _mm512_cvtepu8_epi32(
        _mm_loadu_si128((const __m128i *)(const void *)(w[j] + k / 2)));
    const __m512 lut = _mm512_mul_ps(iota, _mm512_set1_ps(s[j][k / XL_Q8_BLOCK]));
    lo[j] = _mm512_permutexvar_ps(v, lut);
    hi[j] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
  }
  _Pragma("GCC unroll 16")
  for (int i = 0; i < RB; i++) {
    const __m512 x0 = _mm512_maskz_loadu_ps(m0, a[i] + k);
    _Pragma("GCC unroll 16")
    for (int j = 0; j < OB; j++) acc[i * OB + j] = _mm512_fmadd_ps(x0, lo[j], acc[i * OB + j]);
  }
  if (!m1) return;
  _Pragma("GCC unroll 16")
  for (int i = 0; i < RB; i++) {
    const __m512 x1 = _mm512_maskz_loadu_ps(m1, a[i] + k + 16);
    _Pragma("GCC unroll 16")
    for (int j = 0; j < OB; j++) acc[i * OB + j] = _mm512_fmadd_ps(x1, hi[j], acc[i * OB + j]);
  }
}

/* y[i, o + j] for i < rc, j < oc (rc <= RB, oc <= OB; RB x OB is 4 x 4 or 1 x 4; missing rows
 * and outputs repeat the first). prefetch: fetch the matrix's bytes one tile ahead. */
T void tile(int type, int RB, int OB, const float *x, int rc, int ldx, const void *W,
            const float *S, int nb, int ldw, int o, int oc, int K, int prefetch, float *y,
            int ldy) {
  const float *a[4];
  const char *w[4];
  const float *s[4];
  const size_t esz = type == BF16 ? 2 : 1; /* bytes per weight (int4: per two) */
  const size_t row_bytes = type == Q4 ? xl_q4_row_bytes(ldw) : (size_t)ldw * esz;
  const size_t chunk_bytes = type == Q4 ? L / 2 : L * esz;
  _Pragma("GCC unroll 16")
  for (int i = 0; i < RB; i++) a[i] = x + (size_t)(i < rc ? i : 0) * ldx;
  _Pragma("GCC unroll 16")
  for (int j = 0; j < OB; j++) {
    size_t row = (size_t)o + (j < oc ? j : 0);
    w[j] = (const char *)W + row * row_bytes;
    s[j] = type != BF16 ? S + row * nb : NULL;
  }
  /* the prefetch stream: as many lines per chunk as the tile reads, ahead by a tile or more */
  const size_t tile_bytes = (size_t)OB * row_bytes, step = (size_t)OB * chunk_bytes;
  uintptr_t pf = (uintptr_t)w[0] + (tile_bytes > AHEAD_MIN ? tile_bytes : AHEAD_MIN);
  __m512 acc[16]; /* acc[i * OB + j]: row i, output j */
  _Pragma("GCC unroll 16")
  for (int n = 0; n < RB * OB; n++) acc[n] = _mm512_setzero_ps();
  if (type == Q4) { /* whole blocks, then the last (partial) one */
    const int kb = K & ~(XL_Q8_BLOCK - 1);
    for (int k = 0; k < kb; k += XL_Q8_BLOCK) {
      if (prefetch) {
        for (size_t b = 0; b < 2 * step; b += LINE) _mm_prefetch((const char *)(pf + b), _MM_HINT_T0);
        pf += 2 * step;
      }
      q4_block(RB, OB, a, w, s, k, XL_Q8_BLOCK, acc);
    }
    if (kb < K) q4_block(RB, OB, a, w, s, kb, K - kb, acc);
  }
  const int kv = type == Q4 ? 0 : K & ~(L - 1);
  for (int k = 0; k < kv; k += L) {
    if (prefetch) { /* integer addresses: past the matrix's end they are only hints */
      for (size_t b = 0; b < step; b += LINE) _mm_prefetch((const char *)(pf + b), _MM_HINT_T0);
      pf += step;
    }
    if (RB == 1) {
      __m512 v = _mm512_loadu_ps(a[0] + k);
      _Pragma("GCC unroll 16")
      for (int j = 0; j < OB; j++) acc[j] = _mm512_fmadd_ps(v, load_w(type, w[j], s[j], k), acc[j]);
    } else {
      __m512 b[4];
      _Pragma("GCC unroll 16")
      for (int j = 0; j < OB; j++) b[j] = load_w(type, w[j], s[j], k);
      _Pragma("GCC unroll 16")
      for (int i = 0; i < RB; i++) {
        __m512 v = _mm512_loadu_ps(a[i] + k);
        _Pragma("GCC unroll 16")
        for (int j = 0; j < OB; j++) acc[i * OB + j] = _mm512_fmadd_ps(v, b[j], acc[i * OB + j]);
      }
    }
  }
  if (type != Q4 && kv < K) { /* the tail, zero-padded to L lanes */
    const __mmask16 m = (__mmask16)((1u << (K - kv)) - 1u);
    _Pragma("GCC unroll 16")
    for (int j = 0; j < OB; j++) {
      _Alignas(64) char pad[2 * L] = {0};
      memcpy(pad, w[j] + kv * esz, (size_t)(K - kv) * esz);
      __m512 b = load_w(type, pad, type == Q8 ? s[j] + kv / XL_Q8_BLOCK : NULL, 0);
      _Pragma("GCC unroll 16")
      for (int i = 0; i < RB; i++)
        acc[i * OB + j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a[i] + kv), b, acc[i * OB + j]);
    }
  }
  float sums[16];
  if (RB * OB == 16) {
    _mm512_storeu_ps(sums, sum16(acc));
    _Pragma("GCC unroll 16")
    for (int i = 0; i < rc; i++)
      _Pragma("GCC unroll 16")
      for (int j = 0; j < oc; j++) y[(size_t)i * ldy + o + j] = sums[i * OB + j];
  } else { /* one row, 4 outputs */
    _mm512_storeu_ps(sums, sum4(acc));
    _Pragma("GCC unroll 16")
    for (int j = 0; j < oc; j++) y[o + j] = sums[4 * j];
  }
}

T void matmul(int type, const float *x, int M, int K, int ldx, const void *W, const float *S,
              int N, int ldw, float *y, int ldy) {
  const int nb = xl_q8_blocks(ldw);
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    if (r1 - r0 == 1) { /* a lone row (decode): 4 outputs a tile, prefetching */
      const float *xr = x + (size_t)r0 * ldx;
      float *yr = y + (size_t)r0 * ldy;
      for (int o = 0; o < N; o += 4)
        tile(type, 1, 4, xr, 1, ldx, W, S, nb, ldw, o, N - o < 4 ? N - o : 4, K, 1, yr, ldy);
      continue;
    }
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      for (int r = r0; r < r1; r += 4) {
        int rc = r1 - r < 4 ? r1 - r : 4;
        const float *xr = x + (size_t)r * ldx;
        float *yr = y + (size_t)r * ldy;
        if (rc == 1) /* the block's last row alone: the same per-element arithmetic */
          tile(type, 1, 4, xr, 1, ldx, W, S, nb, ldw, o, oc, K, 0, yr, ldy);
        else
          tile(type, 4, 4, xr, rc, ldx, W, S, nb, ldw, o, oc, K, r == r0, yr, ldy);
      }
    }
  }
}

__attribute__((target("avx512f"))) static void matmul_bf16(const float *x, int M, int K, int ldx,
                                                           const uint16_t *W, int N, int ldw,
                                                           float *y, int ldy) {
  matmul(BF16, x, M, K, ldx, W, NULL, N, ldw, y, ldy);
}

__attribute__((target("avx512f"))) static void matmul_q8(const float *x, int M, int K, int ldx,
                                                         const int8_t *W, const float *S, int N,
                                                         int ldw, float *y, int ldy) {
  matmul(Q8, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

__attribute__((target("avx512f"))) static void matmul_q4(const float *x, int M, int K, int ldx,
                                                         const uint8_t *W, const float *S, int N,
                                                         int ldw, float *y, int ldy) {
  matmul(Q4, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

const xl_wkernels xl_wkernels_avx512 = {"avx512", matmul_bf16, matmul_q8, matmul_q4};
#undef T
#endif /* __x86_64__ */
