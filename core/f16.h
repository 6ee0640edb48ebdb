/*
 * f16.h: IEEE 754 half precision (binary16) <-> float, for the block scales of int8 and int4
 * weights (wmat.c quantises to scales a half holds exactly; wpanel.c stores them as halves, which
 * the AVX-512 kernels widen with VCVTPH2PS). Widening is exact; narrowing rounds to nearest, ties
 * to even (subnormal halves included), gives Inf from 65520 on, and keeps a NaN a (quiet) NaN.
 * Pure functions: any thread.
 */
#ifndef XL_F16_H
#define XL_F16_H

#include <stdint.h>
#include <string.h>

#define XL_F16_MAX 65504.0f /* the largest finite half */

static inline float xl_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  uint32_t u;
  if (!e) { /* zero or subnormal: m 2^-24, exact in a float */
    const float f = (float)m * 0x1p-24f;
    return sign ? -f : f;
  }
  if (e == 0x1Fu) u = sign | 0x7F800000u | (m << 13); /* Inf, NaN */
  else u = sign | ((e + 112u) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t xl_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN */
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);                       /* >= 65520: Inf */
  if (a >= 0x38800000u) { /* >= 2^-14: a normal half; round the 13 bits dropped */
    const uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
  }
  /* a subnormal half (or zero): k 2^-24, k = the significand shifted right, rounded */
  const uint32_t e = a >> 23;
  if (e < 102u) return sign; /* below 2^-25: rounds to zero */
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e; /* 14 .. 24 */
  const uint32_t k = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return (uint16_t)(sign | (k + (rest > half || (rest == half && (k & 1u)))));
}

/* f rounded to the nearest half, as a float (Inf beyond the halves' range) */
static inline float xl_f16_round(float f) { return xl_f16_to_f32(xl_f32_to_f16(f)); }

#endif /* XL_F16_H */
