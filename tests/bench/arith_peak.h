/*
 * arith_peak.h: one core's arithmetic peak for an instruction a weight GEMM runs on (the
 * ceiling beside which bench_kernels prints its in-cache GEMM). x86-64 only; elsewhere the
 * rate is 0 (not measured). Main thread only.
 */
#ifndef ARITH_PEAK_H
#define ARITH_PEAK_H

typedef enum {
  PEAK_FMA512, /* F32 multiply-add, 16 lanes (AVX-512F) */
  PEAK_FMA256, /* F32 multiply-add, 8 lanes (AVX2 + FMA) */
  PEAK_DPBF16, /* vdpbf16ps: 32 bf16 products added into 16 F32 lanes (AVX512_BF16) */
  PEAK_DPBUSD  /* vpdpbusd: 64 u8 x s8 products added into 16 int32 lanes (AVX512_VNNI) */
} arith_instr;

/* Operations a second (2 per multiply-add), in billions, over at least `seconds` of this
 * thread's CPU time; 0 off x86-64. The caller makes sure the CPU has the instruction. */
double arith_peak_gops(arith_instr instr, double seconds);
const char *arith_peak_name(arith_instr instr);

#endif /* ARITH_PEAK_H */
