/*
 * wkernels_f32p_avx512.c: F32 weights in panels (wpanel.h) times F32 activations with
 * AVX-512F, one output row per lane. One 64-byte load of a panel gives one column of its 16
 * outputs; each row's activation of that column, broadcast, multiplies it into the row's 16
 * accumulators (vfmadd231ps): no horizontal sums, and every output's sum runs through the
 * columns in order from +0, so a row gets the same bits in any tile, alone or in any batch
 * (xl_f32p_matmul_portable's arithmetic, bit for bit).
 * Tiles of up to 12 rows x 2 panels (24 accumulators, two panel loads and 12 broadcasts per
 * column: the FMA units, not the loads, bound it); a block's rows split so that no tile is
 * left with a lone row when there are more (17 rows: 9, 8; tiles of 8 rows at most ran a
 * 17-row forward about 5% slower). A lone row (a decode step) takes
 * 4 panels at a time, one from each quarter of its panels: four streams in flight, far apart
 * in memory, as the dot-product kernels' lone row. With several row tiles, the first streams
 * the panels from memory and the second prefetches the next panels into L2, so the later tiles
 * compute while the next panels arrive. The columns go in slices of K_SLICE: every row tile
 * of a block runs over one slice of the pair of panels (16 KiB, in L1) before the next, its
 * sums kept between slices (the sums stay those of one pass in column order); without slices
 * the later tiles read the pair from L2 and the kernel ran at 73% of the FMA rate in cache
 * instead of 95% (bench_kernels, AVX-512 VM). Blocks of 64 rows keep a block's activations in L2.
 * Compiled with target attributes; used only where the AVX-512 family runs (xl_f32p_wanted).
 * Any thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "wpanel.h"
#include "wpanel_avx512.h"

#define TF __attribute__((target("avx512f"), always_inline)) static inline
#define RB 12        /* rows per tile at most */
#define ROW_BLOCK 64 /* rows whose tiles run over a pair of panels before the next pair */
#define PF 2048      /* prefetch distance along each panel's bytes */
#ifndef K_SLICE
#define K_SLICE 128 /* columns a block's row tiles run before the next (a pair's slice: 16 KiB) */
#endif

/* acc[i][j] += the products of columns c0..c1-1 for the 16 outputs of panel p + j * ps and row
 * i of x (i < R, j < NP), column after column; pf_next: prefetch that far ahead into L2 instead
 * of PF ahead into L1 */
TF void tile(int R, int NP, const float *x, int ldx, const float *P, int K, int p, int ps, int c0,
             int c1, size_t pf_next, __m512 acc_io[RB][4]) {
  __m512 acc[RB][4];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < NP; j++) acc[i][j] = acc_io[i][j];
  const float *w[4];
  for (int j = 0; j < NP; j++) w[j] = P + (size_t)(p + j * ps) * K * XL_Q8P_ROWS;
  for (int c = c0; c < c1; c++) {
    const size_t at = (size_t)c * XL_Q8P_ROWS; /* column c of the panels: 64 bytes each */
    __m512 a[4];
    for (int j = 0; j < NP; j++) {
      /* addresses as integers: past the panels' end they are hints, not pointers */
      if (pf_next) _mm_prefetch((const char *)((uintptr_t)(w[j] + at) + pf_next), _MM_HINT_T1);
      else _mm_prefetch((const char *)((uintptr_t)(w[j] + at) + PF), _MM_HINT_T0);
      a[j] = _mm512_loadu_ps(w[j] + at);
    }
    for (int i = 0; i < R; i++) {
      const __m512 xv = _mm512_set1_ps(x[(size_t)i * ldx + c]);
      for (int j = 0; j < NP; j++) acc[i][j] = _mm512_fmadd_ps(xv, a[j], acc[i][j]);
    }
  }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < NP; j++) acc_io[i][j] = acc[i][j];
}

/* the tile for R rows (1-12) and NP panels (1-2), constants in each call (registers, unrolled) */
TF void tile_of(int R, int NP, const float *x, int ldx, const float *P, int K, int p, int c0,
                int c1, size_t pf, __m512 out[RB][4]) {
  const int two = NP == 2;
  switch (R) {
    case 12:
      two ? tile(12, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(12, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 11:
      two ? tile(11, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(11, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 10:
      two ? tile(10, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(10, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 9:
      two ? tile(9, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(9, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 8:
      two ? tile(8, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(8, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 7:
      two ? tile(7, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(7, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 6:
      two ? tile(6, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(6, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 5:
      two ? tile(5, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(5, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 4:
      two ? tile(4, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(4, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 3:
      two ? tile(3, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(3, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    case 2:
      two ? tile(2, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(2, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
      break;
    default:
      two ? tile(1, 2, x, ldx, P, K, p, 1, c0, c1, pf, out)
          : tile(1, 1, x, ldx, P, K, p, 1, c0, c1, pf, out);
  }
}

/* rows of the next tile with `left` rows to go: 12 while 24 or more are left, then the rest in
 * two tiles as even as can be (17: 9 and 8), never a lone row behind a tile */
static inline int tile_rows(int left) {
  return left >= 2 * RB ? RB : left > RB ? (left + 1) / 2 : left;
}

__attribute__((target("avx512f"))) void xl_f32p_matmul_avx512(const float *x, int M, int K, int ldx,
                                                              const float *P, int row0, int N,
                                                              float *y, int ldy) {
  if (M <= 0 || N <= 0) return;
  const int p_begin = row0 / XL_Q8P_ROWS, p_end = (row0 + N + XL_Q8P_ROWS - 1) / XL_Q8P_ROWS;
  if (M == 1) { /* a lone row (decode): four streams, one per quarter of the panels */
    const int n_panels = p_end - p_begin, per = (n_panels + 3) / 4; /* panels a stream */
    for (int g = 0; g < per; g++) {
      const int p = p_begin + g;
      const int np = (n_panels - g + per - 1) / per; /* streams with a panel left */
      __m512 out[RB][4];
      for (int j = 0; j < 4; j++) out[0][j] = _mm512_setzero_ps();
      if (np == 4) tile(1, 4, x, ldx, P, K, p, per, 0, K, 0, out);
      else if (np == 3) tile(1, 3, x, ldx, P, K, p, per, 0, K, 0, out);
      else if (np == 2) tile(1, 2, x, ldx, P, K, p, per, 0, K, 0, out);
      else tile(1, 1, x, ldx, P, K, p, per, 0, K, 0, out);
      for (int j = 0; j < np; j++) xl_panel_store_avx512(out[0][j], p + j * per, row0, N, y);
    }
    return;
  }
  __m512 part[ROW_BLOCK][2]; /* the block's sums between slices of K: [row][panel of the pair] */
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    const int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    const int second = r0 + tile_rows(r1 - r0); /* where the second row tile starts */
    for (int p = p_begin; p < p_end; p += 2) {
      const int np = p + 1 < p_end ? 2 : 1;
      for (int r = r0; r < r1; r++) part[r - r0][0] = part[r - r0][1] = _mm512_setzero_ps();
      /* K in slices: a slice of the pair stays in L1 while every row tile reads it */
      for (int c0 = 0; c0 < K; c0 += K_SLICE) {
        const int c1 = K - c0 > K_SLICE ? c0 + K_SLICE : K;
        for (int r = r0; r < r1;) {
          const int R = tile_rows(r1 - r);
          /* the second row tile prefetches the next panels into L2 (the first streams these) */
          const size_t pf = r == second ? (size_t)np * K * XL_Q8P_ROWS * sizeof(float) : 0;
          __m512 acc[RB][4];
          for (int i = 0; i < R; i++)
            acc[i][0] = part[r - r0 + i][0], acc[i][1] = part[r - r0 + i][1];
          tile_of(R, np, x + (size_t)r * ldx, ldx, P, K, p, c0, c1, pf, acc);
          for (int i = 0; i < R; i++)
            part[r - r0 + i][0] = acc[i][0], part[r - r0 + i][1] = acc[i][1];
          r += R;
        }
      }
      for (int r = r0; r < r1; r++)
        for (int j = 0; j < np; j++)
          xl_panel_store_avx512(part[r - r0][j], p + j, row0, N, y + (size_t)r * ldy);
    }
  }
}
#undef TF
#endif /* __x86_64__ */
