/*
 * kvkernels_avx2.c: the AVX2 + FMA family of the narrow-memory table (kvkernels.h): the decode
 * step's key products and value mixes over bf16 or int8 memory, widened to F32 in registers
 * (8 lanes); the loops are kvkernels_x86.h's, shared with the AVX-512 family. Compiled with
 * target attributes, chosen at run time with the kernel family (cpu.c); x86-64 only. Any
 * thread; pure functions.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#define T __attribute__((target("avx2,fma")))
#define VF __m256
#define LANES 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VMUL _mm256_mul_ps
/* Software prefetch (integer addresses: past the memory's end only a hint): the part of the
 * rows the next pass (keys) or PF_VALS rows ahead (values) will read. */
#define PF_VALS 8 /* value rows ahead */
#define PREFETCH(p, bytes)                                                                    \
  _mm_prefetch((const char *)((uintptr_t)(const void *)(p) + (bytes)), _MM_HINT_T0)
#define KV_TABLE xl_kv_kernels_avx2
#define KV_NAME "avx2"

T static inline __m256 widen_bf16(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
T static inline __m256 widen_i8(const int8_t *p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

#include "kvkernels_x86.h"
#endif /* __x86_64__ */
