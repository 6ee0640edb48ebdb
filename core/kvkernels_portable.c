/*
 * kvkernels_portable.c: the portable C family of the narrow-memory table (kvkernels.h), the
 * reference the vector families are tested against, and xl_kv_kern(), which matches the table
 * to the kernel family in use. Any thread; pure functions.
 */
#include "kernels.h"
#include "kvkernels.h"

static void dot_rows_bf16(const float *q, int dh, const uint16_t *rows, size_t ld, int n,
                          float *s) {
  for (int j = 0; j < n; j++) s[j] = 0.0f;
  for (int k = 0; k < dh; k++) {
    const uint16_t *r = rows + (size_t)k * ld;
    for (int j = 0; j < n; j++) s[j] += q[k] * xl_bf16_to_f32(r[j]);
  }
}

static void dot_rows_i8(const float *q, int dh, const int8_t *rows, size_t ld, const float *scale,
                        int n, float *s) {
  for (int j = 0; j < n; j++) s[j] = 0.0f;
  for (int k = 0; k < dh; k++) {
    const int8_t *r = rows + (size_t)k * ld;
    for (int j = 0; j < n; j++) s[j] += q[k] * (float)r[j];
  }
  for (int j = 0; j < n; j++) s[j] *= scale[j];
}

static void mix_rows_bf16(float *out, const float *p, size_t p_stride, const uint16_t *rows,
                          size_t ld, int n, int H, int dh) {
  for (int j = 0; j < n; j++)
    for (int h = 0; h < H; h++) {
      float w = p[(size_t)h * p_stride + j];
      const uint16_t *r = rows + (size_t)j * ld + (size_t)h * dh;
      float *o = out + (size_t)h * dh;
      for (int i = 0; i < dh; i++) o[i] += w * xl_bf16_to_f32(r[i]);
    }
}

static void mix_rows_i8(float *out, const float *p, size_t p_stride, const int8_t *rows, size_t ld,
                        const float *scale, size_t s_stride, int n, int H, int dh) {
  for (int j = 0; j < n; j++)
    for (int h = 0; h < H; h++) {
      float w = p[(size_t)h * p_stride + j] * scale[(size_t)j * s_stride + h];
      const int8_t *r = rows + (size_t)j * ld + (size_t)h * dh;
      float *o = out + (size_t)h * dh;
      for (int i = 0; i < dh; i++) o[i] += w * (float)r[i];
    }
}

const xl_kv_kernels xl_kv_kernels_portable = {.name = "portable",
                                              .dot_rows_bf16 = dot_rows_bf16,
                                              .dot_rows_i8 = dot_rows_i8,
                                              .mix_rows_bf16 = mix_rows_bf16,
                                              .mix_rows_i8 = mix_rows_i8};

const xl_kv_kernels *xl_kv_kern(void) {
  const xl_kernels *k = xl_kern();
#if defined(__x86_64__)
  if (k == &xl_kernels_avx512) return &xl_kv_kernels_avx512;
  if (k == &xl_kernels_avx2) return &xl_kv_kernels_avx2;
#endif
#if defined(__aarch64__)
  if (k == &xl_kernels_neon) return &xl_kv_kernels_neon;
#endif
  return &xl_kv_kernels_portable;
}
