/*
 * wmat.c: weight matrices in the model's weight type (wkernels.h): the type names, the choice
 * of the narrow-weight kernel table (the family of xl_kern()), the GEMM and Linear over any
 * type and layout (rows, or the panels of the dot-product and F32 panel kernels: wpanel.h),
 * row reads (the embedding lookup), views from a row, and the int8 and int4 block
 * quantisations. Any thread; pure functions.
 */
#include <math.h>
#include <string.h>

#include "f16.h"
#include "internal.h"
#include "wpanel.h"

static const char *const WEIGHT_NAMES[] = {"f32", "bf16", "int8", "int4"};

const char *xl_weights_name(xl_weights w) {
  return (unsigned)w < sizeof WEIGHT_NAMES / sizeof *WEIGHT_NAMES ? WEIGHT_NAMES[w] : NULL;
}

int xl_weights_parse(const char *name) {
  for (int i = 0; name && i < (int)(sizeof WEIGHT_NAMES / sizeof *WEIGHT_NAMES); i++)
    if (!strcmp(name, WEIGHT_NAMES[i])) return i;
  return -1;
}

const xl_wkernels *xl_wkern(void) {
  const xl_kernels *k = xl_kern();
#if defined(__x86_64__)
  if (k == &xl_kernels_avx512) return &xl_wkernels_avx512;
  if (k == &xl_kernels_avx2) return &xl_wkernels_avx2;
#endif
#if defined(__aarch64__)
  if (k == &xl_kernels_neon) return &xl_wkernels_neon;
#endif
  (void)k;
  return &xl_wkernels_portable;
}

void xl_matmul_w(const float *x, int M, int K, int ldx, const xl_wmat *W, int N, float *y,
                 int ldy) {
  if (M <= 0 || N <= 0) return;
  switch (W->type) {
  case XL_WEIGHTS_BF16:
    if (!W->panels) xl_wkern()->matmul_bf16(x, M, K, ldx, W->data, N, W->cols, y, ldy);
#if defined(__x86_64__)
    else if (xl_bf16p_wanted()) xl_bf16p_matmul_avx512(x, M, K, ldx, W->data, W->row0, N, y, ldy);
#endif
    else xl_bf16p_matmul_portable(x, M, K, ldx, W->data, W->row0, N, y, ldy);
    break;
  case XL_WEIGHTS_INT8:
    if (!W->panels) xl_wkern()->matmul_q8(x, M, K, ldx, W->data, W->scales, N, W->cols, y, ldy);
#if defined(__x86_64__)
    else if (xl_q8p_wanted())
      xl_q8p_matmul_vnni(x, M, K, ldx, W->data, W->panel_scales, W->row0, N, y, ldy);
#endif
    else xl_q8p_matmul_portable(x, M, K, ldx, W->data, W->panel_scales, W->row0, N, y, ldy);
    break;
  case XL_WEIGHTS_INT4:
    if (!W->panels) xl_wkern()->matmul_q4(x, M, K, ldx, W->data, W->scales, N, W->cols, y, ldy);
#if defined(__x86_64__)
    else if (xl_q8p_wanted())
      xl_q4p_matmul_vnni(x, M, K, ldx, W->data, W->panel_scales, W->row0, N, y, ldy);
#endif
    else xl_q4p_matmul_portable(x, M, K, ldx, W->data, W->panel_scales, W->row0, N, y, ldy);
    break;
  default:
    if (!W->panels) xl_matmul_nt(x, M, K, ldx, W->data, N, W->cols, y, ldy);
#if defined(__x86_64__)
    else if (xl_kern() == &xl_kernels_avx512)
      xl_f32p_matmul_avx512(x, M, K, ldx, W->data, W->row0, N, y, ldy);
    else if (xl_kern() == &xl_kernels_avx2)
      xl_f32p_matmul_avx2(x, M, K, ldx, W->data, W->row0, N, y, ldy);
#endif
    else xl_f32p_matmul_portable(x, M, K, ldx, W->data, W->row0, N, y, ldy);
  }
}

void xl_linear_w(const float *x, int rows, int in, const xl_wmat *W, const float *b, int out,
                 float *y, int ldy) {
  xl_matmul_w(x, rows, in, in, W, out, y, ldy); /* y[rows, out] = x[rows, in] W^T */
  if (b && rows > 0) xl_kern()->add_bias(y, rows, out, ldy, b);
}

void xl_wmat_row(const xl_wmat *W, int r, float *out) {
  const size_t at = (size_t)r * W->cols;
  switch (W->type) {
  case XL_WEIGHTS_BF16: {
    if (W->panels) {
      xl_bf16p_row(W->data, W->cols, W->row0 + r, out);
      break;
    }
    const uint16_t *h = (const uint16_t *)W->data + at;
    for (int c = 0; c < W->cols; c++) out[c] = xl_bf16_to_f32(h[c]);
    break;
  }
  case XL_WEIGHTS_INT8: {
    if (W->panels) {
      xl_q8p_row(W->data, W->panel_scales, W->cols, W->row0 + r, out);
      break;
    }
    const int8_t *q = (const int8_t *)W->data + at;
    const float *s = W->scales + (size_t)r * xl_q8_blocks(W->cols);
    for (int c = 0; c < W->cols; c++) out[c] = (float)q[c] * s[c / XL_Q8_BLOCK];
    break;
  }
  case XL_WEIGHTS_INT4: {
    if (W->panels) {
      xl_q4p_row(W->data, W->panel_scales, W->cols, W->row0 + r, out);
      break;
    }
    const uint8_t *q = (const uint8_t *)W->data + (size_t)r * xl_q4_row_bytes(W->cols);
    const float *s = W->scales + (size_t)r * xl_q8_blocks(W->cols);
    for (int c = 0; c < W->cols; c++) out[c] = (float)xl_q4_at(q, c) * s[c / XL_Q8_BLOCK];
    break;
  }
  default:
    if (W->panels) xl_f32p_row(W->data, W->cols, W->row0 + r, out);
    else memcpy(out, (const float *)W->data + at, (size_t)W->cols * sizeof *out);
  }
}

xl_wmat xl_wmat_from_row(const xl_wmat *W, int r) {
  xl_wmat v = *W;
  const size_t at = (size_t)r * W->cols;
  switch (W->type) {
  case XL_WEIGHTS_BF16:
    if (W->panels) v.row0 += r; /* panels: the data stays whole, the view moves */
    else v.data = (const uint16_t *)W->data + at;
    break;
  case XL_WEIGHTS_INT8:
    if (W->panels) {
      v.row0 += r; /* panels: the data stays whole, the view moves */
      break;
    }
    v.data = (const int8_t *)W->data + at;
    v.scales = W->scales + (size_t)r * xl_q8_blocks(W->cols);
    break;
  case XL_WEIGHTS_INT4:
    if (W->panels) {
      v.row0 += r;
      break;
    }
    v.data = (const uint8_t *)W->data + (size_t)r * xl_q4_row_bytes(W->cols);
    v.scales = W->scales + (size_t)r * xl_q8_blocks(W->cols);
    break;
  default:
    if (W->panels) v.row0 += r;
    else v.data = (const float *)W->data + at;
  }
  return v;
}

/* amax / levels rounded up to a half (f16.h): the scale the panels keep exactly, and no weight
 * rounds past +-levels against it (Inf past the largest half) */
static float half_scale(float amax, float levels) {
  const float s = amax / levels;
  uint16_t h = xl_f32_to_f16(s);
  if (xl_f16_to_f32(h) < s) h++; /* the next half up (65504: Inf) */
  return xl_f16_to_f32(h);
}

float xl_q8_block(const float *x, int n, int8_t *q) {
  float amax = 0.0f;
  for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
  float s = half_scale(amax, 127.0f);
  for (int i = 0; i < n; i++) {
    float v = s > 0.0f && s <= XL_F16_MAX ? nearbyintf(x[i] / s) : 0.0f;
    q[i] = (int8_t)fminf(fmaxf(v, -127.0f), 127.0f);
  }
  return s;
}

float xl_q4_block(const float *x, int n, uint8_t *q) {
  float amax = 0.0f;
  for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
  float s = half_scale(amax, 7.0f);
  memset(q, 0x88, XL_Q4_BLOCK_BYTES);
  for (int i = 0; i < n; i++) {
    float v = s > 0.0f && s <= XL_F16_MAX ? nearbyintf(x[i] / s) : 0.0f;
    int nib = (int)fminf(fmaxf(v, -7.0f), 7.0f) + 8;
    if (i < 16) q[i] = (uint8_t)((q[i] & 0xF0) | nib);
    else q[i - 16] = (uint8_t)((q[i - 16] & 0x0F) | (nib << 4));
  }
  return s;
}
