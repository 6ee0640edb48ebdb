/*
 * kvkernels_avx512.c: the AVX-512F family of the narrow-memory table (kvkernels.h): the decode
 * step's key products and value mixes over bf16 or int8 memory, widened to F32 in registers
 * (16 lanes); the loops are kvkernels_x86.h's, shared with the AVX2 family. Compiled with target
 * attributes, chosen at run time with the kernel family (cpu.c); x86-64 only. Any thread; pure
 * functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#define T __attribute__((target("avx512f")))
#define VF __m512
#define LANES 16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#define VMUL _mm512_mul_ps
/* Software prefetch (integer addresses: past the memory's end only a hint). Both loops read
 * the memory in passes over a few rows at a time and fetch, as they go, the same part of the
 * rows the next pass (keys) or PF_VALS rows ahead (values) will read (the hardware prefetcher
 * alone left the value mix at under half the bandwidth of a sequential read when the memory
 * streams from DRAM). */
#define PF_VALS 8 /* value rows ahead */
#define KEY_ROWS4 4 /* four queries x 4 rows of broadcast values: 16 of the 32 registers */
#define PREFETCH(p, bytes)                                                                    \
  _mm_prefetch((const char *)((uintptr_t)(const void *)(p) + (bytes)), _MM_HINT_T0)
#define KV_TABLE xl_kv_kernels_avx512
#define KV_NAME "avx512"

T static inline __m512 widen_bf16(const uint16_t *p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
T static inline __m512 widen_i8(const int8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

#include "kvkernels_x86.h"
#endif /* __x86_64__ */
