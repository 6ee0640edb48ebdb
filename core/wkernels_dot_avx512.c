/*
 * wkernels_dot_avx512.c: narrow weights in panels (wpanel.h) times F32 activations with the
 * AVX-512 dot-product instructions, one output row per lane (no horizontal sums).
 * int8 with AVX-512 VNNI:
 * each row of the activations is quantised per block of 32 once per call, then one vpdpbusd
 * multiplies 4 weights of 16 output rows (a 64-byte load of a panel) by the same 4 quantised
 * activations (broadcast) and adds the products into the 16 outputs' int32 lanes; each block's
 * exact integer sums are corrected for the weights' +128 (a tile of rows starts them at minus
 * the correction, a lone row subtracts it at the end), converted, and added into F32
 * accumulators with the block's two scales (the weights' kept as halves, widened by
 * VCVTPH2PS): lanes are outputs, so no horizontal sums.
 * Its arithmetic is xl_q8p_matmul_portable's, bit for bit. int4 panels the same way, each
 * 64-byte load split into its low and high nibbles: two vpdpbusd (xl_q4p_matmul_portable's
 * arithmetic, bit for bit).
 * bf16 with AVX-512 BF16: each activation row is rounded to bf16 once per call
 * (vcvtne2ps2bf16); one vdpbf16ps adds 2 weights x 2 activations into each of 16 outputs.
 * Tiles of 4 rows x 2 panels (32 outputs; bf16: 8 rows x 2 panels, then 4), leftover rows one
 * at a time; a lone row (int8, int4: a decode step) 4 panels at a time, one from each quarter
 * of its panels: four streams in flight, far apart in memory, each reading its quarter in
 * order and prefetching on into its next panel (int4's streams their scales' too): DRAM
 * serves four distant streams faster than four neighbouring panels 8-64 KB apart
 * (docs/models.md, "Weight types"). With several row tiles (every type), the first streams
 * the panels from memory and the second prefetches the next panels into L2, so the later tiles
 * compute while the next panels arrive. Each row's arithmetic is the same in any tile and
 * alone, whatever order the panels are taken in.
 * Compiled with target attributes; used only when the CPU has the instructions
 * (xl_q8p_wanted, xl_bf16p_wanted). Any thread.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "wpanel.h"
#include "wpanel_avx512.h"

#define TGT "avx512f,avx512bw,avx512vnni"
#define T __attribute__((target(TGT), always_inline)) static inline
#define TGT_BF16 "avx512f,avx512bw,avx512bf16"
#define TB __attribute__((target(TGT_BF16), always_inline)) static inline
#define TF __attribute__((target("avx512f"), always_inline)) static inline
#define XQ_BYTES 131072 /* narrowed activations on the stack: rows per chunk x row bytes (16 rows of
                           4096 bf16: a batch of 16 reads the weights once) */
#define RB 4           /* rows per tile (int8, int4: 16 int32 and 16 F32 accumulators) */
#define RB_BF16 8      /* rows per tile (bf16: 16 F32 accumulators) */
#define PF 2048        /* prefetch distance along each panel's bytes */

/* xl_q8p_quantize_row, 16 lanes at a time (kp: K rounded up to whole blocks) */
T void quantize_row(const float *x, int K, int kp, int8_t *xq, float *sx, int32_t *corr) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  for (int c0 = 0, b = 0; c0 < kp; c0 += XL_Q8_BLOCK, b++) {
    const int n0 = K - c0, n1 = K - c0 - 16;
    const __mmask16 m0 = n0 >= 16 ? 0xFFFF : n0 > 0 ? (__mmask16)((1u << n0) - 1u) : 0;
    const __mmask16 m1 = n1 >= 16 ? 0xFFFF : n1 > 0 ? (__mmask16)((1u << n1) - 1u) : 0;
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x + c0), v1 = _mm512_maskz_loadu_ps(m1, x + c0 + 16);
    const __m512 a0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v0), abs_mask));
    const __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v1), abs_mask));
    /* max_ps returns its second operand when one is NaN: NaN lanes are skipped */
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a1, _mm512_max_ps(a0, _mm512_setzero_ps())));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m512 s = _mm512_set1_ps(inv);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    /* round to nearest even (the default mode); NaN, Inf -> INT_MIN -> -127; padding 0 */
    __m512i q0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, s)), lo), hi);
    __m512i q1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, s)), lo), hi);
    q0 = _mm512_maskz_mov_epi32(m0, q0);
    q1 = _mm512_maskz_mov_epi32(m1, q1);
    _mm_storeu_si128((__m128i *)(void *)(xq + c0), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(void *)(xq + c0 + 16), _mm512_cvtepi32_epi8(q1));
    sx[b] = amax / 127.0f;
    corr[b] = 128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

/* out[i][j] = the 16 outputs of panel p + j * ps for row i (i < R, j < NP) */
T void tile(int q4, int R, int NP, const int8_t *xq, int kp, const float *sx, const int32_t *corr,
            int nb, const uint8_t *P, const uint16_t *S, int p, int ps, size_t pf_next,
            __m512 out[RB][4]) {
  __m512 facc[RB][4];
  __m512i iacc[RB][4];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < NP; j++) facc[i][j] = _mm512_setzero_ps();
  const uint8_t *w[4];
  const size_t pbytes = (size_t)kp * XL_Q8P_ROWS / (q4 ? 2 : 1); /* one panel */
  for (int j = 0; j < NP; j++) w[j] = P + (size_t)(p + j * ps) * pbytes;
  /* Each panel's stream prefetches PF bytes ahead; past a panel's end that is the next panel
   * in memory, which a lone row's stream reads next (its quarter of the panels in order). */
#define AHEAD_OF(j, at) ((uintptr_t)(w[j] + (at)) + PF)
  const __m512i low4 = _mm512_set1_epi8(15);
  /* A lone row's int4 streams prefetch their scales too (a panel's 16 halves a block, its own
   * stream beside the weights'), as many blocks ahead as the weights' PF bytes are: at one row
   * from DRAM that read the int4 GEMV's bytes a quarter faster (bench_kernels); int8's did no
   * better with it. */
  const int prefetch_scales = q4 && R == 1;
  const size_t s_ahead = (size_t)PF / (pbytes / (size_t)nb) * XL_Q8P_ROWS * sizeof *S;
#define SCALES_OF(j) (S + ((size_t)(p + (j) * ps) * nb + (size_t)b) * XL_Q8P_ROWS) /* block b's 16 */
  /* The correction for the weights' +128 (exact integers: either way the same sums): a tile of
   * rows starts each block's sums at minus it, one subtraction less per output (measured: the
   * 16-row GEMM a little faster); a lone row starts at zero and subtracts it at the block's end,
   * so the block's first products wait on no load (measured: the GEMV slower the other way). */
  const int start_at_corr = R > 1;
#define CORR(i) _mm512_set1_epi32(corr[(size_t)(i) * nb + b] / (q4 ? 16 : 1))
  for (int b = 0; b < nb; b++) {
    for (int i = 0; i < R; i++) {
      const __m512i c0 = start_at_corr ? _mm512_sub_epi32(_mm512_setzero_si512(), CORR(i))
                                       : _mm512_setzero_si512();
      for (int j = 0; j < NP; j++) iacc[i][j] = c0;
    }
    for (int j = 0; prefetch_scales && j < NP; j++) /* a hint only */
      _mm_prefetch((const char *)((uintptr_t)SCALES_OF(j) + s_ahead), _MM_HINT_T0);
    /* int4: 64 bytes a group of 8 columns, low nibbles columns 0-3, high 4-7 */
    for (int g = 0; q4 && g < XL_Q8_BLOCK / 8; g++) {
      const size_t at = ((size_t)b * (XL_Q8_BLOCK / 8) + (size_t)g) * 64;
      __m512i lo[4], hi[4];
      for (int j = 0; j < NP; j++) {
        if (pf_next) _mm_prefetch((const char *)((uintptr_t)(w[j] + at) + pf_next), _MM_HINT_T1);
        else _mm_prefetch((const char *)AHEAD_OF(j, at), _MM_HINT_T0); /* a hint only */
        const __m512i a = _mm512_loadu_si512((const void *)(w[j] + at));
        lo[j] = _mm512_and_si512(a, low4);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(a, 4), low4);
      }
      for (int i = 0; i < R; i++) {
        int32_t f0, f1;
        memcpy(&f0, xq + (size_t)i * kp + (size_t)b * XL_Q8_BLOCK + 8 * g, 4);
        memcpy(&f1, xq + (size_t)i * kp + (size_t)b * XL_Q8_BLOCK + 8 * g + 4, 4);
        const __m512i x0 = _mm512_set1_epi32(f0), x1 = _mm512_set1_epi32(f1);
        for (int j = 0; j < NP; j++)
          iacc[i][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(iacc[i][j], lo[j], x0), hi[j], x1);
      }
    }
    for (int g = 0; !q4 && g < XL_Q8_BLOCK / 4; g++) {
      const size_t at = ((size_t)b * (XL_Q8_BLOCK / 4) + (size_t)g) * 64;
      __m512i a[4];
      for (int j = 0; j < NP; j++) {
        if (pf_next) _mm_prefetch((const char *)((uintptr_t)(w[j] + at) + pf_next), _MM_HINT_T1);
        else _mm_prefetch((const char *)AHEAD_OF(j, at), _MM_HINT_T0); /* a hint only */
        a[j] = _mm512_loadu_si512((const void *)(w[j] + at));
      }
      for (int i = 0; i < R; i++) {
        int32_t four;
        memcpy(&four, xq + (size_t)i * kp + (size_t)b * XL_Q8_BLOCK + 4 * g, 4);
        const __m512i xb = _mm512_set1_epi32(four);
        for (int j = 0; j < NP; j++) iacc[i][j] = _mm512_dpbusd_epi32(iacc[i][j], a[j], xb);
      }
    }
    __m512 sw[4];
    for (int j = 0; j < NP; j++) /* the block's 16 scales, halves widened (exact) */
      sw[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)SCALES_OF(j)));
    for (int i = 0; i < R; i++) {
      const __m512 xs = _mm512_set1_ps(sx[(size_t)i * nb + b]);
      for (int j = 0; j < NP; j++) {
        const __m512i sum = start_at_corr ? iacc[i][j] : _mm512_sub_epi32(iacc[i][j], CORR(i));
        facc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(sw[j], xs), facc[i][j]);
      }
    }
  }
#undef CORR
  for (int i = 0; i < R; i++)
    for (int j = 0; j < NP; j++) out[i][j] = facc[i][j];
#undef AHEAD_OF
#undef SCALES_OF
}

T void matmul_panels(int q4, const float *x, int M, int K, int ldx, const uint8_t *P,
                     const uint16_t *S, int row0, int N, float *y, int ldy) {
  const int kp = xl_q8p_kp(K), nb = kp / XL_Q8_BLOCK;
  int chunk = XQ_BYTES / kp;
  if (chunk < 1) chunk = 1; /* K past XQ_BYTES: the portable kernel (same results) */
  if (kp > XQ_BYTES) {
    if (q4) xl_q4p_matmul_portable(x, M, K, ldx, P, S, row0, N, y, ldy);
    else xl_q8p_matmul_portable(x, M, K, ldx, P, S, row0, N, y, ldy);
    return;
  }
  _Alignas(64) int8_t xq[XQ_BYTES];                /* [chunk, kp] */
  float sx[XQ_BYTES / XL_Q8_BLOCK];                /* [chunk, nb] */
  int32_t corr[XQ_BYTES / XL_Q8_BLOCK];            /* [chunk, nb] */
  const int p_begin = row0 / XL_Q8P_ROWS, p_end = (row0 + N + XL_Q8P_ROWS - 1) / XL_Q8P_ROWS;
  for (int r0 = 0; r0 < M; r0 += chunk) {
    const int r1 = r0 + chunk < M ? r0 + chunk : M;
    for (int r = r0; r < r1; r++)
      quantize_row(x + (size_t)r * ldx, K, kp, xq + (size_t)(r - r0) * kp, sx + (size_t)(r - r0) * nb,
                   corr + (size_t)(r - r0) * nb);
    if (r1 - r0 == 1) { /* a lone row (decode): four streams, one per quarter of the panels */
      const int n_panels = p_end - p_begin, per = (n_panels + 3) / 4; /* panels a stream */
      for (int g = 0; g < per; g++) {
        const int p = p_begin + g;
        const int np = (n_panels - g + per - 1) / per; /* streams with a panel left */
        __m512 out[RB][4];
        if (np == 4) tile(q4, 1, 4, xq, kp, sx, corr, nb, P, S, p, per, 0, out);
        else if (np == 3) tile(q4, 1, 3, xq, kp, sx, corr, nb, P, S, p, per, 0, out);
        else if (np == 2) tile(q4, 1, 2, xq, kp, sx, corr, nb, P, S, p, per, 0, out);
        else tile(q4, 1, 1, xq, kp, sx, corr, nb, P, S, p, per, 0, out);
        for (int j = 0; j < np; j++)
          xl_panel_store_avx512(out[0][j], p + j * per, row0, N, y + (size_t)r0 * ldy);
      }
      continue;
    }
    for (int p = p_begin; p < p_end; p += 2) {
      const int np = p + 1 < p_end ? 2 : 1;
      for (int r = r0; r < r1;) {
        const int R = r1 - r >= RB ? RB : 1;
        const size_t q = (size_t)(r - r0);
        /* the second row tile prefetches the next panels into L2 (the first streams these) */
        const size_t pf = r == r0 + RB ? (size_t)np * kp * XL_Q8P_ROWS / (q4 ? 2 : 1) : 0;
        __m512 out[RB][4];
        if (R == RB && np == 2) tile(q4, RB, 2, xq + q * kp, kp, sx + q * nb, corr + q * nb, nb, P, S, p, 1, pf, out);
        else if (R == RB) tile(q4, RB, 1, xq + q * kp, kp, sx + q * nb, corr + q * nb, nb, P, S, p, 1, pf, out);
        else if (np == 2) tile(q4, 1, 2, xq + q * kp, kp, sx + q * nb, corr + q * nb, nb, P, S, p, 1, pf, out);
        else tile(q4, 1, 1, xq + q * kp, kp, sx + q * nb, corr + q * nb, nb, P, S, p, 1, pf, out);
        for (int i = 0; i < R; i++)
          for (int j = 0; j < np; j++)
            xl_panel_store_avx512(out[i][j], p + j, row0, N, y + (size_t)(r + i) * ldy);
        r += R;
      }
    }
  }
}
__attribute__((target(TGT))) void xl_q8p_matmul_vnni(const float *x, int M, int K, int ldx,
                                                     const uint8_t *P, const uint16_t *S, int row0,
                                                     int N, float *y, int ldy) {
  matmul_panels(0, x, M, K, ldx, P, S, row0, N, y, ldy);
}

__attribute__((target(TGT))) void xl_q4p_matmul_vnni(const float *x, int M, int K, int ldx,
                                                     const uint8_t *P, const uint16_t *S, int row0,
                                                     int N, float *y, int ldy) {
  matmul_panels(1, x, M, K, ldx, P, S, row0, N, y, ldy);
}

/* ---- bf16 ---- */

/* xb[0..kp2) = x[0..K) rounded to bf16 (zeros past K); xb holds a multiple of 32 */
TB void round_row(const float *x, int K, int kp2, uint16_t *xb) {
  for (int c = 0; c < kp2; c += 32) {
    const int n0 = K - c, n1 = K - c - 16;
    const __mmask16 m0 = n0 >= 16 ? 0xFFFF : n0 > 0 ? (__mmask16)((1u << n0) - 1u) : 0;
    const __mmask16 m1 = n1 >= 16 ? 0xFFFF : n1 > 0 ? (__mmask16)((1u << n1) - 1u) : 0;
    const __m512 lo = _mm512_maskz_loadu_ps(m0, x + c), hi = _mm512_maskz_loadu_ps(m1, x + c + 16);
    _mm512_storeu_si512((void *)(xb + c), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

/* rows of the bf16 tile for `left` rows to go: 8, then 4, then one at a time (a row's sums are
 * the same in any tile) */
static inline int bf16_tile_rows(int left) { return left >= RB_BF16 ? RB_BF16 : left >= RB ? RB : 1; }

/* out[i][j] = the 16 outputs of panel p + j for row i (i < R, j < NP); rows xb, stride xs */
TB void tile_bf16(int R, int NP, const uint16_t *xb, int xs, const uint16_t *P, int kp2, int p,
                  size_t pf_next, __m512 out[RB_BF16][2]) {
  __m512 acc[RB_BF16][2];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < NP; j++) acc[i][j] = _mm512_setzero_ps();
  const uint16_t *w[2];
  for (int j = 0; j < NP; j++) w[j] = P + (size_t)(p + j) * kp2 * XL_Q8P_ROWS;
  for (int g = 0; g < kp2 / 2; g++) {
    const size_t at = (size_t)g * 2 * XL_Q8P_ROWS;
    __m512bh a[2];
    for (int j = 0; j < NP; j++) {
      if (pf_next) _mm_prefetch((const char *)((uintptr_t)(w[j] + at) + pf_next), _MM_HINT_T1);
      else _mm_prefetch((const char *)((uintptr_t)(w[j] + at) + PF), _MM_HINT_T0); /* a hint only */
      a[j] = (__m512bh)_mm512_loadu_si512((const void *)(w[j] + at));
    }
    for (int i = 0; i < R; i++) {
      int32_t two;
      memcpy(&two, xb + (size_t)i * xs + 2 * g, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(two);
      for (int j = 0; j < NP; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, a[j]);
    }
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < NP; j++) out[i][j] = acc[i][j];
}

__attribute__((target(TGT_BF16))) void xl_bf16p_matmul_avx512(const float *x, int M, int K,
                                                              int ldx, const uint16_t *P,
                                                              int row0, int N, float *y,
                                                              int ldy) {
  const int kp2 = xl_bf16p_kp(K), xs = (kp2 + 31) & ~31; /* row stride of xb: whole stores */
  if ((size_t)xs * 2 > XQ_BYTES) {
    xl_bf16p_matmul_portable(x, M, K, ldx, P, row0, N, y, ldy);
    return;
  }
  const int chunk = XQ_BYTES / (xs * 2);
  _Alignas(64) uint16_t xb[XQ_BYTES / 2]; /* [chunk, xs] */
  const int p_begin = row0 / XL_Q8P_ROWS, p_end = (row0 + N + XL_Q8P_ROWS - 1) / XL_Q8P_ROWS;
  for (int r0 = 0; r0 < M; r0 += chunk) {
    const int r1 = r0 + chunk < M ? r0 + chunk : M;
    for (int r = r0; r < r1; r++) round_row(x + (size_t)r * ldx, K, kp2, xb + (size_t)(r - r0) * xs);
    const int second = r0 + bf16_tile_rows(r1 - r0); /* where the second row tile starts */
    for (int p = p_begin; p < p_end; p += 2) {
      const int np = p + 1 < p_end ? 2 : 1;
      for (int r = r0; r < r1;) {
        const int R = bf16_tile_rows(r1 - r);
        const uint16_t *xr = xb + (size_t)(r - r0) * xs;
        /* the second row tile prefetches the next panels into L2 (the first streams these) */
        const size_t pf = r == second ? (size_t)np * kp2 * XL_Q8P_ROWS * sizeof(uint16_t) : 0;
        __m512 out[RB_BF16][2];
        if (R == RB_BF16 && np == 2) tile_bf16(RB_BF16, 2, xr, xs, P, kp2, p, pf, out);
        else if (R == RB_BF16) tile_bf16(RB_BF16, 1, xr, xs, P, kp2, p, pf, out);
        else if (R == RB && np == 2) tile_bf16(RB, 2, xr, xs, P, kp2, p, pf, out);
        else if (R == RB) tile_bf16(RB, 1, xr, xs, P, kp2, p, pf, out);
        else if (np == 2) tile_bf16(1, 2, xr, xs, P, kp2, p, pf, out);
        else tile_bf16(1, 1, xr, xs, P, kp2, p, pf, out);
        for (int i = 0; i < R; i++)
          for (int j = 0; j < np; j++)
            xl_panel_store_avx512(out[i][j], p + j, row0, N, y + (size_t)(r + i) * ldy);
        r += R;
      }
    }
  }
}
#undef T
#undef TB
#undef TF
#endif /* __x86_64__ */
