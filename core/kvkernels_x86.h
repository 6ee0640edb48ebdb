/*
 * kvkernels_x86.h: the body of the x86 SIMD families of the narrow-memory table (kvkernels.h),
 * written once over a vector of LANES floats: the decode step's key products and value mixes
 * over bf16 or int8 memory, widened to F32 in registers and accumulated with fused
 * multiply-adds, the memory read in passes over a few rows at a time and prefetched in
 * software; ragged tails in scalar fmaf. Included once, by kvkernels_avx512.c and by
 * kvkernels_avx2.c, each defining first:
 *   T                        the functions' target attribute
 *   VF, LANES                the vector type and its number of floats
 *   VLOAD(p), VSTORE(p, v)   unaligned load / store of LANES floats
 *   VSET1(x), VFMA(a, b, c), VMUL(a, b)   broadcast; a * b + c fused; a * b
 *   widen_bf16(p), widen_i8(p)            LANES narrow values at p as a VF
 *   PREFETCH(p, bytes), PF_VALS           a software prefetch; value rows ahead
 *   KV_TABLE, KV_NAME        the table to define and its family's name
 * Any thread; pure functions.
 */
#include <math.h>

#include "kvkernels.h"

/* Key products: s[j] is kept in memory (L1: one head's positions) and updated by a pass over
 * KEY_ROWS key rows at a time, so the memory is read as KEY_ROWS sequential streams (the rows
 * of a head lie one after the other) instead of one stream per head dimension. Each s[j] still
 * gets its fused multiply-adds in the order k = 0, 1, .., dh-1 from 0, as the portable
 * reference. */
#define KEY_ROWS 8
#define DOT_ROWS(WIDEN, SCALAR)                                                                    \
  do {                                                                                             \
    const int nv = n & ~(LANES - 1);                                                               \
    for (int j = 0; j < n; j++) s[j] = 0.0f;                                                       \
    int k = 0;                                                                                     \
    for (; k + KEY_ROWS <= dh; k += KEY_ROWS) {                                                    \
      VF qk[KEY_ROWS];                                                                             \
      __typeof__(rows) r[KEY_ROWS];                                                                \
      for (int i = 0; i < KEY_ROWS; i++) {                                                         \
        qk[i] = VSET1(q[k + i]);                                                                   \
        r[i] = rows + (size_t)(k + i) * ld;                                                        \
      }                                                                                            \
      for (int j = 0; j < nv; j += LANES) {                                                        \
        if (!((j * sizeof *rows) & 63)) /* the next KEY_ROWS rows, once per 64-byte line */        \
          for (int i = 0; i < KEY_ROWS; i++) PREFETCH(r[i] + j, KEY_ROWS * ld * sizeof *rows);     \
        VF a = VLOAD(s + j);                                                                       \
        for (int i = 0; i < KEY_ROWS; i++) a = VFMA(qk[i], WIDEN(r[i] + j), a);                    \
        VSTORE(s + j, a);                                                                          \
      }                                                                                            \
      for (int j = nv; j < n; j++) {                                                               \
        float a = s[j];                                                                            \
        for (int i = 0; i < KEY_ROWS; i++) a = fmaf(q[k + i], SCALAR(r[i][j]), a);                 \
        s[j] = a;                                                                                  \
      }                                                                                            \
    }                                                                                              \
    for (; k < dh; k++) {                                                                          \
      VF qk = VSET1(q[k]);                                                                         \
      __typeof__(rows) r = rows + (size_t)k * ld;                                                  \
      for (int j = 0; j < nv; j += LANES)                                                          \
        VSTORE(s + j, VFMA(qk, WIDEN(r + j), VLOAD(s + j)));                                       \
      for (int j = nv; j < n; j++) s[j] = fmaf(q[k], SCALAR(r[j]), s[j]);                          \
    }                                                                                              \
  } while (0)

#define AS_FLOAT(x) ((float)(x))

T static void dot_rows_bf16(const float *q, int dh, const uint16_t *rows, size_t ld, int n,
                            float *s) {
  DOT_ROWS(widen_bf16, xl_bf16_to_f32);
}

T static void dot_rows_i8(const float *q, int dh, const int8_t *rows, size_t ld, const float *scale,
                          int n, float *s) {
  DOT_ROWS(widen_i8, AS_FLOAT);
  int j = 0;
  for (; j + LANES <= n; j += LANES)
    VSTORE(s + j, VMUL(VLOAD(s + j), VLOAD(scale + j)));
  for (; j < n; j++) s[j] *= scale[j];
}

/* Value mixes. With dh a multiple of LANES: VALUE_ROWS value rows at a time (contiguous
 * memory, read in order); per head, the rows' weights broadcast, then for every MIX_CHAINS x
 * LANES outputs one load each, VALUE_ROWS fused multiply-adds each and one store each. The
 * MIX_CHAINS sums go side by side so the core overlaps their latencies (one sum's adds must run
 * one after another), and a head of COMMON_HEAD values gets loops built for that constant
 * (bench_kernels' int8 value mix from DRAM: about 1.2x on AVX2; a few per cent on AVX-512,
 * whose loop was already near the read rate). Otherwise one head at a time, scalar fmaf.
 * Either way each output gets its fused multiply-adds in the order j = 0, 1, .., n-1.
 * w(j, h): row j's weight in head h. */
#define VALUE_ROWS 8
_Static_assert(VALUE_ROWS == 8, "the mixes take a full pass's weights as vectors of 8");
#define MIX_CHAINS 4 /* vectors of outputs a pass over VALUE_ROWS rows sums side by side */
#define MIX_MAX_HEADS 64 /* the four-query mix's weight buffer */
#define COMMON_HEAD 64 /* d_head of most models (wt103, enwik8, text8): loops built for it */
/* The vector path over heads of DH values (an expression: dh, or a constant the compiler then
 * builds the loops for). Per pass and head, the rows' weights first go to wt[] (a full pass's
 * eight as one vector: W8_PRE, then W8; the same products, rounded the same way, as WEIGHT's),
 * and a full pass runs loops of the constant VALUE_ROWS, its weights broadcast from wt[]. */
#define MIX_VECTOR(WIDEN, WEIGHT, W8_PRE, W8, PF_PASS, DH)                                         \
  for (int j0 = 0; j0 < n; j0 += VALUE_ROWS) {                                                     \
    const int nr = n - j0 < VALUE_ROWS ? n - j0 : VALUE_ROWS;                                      \
    const __typeof__(rows) r0 = rows + (size_t)j0 * ld;                                            \
    PF_PASS;                                                                                       \
    for (int h = 0; h < H; h++) {                                                                  \
      float wt[VALUE_ROWS]; /* the rows' weights in this head */                                   \
      if (nr == VALUE_ROWS) {                                                                      \
        W8_PRE;                                                                                    \
        _mm256_storeu_ps(wt, W8);                                                                  \
      } else {                                                                                     \
        for (int i = 0; i < nr; i++) {                                                             \
          const int j = j0 + i;                                                                    \
          wt[i] = WEIGHT;                                                                          \
        }                                                                                          \
      }                                                                                            \
      for (int i = 0; i < VALUE_ROWS; i++) /* this head's part of the rows PF_VALS ahead */        \
        for (size_t b = 0; b < (DH) * sizeof *rows; b += 64)                                       \
          PREFETCH(r0 + (size_t)(PF_VALS + i) * ld + (size_t)h * (DH), b);                         \
      if (nr == VALUE_ROWS)                                                                        \
        MIX1_HEAD(WIDEN, DH, VALUE_ROWS);                                                          \
      else                                                                                         \
        MIX1_HEAD(WIDEN, DH, nr);                                                                  \
    }                                                                                              \
  }
/* MIX_VECTOR's pass over NR rows from r0 in head h, weights wt[] */
#define MIX1_HEAD(WIDEN, DH, NR)                                                                   \
  do {                                                                                             \
    int e = h * (DH);                                                                              \
    for (; e + MIX_CHAINS * LANES <= (h + 1) * (DH); e += MIX_CHAINS * LANES) {                    \
      VF a[MIX_CHAINS]; /* MIX_CHAINS outputs' sums side by side: independent chains */           \
      for (int c = 0; c < MIX_CHAINS; c++) a[c] = VLOAD(out + e + c * LANES);                      \
      for (int i = 0; i < (NR); i++) {                                                             \
        const VF wi = VSET1(wt[i]);                                                                \
        for (int c = 0; c < MIX_CHAINS; c++)                                                       \
          a[c] = VFMA(wi, WIDEN(r0 + (size_t)i * ld + e + c * LANES), a[c]);                      \
      }                                                                                            \
      for (int c = 0; c < MIX_CHAINS; c++) VSTORE(out + e + c * LANES, a[c]);                      \
    }                                                                                              \
    for (; e < (h + 1) * (DH); e += LANES) {                                                       \
      VF a = VLOAD(out + e);                                                                       \
      for (int i = 0; i < (NR); i++) a = VFMA(VSET1(wt[i]), WIDEN(r0 + (size_t)i * ld + e), a);    \
      VSTORE(out + e, a);                                                                          \
    }                                                                                              \
  } while (0)

#define MIX_ROWS(WIDEN, SCALAR, WEIGHT, W8_PRE, W8, PF_PASS)                                       \
  do {                                                                                             \
    if (dh == COMMON_HEAD) {                                                                       \
      MIX_VECTOR(WIDEN, WEIGHT, W8_PRE, W8, PF_PASS, COMMON_HEAD);                                 \
      return;                                                                                      \
    }                                                                                              \
    if (dh % LANES == 0) {                                                                         \
      MIX_VECTOR(WIDEN, WEIGHT, W8_PRE, W8, PF_PASS, dh);                                          \
      return;                                                                                      \
    }                                                                                              \
    for (int h = 0; h < H; h++)                                                                    \
      for (int e = h * dh; e < (h + 1) * dh; e++) {                                                \
        float a = out[e];                                                                          \
        for (int j = 0; j < n; j++) a = fmaf(WEIGHT, SCALAR(rows[(size_t)j * ld + e]), a);         \
        out[e] = a;                                                                                \
      }                                                                                            \
  } while (0)

/* A full pass's weights in head h: the probabilities of rows j0.. j0 + 7 (times, for int8,
 * their scales in head h). */
#define P8_1 _mm256_loadu_ps(p + (size_t)h * p_stride + j0)
#define SCALE8(t) scale[(size_t)(j0 + (t)) * s_stride + h]
#define SCALES8                                                                                    \
  const __m256 sc = _mm256_set_ps(SCALE8(7), SCALE8(6), SCALE8(5), SCALE8(4), SCALE8(3),         \
                                  SCALE8(2), SCALE8(1), SCALE8(0))

/* The scales of the rows PF_VALS ahead (the weights of a pass wait on all eight of theirs) */
#define PF_SCALES                                                                                  \
  for (int t = 0; t < VALUE_ROWS; t++) PREFETCH(scale + (size_t)(j0 + PF_VALS + t) * s_stride, 0)

T static void mix_rows_bf16(float *out, const float *p, size_t p_stride, const uint16_t *rows,
                            size_t ld, int n, int H, int dh) {
  MIX_ROWS(widen_bf16, xl_bf16_to_f32, p[(size_t)h * p_stride + j], (void)0, P8_1, (void)0);
}

T static void mix_rows_i8(float *out, const float *p, size_t p_stride, const int8_t *rows,
                          size_t ld, const float *scale, size_t s_stride, int n, int H, int dh) {
  MIX_ROWS(widen_i8, AS_FLOAT, p[(size_t)h * p_stride + j] * scale[(size_t)j * s_stride + h],
           SCALES8, _mm256_mul_ps(P8_1, sc), PF_SCALES);
}

/* Four queries (a short prompt's block over a memory, or four decode steps' products with the
 * positional table): DOT_ROWS and MIX_ROWS with each group of rows widened once and used by
 * the four, every number computed as the single-query loops compute it (the same fused
 * multiply-adds in the same order from the same start). The key products go over KEY_ROWS4
 * rows a pass with the four queries' values of those rows broadcast into registers once a pass
 * (a family defines KEY_ROWS4 where its registers hold the 4 x KEY_ROWS4 of them; else
 * KEY_ROWS): passes of any length give the same sums, only s is stored between them. */
#ifndef KEY_ROWS4
#define KEY_ROWS4 KEY_ROWS
#endif
#define DOT_ROWS4(WIDEN, SCALAR)                                                                   \
  do {                                                                                             \
    const int nv = n & ~(LANES - 1);                                                               \
    for (int i = 0; i < 4; i++)                                                                    \
      for (int j = 0; j < n; j++) s[(size_t)i * lds + j] = 0.0f;                                   \
    int k = 0;                                                                                     \
    for (; k + KEY_ROWS4 <= dh; k += KEY_ROWS4) {                                                  \
      __typeof__(rows) r[KEY_ROWS4];                                                               \
      VF qb[4][KEY_ROWS4]; /* query i's value of row k + kk, in every lane */                      \
      for (int kk = 0; kk < KEY_ROWS4; kk++) {                                                     \
        r[kk] = rows + (size_t)(k + kk) * ld;                                                      \
        for (int i = 0; i < 4; i++) qb[i][kk] = VSET1(q[(size_t)i * ldq + k + kk]);                \
      }                                                                                            \
      for (int j = 0; j < nv; j += LANES) {                                                        \
        if (!((j * sizeof *rows) & 63))                                                            \
          for (int kk = 0; kk < KEY_ROWS4; kk++)                                                   \
            PREFETCH(r[kk] + j, KEY_ROWS4 * ld * sizeof *rows);                                    \
        VF w[KEY_ROWS4];                                                                           \
        for (int kk = 0; kk < KEY_ROWS4; kk++) w[kk] = WIDEN(r[kk] + j);                           \
        for (int i = 0; i < 4; i++) {                                                              \
          float *si = s + (size_t)i * lds + j;                                                     \
          VF a = VLOAD(si);                                                                        \
          for (int kk = 0; kk < KEY_ROWS4; kk++) a = VFMA(qb[i][kk], w[kk], a);                    \
          VSTORE(si, a);                                                                           \
        }                                                                                          \
      }                                                                                            \
      for (int i = 0; i < 4; i++)                                                                  \
        for (int j = nv; j < n; j++) {                                                             \
          float a = s[(size_t)i * lds + j];                                                        \
          for (int kk = 0; kk < KEY_ROWS4; kk++)                                                   \
            a = fmaf(q[(size_t)i * ldq + k + kk], SCALAR(r[kk][j]), a);                            \
          s[(size_t)i * lds + j] = a;                                                              \
        }                                                                                          \
    }                                                                                              \
    for (; k < dh; k++) {                                                                          \
      __typeof__(rows) r = rows + (size_t)k * ld;                                                  \
      for (int i = 0; i < 4; i++) {                                                                \
        const float qk1 = q[(size_t)i * ldq + k];                                                  \
        const VF qk = VSET1(qk1);                                                                  \
        float *si = s + (size_t)i * lds;                                                           \
        for (int j = 0; j < nv; j += LANES) VSTORE(si + j, VFMA(qk, WIDEN(r + j), VLOAD(si + j))); \
        for (int j = nv; j < n; j++) si[j] = fmaf(qk1, SCALAR(r[j]), si[j]);                       \
      }                                                                                            \
    }                                                                                              \
  } while (0)

T static void dot_rows4_bf16(const float *q, size_t ldq, int dh, const uint16_t *rows, size_t ld,
                             int n, float *s, size_t lds) {
  DOT_ROWS4(widen_bf16, xl_bf16_to_f32);
}

T static void dot_rows4_i8(const float *q, size_t ldq, int dh, const int8_t *rows, size_t ld,
                           const float *scale, int n, float *s, size_t lds) {
  DOT_ROWS4(widen_i8, AS_FLOAT);
  for (int i = 0; i < 4; i++) {
    float *si = s + (size_t)i * lds;
    int j = 0;
    for (; j + LANES <= n; j += LANES) VSTORE(si + j, VMUL(VLOAD(si + j), VLOAD(scale + j)));
    for (; j < n; j++) si[j] *= scale[j];
  }
}

/* MIX_ROWS of 4 queries where its vector path applies (dh a multiple of LANES, at most
 * MIX_MAX_HEADS heads); else the single-query loop per query. WEIGHT(i) is query i's weight
 * of row j in head h; a whole pass of VALUE_ROWS (8) rows takes its four queries' weights in
 * head h eight at a time instead: W8_PRE (per head) then W8(i), the same products rounded the
 * same way, as a vector of 8. The pass over the rows then runs loops of a constant length. */
#define MIX_ROWS4(WIDEN, SINGLE, WEIGHT, W8_PRE, W8)                                               \
  do {                                                                                             \
    if (dh % LANES || H > MIX_MAX_HEADS) {                                                         \
      for (int i = 0; i < 4; i++) SINGLE;                                                          \
      return;                                                                                      \
    }                                                                                              \
    float w[4][MIX_MAX_HEADS][VALUE_ROWS]; /* query i's weight of row t in head h */              \
    for (int j0 = 0; j0 < n; j0 += VALUE_ROWS) {                                                   \
      const int nr = n - j0 < VALUE_ROWS ? n - j0 : VALUE_ROWS;                                    \
      const __typeof__(rows) r0 = rows + (size_t)j0 * ld;                                          \
      if (nr == VALUE_ROWS) {                                                                      \
        for (int h = 0; h < H; h++) {                                                              \
          W8_PRE;                                                                                  \
          for (int i = 0; i < 4; i++) _mm256_storeu_ps(w[i][h], W8(i));                            \
        }                                                                                          \
        MIX4_PASS(WIDEN, VALUE_ROWS);                                                              \
      } else {                                                                                     \
        for (int i = 0; i < 4; i++)                                                                \
          for (int h = 0; h < H; h++)                                                              \
            for (int t = 0; t < nr; t++) {                                                         \
              const int j = j0 + t;                                                                \
              w[i][h][t] = WEIGHT(i);                                                              \
            }                                                                                      \
        MIX4_PASS(WIDEN, nr);                                                                      \
      }                                                                                            \
    }                                                                                              \
  } while (0)
/* MIX_ROWS4's pass over NR rows from r0 (NR: VALUE_ROWS, or the last pass's nr) */
#define MIX4_PASS(WIDEN, NR)                                                                       \
  for (int h = 0; h < H; h++) {                                                                    \
    for (int t = 0; t < VALUE_ROWS; t++)                                                           \
      for (size_t b = 0; b < dh * sizeof *rows; b += 64)                                           \
        PREFETCH(r0 + (size_t)(PF_VALS + t) * ld + (size_t)h * dh, b);                             \
    for (int e = h * dh; e < (h + 1) * dh; e += LANES) {                                           \
      VF v[VALUE_ROWS];                                                                            \
      for (int t = 0; t < (NR); t++) v[t] = WIDEN(r0 + (size_t)t * ld + e);                        \
      for (int i = 0; i < 4; i++) {                                                                \
        float *oi = out + (size_t)i * ldo + e;                                                     \
        VF a = VLOAD(oi);                                                                          \
        for (int t = 0; t < (NR); t++) a = VFMA(VSET1(w[i][h][t]), v[t], a);                       \
        VSTORE(oi, a);                                                                             \
      }                                                                                            \
    }                                                                                              \
  }

#define W4_BF16(i) p[(size_t)(i) * ldp + (size_t)h * p_stride + j]
#define W4_I8(i) (p[(size_t)(i) * ldp + (size_t)h * p_stride + j] * scale[(size_t)j * s_stride + h])
#define P8(i) _mm256_loadu_ps(p + (size_t)(i) * ldp + (size_t)h * p_stride + j0)
#define W8_I8(i) _mm256_mul_ps(P8(i), sc)

T static void mix_rows4_bf16(float *out, size_t ldo, const float *p, size_t ldp, size_t p_stride,
                             const uint16_t *rows, size_t ld, int n, int H, int dh) {
  MIX_ROWS4(widen_bf16,
            mix_rows_bf16(out + (size_t)i * ldo, p + (size_t)i * ldp, p_stride, rows, ld, n, H, dh),
            W4_BF16, (void)0, P8);
}

T static void mix_rows4_i8(float *out, size_t ldo, const float *p, size_t ldp, size_t p_stride,
                           const int8_t *rows, size_t ld, const float *scale, size_t s_stride,
                           int n, int H, int dh) {
  MIX_ROWS4(widen_i8,
            mix_rows_i8(out + (size_t)i * ldo, p + (size_t)i * ldp, p_stride, rows, ld, scale,
                        s_stride, n, H, dh),
            W4_I8, SCALES8, W8_I8);
}
#undef W4_BF16
#undef W4_I8
#undef P8
#undef SCALE8
#undef SCALES8
#undef P8_1
#undef PF_SCALES
#undef W8_I8

const xl_kv_kernels KV_TABLE = {.name = KV_NAME,
                                .dot_rows_bf16 = dot_rows_bf16,
                                .dot_rows_i8 = dot_rows_i8,
                                .mix_rows_bf16 = mix_rows_bf16,
                                .mix_rows_i8 = mix_rows_i8,
                                .dot_rows4_bf16 = dot_rows4_bf16,
                                .dot_rows4_i8 = dot_rows4_i8,
                                .mix_rows4_bf16 = mix_rows4_bf16,
                                .mix_rows4_i8 = mix_rows4_i8};
