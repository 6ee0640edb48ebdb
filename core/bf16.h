/*
 * bf16.h: bfloat16 <-> float for the weights (wmat.c, wkernels_*.c) and the session memory
 * (kv_store.c, kvkernels_*.c). Widening is exact; narrowing rounds to nearest, ties to even,
 * carries into Inf on overflow, and keeps a NaN a (quiet) NaN. Pure functions: any thread.
 */
#ifndef XL_BF16_H
#define XL_BF16_H

#include <stdint.h>
#include <string.h>

static inline float xl_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t xl_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif /* XL_BF16_H */
