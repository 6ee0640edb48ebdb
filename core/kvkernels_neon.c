/*
 * kvkernels_neon.c: the aarch64 NEON family of the narrow-memory table (kvkernels.h): the
 * decode step's key products and value mixes over bf16 or int8 memory, widened to F32 in
 * registers (4 lanes, blocks of 8) and accumulated with fused multiply-adds; ragged tails in
 * scalar fmaf. aarch64 only. Any thread; pure functions.
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>

#include "kvkernels.h"

/* 8 elements at p as two 4-lane float vectors */
static inline void widen8_bf16(const uint16_t *p, float32x4_t *lo, float32x4_t *hi) {
  uint16x8_t w = vld1q_u16(p);
  *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w), 16));
  *hi = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(w), 16));
}
static inline void widen8_i8(const int8_t *p, float32x4_t *lo, float32x4_t *hi) {
  int16x8_t w = vmovl_s8(vld1_s8(p));
  *lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
  *hi = vcvtq_f32_s32(vmovl_s16(vget_high_s16(w)));
}

#define DOT_BODY(WIDEN8, SCALAR, FINISH)                                               \
  do {                                                                                \
    int j = 0;                                                                        \
    for (; j + 8 <= n; j += 8) {                                                      \
      float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, x0, x1;                            \
      __typeof__(rows) r = rows + j;                                            \
      for (int k = 0; k < dh; k++, r += ld) {                                         \
        WIDEN8(r, &x0, &x1);                                                          \
        a0 = vfmaq_n_f32(a0, x0, q[k]);                                               \
        a1 = vfmaq_n_f32(a1, x1, q[k]);                                               \
      }                                                                               \
      vst1q_f32(s + j, FINISH(a0, j));                                                \
      vst1q_f32(s + j + 4, FINISH(a1, j + 4));                                        \
    }                                                                                 \
    for (; j < n; j++) {                                                              \
      float a = 0.0f;                                                                 \
      for (int k = 0; k < dh; k++) a = fmaf(q[k], SCALAR(rows[(size_t)k * ld + j]), a); \
      vst1q_lane_f32(s + j, FINISH(vdupq_n_f32(a), j), 0);                            \
    }                                                                                 \
  } while (0)

#define AS_FLOAT(x) ((float)(x))
#define NO_SCALE(acc, at) (acc)
#define BY_SCALE4(acc, at) vmulq_f32((acc), vld1q_f32(scale + (at)))

static void dot_rows_bf16(const float *q, int dh, const uint16_t *rows, size_t ld, int n,
                          float *s) {
  DOT_BODY(widen8_bf16, xl_bf16_to_f32, NO_SCALE);
}

static void dot_rows_i8(const float *q, int dh, const int8_t *rows, size_t ld, const float *scale,
                        int n, float *s) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, x0, x1;
    const int8_t *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      widen8_i8(r, &x0, &x1);
      a0 = vfmaq_n_f32(a0, x0, q[k]);
      a1 = vfmaq_n_f32(a1, x1, q[k]);
    }
    vst1q_f32(s + j, BY_SCALE4(a0, j));
    vst1q_f32(s + j + 4, BY_SCALE4(a1, j + 4));
  }
  for (; j < n; j++) {
    float a = 0.0f;
    for (int k = 0; k < dh; k++) a = fmaf(q[k], (float)rows[(size_t)k * ld + j], a);
    s[j] = a * scale[j];
  }
}

/* One head's outputs o[0..dh) accumulated over n rows in registers, 8 lanes at a time;
 * WEIGHT is row j's weight. Scalar fmaf when dh is not a multiple of 8. */
#define MIX_HEAD(WIDEN8, SCALAR, WEIGHT)                                                     \
  do {                                                                                      \
    int e = 0;                                                                              \
    if (dh % 8 == 0)                                                                        \
      for (; e < dh; e += 8) {                                                              \
        float32x4_t a0 = vld1q_f32(o + e), a1 = vld1q_f32(o + e + 4), x0, x1;               \
        for (int j = 0; j < n; j++) {                                                       \
          float w = WEIGHT;                                                                 \
          WIDEN8(rows + (size_t)j * ld + hoff + e, &x0, &x1);                               \
          a0 = vfmaq_n_f32(a0, x0, w);                                                      \
          a1 = vfmaq_n_f32(a1, x1, w);                                                      \
        }                                                                                   \
        vst1q_f32(o + e, a0);                                                               \
        vst1q_f32(o + e + 4, a1);                                                           \
      }                                                                                     \
    for (; e < dh; e++) {                                                                   \
      float a = o[e];                                                                       \
      for (int j = 0; j < n; j++) a = fmaf(WEIGHT, SCALAR(rows[(size_t)j * ld + hoff + e]), a); \
      o[e] = a;                                                                             \
    }                                                                                       \
  } while (0)

static void mix_rows_bf16(float *out, const float *p, size_t p_stride, const uint16_t *rows,
                          size_t ld, int n, int H, int dh) {
  for (int h = 0; h < H; h++) {
    float *o = out + (size_t)h * dh;
    const float *ph = p + (size_t)h * p_stride;
    size_t hoff = (size_t)h * dh;
    MIX_HEAD(widen8_bf16, xl_bf16_to_f32, ph[j]);
  }
}

static void mix_rows_i8(float *out, const float *p, size_t p_stride, const int8_t *rows,
                        size_t ld, const float *scale, size_t s_stride, int n, int H, int dh) {
  for (int h = 0; h < H; h++) {
    float *o = out + (size_t)h * dh;
    const float *ph = p + (size_t)h * p_stride;
    const float *sh = scale + h;
    size_t hoff = (size_t)h * dh;
    MIX_HEAD(widen8_i8, AS_FLOAT, ph[j] * sh[(size_t)j * s_stride]);
  }
}

const xl_kv_kernels xl_kv_kernels_neon = {.name = "neon",
                                          .dot_rows_bf16 = dot_rows_bf16,
                                          .dot_rows_i8 = dot_rows_i8,
                                          .mix_rows_bf16 = mix_rows_bf16,
                                          .mix_rows_i8 = mix_rows_i8};
#endif /* __aarch64__ */
