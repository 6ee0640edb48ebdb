/*
 * test_core_wkernels.c: bf16, int8 and int4 weights (wkernels.h) on the kernel family in use
 * (XLSERVE_CPU picks it: ctest runs this once per family of the machine). The narrowing itself
 * (bf16 round-to-nearest-even with NaN/Inf/overflow, the IEEE halves that hold the int8 and int4
 * block scales, those scales, int4 nibble packing, a weight too large for a scale refused); the GEMM with bf16, int8 and int4 weights for 1..70 rows and awkward sizes (every tail of every lane count, partial int8
 * blocks) against a double-precision reference on the widened/dequantised weights and against
 * the portable family; each row's outputs bit-identical alone and inside any batch; and whole
 * models loaded with --weights bf16/int8/int4: close to F32, fewer weight bytes, a decode step the
 * same alone and batched, an unknown weight type refused; and a BF16 file under bf16 weights
 * used in place, with the results of the F32 file narrowed at load.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "f16.h"
#include "internal.h"
#include "testlib.h"
#include "wpanel.h"

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_narrowing(void) {
  CHECK(xl_f32_to_bf16(1.0f) == 0x3F80);
  CHECK(xl_f32_to_bf16(float_of(0x3F808000u)) == 0x3F80); /* tie: to the even neighbour */
  CHECK(xl_f32_to_bf16(float_of(0x3F818000u)) == 0x3F82); /* tie, odd below: up */
  CHECK(xl_f32_to_bf16(float_of(0x3F808001u)) == 0x3F81); /* above the tie: up */
  CHECK(xl_f32_to_bf16(-0.0f) == 0x8000);
  CHECK(xl_f32_to_bf16(INFINITY) == 0x7F80);
  CHECK(xl_f32_to_bf16(FLT_MAX) == 0x7F80); /* rounds past the largest bf16: Inf */
  CHECK(isnan(xl_bf16_to_f32(xl_f32_to_bf16(NAN))));
  CHECK(isnan(xl_bf16_to_f32(xl_f32_to_bf16(float_of(0x7F800001u))))); /* low-payload NaN */
  for (uint32_t u = 0x3E000000u; u < 0x3E000000u + 100000u; u += 7) { /* error <= half a step */
    float f = float_of(u), g = xl_bf16_to_f32(xl_f32_to_bf16(f));
    if (!(fabsf(f - g) <= ldexpf(1.0f, -8) * fabsf(f))) {
      CHECK(fabsf(f - g) <= ldexpf(1.0f, -8) * fabsf(f));
      break;
    }
  }
  float x[32];
  int8_t q[32];
  for (int i = 0; i < 32; i++) x[i] = (float)(i - 13) * 0.1f;
  float s = xl_q8_block(x, 32, q);
  CHECK(s >= 1.8f / 127.0f && s == xl_f16_round(s)); /* a half: the next one up */
  CHECK_NEAR(s, 1.8f / 127.0f, 1e-5);
  CHECK(q[31] == 127 && q[13] == 0 && q[0] == -92);
  int bad = 0;
  for (int i = 0; i < 32; i++) bad += fabsf((float)q[i] * s - x[i]) > 0.5f * s * 1.0001f;
  CHECK(bad == 0);
  memset(x, 0, sizeof x);
  x[3] = -0.0f;
  CHECK(xl_q8_block(x, 5, q) == 0.0f);
  CHECK(q[0] == 0 && q[3] == 0 && q[4] == 0);
  x[0] = -2.0f; /* the largest magnitude negative: -127 */
  s = xl_q8_block(x, 5, q);
  CHECK(q[0] == -127 && s == xl_f16_round(s) && s >= 2.0f / 127.0f);
  x[0] = 127.0f * 65504.0f; /* the largest scale a half holds */
  CHECK(xl_q8_block(x, 5, q) == 65504.0f && q[0] == 127);
  x[0] = 127.0f * 65600.0f; /* past it: Inf, the weights 0 (the loader refuses the tensor) */
  CHECK(isinf(xl_q8_block(x, 5, q)) && q[0] == 0);
  x[0] = 1e-4f; /* a subnormal half: the weights still round against the scale returned */
  s = xl_q8_block(x, 5, q);
  CHECK(s == xl_f16_round(s) && s >= 1e-4f / 127.0f && s < 1e-4f / 127.0f + 0x1p-24f);
  CHECK(q[0] == (int8_t)nearbyintf(1e-4f / s) && q[0] > 100);
  x[0] = 1e-7f; /* a scale below the halves' smallest: that one, 2^-24 */
  CHECK(xl_q8_block(x, 5, q) == 0x1p-24f && q[0] == 2);

  /* int4: 15 levels, two a byte (weight j low nibble, j + 16 high), padding 0x88 */
  uint8_t q4[16];
  for (int i = 0; i < 32; i++) x[i] = (float)(i - 13) * 0.1f;
  s = xl_q4_block(x, 32, q4);
  CHECK(s >= 1.8f / 7.0f && s == xl_f16_round(s));
  CHECK_NEAR(s, 1.8f / 7.0f, 2e-4);
  CHECK(xl_q4_at(q4, 31) == 7 && xl_q4_at(q4, 13) == 0 && xl_q4_at(q4, 0) == -5);
  CHECK((q4[0] & 15) == 3 && (q4[15] >> 4) == 15); /* weights 0 and 31: -5 + 8, 7 + 8 */
  bad = 0;
  for (int i = 0; i < 32; i++) bad += fabsf((float)xl_q4_at(q4, i) * s - x[i]) > 0.5f * s * 1.0001f;
  CHECK(bad == 0);
  x[0] = -4.0f; /* the largest magnitude negative: -7 */
  s = xl_q4_block(x, 5, q4);
  CHECK(xl_q4_at(q4, 0) == -7 && s >= 4.0f / 7.0f && s == xl_f16_round(s));
  for (int i = 5; i < 32; i++) bad += xl_q4_at(q4, i) != 0; /* missing weights: 0 */
  CHECK(bad == 0);
  memset(x, 0, sizeof x);
  CHECK(xl_q4_block(x, 32, q4) == 0.0f && q4[0] == 0x88 && q4[15] == 0x88);
  CHECK(xl_q4_row_bytes(1) == 16 && xl_q4_row_bytes(32) == 16 && xl_q4_row_bytes(33) == 32);
}

/* f16.h against the definition: every half widens to m 2^(e-25) (and back to itself); a float
 * narrows to the nearest half, ties to the even one, from 65520 on to Inf, NaN to a NaN. */
static void test_halves(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000u; h++) {
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    const float f = xl_f16_to_f32((uint16_t)h);
    if (e == 0x1F) {
      bad += m ? !isnan(f) : !(isinf(f) && !!signbit(f) == !!(h & 0x8000u));
      continue;
    }
    const double want = ldexp(e ? (double)(m | 0x400u) : (double)m, e ? (int)e - 25 : -24);
    bad += (double)fabsf(f) != want || !!signbit(f) != !!(h & 0x8000u);
    bad += xl_f32_to_f16(f) != h;
  }
  CHECK(bad == 0);
  CHECK(xl_f32_to_f16(65504.0f) == 0x7BFF && xl_f32_to_f16(65519.99f) == 0x7BFF);
  CHECK(xl_f32_to_f16(65520.0f) == 0x7C00 && xl_f32_to_f16(-1e9f) == 0xFC00);
  CHECK(xl_f32_to_f16(INFINITY) == 0x7C00 && isnan(xl_f16_to_f32(xl_f32_to_f16(NAN))));
  CHECK(xl_f32_to_f16(1.0f + 0x1p-11f) == 0x3C00);             /* tie: to the even one */
  CHECK(xl_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3C02);         /* tie, odd below: up */
  CHECK(xl_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01);  /* above the tie: up */
  CHECK(xl_f32_to_f16(0x1p-25f) == 0 && xl_f32_to_f16(0x1.8p-25f) == 1); /* subnormal ties */
  CHECK(xl_f32_to_f16(3 * 0x1p-25f) == 2 && xl_f32_to_f16(0x1p-26f) == 0);
  CHECK(xl_f32_to_f16(0x1.ff8p-15f) == 0x03FF && xl_f32_to_f16(0x1.ffcp-15f) == 0x0400); /* tie: up to 2^-14 */
  CHECK(xl_f32_to_f16(-0.0f) == 0x8000 && xl_f32_to_f16(1e-30f) == 0);
  /* between the halves: the nearer one, against double arithmetic, across the ranges */
  unsigned seed = 3;
  for (int i = 0; i < 200000 && !bad; i++) {
    seed = seed * 1103515245u + 12345u;
    const float f = ldexpf(1.0f + (float)(seed >> 9) * 0x1p-23f, (int)(seed % 48u) - 32);
    const double v = xl_f16_to_f32(xl_f32_to_f16(f));
    if (f >= 65520.0f) continue;
    const uint16_t h = xl_f32_to_f16(f);
    const double lo = h & 0x7FFFu ? xl_f16_to_f32((uint16_t)(h - 1)) : 0.0,
                 hi = xl_f16_to_f32((uint16_t)(h + 1));
    bad += fabs(v - f) > fabs(lo - f) || (h < 0x7BFF && fabs(v - f) > fabs(hi - f));
  }
  CHECK(bad == 0);
}

static float frand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

#define MAXM 70
#define MAXN 150 /* 10 panels of 16 rows: a lone row's four streams take 3, 3, 3 and 1 */
#define YLD (MAXN + 8) /* outputs a row of y buffers holds: N + 3 at most */
#define MAXK 100
#define LD 100

/* weights [MAXN, LD] in F32 and in the three narrow types, and their exact F32 values */
typedef struct {
  float w[MAXN * LD];
  uint16_t bf[MAXN * LD];
  int8_t q[MAXN * LD];
  float s[MAXN * 4]; /* xl_q8_blocks(LD) = 4 scales per row */
  uint8_t q4[MAXN * 64]; /* int4: xl_q4_row_bytes(LD) = 64 bytes per row */
  float s4[MAXN * 4];
  float wbf[MAXN * LD], wq[MAXN * LD], wq4[MAXN * LD];
} weights;

static void make_weights(weights *w, unsigned seed) {
  float row[LD];
  for (int o = 0; o < MAXN; o++) {
    for (int k = 0; k < LD; k++) row[k] = frand(&seed) * (o % 3 ? 1.0f : 1e-3f);
    memcpy(w->w + o * LD, row, sizeof row);
    for (int k = 0; k < LD; k++) {
      w->bf[o * LD + k] = xl_f32_to_bf16(row[k]);
      w->wbf[o * LD + k] = xl_bf16_to_f32(w->bf[o * LD + k]);
    }
    for (int b = 0; b < 4; b++) {
      int n = LD - 32 * b < 32 ? LD - 32 * b : 32;
      w->s[o * 4 + b] = xl_q8_block(row + 32 * b, n, w->q + o * LD + 32 * b);
    }
    for (int k = 0; k < LD; k++) w->wq[o * LD + k] = (float)w->q[o * LD + k] * w->s[o * 4 + k / 32];
    for (int b = 0; b < 4; b++) {
      int n = LD - 32 * b < 32 ? LD - 32 * b : 32;
      w->s4[o * 4 + b] = xl_q4_block(row + 32 * b, n, w->q4 + o * 64 + 16 * b);
    }
    for (int k = 0; k < LD; k++)
      w->wq4[o * LD + k] = (float)xl_q4_at(w->q4 + o * 64, k) * w->s4[o * 4 + k / 32];
  }
}

/* type: 0 bf16, 1 int8, 2 int4 */
static void run(const xl_wkernels *k, int type, const float *x, int M, int K, const weights *w,
                int N, float *y, int ldy) {
  if (type == 2) k->matmul_q4(x, M, K, LD, w->q4, w->s4, N, LD, y, ldy);
  else if (type == 1) k->matmul_q8(x, M, K, LD, w->q, w->s, N, LD, y, ldy);
  else k->matmul_bf16(x, M, K, LD, w->bf, N, LD, y, ldy);
}

/* the family in use vs double on the exact weights and vs portable; a row alone == in a batch */
static void check_matmul(int type) {
  static const int Ms[] = {1, 2, 3, 4, 5, 7, 9, 12, 13, 17, 70};
  static const int Ns[] = {1, 2, 3, 4, 5, 8, 9, 13, 33};
  static const int Ks[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 64, 65, 100};
  const xl_wkernels *k = xl_wkern();
  weights *w = malloc(sizeof *w);
  float *x = malloc(MAXM * LD * sizeof *x), *y = malloc(MAXM * YLD * sizeof *y),
        *yp = malloc(MAXM * YLD * sizeof *yp), *y1 = malloc(YLD * sizeof *y1);
  unsigned seed = 7;
  for (int i = 0; i < MAXM * LD; i++) x[i] = frand(&seed);
  make_weights(w, 3);
  const float *wf = type == 2 ? w->wq4 : type == 1 ? w->wq : w->wbf;
  int bad_ref = 0, bad_port = 0, bad_inv = 0;
  for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
    for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
      for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
        int M = Ms[a], N = Ns[b], K = Ks[c], ldy = N + 3;
        run(k, type, x, M, K, w, N, y, ldy);
        run(&xl_wkernels_portable, type, x, M, K, w, N, yp, ldy);
        for (int r = 0; r < M; r++) {
          for (int o = 0; o < N; o++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < K; i++) {
              ref += (double)x[r * LD + i] * wf[o * LD + i];
              mag += fabs((double)x[r * LD + i] * wf[o * LD + i]);
            }
            bad_ref += fabs(ref - y[r * ldy + o]) > 1e-6 * mag + 1e-30;
            bad_port += fabs(yp[r * ldy + o] - y[r * ldy + o]) > 2e-6 * mag + 1e-30;
          }
          run(k, type, x + r * LD, 1, K, w, N, y1, N); /* the row alone */
          bad_inv += memcmp(y1, y + r * ldy, (size_t)N * sizeof *y1) != 0;
        }
      }
  if (bad_ref || bad_port || bad_inv)
    fprintf(stderr, "%s %s: %d off the reference, %d off portable, %d rows batch-dependent\n",
            k->name, type == 2 ? "int4" : type == 1 ? "int8" : "bf16", bad_ref, bad_port, bad_inv);
  CHECK(bad_ref == 0);
  CHECK(bad_port == 0);
  CHECK(bad_inv == 0);
  free(w);
  free(x);
  free(y);
  free(yp);
  free(y1);
}

static void test_matmul_bf16(void) { check_matmul(0); }
static void test_matmul_int8(void) { check_matmul(1); }
static void test_matmul_int4(void) { check_matmul(2); }

/* Each weight as the GEMM of the family in use sees it is its exact value, rounded once
 * ((q - 8) * s for int4, q * s for int8): x rows that pick one column give the weight itself,
 * alone (M = 1, the decode tiles) and in a batch (M = 5, the prompt tiles), for every column
 * (whole blocks and the tail). */
static void test_weights_exact_through_the_gemm(void) {
  enum { M = 5 };
  weights *w = malloc(sizeof *w);
  make_weights(w, 11);
  float x[M * LD], y[M * MAXN];
  int bad[3] = {0, 0, 0};
  for (int type = 0; type < 3; type++) {
    const float *wf = type == 2 ? w->wq4 : type == 1 ? w->wq : w->wbf;
    for (int k = 0; k < LD; k++) {
      memset(x, 0, sizeof x);
      for (int r = 0; r < M; r++) x[r * LD + (k + r) % LD] = 1.0f;
      for (int m = 1; m <= M; m += M - 1) {
        run(xl_wkern(), type, x, m, LD, w, MAXN, y, MAXN);
        for (int r = 0; r < m; r++)
          for (int o = 0; o < MAXN; o++)
            bad[type] += y[r * MAXN + o] != wf[o * LD + (k + r) % LD];
      }
    }
  }
  if (bad[0] || bad[1] || bad[2])
    fprintf(stderr, "%s: weights off their exact value: bf16 %d, int8 %d, int4 %d\n",
            xl_wkern()->name, bad[0], bad[1], bad[2]);
  CHECK(bad[0] == 0 && bad[1] == 0 && bad[2] == 0);
  free(w);
}

/* int4 rows read back (the embedding lookup) and views from a row (the adaptive softmax's
 * clusters) through xl_wmat: the dequantised weights, and a view's GEMM that of those rows */
static void test_int4_wmat(void) {
  weights *w = malloc(sizeof *w);
  make_weights(w, 9);
  xl_wmat W = {XL_WEIGHTS_INT4, w->q4, w->s4, LD, 0, 0, NULL};
  float row[LD], x[LD], y[MAXN], yv[MAXN];
  int bad = 0;
  for (int o = 0; o < MAXN; o++) {
    xl_wmat_row(&W, o, row);
    for (int k = 0; k < LD; k++) bad += row[k] != w->wq4[o * LD + k];
  }
  unsigned seed = 5;
  for (int k = 0; k < LD; k++) x[k] = frand(&seed);
  xl_matmul_w(x, 1, LD, LD, &W, MAXN, y, MAXN);
  xl_wmat V = xl_wmat_from_row(&W, 7);
  xl_matmul_w(x, 1, LD, LD, &V, MAXN - 7, yv, MAXN);
  bad += memcmp(y + 7, yv, (MAXN - 7) * sizeof *y) != 0;
  xl_wmat_row(&V, 2, row);
  for (int k = 0; k < LD; k++) bad += row[k] != w->wq4[9 * LD + k];
  CHECK(bad == 0);
  free(w);
}

/* The dot-product kernels exist on x86-64 only; elsewhere the CPU has neither instruction set,
 * the tests' `if (vnni)` / `if (dot)` branches never run, and these name the mirrors. */
#if defined(__x86_64__)
#define Q8P_DOT xl_q8p_matmul_vnni
#define Q4P_DOT xl_q4p_matmul_vnni
#define BF16P_DOT xl_bf16p_matmul_avx512
#else
#define Q8P_DOT xl_q8p_matmul_portable
#define Q4P_DOT xl_q4p_matmul_portable
#define BF16P_DOT xl_bf16p_matmul_portable
#endif

/* The panel tests' verdict: every count of bad outputs must be 0 (each named when not). */
static void panel_counts(const char *type, int bad_row, int bad_ref, int bad_inv, int bad_dot,
                         int bad_dot_inv) {
  if (bad_row || bad_ref || bad_inv || bad_dot || bad_dot_inv)
    fprintf(stderr, "%s panels: %d rows read back wrong, %d off the reference, %d rows batch-"
                    "dependent; dot kernel: %d rows off portable, %d alone off\n",
            type, bad_row, bad_ref, bad_inv, bad_dot, bad_dot_inv);
  CHECK(bad_row == 0);
  CHECK(bad_ref == 0);
  CHECK(bad_inv == 0);
  CHECK(bad_dot == 0);
  CHECK(bad_dot_inv == 0);
}

/* The counts of bad outputs of a panel test (see panel_counts). */
typedef struct {
  int row, ref, inv, dot, dot_inv;
} panel_bad;

typedef void (*panel_matmul)(const float *x, int M, int K, int ldx, const uint8_t *P,
                             const uint16_t *S, int row0, int N, float *y, int ldy);

/* The int8 and int4 panel tests' sweep over one width K of the panels P, S, whose rows hold the
 * values wq[MAXN, LD]: for every batch size M, output count N and first row row0, the portable
 * kernel within the activations' quantisation bound of a double reference and each row alone
 * equal to it in the batch; the dot-product kernel (NULL: none on this CPU) equal to the
 * portable one bit for bit, batched and alone. x: [MAXM, LD]; y, yp: [MAXM, YLD]; y1: [YLD]. */
static void sweep_panels(const float *x, int K, const uint8_t *P, const uint16_t *S, const float *wq,
                         panel_matmul portable, panel_matmul dot, float *y, float *yp, float *y1,
                         panel_bad *bad) {
  static const int Ms[] = {1, 2, 3, 4, 5, 9, 17};
  static const int Ns[] = {1, 5, 16, 17, 33, 70, 134}; /* 1 to 9 panels: a lone row's streams */
  static const int Row0s[] = {0, 3, 16};
  for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
    for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
      for (size_t z = 0; z < sizeof Row0s / sizeof *Row0s; z++) {
        const int M = Ms[a], N = Ns[b], row0 = Row0s[z], ldy = N + 3;
        if (row0 + N > MAXN) continue;
        portable(x, M, K, LD, P, S, row0, N, yp, ldy);
        if (dot) {
          dot(x, M, K, LD, P, S, row0, N, y, ldy);
          for (int r = 0; r < M; r++)
            bad->dot += memcmp(y + r * ldy, yp + r * ldy, (size_t)N * sizeof *y) != 0;
        }
        for (int r = 0; r < M; r++) {
          for (int o = 0; o < N; o++) { /* |error| <= sum over blocks of sum|w| * amax / 254 */
            double ref = 0, bound = 1e-30;
            for (int b0 = 0; b0 < K; b0 += 32) {
              double amax = 0, wsum = 0;
              for (int k = b0; k < K && k < b0 + 32; k++) {
                ref += (double)x[r * LD + k] * wq[(row0 + o) * LD + k];
                amax = fmax(amax, fabs(x[r * LD + k]));
                wsum += fabs(wq[(row0 + o) * LD + k]);
              }
              bound += wsum * amax / 254.0 * 1.001 + 1e-6 * wsum * amax;
            }
            bad->ref += fabs(ref - yp[r * ldy + o]) > bound;
          }
          portable(x + r * LD, 1, K, LD, P, S, row0, N, y1, N);
          bad->inv += memcmp(y1, yp + r * ldy, (size_t)N * sizeof *y1) != 0;
          if (dot) {
            dot(x + r * LD, 1, K, LD, P, S, row0, N, y1, N);
            bad->dot_inv += memcmp(y1, yp + r * ldy, (size_t)N * sizeof *y1) != 0;
          }
        }
      }
}

/* NaN and Inf among two rows of activations x[2, LD] (else random from *seed) through the panels
 * P, S of all MAXN rows: how many outputs of the dot-product kernel differ from the portable
 * one's (NaN equal to NaN). y, yp: [2, MAXN]. */
static int odd_activations(unsigned *seed, const uint8_t *P, const uint16_t *S, panel_matmul portable,
                           panel_matmul dot, float *y, float *yp) {
  float odd[2 * LD];
  for (int k = 0; k < 2 * LD; k++) odd[k] = frand(seed);
  odd[5] = NAN, odd[40] = INFINITY, odd[LD + 70] = -INFINITY;
  portable(odd, 2, LD, LD, P, S, 0, MAXN, yp, MAXN);
  dot(odd, 2, LD, LD, P, S, 0, MAXN, y, MAXN);
  int bad = 0;
  for (int i = 0; i < 2 * MAXN; i++) bad += !(y[i] == yp[i] || (isnan(y[i]) && isnan(yp[i])));
  return bad;
}

/* int8 weights in panels (wpanel.h), for every matrix width: each row read back from the panels
 * is the row-major row; the portable kernel is within the activations' quantisation bound of a
 * double reference on the dequantised weights, a row alone gives what it gives in a batch, a
 * view from row row0 gives those rows; where the CPU has AVX-512 VNNI, the dot-product kernel
 * gives the portable kernel's outputs bit for bit (also for NaN, Inf, zero and tiny blocks). */
static void test_int8_panels(void) {
  static const int Ks[] = {1, 7, 31, 32, 33, 64, 100};
  weights *w = malloc(sizeof *w);
  float *x = malloc(MAXM * LD * sizeof *x), *y = malloc(MAXM * YLD * sizeof *y),
        *yp = malloc(MAXM * YLD * sizeof *yp), *y1 = malloc(YLD * sizeof *y1);
  int8_t *q = malloc(MAXN * LD);
  float *sc = malloc(MAXN * 4 * sizeof *sc), row[LD];
  uint8_t *P = malloc(xl_q8p_bytes(MAXN, LD));
  uint16_t *S = malloc(xl_q8p_scale_count(MAXN, LD) * sizeof *S);
  unsigned seed = 11;
  for (int i = 0; i < MAXM * LD; i++) x[i] = frand(&seed) * (i % 7 ? 1.0f : 8.0f);
  for (int k = 0; k < LD; k++) x[3 * LD + k] = 0.0f; /* an all-zero row */
  for (int k = 0; k < LD; k++) x[4 * LD + k] = frand(&seed) * 1e-41f; /* subnormal blocks */
  make_weights(w, 5);
  const int vnni = xl_cpu_has_avx512_vnni();
  panel_bad bad = {0, 0, 0, 0, 0};
  for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
    const int K = Ks[c], nb = xl_q8_blocks(K);
    for (int o = 0; o < MAXN; o++) { /* the matrix [MAXN, K]: the first K columns, their blocks */
      memcpy(q + o * K, w->q + o * LD, (size_t)K);
      memcpy(sc + o * nb, w->s + o * 4, (size_t)nb * sizeof *sc);
    }
    xl_q8p_pack(q, sc, MAXN, K, P, S);
    for (int o = 0; o < MAXN; o++) {
      xl_q8p_row(P, S, K, o, row);
      for (int k = 0; k < K; k++) bad.row += row[k] != w->wq[o * LD + k];
    }
    sweep_panels(x, K, P, S, w->wq, xl_q8p_matmul_portable, vnni ? Q8P_DOT : NULL, y, yp, y1, &bad);
  }
  /* NaN and Inf activations: quantised alike by both (-127), so the outputs agree */
  if (vnni) {
    xl_q8p_pack(w->q, w->s, MAXN, LD, P, S);
    bad.dot += odd_activations(&seed, P, S, xl_q8p_matmul_portable, Q8P_DOT, y, yp);
  }
  panel_counts("int8", bad.row, bad.ref, bad.inv, bad.dot, bad.dot_inv);
  free(w), free(x), free(y), free(yp), free(y1), free(q), free(sc), free(P), free(S);
}

/* int4 weights in panels (wpanel.h), as test_int8_panels: rows read back from the panels are the
 * int4 rows' values; the portable kernel within the activations' quantisation bound of a double
 * reference, batch-invariant, views from any row; the VNNI kernel (where the CPU has it) the
 * portable kernel's outputs bit for bit, also for NaN and Inf activations. */
static void test_int4_panels(void) {
  static const int Ks[] = {1, 7, 8, 9, 31, 32, 33, 64, 100};
  weights *w = malloc(sizeof *w);
  float *x = malloc(MAXM * LD * sizeof *x), *y = malloc(MAXM * YLD * sizeof *y),
        *yp = malloc(MAXM * YLD * sizeof *yp), *y1 = malloc(YLD * sizeof *y1);
  uint8_t *q = malloc(MAXN * 64);
  float *sc = malloc(MAXN * 4 * sizeof *sc), row[LD];
  uint8_t *P = malloc(xl_q4p_bytes(MAXN, LD));
  uint16_t *S = malloc(xl_q8p_scale_count(MAXN, LD) * sizeof *S);
  unsigned seed = 17;
  for (int i = 0; i < MAXM * LD; i++) x[i] = frand(&seed) * (i % 7 ? 1.0f : 8.0f);
  for (int k = 0; k < LD; k++) x[3 * LD + k] = 0.0f;                  /* an all-zero row */
  for (int k = 0; k < LD; k++) x[4 * LD + k] = frand(&seed) * 1e-41f; /* subnormal blocks */
  make_weights(w, 19);
  const int vnni = xl_cpu_has_avx512_vnni();
  panel_bad bad = {0, 0, 0, 0, 0};
  for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
    const int K = Ks[c], nb = xl_q8_blocks(K), rb = (int)xl_q4_row_bytes(K);
    for (int o = 0; o < MAXN; o++) { /* the matrix [MAXN, K]: the first K columns' blocks */
      memcpy(q + o * rb, w->q4 + o * 64, (size_t)rb);
      memcpy(sc + o * nb, w->s4 + o * 4, (size_t)nb * sizeof *sc);
    }
    xl_q4p_pack(q, sc, MAXN, K, P, S);
    for (int o = 0; o < MAXN; o++) {
      xl_q4p_row(P, S, K, o, row);
      for (int k = 0; k < K; k++) bad.row += row[k] != w->wq4[o * LD + k];
    }
    sweep_panels(x, K, P, S, w->wq4, xl_q4p_matmul_portable, vnni ? Q4P_DOT : NULL, y, yp, y1,
                 &bad);
  }
  if (vnni) { /* NaN and Inf activations: quantised alike by both (-127) */
    xl_q4p_pack(w->q4, w->s4, MAXN, LD, P, S);
    bad.dot += odd_activations(&seed, P, S, xl_q4p_matmul_portable, Q4P_DOT, y, yp);
  }
  /* through xl_wmat: a view from row 5 and its rows read back */
  xl_wmat W = {XL_WEIGHTS_INT4, P, NULL, LD, 1, 0, S}, V = xl_wmat_from_row(&W, 5);
  xl_wmat_row(&V, 2, row);
  for (int k = 0; k < LD; k++) bad.row += row[k] != w->wq4[7 * LD + k];
  panel_counts("int4", bad.row, bad.ref, bad.inv, bad.dot, bad.dot_inv);
  free(w), free(x), free(y), free(yp), free(y1), free(q), free(sc), free(P), free(S);
}

/* bf16 weights in panels (wpanel.h): rows read back exactly; the portable mirror and, where the
 * CPU has AVX-512 BF16, the dot-product kernel within the activations' bf16 rounding of a double
 * reference (each |x| rounded by at most 2^-8 of itself, denormals flushed), each other's
 * outputs within a few ulps of the sum of |products|, a row alone the same as in any batch bit
 * for bit, views from any row. */
static void test_bf16_panels(void) {
  static const int Ms[] = {1, 2, 3, 4, 5, 9, 13, 17}; /* tiles of 8, 4 and 1 rows */
  static const int Ns[] = {1, 5, 16, 17, 33};
  static const int Ks[] = {1, 2, 7, 31, 32, 33, 64, 100};
  static const int Row0s[] = {0, 3, 16};
  weights *w = malloc(sizeof *w);
  float *x = malloc(MAXM * LD * sizeof *x), *y = malloc(MAXM * YLD * sizeof *y),
        *yp = malloc(MAXM * YLD * sizeof *yp), *y1 = malloc(YLD * sizeof *y1), row[LD];
  uint16_t *h = malloc(MAXN * LD * sizeof *h), *P = malloc(xl_bf16p_count(MAXN, LD) * sizeof *P);
  unsigned seed = 13;
  for (int i = 0; i < MAXM * LD; i++) x[i] = frand(&seed) * (i % 7 ? 1.0f : 8.0f);
  for (int k = 0; k < LD; k++) x[4 * LD + k] = frand(&seed) * 1e-39f; /* denormals: flushed */
  make_weights(w, 7);
  const int dot = xl_cpu_has_avx512_bf16();
  int bad_row = 0, bad_ref = 0, bad_inv = 0, bad_dot = 0, bad_dot_inv = 0;
  for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
    const int K = Ks[c];
    for (int o = 0; o < MAXN; o++) memcpy(h + o * K, w->bf + o * LD, (size_t)K * sizeof *h);
    xl_bf16p_pack(h, MAXN, K, P);
    for (int o = 0; o < MAXN; o++) {
      xl_bf16p_row(P, K, o, row);
      for (int k = 0; k < K; k++) bad_row += row[k] != w->wbf[o * LD + k];
    }
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
      for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
        for (size_t z = 0; z < sizeof Row0s / sizeof *Row0s; z++) {
          const int M = Ms[a], N = Ns[b], row0 = Row0s[z], ldy = N + 3;
          if (row0 + N > MAXN) continue;
          xl_bf16p_matmul_portable(x, M, K, LD, P, row0, N, yp, ldy);
          if (dot) BF16P_DOT(x, M, K, LD, P, row0, N, y, ldy);
          for (int r = 0; r < M; r++) {
            for (int o = 0; o < N; o++) {
              double ref = 0, mag = 0;
              for (int k = 0; k < K; k++) {
                double xk = fabsf(x[r * LD + k]) < FLT_MIN ? 0.0 : x[r * LD + k];
                ref += xk * w->wbf[(row0 + o) * LD + k];
                mag += fabs(xk * w->wbf[(row0 + o) * LD + k]);
              }
              const double bound = mag * (ldexp(1.0, -8) + 1e-6) + 1e-37;
              bad_ref += fabs(ref - yp[r * ldy + o]) > bound;
              if (dot) {
                bad_ref += fabs(ref - y[r * ldy + o]) > bound;
                bad_dot += fabs(y[r * ldy + o] - yp[r * ldy + o]) > 1e-6 * mag + 1e-37;
              }
            }
            xl_bf16p_matmul_portable(x + r * LD, 1, K, LD, P, row0, N, y1, N);
            bad_inv += memcmp(y1, yp + r * ldy, (size_t)N * sizeof *y1) != 0;
            if (dot) {
              BF16P_DOT(x + r * LD, 1, K, LD, P, row0, N, y1, N);
              bad_dot_inv += memcmp(y1, y + r * ldy, (size_t)N * sizeof *y1) != 0;
            }
          }
        }
  }
  CHECK(xl_bf16p_activation(1.0f) == 0x3F80 && xl_bf16p_activation(-1e-40f) == 0x8000);
  CHECK(xl_bf16p_activation(float_of(0x3F808000u)) == 0x3F80); /* tie: to even */
  CHECK(xl_bf16p_activation(float_of(0x7F800001u)) == 0x7FC0);  /* NaN: quiet */
  panel_counts("bf16", bad_row, bad_ref, bad_inv, bad_dot, bad_dot_inv);
  free(w), free(x), free(y), free(yp), free(y1), free(h), free(P);
}

/* The F32 panel kernel of the family in use (AVX-512 or AVX2; the portable one elsewhere), as a
 * model's product reaches it. */
static void f32p_family(const float *x, int M, int K, int ldx, const float *P, int row0, int N,
                        float *y, int ldy) {
  const xl_wmat w = {XL_WEIGHTS_F32, P, NULL, K, 1, row0, NULL};
  xl_matmul_w(x, M, K, ldx, &w, N, y, ldy);
}

/* F32 weights in panels (wpanel.h): each row read back from the panels is the row; the portable
 * kernel is within a sequential F32 sum's rounding bound of a double reference, a row alone gives
 * what it gives in a batch, a view from row row0 gives those rows; where the AVX-512 or AVX2
 * family runs, its kernel gives the portable kernel's outputs bit for bit, batched and alone
 * (every tile shape: blocks of up to 70 rows; a lone row's four streams; NaN and Inf propagated
 * alike). */
static void test_f32_panels(void) {
  static const int Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 10, 13, 16, 17, 23, 24, 70}; /* tiles of 1-12 rows */
  static const int Ns[] = {1, 5, 16, 17, 33, 70, 134};
  static const int Ks[] = {1, 2, 7, 16, 17, 64, 100};
  static const int Row0s[] = {0, 3, 16};
  weights *w = malloc(sizeof *w);
  float *x = malloc(MAXM * LD * sizeof *x), *y = malloc(MAXM * YLD * sizeof *y),
        *yp = malloc(MAXM * YLD * sizeof *yp), *y1 = malloc(YLD * sizeof *y1), row[LD];
  float *f = malloc(MAXN * LD * sizeof *f), *P = malloc(xl_f32p_count(MAXN, LD) * sizeof *P);
  unsigned seed = 17;
  for (int i = 0; i < MAXM * LD; i++) x[i] = frand(&seed) * (i % 7 ? 1.0f : 8.0f);
  for (int k = 0; k < LD; k++) x[4 * LD + k] = frand(&seed) * 1e-39f; /* denormals: kept */
  make_weights(w, 9);
  const int kernel = xl_f32p_wanted();
  int bad_row = 0, bad_ref = 0, bad_inv = 0, bad_dot = 0, bad_dot_inv = 0;
  for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
    const int K = Ks[c];
    for (int o = 0; o < MAXN; o++) memcpy(f + o * K, w->w + o * LD, (size_t)K * sizeof *f);
    xl_f32p_pack(f, MAXN, K, P);
    for (int o = 0; o < MAXN; o++) {
      xl_f32p_row(P, K, o, row);
      bad_row += memcmp(row, w->w + o * LD, (size_t)K * sizeof *row) != 0;
    }
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
      for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
        for (size_t z = 0; z < sizeof Row0s / sizeof *Row0s; z++) {
          const int M = Ms[a], N = Ns[b], row0 = Row0s[z], ldy = N + 3;
          if (row0 + N > MAXN) continue;
          xl_f32p_matmul_portable(x, M, K, LD, P, row0, N, yp, ldy);
          if (kernel) f32p_family(x, M, K, LD, P, row0, N, y, ldy);
          for (int r = 0; r < M; r++) {
            for (int o = 0; o < N; o++) {
              double ref = 0, mag = 0;
              for (int k = 0; k < K; k++) {
                ref += (double)x[r * LD + k] * w->w[(row0 + o) * LD + k];
                mag += fabs((double)x[r * LD + k] * w->w[(row0 + o) * LD + k]);
              }
              bad_ref += fabs(ref - yp[r * ldy + o]) > mag * K * 0x1p-23 + K * 0x1p-149;
            }
            if (kernel) bad_dot += memcmp(y + r * ldy, yp + r * ldy, (size_t)N * sizeof *y) != 0;
            xl_f32p_matmul_portable(x + r * LD, 1, K, LD, P, row0, N, y1, N);
            bad_inv += memcmp(y1, yp + r * ldy, (size_t)N * sizeof *y1) != 0;
            if (kernel) {
              f32p_family(x + r * LD, 1, K, LD, P, row0, N, y1, N);
              bad_dot_inv += memcmp(y1, yp + r * ldy, (size_t)N * sizeof *y1) != 0;
            }
          }
        }
  }
  if (kernel) { /* NaN and Inf among the activations: the same outputs (NaN equal to NaN) */
    x[5] = NAN, x[40] = INFINITY, x[LD + 70] = -INFINITY;
    xl_f32p_matmul_portable(x, 2, LD, LD, P, 0, MAXN, yp, MAXN);
    f32p_family(x, 2, LD, LD, P, 0, MAXN, y, MAXN);
    for (int i = 0; i < 2 * MAXN; i++)
      bad_dot += !(y[i] == yp[i] || (isnan(y[i]) && isnan(yp[i])));
  }
  panel_counts("f32", bad_row, bad_ref, bad_inv, bad_dot, bad_dot_inv);
  free(w), free(x), free(y), free(yp), free(y1), free(f), free(P);
}

/* F32 panels with rows longer than the kernel's slices of K (it runs a block's row tiles over
 * one slice of the columns, keeping their sums between slices): the same bits as the portable
 * kernel, batched and alone, for widths of one slice and a column, several, and a partial last
 * one. */
static void test_f32_panels_long_rows(void) {
  enum { KMAX = 1100, N = 40, ROWS = 70 };
  static const int Ks[] = {129, 256, 300, KMAX};
  static const int Ms[] = {1, 9, 17, 64, 70};
  float *x = malloc((size_t)ROWS * KMAX * sizeof *x), *w = malloc((size_t)N * KMAX * sizeof *w);
  float *P = malloc(xl_f32p_count(N, KMAX) * sizeof *P), *y = malloc(ROWS * N * sizeof *y),
        *yp = malloc(ROWS * N * sizeof *yp), *y1 = malloc(N * sizeof *y1);
  unsigned seed = 19;
  for (int i = 0; i < ROWS * KMAX; i++) x[i] = frand(&seed);
  int bad_dot = 0, bad_inv = 0;
  for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
    const int K = Ks[c];
    for (int i = 0; i < N * K; i++) w[i] = frand(&seed);
    xl_f32p_pack(w, N, K, P);
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++) {
      const int M = Ms[a];
      xl_f32p_matmul_portable(x, M, K, KMAX, P, 0, N, yp, N);
      if (!xl_f32p_wanted()) continue;
      f32p_family(x, M, K, KMAX, P, 0, N, y, N);
      bad_dot += memcmp(y, yp, (size_t)M * N * sizeof *y) != 0;
      for (int r = 0; r < M; r += 7) {
        f32p_family(x + (size_t)r * KMAX, 1, K, KMAX, P, 0, N, y1, N);
        bad_inv += memcmp(y1, yp + r * N, N * sizeof *y1) != 0;
      }
    }
  }
  CHECK(bad_dot == 0);
  CHECK(bad_inv == 0);
  free(x), free(w), free(P), free(y), free(yp), free(y1);
}

/* The family in use is the one cpu.c chose (XLSERVE_CPU), for both tables. */
static void test_family_follows_cpu_path(void) {
  CHECK(!strcmp(xl_wkern()->name, xl_cpu_path()));
}

static xl_model *load_as(const char *dir, xl_weights w) {
  xl_load_options o = XL_LOAD_OPTIONS_DEFAULT;
  o.weights = w;
  xl_model *m = NULL;
  xl_error err;
  if (xl_model_load(dir, &o, &m, &err)) {
    fprintf(stderr, "load %s: %s\n", xl_weights_name(w), err.message);
    return NULL;
  }
  return m;
}

#define STEPS 30
#define V 256

/* log-probs after each of STEPS tokens, fed one at a time; the last step is fed batched with
 * another session too and must give the same distribution bit for bit */
static int decode(xl_model *m, float *lp /* [STEPS, V] */) {
  xl_workspace *ws;
  xl_state *a, *b;
  xl_error err;
  if (xl_workspace_new(m, &ws, &err) || xl_state_new(m, &a, &err) || xl_state_new(m, &b, &err))
    return -1;
  int32_t t[STEPS];
  for (int i = 0; i < STEPS; i++) t[i] = (int32_t)((i * 53 + 5) % V);
  for (int i = 0; i < STEPS; i++) {
    xl_feed f = {a, t + i, 1, NULL, NULL, lp + (size_t)i * V, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) return -1;
  }
  /* again, with session b fed beside it at its last step (and a 5-token chunk before) */
  xl_state_reset(a);
  for (int i = 0; i < STEPS - 1; i++) {
    xl_feed f = {a, t + i, 1, NULL, NULL, NULL, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) return -1;
  }
  float last[V], other[V];
  int32_t chunk[5] = {1, 2, 3, 4, 5};
  xl_feed items[2] = {{b, chunk, 5, NULL, NULL, other, NULL},
                      {a, t + STEPS - 1, 1, NULL, NULL, last, NULL}};
  if (xl_forward(m, ws, items, 2, &err)) return -1;
  int same = !memcmp(last, lp + (size_t)(STEPS - 1) * V, sizeof last);
  xl_state_free(a);
  xl_state_free(b);
  xl_workspace_free(ws);
  return same ? 0 : 1;
}

static void test_models(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  spec.d_model = 64;
  spec.d_inner = 136; /* not a multiple of 32: partial int8 blocks in the second FF layer */
  spec.mem_len = 12;  /* the memory wraps */
  const char *dir = tl_tmpdir("wtypes");
  CHECK(tl_write_model(dir, &spec) == 0);
  xl_model *m[4];
  float *lp[4];
  for (int w = 0; w < 4; w++) {
    m[w] = load_as(dir, (xl_weights)w);
    lp[w] = malloc(sizeof(float) * STEPS * V);
    CHECK(m[w] != NULL);
    if (!m[w]) return;
    CHECK(xl_model_weights(m[w]) == (xl_weights)w);
    CHECK(decode(m[w], lp[w]) == 0); /* runs, and the batched step is the lone step */
  }
  /* F32 bytes: every parameter; bf16 halves the big matrices, int8 quarters them + scales,
   * int4 eighths them + the same scales */
  size_t b0 = xl_model_weight_bytes(m[0]), b1 = xl_model_weight_bytes(m[1]),
         b2 = xl_model_weight_bytes(m[2]), b3 = xl_model_weight_bytes(m[3]);
  CHECK(b0 == xl_model_param_count(m[0]) * sizeof(float));
  CHECK(b1 < b0 * 0.6 && b2 < b1 * 0.7 && b3 < b2 * 0.7);
  CHECK(xl_model_fingerprint(m[1]) == xl_model_fingerprint(m[0])); /* the same model file */
  double worst[4] = {0, 0, 0, 0};
  for (int w = 1; w < 4; w++)
    for (size_t k = 0; k < (size_t)STEPS * V; k++) {
      double d = fabs((double)lp[w][k] - lp[0][k]);
      if (!(d <= worst[w])) worst[w] = d; /* a NaN counts as worst */
    }
  fprintf(stderr, "max |delta log-prob| vs f32: bf16 %.3g, int8 %.3g, int4 %.3g\n", worst[1],
          worst[2], worst[3]);
  /* the narrow types are used, and stay close (a random model's logits are large: its
   * distributions are peaked; the trained model's bounds are in tests/tools) */
  CHECK(worst[1] > 0 && worst[1] < 0.25);
  CHECK(worst[2] > 0 && worst[2] < 0.6);
  CHECK(worst[3] > worst[2] && worst[3] < 8);
  for (int w = 0; w < 4; w++) {
    xl_model_free(m[w]);
    free(lp[w]);
  }
  xl_load_options o = XL_LOAD_OPTIONS_DEFAULT;
  o.weights = (xl_weights)7;
  xl_model *bad = NULL;
  xl_error err;
  CHECK_CODE(xl_model_load(dir, &o, &bad, &err), XL_ARG);
  CHECK(bad == NULL && strstr(err.message, "weight type") != NULL);
  CHECK(xl_weights_parse("bf16") == XL_WEIGHTS_BF16 && xl_weights_parse("int4") == XL_WEIGHTS_INT4);
  CHECK(xl_weights_parse("int3") == -1);
}

/* A weight too large for a half's scale (127 x 65504 for int8, 7 x 65504 for int4): int8 and
 * int4 refuse the file with the tensor, row and columns named; F32 and bf16 load it. */
static void test_weight_too_large_for_a_scale(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  const char *dir = tl_tmpdir("bigweight");
  CHECK(tl_write_model(dir, &spec) == 0);
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  xl_safetensors st;
  xl_error err;
  CHECK_CODE(xl_safetensors_open(path, &st, &err), XL_OK);
  const xl_tensor_entry *t = xl_safetensors_find(&st, "transformer.layers.0.pos_ff.CoreNet.3.weight");
  CHECK(t != NULL && t->ndim == 2 && t->dtype == XL_DT_F32 && t->shape[1] > 40);
  if (!t) return;
  const long at = (long)(t->data - (const uint8_t *)st.map) + 4L * (long)(t->shape[1] + 40);
  xl_safetensors_close(&st);
  const float big = 1e7f; /* row 1, column 40: block 1 (columns 32-63) */
  FILE *f = fopen(path, "r+b");
  CHECK(f && fseek(f, at, SEEK_SET) == 0 && fwrite(&big, 4, 1, f) == 1);
  if (f) fclose(f);
  for (int w = 0; w < 4; w++) {
    xl_load_options o = XL_LOAD_OPTIONS_DEFAULT;
    o.weights = (xl_weights)w;
    xl_model *m = NULL;
    const xl_code rc = xl_model_load(dir, &o, &m, &err);
    if (w < 2) {
      CHECK_CODE(rc, XL_OK);
    } else {
      CHECK_CODE(rc, XL_TENSOR);
      CHECK(m == NULL && strstr(err.message, "CoreNet.3.weight") && strstr(err.message, "too large") &&
            strstr(err.message, "row 1, columns 32-63") && strstr(err.message, xl_weights_name(o.weights)));
    }
    xl_model_free(m);
  }
}

/* dir_out/model.safetensors = dir_in's with every 2-D matrix whose name contains "weight"
 * stored as BF16 (RNE), the rest (LayerNorm, biases, r biases) kept F32; config copied. */
static int write_bf16_copy(const char *dir_in, const char *dir_out) {
  char path[512], hdr[65536];
  xl_safetensors st;
  xl_error err;
  snprintf(path, sizeof path, "%s/model.safetensors", dir_in);
  if (xl_safetensors_open(path, &st, &err)) return -1;
  size_t off = 0, total = 0;
  int len = snprintf(hdr, sizeof hdr, "{");
  for (int i = 0; i < st.n_tensors; i++) {
    const xl_tensor_entry *t = &st.tensors[i];
    int narrow = t->ndim == 2 && strstr(t->name, "weight") && t->dtype == XL_DT_F32;
    size_t nb = narrow ? t->nbytes / 2 : t->nbytes;
    char shape[64];
    if (t->ndim == 2)
      snprintf(shape, sizeof shape, "%lld,%lld", (long long)t->shape[0], (long long)t->shape[1]);
    else
      snprintf(shape, sizeof shape, "%lld", (long long)t->shape[0]);
    len += snprintf(hdr + len, sizeof hdr - (size_t)len,
                    "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                    i ? "," : "", t->name, narrow ? "BF16" : "F32", shape, off, off + nb);
    off += nb;
  }
  total = off;
  len += snprintf(hdr + len, sizeof hdr - (size_t)len, "}");
  while (len % 8) hdr[len++] = ' ';
  uint8_t *data = malloc(total + 1);
  off = 0;
  for (int i = 0; i < st.n_tensors; i++) {
    const xl_tensor_entry *t = &st.tensors[i];
    int narrow = t->ndim == 2 && strstr(t->name, "weight") && t->dtype == XL_DT_F32;
    if (!narrow) {
      memcpy(data + off, t->data, t->nbytes);
      off += t->nbytes;
      continue;
    }
    for (size_t k = 0; k < t->nbytes / 4; k++, off += 2) {
      float f;
      memcpy(&f, t->data + 4 * k, 4);
      uint16_t h = xl_f32_to_bf16(f);
      data[off] = (uint8_t)(h & 0xFF);
      data[off + 1] = (uint8_t)(h >> 8);
    }
  }
  xl_safetensors_close(&st);
  snprintf(path, sizeof path, "%s/model.safetensors", dir_out);
  FILE *f = fopen(path, "wb");
  uint64_t hl = (uint64_t)len;
  uint8_t le[8];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hl >> (8 * i));
  int ok = f && fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, (size_t)len, f) == (size_t)len &&
           fwrite(data, 1, total, f) == total;
  if (f) fclose(f);
  free(data);
  char src[512], dst[512], buf[8192];
  snprintf(src, sizeof src, "%s/config.json", dir_in);
  snprintf(dst, sizeof dst, "%s/config.json", dir_out);
  FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
  size_t n = a ? fread(buf, 1, sizeof buf, a) : 0;
  ok = ok && a && b && n > 0 && fwrite(buf, 1, n, b) == n;
  if (a) fclose(a);
  if (b) fclose(b);
  return ok ? 0 : -1;
}

/* A BF16 file under --weights bf16: its matrices are used in place (no copy: the weight bytes
 * are the file's BF16 bytes), with the same results as the F32 file narrowed at load. */
static void test_bf16_file_in_place(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  const char *d32 = tl_tmpdir("f32file"), *d16 = tl_tmpdir("bf16file");
  CHECK(tl_write_model(d32, &spec) == 0);
  CHECK(write_bf16_copy(d32, d16) == 0);
  xl_model *a = load_as(d32, XL_WEIGHTS_BF16), *b = load_as(d16, XL_WEIGHTS_BF16);
  CHECK(a && b);
  if (!a || !b) return;
  CHECK(xl_model_weight_bytes(a) == xl_model_weight_bytes(b));
  /* in place: b's matrices point into its file mapping (unless the bf16 dot-product kernel
   * runs: then both are packed into panels) */
  const uint8_t *lo = b->st.map, *hi = lo + b->st.map_len, *q = b->layers[0].qkv_w.data;
  CHECK(xl_bf16p_wanted() ? (q < lo || q >= hi) && b->layers[0].qkv_w.panels : q >= lo && q < hi);
  CHECK((const uint8_t *)a->layers[0].qkv_w.data < (const uint8_t *)a->st.map ||
        (const uint8_t *)a->layers[0].qkv_w.data >= (const uint8_t *)a->st.map + a->st.map_len);
  float *la = malloc(sizeof(float) * STEPS * V), *lb = malloc(sizeof(float) * STEPS * V);
  CHECK(decode(a, la) == 0 && decode(b, lb) == 0);
  CHECK(!memcmp(la, lb, sizeof(float) * STEPS * V));
  free(la);
  free(lb);
  xl_model_free(a);
  xl_model_free(b);
}

int main(void) {
  RUN(test_narrowing);
  RUN(test_halves);
  RUN(test_matmul_bf16);
  RUN(test_matmul_int8);
  RUN(test_matmul_int4);
  RUN(test_weights_exact_through_the_gemm);
  RUN(test_int4_wmat);
  RUN(test_int8_panels);
  RUN(test_int4_panels);
  RUN(test_bf16_panels);
  RUN(test_f32_panels);
  RUN(test_f32_panels_long_rows);
  RUN(test_family_follows_cpu_path);
  RUN(test_models);
  RUN(test_weight_too_large_for_a_scale);
  RUN(test_bf16_file_in_place);
  return tl_summary();
}
