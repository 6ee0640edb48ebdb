/*
 * test_core_kernels.c: every kernel family this CPU runs (kernels.h), each against a double
 * precision reference computed here: the weight GEMM for 1..N rows and awkward sizes (tails of
 * every lane count), with each row's outputs bit-identical alone and inside any batch; softmax
 * max / exp-sum / sum-exp; the decode products over transposed rows (dot_rows, mix_rows);
 * LayerNorm, ReLU, bias rows, the reversed position term (add_reversed, bit for bit).
 * Non-finite and denormal inputs give defined IEEE results (NaN stays NaN, exp(-Inf) = 0,
 * exp(+Inf) = Inf), with no float-to-int conversion of a non-finite value (the UBSan build
 * checks that). And the path switch: unknown names and paths this CPU or build cannot run are
 * clear errors that leave the current path alone. And the workspace buffers the GEMMs read
 * start on cache lines.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testlib.h"

static const char *const FAMILIES[] = {"avx512", "avx2", "neon", "portable"};
#define N_FAMILIES 4

static float frand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) x[i] = frand(&seed);
}

/* One product y[M x N] = x[M x K] . w[N x K]^T (row strides ldx, ldw, ldy) checked two ways:
 * each result against a double-precision sum (counted in *bad_ref), and each row computed alone
 * against the same row inside the batch of M, bit for bit (counted in *bad_inv). y1: N floats. */
static void check_product(const xl_kernels *k, const float *x, int M, int K, int ldx,
                          const float *w, int N, int ldw, float *y, int ldy, float *y1,
                          int *bad_ref, int *bad_inv) {
  k->matmul_nt(x, M, K, ldx, w, N, ldw, y, ldy);
  for (int r = 0; r < M; r++) {
    for (int o = 0; o < N; o++) {
      double ref = 0;
      for (int i = 0; i < K; i++) ref += (double)x[(size_t)r * ldx + i] * w[(size_t)o * ldw + i];
      if (fabs(ref - y[(size_t)r * ldy + o]) > 1e-5 * K) (*bad_ref)++;
    }
    k->matmul_nt(x + (size_t)r * ldx, 1, K, ldx, w, N, ldw, y1, N); /* the row alone */
    if (memcmp(y1, y + (size_t)r * ldy, (size_t)N * sizeof *y1)) (*bad_inv)++;
  }
}

/* GEMM vs double, and a row's results alone == inside a batch of M rows (bit for bit). */
static void check_matmul(const xl_kernels *k) {
  static const int Ms[] = {1, 2, 3, 4, 5, 7, 9, 17, 70};
  static const int Ns[] = {1, 3, 4, 5, 8, 9, 13, 33};
  static const int Ks[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 40, 64, 100};
  float *x = malloc(70 * 100 * sizeof *x), *w = malloc(33 * 100 * sizeof *w),
        *y = malloc(70 * 40 * sizeof *y), *y1 = malloc(40 * sizeof *y1);
  fill(x, 70 * 100, 1);
  fill(w, 33 * 100, 2);
  int bad_ref = 0, bad_inv = 0;
  for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
    for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
      for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
        check_product(k, x, Ms[a], Ks[c], 100, w, Ns[b], 100, y, Ns[b] + 3, y1, &bad_ref,
                      &bad_inv);
  CHECK(bad_ref == 0);
  CHECK(bad_inv == 0);
  free(x);
  free(w);
  free(y);
  free(y1);
}

/* Long weight rows (K up to past 4096 floats) with a row stride that puts every weight row off
 * a 32-byte boundary, in blocks of many rows (where a family may copy its weight rows into an
 * aligned panel first) and fewer: the same checks as above, both ways. */
static void check_matmul_long_rows(const xl_kernels *k) {
  static const int Ks[] = {1000, 4096, 4101};
  static const int Ms[] = {2, 13, 50};
  enum { LD = 4101 + 5, N = 6, MAX_M = 50 };
  float *x = malloc((size_t)MAX_M * LD * sizeof *x), *w = malloc((size_t)N * LD * sizeof *w),
        *y = malloc((size_t)MAX_M * N * sizeof *y), *y1 = malloc(N * sizeof *y1);
  fill(x, (size_t)MAX_M * LD, 3);
  fill(w, (size_t)N * LD, 4);
  int bad_ref = 0, bad_inv = 0;
  for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
    for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) /* w + 1: rows 4 bytes past w's */
      check_product(k, x, Ms[a], Ks[c], LD, w + 1, N, LD, y, N, y1, &bad_ref, &bad_inv);
  CHECK(bad_ref == 0);
  CHECK(bad_inv == 0);
  free(x);
  free(w);
  free(y);
  free(y1);
}

static void check_softmax(const xl_kernels *k) {
  for (int n = 1; n <= 70; n += 3) {
    float x[70], e[70];
    fill(x, (size_t)n, (unsigned)n);
    for (int i = 0; i < n; i++) x[i] *= 30.0f;
    float mx = k->max(x, n);
    float ref_mx = -INFINITY;
    for (int i = 0; i < n; i++) ref_mx = x[i] > ref_mx ? x[i] : ref_mx;
    CHECK(mx == ref_mx);
    memcpy(e, x, sizeof e);
    float s = k->exp_sum(e, n, mx), s2 = k->sum_exp(x, n, mx);
    double ref = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
      double r = exp((double)x[i] - mx);
      ref += r;
      if (fabs(e[i] - r) > 4e-7 * r + 1e-37) bad++;
    }
    CHECK(bad == 0);
    CHECK_NEAR(s, ref, 1e-5 * ref);
    CHECK(s == s2); /* the same lanes and order */
  }
}

/* exp of non-finite and extreme arguments: defined, and what IEEE exp gives. */
static void check_exp_specials(const xl_kernels *k) {
  const float nan = NAN, inf = INFINITY, den = FLT_MIN / 8.0f;
  float v[19] = {nan, -inf, inf, 0.0f, -0.0f, den, -den, -87.0f, -87.4f, -100.0f, -1e30f,
                 1e30f, 88.0f, 89.0f, -FLT_MAX, FLT_MAX, -nan, 1.0f, -5.5f};
  for (int n = 1; n <= 19; n++) {
    float x[19], got[19];
    memcpy(x, v, sizeof x);
    k->exp_sum(x, n, 0.0f);
    memcpy(got, x, sizeof got);
    int bad = 0;
    for (int i = 0; i < n; i++) {
      float want = v[i] != v[i] ? NAN : v[i] < -87.3f ? 0.0f : v[i] > 88.72f ? INFINITY : expf(v[i]);
      int ok = isnan(want) ? isnan(got[i])
               : isinf(want) ? got[i] == want
               : v[i] > 87.0f ? got[i] > 1e37f /* clamped region: large and finite */
               : fabsf(got[i] - want) <= 4e-7f * want + 1e-37f;
      if (!ok) {
        bad++;
        fprintf(stderr, "  %s exp(%g) = %g, want %g\n", k->name, (double)v[i], (double)got[i],
                (double)want);
      }
    }
    CHECK(bad == 0);
  }
  float x[20];
  for (int i = 0; i < 20; i++) x[i] = (float)-i;
  x[5] = NAN;
  CHECK(isnan(k->sum_exp(x, 20, 0.0f)));  /* a NaN score poisons the sum, visibly */
  float ninf[9];
  for (int i = 0; i < 9; i++) ninf[i] = -INFINITY;
  CHECK(k->sum_exp(ninf, 9, 0.0f) == 0.0f);
  CHECK(isnan(k->sum_exp(ninf, 9, -INFINITY))); /* -Inf - -Inf: NaN, no trap, no UB */
}

static void check_attention_products(const xl_kernels *k) {
  /* dot_rows: s[j] = sum_k q[k] rows[k][j] for odd sizes */
  float q[40], rows[40 * 140], s[140];
  fill(q, 40, 3);
  fill(rows, 40 * 140, 4);
  static const int ns[] = {1, 5, 8, 15, 16, 17, 63, 64, 65, 130};
  static const int dhs[] = {1, 4, 7, 16, 32, 40};
  int bad = 0;
  for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
    for (size_t b = 0; b < sizeof dhs / sizeof *dhs; b++) {
      int n = ns[a], dh = dhs[b];
      k->dot_rows(q, dh, rows, 140, n, s);
      for (int j = 0; j < n; j++) {
        double r = 0;
        for (int i = 0; i < dh; i++) r += (double)q[i] * rows[i * 140 + j];
        if (fabs(r - s[j]) > 1e-5 * dh) bad++;
      }
    }
  CHECK(bad == 0);
  /* dot_rows4: four queries in one pass, each bit for bit dot_rows (or no such kernel) */
  bad = 0;
  if (k->dot_rows4)
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
      for (size_t b = 0; b < sizeof dhs / sizeof *dhs; b++) {
        int n = ns[a], dh = dhs[b];
        float q4[4 * 41], s4[4 * 141], one[140];
        fill(q4, 4 * 41, 8);
        fill(s4, 4 * 141, 9);
        k->dot_rows4(q4, 41, dh, rows, 140, n, s4, 141);
        for (int i = 0; i < 4; i++) {
          k->dot_rows(q4 + i * 41, dh, rows, 140, n, one);
          if (memcmp(one, s4 + i * 141, (size_t)n * sizeof *one)) bad++;
        }
      }
  CHECK(bad == 0);
  /* mix_rows: out[h*dh+i] += sum_j p[h][j] rows[j][h*dh+i], head sizes on and off the lanes */
  static const int Hs[] = {1, 2, 3, 8, 12};
  static const int mdh[] = {4, 6, 8, 16, 32, 64, 96};
  bad = 0;
  for (size_t a = 0; a < sizeof Hs / sizeof *Hs; a++)
    for (size_t b = 0; b < sizeof mdh / sizeof *mdh; b++) {
      int H = Hs[a], dh = mdh[b], hd = H * dh, n = 13;
      float *p = malloc((size_t)H * 20 * sizeof *p), *v = malloc((size_t)n * hd * sizeof *v),
            *out = malloc((size_t)hd * sizeof *out);
      fill(p, (size_t)H * 20, 5);
      fill(v, (size_t)n * hd, 6);
      fill(out, (size_t)hd, 7);
      double *ref = malloc((size_t)hd * sizeof *ref);
      for (int e = 0; e < hd; e++) {
        ref[e] = out[e];
        for (int j = 0; j < n; j++) ref[e] += (double)p[(e / dh) * 20 + j] * v[j * hd + e];
      }
      k->mix_rows(out, p, 20, v, (size_t)hd, n, H, dh);
      for (int e = 0; e < hd; e++)
        if (fabs(ref[e] - out[e]) > 1e-5 * n) bad++;
      free(p);
      free(v);
      free(out);
      free(ref);
    }
  CHECK(bad == 0);
  /* mix_rows4: four queries in one pass, each bit for bit mix_rows (or no such kernel) */
  bad = 0;
  for (size_t a = 0; k->mix_rows4 && a < sizeof Hs / sizeof *Hs; a++)
    for (size_t b = 0; b < sizeof mdh / sizeof *mdh; b++) {
      const int H = Hs[a], dh = mdh[b], hd = H * dh, n = 13;
      const size_t ldo = (size_t)hd + 3, ldp = (size_t)H * 21;
      float *p4 = malloc(4 * ldp * sizeof *p4), *v = malloc((size_t)n * hd * sizeof *v),
            *out4 = malloc(4 * ldo * sizeof *out4), *want = malloc(4 * ldo * sizeof *want);
      fill(p4, 4 * ldp, 10);
      fill(v, (size_t)n * hd, 12);
      fill(out4, 4 * ldo, 11);
      memcpy(want, out4, 4 * ldo * sizeof *want);
      for (int i = 0; i < 4; i++) k->mix_rows(want + i * ldo, p4 + i * ldp, 20, v, (size_t)hd, n, H, dh);
      k->mix_rows4(out4, ldo, p4, ldp, 20, v, (size_t)hd, n, H, dh);
      for (int i = 0; i < 4; i++)
        if (memcmp(want + i * ldo, out4 + i * ldo, (size_t)hd * sizeof *want)) bad++;
      free(p4);
      free(v);
      free(out4);
      free(want);
    }
  CHECK(bad == 0);
}

static void check_rows(const xl_kernels *k) {
  static const int dims[] = {1, 5, 8, 16, 17, 33, 256};
  float x[3 * 256], y[3 * 256], g[256], b[256];
  int bad = 0;
  for (size_t a = 0; a < sizeof dims / sizeof *dims; a++) {
    int dim = dims[a];
    fill(x, 3 * 256, 8);
    fill(g, 256, 9);
    fill(b, 256, 10);
    for (int i = 0; i < 3 * dim; i++) x[i] = x[i] * 4.0f + 1.5f;
    k->layer_norm(x, 3, dim, g, b, 1e-5f, y);
    for (int r = 0; r < 3; r++) {
      double mu = 0, var = 0;
      for (int j = 0; j < dim; j++) mu += x[r * dim + j];
      mu /= dim;
      for (int j = 0; j < dim; j++) var += (x[r * dim + j] - mu) * (x[r * dim + j] - mu);
      var /= dim;
      for (int j = 0; j < dim; j++) {
        double want = (x[r * dim + j] - mu) / sqrt(var + 1e-5) * g[j] + b[j];
        if (fabs(want - y[r * dim + j]) > 2e-5) bad++;
      }
    }
  }
  CHECK(bad == 0);
  float r[21] = {-1, 2, -0.0f, NAN, -INFINITY, INFINITY, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12,
                 13, -14, 15, -16, 17};
  k->relu(r, 21);
  CHECK(r[0] == 0 && r[1] == 2 && r[2] == 0 && isnan(r[3]) && r[4] == 0 && isinf(r[5]));
  CHECK(r[19] == 0 && r[20] == 17);
  float yb[2 * 21], bias[19];
  fill(yb, 2 * 21, 11);
  fill(bias, 19, 12);
  float before[2 * 21];
  memcpy(before, yb, sizeof yb);
  k->add_bias(yb, 2, 19, 21, bias);
  bad = 0;
  for (int row = 0; row < 2; row++)
    for (int j = 0; j < 21; j++)
      if (yb[row * 21 + j] != before[row * 21 + j] + (j < 19 ? bias[j] : 0.0f)) bad++;
  CHECK(bad == 0);
}

/* add_reversed: the bits of (s + (p[-k] + b[-k])) * scale for every k, at lengths around
 * every lane count (tails), with p and b ending where their arrays start. */
static void check_add_reversed(const xl_kernels *k) {
  const int NS[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1601};
  enum { MAX_N = 1601 };
  float *s = malloc(MAX_N * sizeof *s), *want = malloc(MAX_N * sizeof *want),
        *p = malloc(MAX_N * sizeof *p), *b = malloc(MAX_N * sizeof *b);
  int bad = 0;
  for (size_t c = 0; c < sizeof NS / sizeof *NS; c++) {
    const int n = NS[c];
    const float scale = 0.125f + (float)c * 0.01f;
    fill(s, (size_t)n, 21u + (unsigned)c);
    fill(p, (size_t)n, 31u + (unsigned)c);
    fill(b, (size_t)n, 41u + (unsigned)c);
    for (int i = 0; i < n; i++) want[i] = (s[i] + (p[n - 1 - i] + b[n - 1 - i])) * scale;
    k->add_reversed(s, p + n - 1, b + n - 1, n, scale);
    for (int i = 0; i < n; i++) bad += memcmp(&s[i], &want[i], sizeof *s) != 0;
  }
  CHECK(bad == 0);
  free(s), free(want), free(p), free(b);
}

/* Every family this CPU runs, through the switch: xl_cpu_select + xl_kern(). */
static void test_every_family(void) {
  int ran = 0;
  for (int f = 0; f < N_FAMILIES; f++) {
    if (xl_cpu_can_run(FAMILIES[f]) != 1) continue;
    xl_error err;
    CHECK_CODE(xl_cpu_select(FAMILIES[f], &err), XL_OK);
    const xl_kernels *k = xl_kern();
    CHECK(!strcmp(k->name, FAMILIES[f]) && !strcmp(xl_cpu_path(), FAMILIES[f]));
    int f0 = tl_failed;
    check_matmul(k);
    check_matmul_long_rows(k);
    check_softmax(k);
    check_exp_specials(k);
    check_attention_products(k);
    check_rows(k);
    check_add_reversed(k);
    printf("  family %-9s %s\n", k->name, tl_failed == f0 ? "ok" : "FAILED");
    ran++;
  }
  CHECK(ran >= 2); /* portable and at least one vector family on x86-64 and aarch64 */
  xl_error err;
  CHECK_CODE(xl_cpu_select("auto", &err), XL_OK);
}

/* The workspace's buffers (the x rows the GEMMs read) start on a 64-byte line at every size
 * and regrowth, so the kernels' vector loads of rows of 16k floats never straddle two lines. */
static void test_workspace_lines(void) {
  static const size_t SIZES[] = {1, 3, 17, 1000, 4097, 65536, 300000, 5, 1 << 20};
  xl_workspace *ws = NULL;
  xl_error err;
  CHECK_CODE(xl_workspace_new(NULL, &ws, &err), XL_OK);
  int off_line = 0;
  for (size_t i = 0; i < sizeof SIZES / sizeof *SIZES; i++)
    for (int slot = 0; slot < 3; slot++) {
      float *b = xl_ws_get(ws, slot, SIZES[i] + (size_t)slot);
      CHECK(b != NULL);
      if ((uintptr_t)b % 64) off_line++;
      b[SIZES[i] + (size_t)slot - 1] = 1.0f; /* the whole size is usable (ASan checks) */
    }
  CHECK(off_line == 0);
  xl_workspace_free(ws);
}

static void test_switch_errors(void) {
  xl_error err;
  CHECK_CODE(xl_cpu_select("portable", &err), XL_OK);
  CHECK_CODE(xl_cpu_select("sse9", &err), XL_ARG);
  CHECK(strstr(err.message, "unknown CPU path 'sse9'") != NULL);
  CHECK(xl_cpu_can_run("sse9") == -1);
#if defined(__x86_64__)
  const char *foreign = "neon";
#else
  const char *foreign = "avx2";
#endif
  CHECK(xl_cpu_can_run(foreign) == 0);
  CHECK_CODE(xl_cpu_select(foreign, &err), XL_UNSUPPORTED);
  CHECK(strstr(err.message, foreign) && strstr(err.message, "this CPU runs: "));
  CHECK(!strcmp(xl_cpu_path(), "portable")); /* a refused switch changes nothing */
  char list[64];
  CHECK(xl_cpu_runnable(list, sizeof list) > 0 && strstr(list, "portable") != NULL);
  CHECK_CODE(xl_cpu_select(NULL, &err), XL_OK); /* auto: the first family the CPU runs */
  CHECK(!strncmp(list, xl_cpu_path(), strlen(xl_cpu_path())));
}

int main(void) {
  RUN(test_every_family);
  RUN(test_switch_errors);
  RUN(test_workspace_lines);
  return tl_summary();
}
