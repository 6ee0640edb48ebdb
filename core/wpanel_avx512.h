/*
 * wpanel_avx512.h: what the AVX-512 panel kernels share (wkernels_dot_avx512.c,
 * wkernels_f32p_avx512.c): writing one panel's 16 output lanes into y, clipped to the view's
 * rows. Included by files compiled with AVX-512F target attributes only. Any thread.
 */
#ifndef XL_WPANEL_AVX512_H
#define XL_WPANEL_AVX512_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "wpanel.h"

/* y[o - row0] = lanes of panel p whose row o is in [row0, row0 + N) */
__attribute__((target("avx512f"), always_inline)) static inline void xl_panel_store_avx512(
    __m512 v, int p, int row0, int N, float *y) {
  const int first = p * XL_Q8P_ROWS;
  if (first >= row0 && first + XL_Q8P_ROWS <= row0 + N) {
    _mm512_storeu_ps(y + (first - row0), v);
    return;
  }
  _Alignas(64) float lanes[XL_Q8P_ROWS];
  _mm512_store_ps(lanes, v);
  for (int l = 0; l < XL_Q8P_ROWS; l++)
    if (first + l >= row0 && first + l < row0 + N) y[first + l - row0] = lanes[l];
}
#endif

#endif /* XL_WPANEL_AVX512_H */
