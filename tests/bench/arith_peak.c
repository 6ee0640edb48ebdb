/*
 * arith_peak.c: the arithmetic peak of one core for the instructions the weight GEMMs run on
 * x86-64 (arith_peak.h): independent accumulator chains of one instruction in registers, no
 * loads, timed by this thread's CPU time (cli_thread_cpu_now). 16 chains (14 in AVX2's 16
 * registers) cover each one's latency at two issues a cycle (on an AVX-512 Zen core fewer
 * chains measured slower), so the loop runs at the issue rate: the ceiling a GEMM tile of that
 * instruction can reach with its data in L1. Main thread only.
 */
#include "arith_peak.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "cli_common.h"

/* 16 chains in the 32 AVX-512 registers; 14 in AVX2's 16 (beside the two operands) */
#define CHAINS14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define CHAINS16(X) CHAINS14(X) X(14) X(15)
#define STEPS 4096 /* iterations between clock reads */

/* Each loop: `steps` rounds of one instruction on every chain; returns a value of every chain
 * so that none is dead. */
#define PEAK_LOOP(name, tgt, vec, CHAINS, setup, init, op, fold)                                   \
  __attribute__((target(tgt))) static float name(long steps) {                                     \
    setup                                                                                          \
    CHAINS(init)                                                                                   \
    for (long s = 0; s < steps; s++) {                                                             \
      CHAINS(op)                                                                                   \
    }                                                                                              \
    vec sum = a0 - a0;                                                                             \
    CHAINS(fold)                                                                                   \
    float out[sizeof(vec) / sizeof(float)];                                                        \
    __builtin_memcpy(out, &sum, sizeof out);                                                       \
    return out[0];                                                                                 \
  }

#define INIT_PS512(i) __m512 a##i = _mm512_set1_ps((float)(i)*1e-3f);
#define FMA_PS512(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define ADD_PS512(i) sum = _mm512_add_ps(sum, a##i);
#define INIT_PS256(i) __m256 a##i = _mm256_set1_ps((float)(i)*1e-3f);
#define FMA_PS256(i) a##i = _mm256_fmadd_ps(a##i, m8, c8);
#define ADD_PS256(i) sum = _mm256_add_ps(sum, a##i);
#define DPBF16(i) a##i = _mm512_dpbf16_ps(a##i, bx, bx);
#define INIT_EPI512(i) __m512i a##i = _mm512_set1_epi32(i);
#define DPBUSD(i) a##i = _mm512_dpbusd_epi32(a##i, ux, sx);
#define ADD_EPI512(i) sum = _mm512_add_epi32(sum, a##i);

#define M512 const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
#define M256 const __m256 m8 = _mm256_set1_ps(0.999999f), c8 = _mm256_set1_ps(1e-6f);
#define BX const __m512bh bx = (__m512bh)_mm512_set1_epi32(0x3f803f80);
#define UX const __m512i ux = _mm512_set1_epi32(0x01020304), sx = _mm512_set1_epi32(0x01010101);

PEAK_LOOP(loop_fma512, "avx512f", __m512, CHAINS16, M512, INIT_PS512, FMA_PS512, ADD_PS512)
PEAK_LOOP(loop_fma256, "avx2,fma", __m256, CHAINS14, M256, INIT_PS256, FMA_PS256, ADD_PS256)
PEAK_LOOP(loop_dpbf16, "avx512f,avx512bf16", __m512, CHAINS16, BX, INIT_PS512, DPBF16, ADD_PS512)
PEAK_LOOP(loop_dpbusd, "avx512f,avx512vnni", __m512i, CHAINS16, UX, INIT_EPI512, DPBUSD, ADD_EPI512)
#endif

volatile float arith_peak_sink; /* keeps every loop's result alive */

double arith_peak_gops(arith_instr instr, double seconds) {
#if defined(__x86_64__)
  float (*loop)(long) = instr == PEAK_FMA512   ? loop_fma512
                        : instr == PEAK_FMA256 ? loop_fma256
                        : instr == PEAK_DPBF16 ? loop_dpbf16
                                               : loop_dpbusd;
  /* operations an instruction does: 2 per multiply-add, its lanes' multiply-adds */
  const double ops = instr == PEAK_FMA512   ? 32
                     : instr == PEAK_FMA256 ? 16
                     : instr == PEAK_DPBF16 ? 64
                                            : 128;
  arith_peak_sink = loop(STEPS); /* warm up (and the core's clock up) */
  long steps = 0;
  double t0 = cli_thread_cpu_now(), el;
  do {
    arith_peak_sink = loop(STEPS);
    steps += STEPS;
  } while ((el = cli_thread_cpu_now() - t0) < seconds);
  const double chains = instr == PEAK_FMA256 ? 14 : 16;
  return el > 0 ? (double)steps * chains * ops / el / 1e9 : 0;
#else
  (void)instr, (void)seconds;
  return 0;
#endif
}

const char *arith_peak_name(arith_instr instr) {
  static const char *const NAME[] = {"FMA zmm", "FMA ymm", "vdpbf16ps", "vpdpbusd"};
  return NAME[instr];
}
