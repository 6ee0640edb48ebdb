/*
 * wkernels_avx512.c: the AVX-512F family of the narrow-weight kernels (wkernels.h). Tiles of
 * up to 4 rows x 4 outputs: each 16-weight chunk of the 4 weight rows is widened (bf16: shift
 * into the high half) or dequantised (int8: sign-extend, convert, times the block's scale) once
 * and multiplied into the 4 rows' accumulators; each (row, output) accumulator is summed by the
 * same reduction, so a lone decode row gets the same result as a row in a tile. Compiled with
 * target attributes, chosen at run time with the AVX-512 F32 family; x86-64 only. Any thread.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "wkernels.h"

#define T __attribute__((target("avx512f"), always_inline)) static inline
#define ROW_BLOCK 64   /* rows of x kept hot while the weight rows stream past */
#define PREFETCH 4096  /* bytes ahead in each weight row (the next groups of rows) */
#define L 16           /* lanes */

/* L weights of a row from column k as F32; s: the row's block scales (int8) */
T __m512 load_w(int q8, const void *w, const float *s, int k) {
  if (!q8) {
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  __m128i q = _mm_loadu_si128((const __m128i *)((const int8_t *)w + k));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)),
                       _mm512_set1_ps(s[k / XL_Q8_BLOCK]));
}

/* y[r + i, o + j] for i < rc, j < oc (rc <= RB, oc <= OB; missing ones repeat the first) */
T void tile(int q8, int RB, int OB, const float *x, int rc, int ldx, const void *W,
            const float *S, int nb, int ldw, int o, int oc, int K, int prefetch, float *y,
            int ldy) {
  const float *a[4];
  const char *w[4];
  const float *s[4];
  const size_t esz = q8 ? 1 : 2;
  for (int i = 0; i < RB; i++) a[i] = x + (size_t)(i < rc ? i : 0) * ldx;
  for (int j = 0; j < OB; j++) {
    size_t row = (size_t)o + (j < oc ? j : 0);
    w[j] = (const char *)W + row * ldw * esz;
    s[j] = q8 ? S + row * nb : NULL;
  }
  __m512 acc[4][4];
  for (int i = 0; i < RB; i++)
    for (int j = 0; j < OB; j++) acc[i][j] = _mm512_setzero_ps();
  const int kv = K & ~(L - 1);
  for (int k = 0; k < kv; k += L) {
    __m512 b[4];
    for (int j = 0; j < OB; j++) {
      if (prefetch) /* an integer address: past the matrix's end it is only a hint */
        _mm_prefetch((const char *)((uintptr_t)w[j] + k * esz + PREFETCH), _MM_HINT_T0);
      b[j] = load_w(q8, w[j], s[j], k);
    }
    for (int i = 0; i < RB; i++) {
      __m512 v = _mm512_loadu_ps(a[i] + k);
      for (int j = 0; j < OB; j++) acc[i][j] = _mm512_fmadd_ps(v, b[j], acc[i][j]);
    }
  }
  if (kv < K) { /* the tail, zero-padded to L lanes */
    const __mmask16 m = (__mmask16)((1u << (K - kv)) - 1u);
    __m512 b[4];
    for (int j = 0; j < OB; j++) {
      _Alignas(64) char pad[2 * L] = {0};
      memcpy(pad, w[j] + kv * esz, (size_t)(K - kv) * esz);
      b[j] = load_w(q8, pad, q8 ? s[j] + kv / XL_Q8_BLOCK : NULL, 0);
    }
    for (int i = 0; i < RB; i++) {
      __m512 v = _mm512_maskz_loadu_ps(m, a[i] + kv);
      for (int j = 0; j < OB; j++) acc[i][j] = _mm512_fmadd_ps(v, b[j], acc[i][j]);
    }
  }
  for (int i = 0; i < rc; i++)
    for (int j = 0; j < oc; j++) y[(size_t)i * ldy + o + j] = _mm512_reduce_add_ps(acc[i][j]);
}

T void matmul(int q8, const float *x, int M, int K, int ldx, const void *W, const float *S,
              int N, int ldw, float *y, int ldy) {
  const int nb = xl_q8_blocks(ldw);
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      for (int r = r0; r < r1; r += 4) {
        int rc = r1 - r < 4 ? r1 - r : 4;
        const float *xr = x + (size_t)r * ldx;
        float *yr = y + (size_t)r * ldy;
        if (rc == 1) /* a lone row (decode): the same per-element arithmetic */
          tile(q8, 1, 4, xr, 1, ldx, W, S, nb, ldw, o, oc, K, 1, yr, ldy);
        else
          tile(q8, 4, 4, xr, rc, ldx, W, S, nb, ldw, o, oc, K, r == r0, yr, ldy);
      }
    }
  }
}

__attribute__((target("avx512f"))) static void matmul_bf16(const float *x, int M, int K, int ldx,
                                                           const uint16_t *W, int N, int ldw,
                                                           float *y, int ldy) {
  matmul(0, x, M, K, ldx, W, NULL, N, ldw, y, ldy);
}

__attribute__((target("avx512f"))) static void matmul_q8(const float *x, int M, int K, int ldx,
                                                         const int8_t *W, const float *S, int N,
                                                         int ldw, float *y, int ldy) {
  matmul(1, x, M, K, ldx, W, S, N, ldw, y, ldy);
}

const xl_wkernels xl_wkernels_avx512 = {"avx512", matmul_bf16, matmul_q8};
#undef T
#endif /* __x86_64__ */
