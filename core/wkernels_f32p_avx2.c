/*
 * wkernels_f32p_avx2.c: F32 weights in panels (wpanel.h) times F32 activations with AVX2 and
 * FMA, one output row per lane: the AVX-512 panel kernel's arithmetic in 8-lane halves. A
 * panel's column (16 outputs, 64 bytes) is two 32-byte loads; each row's activation of that
 * column, broadcast, multiplies them into the row's two accumulators (vfmadd231ps). Every
 * output's sum runs through the columns in order from +0, so a row gets the same bits in any
 * tile, alone or in any batch, and the same bits as the AVX-512 kernel and
 * xl_f32p_matmul_portable.
 * Tiles of up to 6 rows x 1 panel (12 accumulators of AVX2's 16 registers, two panel loads and
 * 6 broadcasts per column); a block's rows split so that no tile is left with a lone row when
 * there are more. A lone row (a decode step) takes 4 panels at a time, one from each quarter of
 * its panels (four streams in flight, far apart in memory). The columns go in slices of
 * K_SLICE: every row tile of a block runs over one slice of the panel (8 KiB, in L1) before the
 * next, its sums kept between slices. Compiled with target attributes; used only where the AVX2
 * family runs (xl_f32p_wanted). Any thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "wpanel.h"

#define TA __attribute__((target("avx2,fma"), always_inline)) static inline
#define RB 6         /* rows per tile at most */
#define ROW_BLOCK 64 /* rows whose tiles run over a panel before the next panel */
#define PF 2048      /* prefetch distance along each panel's bytes */
#define K_SLICE 128  /* columns a block's row tiles run before the next (a panel's slice: 8 KiB) */

/* acc[i][2j], acc[i][2j+1] += the products of columns c0..c1-1 for the 16 outputs of panel
 * p + j * ps and row i of x (i < R, j < NP), column after column */
TA void tile(int R, int NP, const float *x, int ldx, const float *P, int K, int p, int ps, int c0,
             int c1, __m256 acc_io[RB][8]) {
  __m256 acc[RB][8];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < 2 * NP; j++) acc[i][j] = acc_io[i][j];
  const float *w[4];
  for (int j = 0; j < NP; j++) w[j] = P + (size_t)(p + j * ps) * K * XL_Q8P_ROWS;
  for (int c = c0; c < c1; c++) {
    const size_t at = (size_t)c * XL_Q8P_ROWS; /* column c of the panels: 64 bytes each */
    __m256 a[8];
    for (int j = 0; j < NP; j++) {
      /* addresses as integers: past the panels' end they are hints, not pointers */
      _mm_prefetch((const char *)((uintptr_t)(w[j] + at) + PF), _MM_HINT_T0);
      a[2 * j] = _mm256_loadu_ps(w[j] + at);
      a[2 * j + 1] = _mm256_loadu_ps(w[j] + at + 8);
    }
    for (int i = 0; i < R; i++) {
      const __m256 xv = _mm256_broadcast_ss(x + (size_t)i * ldx + c);
      for (int j = 0; j < 2 * NP; j++) acc[i][j] = _mm256_fmadd_ps(xv, a[j], acc[i][j]);
    }
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < 2 * NP; j++) acc_io[i][j] = acc[i][j];
}

/* y[o - row0] = lanes of panel p (halves lo, hi) whose row o is in [row0, row0 + N) */
TA void store_panel(__m256 lo, __m256 hi, int p, int row0, int N, float *y) {
  const int first = p * XL_Q8P_ROWS;
  if (first >= row0 && first + XL_Q8P_ROWS <= row0 + N) {
    _mm256_storeu_ps(y + (first - row0), lo);
    _mm256_storeu_ps(y + (first - row0) + 8, hi);
    return;
  }
  _Alignas(32) float lanes[XL_Q8P_ROWS];
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  for (int l = 0; l < XL_Q8P_ROWS; l++)
    if (first + l >= row0 && first + l < row0 + N) y[first + l - row0] = lanes[l];
}

/* the tile for R rows (1-6) and one panel, R a constant in each call (registers, unrolled) */
TA void tile_of(int R, const float *x, int ldx, const float *P, int K, int p, int c0, int c1,
                __m256 acc[RB][8]) {
  switch (R) {
    case 6: tile(6, 1, x, ldx, P, K, p, 1, c0, c1, acc); break;
    case 5: tile(5, 1, x, ldx, P, K, p, 1, c0, c1, acc); break;
    case 4: tile(4, 1, x, ldx, P, K, p, 1, c0, c1, acc); break;
    case 3: tile(3, 1, x, ldx, P, K, p, 1, c0, c1, acc); break;
    case 2: tile(2, 1, x, ldx, P, K, p, 1, c0, c1, acc); break;
    default: tile(1, 1, x, ldx, P, K, p, 1, c0, c1, acc);
  }
}

/* rows of the next tile with `left` rows to go: 6 while 12 or more are left, then the rest in
 * two tiles as even as can be (7: 4 and 3), never a lone row behind a tile */
static inline int tile_rows(int left) {
  return left >= 2 * RB ? RB : left > RB ? (left + 1) / 2 : left;
}

__attribute__((target("avx2,fma"))) void xl_f32p_matmul_avx2(const float *x, int M, int K, int ldx,
                                                             const float *P, int row0, int N,
                                                             float *y, int ldy) {
  if (M <= 0 || N <= 0) return;
  const int p_begin = row0 / XL_Q8P_ROWS, p_end = (row0 + N + XL_Q8P_ROWS - 1) / XL_Q8P_ROWS;
  if (M == 1) { /* a lone row (decode): four streams, one per quarter of the panels */
    const int n_panels = p_end - p_begin, per = (n_panels + 3) / 4; /* panels a stream */
    for (int g = 0; g < per; g++) {
      const int p = p_begin + g;
      const int np = (n_panels - g + per - 1) / per; /* streams with a panel left */
      __m256 out[RB][8];
      for (int j = 0; j < 8; j++) out[0][j] = _mm256_setzero_ps();
      if (np == 4) tile(1, 4, x, ldx, P, K, p, per, 0, K, out);
      else if (np == 3) tile(1, 3, x, ldx, P, K, p, per, 0, K, out);
      else if (np == 2) tile(1, 2, x, ldx, P, K, p, per, 0, K, out);
      else tile(1, 1, x, ldx, P, K, p, per, 0, K, out);
      for (int j = 0; j < np; j++)
        store_panel(out[0][2 * j], out[0][2 * j + 1], p + j * per, row0, N, y);
    }
    return;
  }
  __m256 part[ROW_BLOCK][2]; /* the block's sums between slices of K: [row][half of the panel] */
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    const int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    for (int p = p_begin; p < p_end; p++) {
      for (int r = r0; r < r1; r++) part[r - r0][0] = part[r - r0][1] = _mm256_setzero_ps();
      /* K in slices: a slice of the panel stays in L1 while every row tile reads it */
      for (int c0 = 0; c0 < K; c0 += K_SLICE) {
        const int c1 = K - c0 > K_SLICE ? c0 + K_SLICE : K;
        for (int r = r0; r < r1;) {
          const int R = tile_rows(r1 - r);
          __m256 acc[RB][8];
          for (int i = 0; i < R; i++)
            acc[i][0] = part[r - r0 + i][0], acc[i][1] = part[r - r0 + i][1];
          tile_of(R, x + (size_t)r * ldx, ldx, P, K, p, c0, c1, acc);
          for (int i = 0; i < R; i++)
            part[r - r0 + i][0] = acc[i][0], part[r - r0 + i][1] = acc[i][1];
          r += R;
        }
      }
      for (int r = r0; r < r1; r++)
        store_panel(part[r - r0][0], part[r - r0][1], p, row0, N, y + (size_t)r * ldy);
    }
  }
}
#undef TA
#endif /* __x86_64__ */
