/*
 * kernels_neon.c: the aarch64 NEON (Advanced SIMD) family of the kernel table (kernels.h).
 * The weight GEMM in tiles of 4 rows x 4 outputs (16 accumulators of the 32 registers), a lone
 * decode row 8 outputs at a time; every output is one 4-lane accumulator advanced over k in
 * order (a K tail is loaded zero-padded, so it is one more step of the same kind) and reduced
 * by one fixed tree (hsum4), so a row's sums never depend on its batch. Softmax max /
 * exp-and-sum (the portable polynomial in 4 lanes), the decode step's products over transposed
 * key rows and value rows with the sums held in registers, LayerNorm, ReLU and bias rows.
 * NEON is part of every aarch64 CPU: no detection needed. aarch64 only. Any thread; pure
 * functions.
 */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

#define ROW_BLOCK 64 /* rows of x kept hot while 4 weight rows stay in L1 */

/* lane j = (c_j[0] + c_j[1]) + (c_j[2] + c_j[3]): the one reduction tree of every output */
static inline float32x4_t hsum4(float32x4_t c0, float32x4_t c1, float32x4_t c2, float32x4_t c3) {
  return vpaddq_f32(vpaddq_f32(c0, c1), vpaddq_f32(c2, c3));
}

static inline float hsum(float32x4_t v) { /* the same tree for one vector */
  float32x4_t s = vpaddq_f32(v, v);
  return vpadds_f32(vget_low_f32(s));
}

/* the first n (< 4) floats of p, zero-padded */
static inline float32x4_t load_tail(const float *p, int n) {
  float t[4] = {0, 0, 0, 0};
  memcpy(t, p, (size_t)n * sizeof *t);
  return vld1q_f32(t);
}

static inline void store_outputs(float *y, float32x4_t s, int oc) {
  if (oc == 4) vst1q_f32(y, s);
  else {
    float t[4];
    vst1q_f32(t, s);
    for (int j = 0; j < oc; j++) y[j] = t[j];
  }
}

/* ---- weight GEMM ------------------------------------------------------------------------ */

/* Named accumulators throughout this file, never arrays: GCC keeps an array of vectors in
 * memory and stores it back on every step. */
static void mm_row(const float *a, int K, const float *W, int N, int ldw, float *y) {
  const int kv = K & ~3, tail = K & 3;
  for (int o = 0; o < N; o += 8) {
    int oc = N - o < 8 ? N - o : 8;
    const float *w[8]; /* outputs past oc repeat output o (results discarded) */
    for (int j = 0; j < 8; j++) w[j] = W + (size_t)(o + (j < oc ? j : 0)) * ldw;
    const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3], *w4 = w[4], *w5 = w[5],
                *w6 = w[6], *w7 = w[7];
    float32x4_t c0 = vdupq_n_f32(0.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
                c7 = c0;
    for (int k = 0; k < kv; k += 4) {
      float32x4_t v = vld1q_f32(a + k);
      c0 = vfmaq_f32(c0, v, vld1q_f32(w0 + k));
      c1 = vfmaq_f32(c1, v, vld1q_f32(w1 + k));
      c2 = vfmaq_f32(c2, v, vld1q_f32(w2 + k));
      c3 = vfmaq_f32(c3, v, vld1q_f32(w3 + k));
      c4 = vfmaq_f32(c4, v, vld1q_f32(w4 + k));
      c5 = vfmaq_f32(c5, v, vld1q_f32(w5 + k));
      c6 = vfmaq_f32(c6, v, vld1q_f32(w6 + k));
      c7 = vfmaq_f32(c7, v, vld1q_f32(w7 + k));
    }
    if (tail) {
      float32x4_t v = load_tail(a + kv, tail);
      c0 = vfmaq_f32(c0, v, load_tail(w0 + kv, tail));
      c1 = vfmaq_f32(c1, v, load_tail(w1 + kv, tail));
      c2 = vfmaq_f32(c2, v, load_tail(w2 + kv, tail));
      c3 = vfmaq_f32(c3, v, load_tail(w3 + kv, tail));
      c4 = vfmaq_f32(c4, v, load_tail(w4 + kv, tail));
      c5 = vfmaq_f32(c5, v, load_tail(w5 + kv, tail));
      c6 = vfmaq_f32(c6, v, load_tail(w6 + kv, tail));
      c7 = vfmaq_f32(c7, v, load_tail(w7 + kv, tail));
    }
    store_outputs(y + o, hsum4(c0, c1, c2, c3), oc < 4 ? oc : 4);
    if (oc > 4) store_outputs(y + o + 4, hsum4(c4, c5, c6, c7), oc - 4);
  }
}

#define FMA4(vload, c0, c1, c2, c3)                                                         \
  do {                                                                                     \
    float32x4_t v_ = (vload);                                                              \
    c0 = vfmaq_f32(c0, v_, b0);                                                            \
    c1 = vfmaq_f32(c1, v_, b1);                                                            \
    c2 = vfmaq_f32(c2, v_, b2);                                                            \
    c3 = vfmaq_f32(c3, v_, b3);                                                            \
  } while (0)

static void mm_neon(const float *x, int M, int K, int ldx, const float *W, int N, int ldw,
                    float *y, int ldy) {
  if (M == 1) {
    mm_row(x, K, W, N, ldw, y);
    return;
  }
  const int kv = K & ~3, tail = K & 3;
  for (int r0 = 0; r0 < M; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < M ? r0 + ROW_BLOCK : M;
    for (int o = 0; o < N; o += 4) {
      int oc = N - o < 4 ? N - o : 4;
      const float *w0 = W + (size_t)o * ldw, *w1 = oc > 1 ? w0 + ldw : w0,
                  *w2 = oc > 2 ? w0 + 2 * (size_t)ldw : w0, *w3 = oc > 3 ? w0 + 3 * (size_t)ldw : w0;
      for (int r = r0; r < r1; r += 4) {
        int rc = r1 - r < 4 ? r1 - r : 4; /* rows past rc repeat row r (results discarded) */
        const float *a0 = x + (size_t)r * ldx, *a1 = rc > 1 ? a0 + ldx : a0,
                    *a2 = rc > 2 ? a0 + 2 * (size_t)ldx : a0, *a3 = rc > 3 ? a0 + 3 * (size_t)ldx : a0;
        float32x4_t c00 = vdupq_n_f32(0.0f), c01 = c00, c02 = c00, c03 = c00, c10 = c00,
                    c11 = c00, c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00,
                    c30 = c00, c31 = c00, c32 = c00, c33 = c00;
        for (int k = 0; k < kv; k += 4) {
          float32x4_t b0 = vld1q_f32(w0 + k), b1 = vld1q_f32(w1 + k), b2 = vld1q_f32(w2 + k),
                      b3 = vld1q_f32(w3 + k);
          FMA4(vld1q_f32(a0 + k), c00, c01, c02, c03);
          FMA4(vld1q_f32(a1 + k), c10, c11, c12, c13);
          FMA4(vld1q_f32(a2 + k), c20, c21, c22, c23);
          FMA4(vld1q_f32(a3 + k), c30, c31, c32, c33);
        }
        if (tail) {
          float32x4_t b0 = load_tail(w0 + kv, tail), b1 = load_tail(w1 + kv, tail),
                      b2 = load_tail(w2 + kv, tail), b3 = load_tail(w3 + kv, tail);
          FMA4(load_tail(a0 + kv, tail), c00, c01, c02, c03);
          FMA4(load_tail(a1 + kv, tail), c10, c11, c12, c13);
          FMA4(load_tail(a2 + kv, tail), c20, c21, c22, c23);
          FMA4(load_tail(a3 + kv, tail), c30, c31, c32, c33);
        }
        float *yr = y + (size_t)r * ldy + o;
        store_outputs(yr, hsum4(c00, c01, c02, c03), oc);
        if (rc > 1) store_outputs(yr + ldy, hsum4(c10, c11, c12, c13), oc);
        if (rc > 2) store_outputs(yr + 2 * (size_t)ldy, hsum4(c20, c21, c22, c23), oc);
        if (rc > 3) store_outputs(yr + 3 * (size_t)ldy, hsum4(c30, c31, c32, c33), oc);
      }
    }
  }
}
#undef FMA4

/* ---- softmax ---------------------------------------------------------------------------- */

static float max_neon(const float *x, int n) {
  float32x4_t m = vdupq_n_f32(-INFINITY);
  int i = 0;
  for (; i + 4 <= n; i += 4) m = vmaxq_f32(m, vld1q_f32(x + i));
  float r = vmaxvq_f32(m);
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

/* exp(x) as xl_exp_portable in 4 lanes: 0 below -87.3, +Inf above 88.72, NaN for NaN. The
 * argument is clamped to [-87.3, 88] before the conversion to int, so 2^n is always a normal
 * float built from its exponent bits; the special lanes are selected in afterwards. */
static inline float32x4_t exp_neon(float32x4_t x) {
  const float32x4_t lo = vdupq_n_f32(-87.3f);
  uint32x4_t under = vcltq_f32(x, lo);
  uint32x4_t over = vcgtq_f32(x, vdupq_n_f32(88.72f));
  uint32x4_t num = vceqq_f32(x, x); /* false for NaN */
  float32x4_t xin = x;
  x = vminq_f32(vmaxq_f32(vbslq_f32(num, x, lo), lo), vdupq_n_f32(88.0f));
  float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  r = vfmaq_f32(r, n, vdupq_n_f32(2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), vmulq_f32(p, r), r);
  int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  p = vmulq_f32(p, vreinterpretq_f32_s32(e)); /* n in [-126, 127]: 2^n is normal */
  p = vbslq_f32(over, vdupq_n_f32(INFINITY), p);
  p = vbslq_f32(num, p, xin);
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(p), under));
}

static float exp_sum_neon(float *x, int n, float shift) {
  float32x4_t s = vdupq_n_f32(0.0f), sh = vdupq_n_f32(shift);
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t e = exp_neon(vsubq_f32(vld1q_f32(x + i), sh));
    vst1q_f32(x + i, e);
    s = vaddq_f32(s, e);
  }
  if (i < n) {
    float t[4] = {0, 0, 0, 0};
    for (int l = 0; l < n - i; l++) t[l] = x[i + l] - shift;
    for (int l = n - i; l < 4; l++) t[l] = -INFINITY; /* exp = 0 */
    float32x4_t e = exp_neon(vld1q_f32(t));
    vst1q_f32(t, e);
    for (int l = 0; l < n - i; l++) x[i + l] = t[l];
    s = vaddq_f32(s, e);
  }
  return hsum(s);
}

static float sum_exp_neon(const float *x, int n, float shift) {
  float32x4_t s = vdupq_n_f32(0.0f), sh = vdupq_n_f32(shift);
  int i = 0;
  for (; i + 4 <= n; i += 4) s = vaddq_f32(s, exp_neon(vsubq_f32(vld1q_f32(x + i), sh)));
  if (i < n) {
    float t[4];
    for (int l = 0; l < 4; l++) t[l] = l < n - i ? x[i + l] - shift : -INFINITY;
    s = vaddq_f32(s, exp_neon(vld1q_f32(t)));
  }
  return hsum(s);
}

/* ---- decode-step attention products ----------------------------------------------------- */

/* s[0..n) = sum_k q[k] * rows[k * ld + 0..n), k in order, each sum started at 0 and advanced
 * by FMA: 32 sums held in 8 registers while the dh rows stream past. */
static void dot_rows_neon(const float *q, int dh, const float *rows, size_t ld, int n, float *s) {
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
                a7 = a0;
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) {
      float32x4_t qk = vdupq_n_f32(q[k]);
      a0 = vfmaq_f32(a0, qk, vld1q_f32(r));
      a1 = vfmaq_f32(a1, qk, vld1q_f32(r + 4));
      a2 = vfmaq_f32(a2, qk, vld1q_f32(r + 8));
      a3 = vfmaq_f32(a3, qk, vld1q_f32(r + 12));
      a4 = vfmaq_f32(a4, qk, vld1q_f32(r + 16));
      a5 = vfmaq_f32(a5, qk, vld1q_f32(r + 20));
      a6 = vfmaq_f32(a6, qk, vld1q_f32(r + 24));
      a7 = vfmaq_f32(a7, qk, vld1q_f32(r + 28));
    }
    vst1q_f32(s + j, a0);
    vst1q_f32(s + j + 4, a1);
    vst1q_f32(s + j + 8, a2);
    vst1q_f32(s + j + 12, a3);
    vst1q_f32(s + j + 16, a4);
    vst1q_f32(s + j + 20, a5);
    vst1q_f32(s + j + 24, a6);
    vst1q_f32(s + j + 28, a7);
  }
  for (; j + 4 <= n; j += 4) {
    float32x4_t a = vdupq_n_f32(0.0f);
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) a = vfmaq_f32(a, vdupq_n_f32(q[k]), vld1q_f32(r));
    vst1q_f32(s + j, a);
  }
  for (; j < n; j++) { /* the same FMAs, one lane */
    float a = 0.0f;
    const float *r = rows + j;
    for (int k = 0; k < dh; k++, r += ld) a = fmaf(q[k], *r, a);
    s[j] = a;
  }
}

/* 8 vectors (32 floats from out + base, inside one head: dh a multiple of 32) accumulated in
 * registers over n rows: out[e] += p[head * p_stride + j] * rows[j * ld + e], j = 0..n-1 in
 * order, one FMA per term. */
static void mix_chunk_8(float *out, int base, const float *p, size_t p_stride, const float *rows,
                        size_t ld, int n, int dh) {
  float *o = out + base;
  float32x4_t a0 = vld1q_f32(o), a1 = vld1q_f32(o + 4), a2 = vld1q_f32(o + 8),
              a3 = vld1q_f32(o + 12), a4 = vld1q_f32(o + 16), a5 = vld1q_f32(o + 20),
              a6 = vld1q_f32(o + 24), a7 = vld1q_f32(o + 28);
  const float *ph = p + (size_t)(base / dh) * p_stride, *r = rows + base;
  for (int j = 0; j < n; j++, r += ld) {
    float32x4_t b = vdupq_n_f32(ph[j]);
    a0 = vfmaq_f32(a0, b, vld1q_f32(r));
    a1 = vfmaq_f32(a1, b, vld1q_f32(r + 4));
    a2 = vfmaq_f32(a2, b, vld1q_f32(r + 8));
    a3 = vfmaq_f32(a3, b, vld1q_f32(r + 12));
    a4 = vfmaq_f32(a4, b, vld1q_f32(r + 16));
    a5 = vfmaq_f32(a5, b, vld1q_f32(r + 20));
    a6 = vfmaq_f32(a6, b, vld1q_f32(r + 24));
    a7 = vfmaq_f32(a7, b, vld1q_f32(r + 28));
  }
  vst1q_f32(o, a0);
  vst1q_f32(o + 4, a1);
  vst1q_f32(o + 8, a2);
  vst1q_f32(o + 12, a3);
  vst1q_f32(o + 16, a4);
  vst1q_f32(o + 20, a5);
  vst1q_f32(o + 24, a6);
  vst1q_f32(o + 28, a7);
}

/* one vector (4 floats from out + base, inside one head) of the same sums */
static void mix_chunk_1(float *out, int base, const float *p, size_t p_stride, const float *rows,
                        size_t ld, int n, int dh) {
  float32x4_t a = vld1q_f32(out + base);
  const float *ph = p + (size_t)(base / dh) * p_stride, *r = rows + base;
  for (int j = 0; j < n; j++, r += ld) a = vfmaq_f32(a, vdupq_n_f32(ph[j]), vld1q_f32(r));
  vst1q_f32(out + base, a);
}

static void axpy_neon(float *y, float a, const float *x, int n) {
  float32x4_t va = vdupq_n_f32(a);
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
  for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

static void mix_rows_neon(float *out, const float *p, size_t p_stride, const float *rows,
                          size_t ld, int n, int H, int dh) {
  int hd = H * dh, e = 0;
  if (dh % 4 == 0) {
    if (dh % 32 == 0)
      for (; e + 32 <= hd; e += 32) mix_chunk_8(out, e, p, p_stride, rows, ld, n, dh);
    for (; e < hd; e += 4) mix_chunk_1(out, e, p, p_stride, rows, ld, n, dh);
    return;
  }
  for (int j = 0; j < n; j++) /* one key at a time, every head */
    for (int h = 0; h < H; h++)
      axpy_neon(out + (size_t)h * dh, p[(size_t)h * p_stride + j],
                rows + (size_t)j * ld + (size_t)h * dh, dh);
}

/* ---- LayerNorm, ReLU, bias -------------------------------------------------------------- */

static void layer_norm_neon(const float *x, int rows, int dim, const float *g, const float *b,
                            float eps, float *y) {
  const int dv = dim & ~3, tail = dim & 3;
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * dim;
    float *yr = y + (size_t)r * dim;
    float32x4_t s = vdupq_n_f32(0.0f);
    for (int j = 0; j < dv; j += 4) s = vaddq_f32(s, vld1q_f32(xr + j));
    if (tail) s = vaddq_f32(s, load_tail(xr + dv, tail));
    const float mu = hsum(s) / (float)dim;
    const float32x4_t vmu = vdupq_n_f32(mu);
    float32x4_t v = vdupq_n_f32(0.0f);
    for (int j = 0; j < dv; j += 4) {
      float32x4_t d = vsubq_f32(vld1q_f32(xr + j), vmu);
      v = vfmaq_f32(v, d, d);
    }
    float var = hsum(v);
    for (int j = dv; j < dim; j++) var += (xr[j] - mu) * (xr[j] - mu);
    var /= (float)dim; /* biased, as torch */
    const float inv = (float)(1.0 / sqrt((double)var + eps));
    const float32x4_t vinv = vdupq_n_f32(inv);
    for (int j = 0; j < dv; j += 4) {
      float32x4_t d = vmulq_f32(vsubq_f32(vld1q_f32(xr + j), vmu), vinv);
      vst1q_f32(yr + j, vfmaq_f32(vld1q_f32(b + j), d, vld1q_f32(g + j)));
    }
    for (int j = dv; j < dim; j++) yr[j] = fmaf((xr[j] - mu) * inv, g[j], b[j]);
  }
}

static void relu_neon(float *x, size_t n) {
  const float32x4_t z = vdupq_n_f32(0.0f);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmaxq_f32(vld1q_f32(x + i), z)); /* NaN stays */
  for (; i < n; i++) x[i] = x[i] < 0.0f ? 0.0f : x[i];
}

static void add_bias_neon(float *y, int rows, int n, int ldy, const float *b) {
  for (int r = 0; r < rows; r++) {
    float *yr = y + (size_t)r * ldy;
    int j = 0;
    for (; j + 4 <= n; j += 4) vst1q_f32(yr + j, vaddq_f32(vld1q_f32(yr + j), vld1q_f32(b + j)));
    for (; j < n; j++) yr[j] += b[j];
  }
}

/* 4 lanes turned end for end: [x0 x1 x2 x3] -> [x3 x2 x1 x0] */
static inline float32x4_t reverse4(float32x4_t x) {
  float32x4_t r = vrev64q_f32(x); /* [x1 x0 x3 x2] */
  return vcombine_f32(vget_high_f32(r), vget_low_f32(r));
}

static void add_reversed_neon(float *s, const float *p, const float *b, int n, float scale) {
  const float32x4_t sc = vdupq_n_f32(scale);
  int k = 0;
  for (; k + 4 <= n; k += 4) {
    float32x4_t t = vaddq_f32(reverse4(vld1q_f32(p - k - 3)), reverse4(vld1q_f32(b - k - 3)));
    vst1q_f32(s + k, vmulq_f32(vaddq_f32(vld1q_f32(s + k), t), sc));
  }
  for (; k < n; k++) s[k] = (s[k] + (p[-k] + b[-k])) * scale;
}

const xl_kernels xl_kernels_neon = {
  .name = "neon",
  .matmul_nt = mm_neon,
  .max = max_neon,
  .exp_sum = exp_sum_neon,
  .sum_exp = sum_exp_neon,
  .dot_rows = dot_rows_neon,
  .mix_rows = mix_rows_neon,
  .layer_norm = layer_norm_neon,
  .relu = relu_neon,
  .add_bias = add_bias_neon,
  .add_reversed = add_reversed_neon,
};
#endif /* __aarch64__ */
