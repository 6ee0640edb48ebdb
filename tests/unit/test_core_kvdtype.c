/*
 * test_core_kvdtype.c: session memory stored as bf16 or int8. The kernel family in use
 * (XLSERVE_CPU; ctest runs this once per family) against the portable reference for every
 * narrow-memory kernel, ragged lengths and head sizes, long key runs and many heads included;
 * the narrowing itself (bf16 round-to-nearest-even, NaN kept; int8 within half a step of its
 * scale); forward passes of a narrow memory batched equal to unbatched, bit for bit, and close
 * to F32; state blobs and deltas carrying their dtype: same-dtype round trips bit for bit, a
 * blob or delta of one dtype imported under another equal to the narrowed original, and a
 * blob or delta naming a dtype this build does not know refused.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* xl_hash64 (re-signing edited blobs), the state layout */
#include "kvkernels.h"
#include "testlib.h"

static const xl_kv_dtype DTYPES[XL_KV_DTYPE_COUNT] = {XL_KV_F32, XL_KV_BF16, XL_KV_INT8};

static unsigned rng = 12345u;
static float frand(void) { /* [-1, 1) */
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) * (2.0 / 16777216.0) - 1.0);
}

/* |a - b| within a relative tolerance of the sum of the terms' magnitudes */
static int close_to(float a, float b, float mag) { return fabsf(a - b) <= 1e-5f * mag + 1e-30f; }

/* One shape: the family in use against portable for the bf16 and int8 key products (keys
 * [dh][ld]) and value mixes (rows [n][ld2], probabilities [H][ps] of p_scale, value scales
 * [n][ss]), each output within the tolerance of its terms' magnitudes. */
static void kernels_case(int H, int dh, int n, size_t ld, size_t ld2, size_t ps, size_t ss,
                         float p_scale) {
  const xl_kv_kernels *k = xl_kv_kern(), *ref = &xl_kv_kernels_portable;
  const int hd = H * dh;
  float *q = malloc((size_t)dh * 4), *s1 = malloc((size_t)n * 4), *s2 = malloc((size_t)n * 4),
        *mag = malloc((size_t)n * 4), *sc = malloc((size_t)n * 4),
        *p = malloc((size_t)H * ps * 4), *vs = malloc((size_t)n * ss * 4),
        *o1 = malloc((size_t)hd * 4), *o2 = malloc((size_t)hd * 4), *om = malloc((size_t)hd * 4);
  uint16_t *kb = malloc((size_t)dh * ld * 2), *vb = malloc((size_t)n * ld2 * 2);
  int8_t *ki = malloc((size_t)dh * ld), *vi = malloc((size_t)n * ld2);
  for (int i = 0; i < dh; i++) q[i] = frand();
  for (size_t i = 0; i < (size_t)dh * ld; i++) {
    kb[i] = xl_f32_to_bf16(frand() * 3.0f);
    ki[i] = (int8_t)(int)(frand() * 127.0f);
  }
  for (int j = 0; j < n; j++) sc[j] = 0.01f + 0.02f * (frand() + 1.0f);
  int ok_kb = 1, ok_ki = 1, ok_vb = 1, ok_vi = 1;
  for (int j = 0; j < n; j++) {
    mag[j] = 0;
    for (int i = 0; i < dh; i++) mag[j] += fabsf(q[i] * xl_bf16_to_f32(kb[(size_t)i * ld + j]));
  }
  ref->dot_rows_bf16(q, dh, kb, ld, n, s1);
  k->dot_rows_bf16(q, dh, kb, ld, n, s2);
  for (int j = 0; j < n; j++) ok_kb &= close_to(s1[j], s2[j], mag[j]);
  for (int j = 0; j < n; j++) {
    mag[j] = 0;
    for (int i = 0; i < dh; i++) mag[j] += fabsf(q[i] * ki[(size_t)i * ld + j]) * sc[j];
  }
  ref->dot_rows_i8(q, dh, ki, ld, sc, n, s1);
  k->dot_rows_i8(q, dh, ki, ld, sc, n, s2);
  for (int j = 0; j < n; j++) ok_ki &= close_to(s1[j], s2[j], mag[j]);
  for (size_t i = 0; i < (size_t)n * ld2; i++) {
    vb[i] = xl_f32_to_bf16(frand() * 3.0f);
    vi[i] = (int8_t)(int)(frand() * 127.0f);
  }
  for (size_t i = 0; i < (size_t)H * ps; i++) p[i] = (frand() + 1.0f) * 0.5f * p_scale;
  for (size_t i = 0; i < (size_t)n * ss; i++) vs[i] = 0.01f + 0.02f * (frand() + 1.0f);
  for (int e = 0; e < hd; e++) o1[e] = o2[e] = frand(), om[e] = fabsf(o1[e]);
  for (int j = 0; j < n; j++)
    for (int e = 0; e < hd; e++)
      om[e] += fabsf(p[(size_t)(e / dh) * ps + j] * xl_bf16_to_f32(vb[(size_t)j * ld2 + e]));
  ref->mix_rows_bf16(o1, p, ps, vb, ld2, n, H, dh);
  k->mix_rows_bf16(o2, p, ps, vb, ld2, n, H, dh);
  for (int e = 0; e < hd; e++) ok_vb &= close_to(o1[e], o2[e], om[e]);
  for (int e = 0; e < hd; e++) o1[e] = o2[e] = frand(), om[e] = fabsf(o1[e]);
  for (int j = 0; j < n; j++)
    for (int e = 0; e < hd; e++)
      om[e] += fabsf(p[(size_t)(e / dh) * ps + j] * vs[(size_t)j * ss + (size_t)(e / dh)] *
                     vi[(size_t)j * ld2 + e]);
  ref->mix_rows_i8(o1, p, ps, vi, ld2, vs, ss, n, H, dh);
  k->mix_rows_i8(o2, p, ps, vi, ld2, vs, ss, n, H, dh);
  for (int e = 0; e < hd; e++) ok_vi &= close_to(o1[e], o2[e], om[e]);
  CHECK(ok_kb);
  CHECK(ok_ki);
  CHECK(ok_vb);
  CHECK(ok_vi);
  if (!ok_kb || !ok_ki || !ok_vb || !ok_vi) fprintf(stderr, "  H %d dh %d n %d\n", H, dh, n);
  free(q), free(s1), free(s2), free(mag), free(sc), free(p), free(vs), free(o1), free(o2);
  free(om), free(kb), free(vb), free(ki), free(vi);
}

/* One shape: the family's four-query entries (where it has them) against its single-query
 * entries run per query, bit for bit: queries [4][dh + 1], sums [4][n + 3], outputs
 * [4][hd + 2], probabilities [4][H * ps + 1]; keys, rows and scales as kernels_case. */
static void four_queries_case(int H, int dh, int n, size_t ld, size_t ld2, size_t ps, size_t ss) {
  const xl_kv_kernels *k = xl_kv_kern();
  if (!k->dot_rows4_bf16 || !k->dot_rows4_i8 || !k->mix_rows4_bf16 || !k->mix_rows4_i8) return;
  const int hd = H * dh;
  const size_t ldq = (size_t)dh + 1, lds = (size_t)n + 3, ldo = (size_t)hd + 2,
               ldp = (size_t)H * ps + 1;
  float *q = malloc(4 * ldq * 4), *s4 = malloc(4 * lds * 4), *s1 = malloc((size_t)n * 4),
        *sc = malloc((size_t)n * 4), *p = malloc(4 * ldp * 4), *vs = malloc((size_t)n * ss * 4),
        *o4 = malloc(4 * ldo * 4), *o1 = malloc(4 * ldo * 4);
  uint16_t *kb = malloc((size_t)dh * ld * 2), *vb = malloc((size_t)n * ld2 * 2);
  int8_t *ki = malloc((size_t)dh * ld), *vi = malloc((size_t)n * ld2);
  for (size_t i = 0; i < 4 * ldq; i++) q[i] = frand();
  for (size_t i = 0; i < (size_t)dh * ld; i++) {
    kb[i] = xl_f32_to_bf16(frand() * 3.0f);
    ki[i] = (int8_t)(int)(frand() * 127.0f);
  }
  for (size_t i = 0; i < (size_t)n * ld2; i++) {
    vb[i] = xl_f32_to_bf16(frand() * 3.0f);
    vi[i] = (int8_t)(int)(frand() * 127.0f);
  }
  for (int j = 0; j < n; j++) sc[j] = 0.01f + 0.02f * (frand() + 1.0f);
  for (size_t i = 0; i < 4 * ldp; i++) p[i] = (frand() + 1.0f) * 0.5f;
  for (size_t i = 0; i < (size_t)n * ss; i++) vs[i] = 0.01f + 0.02f * (frand() + 1.0f);
  int bad = 0;
  k->dot_rows4_bf16(q, ldq, dh, kb, ld, n, s4, lds);
  for (int i = 0; i < 4; i++) {
    k->dot_rows_bf16(q + i * ldq, dh, kb, ld, n, s1);
    bad += memcmp(s1, s4 + i * lds, (size_t)n * 4) != 0;
  }
  k->dot_rows4_i8(q, ldq, dh, ki, ld, sc, n, s4, lds);
  for (int i = 0; i < 4; i++) {
    k->dot_rows_i8(q + i * ldq, dh, ki, ld, sc, n, s1);
    bad += memcmp(s1, s4 + i * lds, (size_t)n * 4) != 0;
  }
  for (size_t e = 0; e < 4 * ldo; e++) o4[e] = o1[e] = frand();
  k->mix_rows4_bf16(o4, ldo, p, ldp, ps, vb, ld2, n, H, dh);
  for (int i = 0; i < 4; i++) k->mix_rows_bf16(o1 + i * ldo, p + i * ldp, ps, vb, ld2, n, H, dh);
  for (int i = 0; i < 4; i++) bad += memcmp(o1 + i * ldo, o4 + i * ldo, (size_t)hd * 4) != 0;
  for (size_t e = 0; e < 4 * ldo; e++) o4[e] = o1[e] = frand();
  k->mix_rows4_i8(o4, ldo, p, ldp, ps, vi, ld2, vs, ss, n, H, dh);
  for (int i = 0; i < 4; i++)
    k->mix_rows_i8(o1 + i * ldo, p + i * ldp, ps, vi, ld2, vs, ss, n, H, dh);
  for (int i = 0; i < 4; i++) bad += memcmp(o1 + i * ldo, o4 + i * ldo, (size_t)hd * 4) != 0;
  CHECK(bad == 0);
  if (bad) fprintf(stderr, "  four queries: H %d dh %d n %d\n", H, dh, n);
  free(q), free(s4), free(s1), free(sc), free(p), free(vs), free(o4), free(o1);
  free(kb), free(vb), free(ki), free(vi);
}

/* Ragged lengths and head sizes, 3 heads; strides past the rows (keys [dh][n + 5], value rows
 * [n][hd + 3], probabilities [H][n + 2], value scales [n][H + 1]). */
static void test_kernels_match_portable(void) {
  printf("  family %s\n", xl_kv_kern()->name);
  const int NS[] = {1, 7, 8, 15, 16, 17, 31, 33, 64, 100};
  const int DHS[] = {4, 12, 16, 32, 64};
  for (size_t a = 0; a < sizeof DHS / sizeof *DHS; a++)
    for (size_t b = 0; b < sizeof NS / sizeof *NS; b++) {
      int dh = DHS[a], n = NS[b], H = 3;
      kernels_case(H, dh, n, (size_t)n + 5, (size_t)(H * dh) + 3, (size_t)n + 2, (size_t)H + 1,
                   1.0f);
      four_queries_case(H, dh, n, (size_t)n + 5, (size_t)(H * dh) + 3, (size_t)n + 2,
                        (size_t)H + 1);
    }
}

/* The vector families at a real model's shape and past their fast paths' limits: long key
 * runs (passes over many blocks of key rows), value mixes with many heads (16, and more heads
 * than the four-query mix's weight buffer holds: its per-query path), at the head width the
 * families build their value loops for (64) and others, against portable. */
static void test_kernels_long_runs_many_heads(void) {
  const struct { int H, dh, n; } CASES[] = {{16, 64, 1603}, {65, 16, 21}, {2, 64, 200}};
  for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
    const int H = CASES[c].H, dh = CASES[c].dh, n = CASES[c].n;
    kernels_case(H, dh, n, (size_t)n + 3, (size_t)(H * dh) + 5, (size_t)n + 1, (size_t)H,
                 1.0f / (float)n);
    four_queries_case(H, dh, n, (size_t)n + 3, (size_t)(H * dh) + 5, (size_t)n + 1, (size_t)H);
  }
}

static void test_narrowing(void) {
  /* bf16: ties to even, carries into the exponent, NaN stays NaN, infinities kept */
  union { uint32_t u; float f; } v;
  v.u = 0x3f808000u; /* 1 + 2^-8: a tie, rounds down to even 0x3f80 */
  CHECK(xl_f32_to_bf16(v.f) == 0x3f80);
  v.u = 0x3f818000u; /* a tie above an odd mantissa: rounds up to 0x3f82 */
  CHECK(xl_f32_to_bf16(v.f) == 0x3f82);
  v.u = 0x3f808001u; /* just above the tie: up */
  CHECK(xl_f32_to_bf16(v.f) == 0x3f81);
  v.u = 0x3fffffffu; /* carries into the exponent: 2.0 */
  CHECK(xl_f32_to_bf16(v.f) == 0x4000);
  CHECK(xl_f32_to_bf16(INFINITY) == 0x7f80 && xl_f32_to_bf16(-INFINITY) == 0xff80);
  float nan = NAN;
  CHECK(isnan(xl_bf16_to_f32(xl_f32_to_bf16(nan))));
  v.u = 0x7f800001u; /* a signalling NaN whose payload is all in the low bits stays a NaN */
  CHECK(isnan(xl_bf16_to_f32(xl_f32_to_bf16(v.f))));
  CHECK(xl_bf16_to_f32(xl_f32_to_bf16(-3.5f)) == -3.5f);
}

static const char *model_dir(void) {
  static const char *dir;
  if (!dir) {
    tl_model_spec spec = TL_MODEL_SPEC_DEFAULT; /* 2 layers, 2 heads x 16, mem_len 24 */
    dir = tl_tmpdir("kvdtype");
    if (tl_write_model(dir, &spec)) dir = NULL;
  }
  return dir;
}

/* int8 store/load: each value within half a step (scale / 2) of the original, per head */
static void test_int8_store_load(void) {
  xl_model *m = tl_load_model(model_dir(), XL_KV_INT8);
  CHECK(m != NULL);
  if (!m) return;
  xl_state *s = NULL;
  xl_error err;
  CHECK_CODE(xl_state_new(m, &s, &err), XL_OK);
  int hd = m->hd, dh = m->cfg.d_head;
  float k[64], v[64], k2[64], v2[64];
  for (int i = 0; i < hd; i++) k[i] = frand() * 5.0f, v[i] = frand() * 0.01f;
  for (int i = 0; i < dh; i++) v[dh + i] = 0.0f; /* an all-zero head: scale 0, exact zeros */
  xl_kv_layer L = xl_state_layer(s, 1);
  xl_kv_store(m, &L, 3, k, v);
  xl_kv_load(m, &L, 3, k2, v2);
  int ok = 1;
  for (int h = 0; h < m->cfg.n_head; h++) {
    float ka = 0, va = 0;
    for (int i = 0; i < dh; i++) {
      ka = fmaxf(ka, fabsf(k[h * dh + i]));
      va = fmaxf(va, fabsf(v[h * dh + i]));
    }
    for (int i = 0; i < dh; i++) {
      ok &= fabsf(k2[h * dh + i] - k[h * dh + i]) <= ka / 127.0f * 0.5001f;
      ok &= fabsf(v2[h * dh + i] - v[h * dh + i]) <= va / 127.0f * 0.5001f;
    }
  }
  CHECK(ok);
  for (int i = 0; i < dh; i++) CHECK(v2[dh + i] == 0.0f);
  CHECK(xl_state_bytes(s) == xl_model_state_bytes(m));
  CHECK(xl_model_state_bytes_per_token(m) ==
        (size_t)m->cfg.n_layer * 2 * ((size_t)hd + 4 * (size_t)m->cfg.n_head));
  /* the decode step's positional table: rows for distances 0..mem_len, each an int8 key row
   * with its per-head scales, and the per-head bias terms */
  const xl_kv_layer *T = &m->layers[0].pos_keys;
  size_t rows = (size_t)(T->M < m->cfg.mem_len + 1 ? T->M : m->cfg.mem_len + 1);
  CHECK(T->dtype == XL_KV_INT8 && rows > 0);
  CHECK(xl_model_decode_table_bytes(m) ==
        (size_t)m->cfg.n_layer * rows * ((size_t)hd + 2 * 4 * (size_t)m->cfg.n_head));
  xl_state_free(s);
  xl_model_free(m);
}

#define NS 5
#define NTOK 40

/* Each session: a prefill chunk then single-token decode steps, alone or all in one batch;
 * log-probs into lp[session][NTOK - 1]. */
static void run_sessions(xl_model *m, int batched, float lp[NS][NTOK]) {
  xl_error err;
  xl_workspace *ws = NULL;
  xl_workspace_new(m, &ws, &err);
  xl_state *st[NS];
  int32_t t[NS][NTOK];
  for (int s = 0; s < NS; s++) {
    xl_state_new(m, &st[s], &err);
    tl_tokens(t[s], NTOK, 7u + (unsigned)s);
  }
  /* prefills of 9..13 tokens, so the batch's steps read different lengths of the positional
   * table until the rings are full; then decode (the rings wrap: mem_len 24 < 40) */
  for (int s = 0; s < NS; s++) {
    xl_feed f = {st[s], t[s], 9 + s, t[s] + 1, lp[s], NULL, NULL};
    CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
  }
  for (int k = 0; 9 + NS - 1 + k < NTOK - 1; k++) {
    xl_feed f[NS];
    for (int s = 0; s < NS; s++) {
      const int i = 9 + s + k;
      f[s] = (xl_feed){st[s], t[s] + i, 1, t[s] + i + 1, lp[s] + i, NULL, NULL};
    }
    if (batched) CHECK_CODE(xl_forward(m, ws, f, NS, &err), XL_OK);
    else
      for (int s = 0; s < NS; s++) CHECK_CODE(xl_forward(m, ws, &f[s], 1, &err), XL_OK);
  }
  for (int s = 0; s < NS; s++) xl_state_free(st[s]);
  xl_workspace_free(ws);
}

static void test_forward_batch_invariant_and_close(void) {
  static float ref[NS][NTOK], a[NS][NTOK], b[NS][NTOK];
  xl_model *m32 = tl_load_model(model_dir(), XL_KV_F32);
  CHECK(m32 != NULL);
  if (!m32) return;
  run_sessions(m32, 0, ref);
  run_sessions(m32, 1, b);
  CHECK(memcmp(ref, b, sizeof b) == 0); /* batch invariance over an F32 memory, bit for bit */
  for (int d = 1; d < XL_KV_DTYPE_COUNT; d++) {
    xl_model *m = tl_load_model(model_dir(), DTYPES[d]);
    CHECK(m != NULL && xl_model_fingerprint(m) == xl_model_fingerprint(m32));
    if (!m) continue;
    run_sessions(m, 0, a);
    run_sessions(m, 1, b);
    CHECK(memcmp(a, b, sizeof a) == 0); /* batch invariance, bit for bit */
    float worst = 0;
    int differs = 0;
    for (int s = 0; s < NS; s++)
      for (int i = 0; i < NTOK - 1; i++) {
        worst = fmaxf(worst, fabsf(a[s][i] - ref[s][i]));
        differs |= a[s][i] != ref[s][i];
      }
    CHECK(worst < (DTYPES[d] == XL_KV_BF16 ? 0.02f : 0.05f)); /* a random model: loose */
    CHECK(differs); /* the narrow memory is really read (decode steps after the prefill) */
    printf("  %s: max |delta log-prob| vs f32 %.3g\n", xl_kv_dtype_name(DTYPES[d]), (double)worst);
    xl_model_free(m);
  }
  xl_model_free(m32);
}

/* A state fed one segment from empty has keys/values computed in F32 and then stored; so its
 * F32 blob imported under dtype D equals, byte for byte, the blob of a D state fed the same. */
static int feed(xl_model *m, xl_state *s, const int32_t *t, int n) {
  xl_error err;
  xl_workspace *ws = NULL;
  xl_workspace_new(m, &ws, &err);
  xl_feed f = {s, t, n, NULL, NULL, NULL, NULL};
  xl_code rc = xl_forward(m, ws, &f, 1, &err);
  xl_workspace_free(ws);
  return rc == XL_OK;
}

static int same_blob(const xl_state *a, const xl_state *b) {
  uint8_t *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  xl_error err;
  int same = xl_state_serialize(a, &x, &nx, &err) == XL_OK &&
             xl_state_serialize(b, &y, &ny, &err) == XL_OK && nx == ny && !memcmp(x, y, nx);
  free(x);
  free(y);
  return same;
}

static void test_blobs_across_dtypes(void) {
  xl_model *m[XL_KV_DTYPE_COUNT];
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) m[d] = tl_load_model(model_dir(), DTYPES[d]);
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) CHECK(m[d] != NULL);
  if (!m[0] || !m[1] || !m[2]) return;
  xl_error err;
  int32_t t[30];
  tl_tokens(t, 30, 3);
  xl_state *fed[XL_KV_DTYPE_COUNT]; /* each dtype fed the same 30 tokens (the ring wraps) */
  uint8_t *blob[XL_KV_DTYPE_COUNT];
  size_t len[XL_KV_DTYPE_COUNT];
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) {
    xl_state_new(m[d], &fed[d], &err);
    CHECK(feed(m[d], fed[d], t, 30));
    CHECK(xl_state_kv_dtype(fed[d]) == DTYPES[d]);
    CHECK_CODE(xl_state_serialize(fed[d], &blob[d], &len[d], &err), XL_OK);
    CHECK(blob[d][8] == (d == 0 ? 1 : 2) && blob[d][60] == d); /* version, dtype code */
  }
  CHECK(len[1] - 72 < (len[0] - 72) / 2 + 1); /* bf16 payload: half */
  /* a full f32 blob fits every model's bound for an imported blob (an f32 export into a bf16
   * or int8 server: the bound is not the server's own, smaller state) */
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) CHECK(len[0] <= xl_model_state_blob_max_bytes(m[d]));
  CHECK(xl_model_state_blob_max_bytes(m[1]) > xl_model_state_bytes(m[1]));
  /* int8 payload: a quarter, plus one f32 scale per position, head and K/V (d_head 16 here:
   * 0.31 of f32; 0.27 at d_head 64) */
  CHECK(len[2] - 72 == (len[0] - 72) / 4 + (size_t)m[0]->cfg.n_layer * (size_t)m[0]->cfg.mem_len *
                                                   2 * (size_t)m[0]->cfg.n_head * 4);
  for (int from = 0; from < XL_KV_DTYPE_COUNT; from++)
    for (int to = 0; to < XL_KV_DTYPE_COUNT; to++) {
      xl_state *s = NULL;
      CHECK_CODE(xl_state_deserialize(m[to], blob[from], len[from], &s, &err), XL_OK);
      if (!s) continue;
      CHECK(xl_state_kv_dtype(s) == DTYPES[to]);
      CHECK(xl_state_tokens_fed(s) == 30 && xl_state_mem_length(s) == m[to]->cfg.mem_len);
      if (from == to || from == 0) CHECK(same_blob(s, fed[to])); /* exact: copy or narrowing */
      if (from == 1 && to == 0) { /* bf16 widened to f32 and narrowed back: the same bf16 */
        xl_state *back = NULL;
        uint8_t *b32 = NULL;
        size_t n32 = 0;
        CHECK_CODE(xl_state_serialize(s, &b32, &n32, &err), XL_OK);
        CHECK_CODE(xl_state_deserialize(m[1], b32, n32, &back, &err), XL_OK);
        CHECK(back && same_blob(back, fed[1]));
        xl_state_free(back);
        free(b32);
      }
      /* a state imported from any dtype decodes on */
      int32_t nx = 5;
      CHECK(feed(m[to], s, &nx, 1));
      xl_state_free(s);
    }
  /* an unknown dtype code (re-signed) is refused as a mismatch, naming the dtype */
  uint8_t *bad = malloc(len[1]);
  memcpy(bad, blob[1], len[1]);
  bad[60] = 7;
  uint64_t h = xl_hash64(bad, len[1] - 8, 0x626c6f6273756d31ULL);
  for (int i = 0; i < 8; i++) bad[len[1] - 8 + i] = (uint8_t)(h >> (8 * i));
  xl_state *s = NULL;
  CHECK_CODE(xl_state_deserialize(m[0], bad, len[1], &s, &err), XL_MISMATCH);
  CHECK(s == NULL && strstr(err.message, "dtype code 7") != NULL);
  /* version 1 with a non-zero dtype (re-signed): refused, never read as f32 */
  memcpy(bad, blob[1], len[1]);
  bad[8] = 1;
  h = xl_hash64(bad, len[1] - 8, 0x626c6f6273756d31ULL);
  for (int i = 0; i < 8; i++) bad[len[1] - 8 + i] = (uint8_t)(h >> (8 * i));
  CHECK(xl_state_deserialize(m[1], bad, len[1], &s, &err) != XL_OK && s == NULL);
  /* an int8 blob with a negative scale (re-signed): refused */
  free(bad);
  bad = malloc(len[2]);
  memcpy(bad, blob[2], len[2]);
  bad[len[2] - 8 - 1] |= 0x80; /* the last value scale's sign bit */
  h = xl_hash64(bad, len[2] - 8, 0x626c6f6273756d31ULL);
  for (int i = 0; i < 8; i++) bad[len[2] - 8 + i] = (uint8_t)(h >> (8 * i));
  CHECK_CODE(xl_state_deserialize(m[2], bad, len[2], &s, &err), XL_STATE);
  free(bad);
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) {
    free(blob[d]);
    xl_state_free(fed[d]);
  }
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) xl_model_free(m[d]);
}

/* A session saved as a snapshot + turn deltas under dtype A, rebuilt under dtype B, equals the
 * A state imported whole under B; same-dtype deltas rebuild bit for bit. */
static void test_deltas_across_dtypes(void) {
  xl_model *m[XL_KV_DTYPE_COUNT];
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) m[d] = tl_load_model(model_dir(), DTYPES[d]);
  if (!m[0] || !m[1] || !m[2]) return;
  xl_error err;
  int32_t t[60];
  tl_tokens(t, 60, 11);
  const int cuts[] = {0, 10, 17, 18, 45, 60}; /* turns; the ring (24) wraps */
  for (int a = 0; a < XL_KV_DTYPE_COUNT; a++) {
    xl_state *src = NULL;
    xl_state_new(m[a], &src, &err);
    CHECK(feed(m[a], src, t, cuts[1]));
    uint8_t *snap = NULL, *delta[5] = {0};
    size_t nsnap = 0, nd[5] = {0};
    xl_state_serialize(src, &snap, &nsnap, &err);
    for (int k = 1; k + 1 < 6; k++) {
      CHECK(feed(m[a], src, t + cuts[k], cuts[k + 1] - cuts[k]));
      CHECK_CODE(xl_state_delta_encode(src, (uint64_t)cuts[k], &delta[k], &nd[k], &err), XL_OK);
      if (delta[k]) CHECK(delta[k][8] == (a == 0 ? 1 : 2));
    }
    uint8_t *whole = NULL;
    size_t nwhole = 0;
    xl_state_serialize(src, &whole, &nwhole, &err);
    for (int b = 0; b < XL_KV_DTYPE_COUNT; b++) {
      xl_state *s = NULL, *expect = NULL;
      CHECK_CODE(xl_state_deserialize(m[b], snap, nsnap, &s, &err), XL_OK);
      for (int k = 1; s && k + 1 < 6; k++) CHECK_CODE(xl_state_delta_apply(s, delta[k], nd[k], &err), XL_OK);
      CHECK_CODE(xl_state_deserialize(m[b], whole, nwhole, &expect, &err), XL_OK);
      if (s && expect) {
        if (a == b || a == 0) CHECK(same_blob(s, expect));
        else { /* narrow to another: the same positions converted; compare widened values */
          float k1[64], v1[64], k2[64], v2[64];
          int ok = 1;
          for (int l = 0; l < m[b]->cfg.n_layer; l++) {
            xl_kv_layer L1 = xl_state_layer(s, l), L2 = xl_state_layer(expect, l);
            for (int slot = 0; slot < s->mem_len; slot++) {
              xl_kv_load(m[b], &L1, slot, k1, v1);
              xl_kv_load(m[b], &L2, slot, k2, v2);
              ok &= !memcmp(k1, k2, sizeof(float) * (size_t)m[b]->hd) &&
                    !memcmp(v1, v2, sizeof(float) * (size_t)m[b]->hd);
            }
          }
          CHECK(ok);
        }
      }
      xl_state_free(s);
      xl_state_free(expect);
    }
    /* an unknown dtype in a delta (re-signed) is refused, the state untouched */
    if (a != 0) {
      size_t n = nd[2];
      uint8_t *bad = malloc(n);
      memcpy(bad, delta[2], n);
      bad[64] = 9;
      uint64_t h = xl_hash64(bad, n - 8, 0x64656c7461736d31ULL);
      for (int i = 0; i < 8; i++) bad[n - 8 + i] = (uint8_t)(h >> (8 * i));
      xl_state *s = NULL;
      xl_state_deserialize(m[a], snap, nsnap, &s, &err);
      CHECK_CODE(xl_state_delta_apply(s, delta[1], nd[1], &err), XL_OK);
      CHECK_CODE(xl_state_delta_apply(s, bad, n, &err), XL_MISMATCH);
      CHECK(strstr(err.message, "dtype code 9") != NULL);
      CHECK(xl_state_tokens_fed(s) == (uint64_t)cuts[2]);
      free(bad);
      xl_state_free(s);
    }
    for (int k = 1; k < 5; k++) free(delta[k]);
    free(snap);
    free(whole);
    xl_state_free(src);
  }
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) xl_model_free(m[d]);
}

int main(void) {
  RUN(test_kernels_match_portable);
  RUN(test_kernels_long_runs_many_heads);
  RUN(test_narrowing);
  RUN(test_int8_store_load);
  RUN(test_forward_batch_invariant_and_close);
  RUN(test_blobs_across_dtypes);
  RUN(test_deltas_across_dtypes);
  return tl_summary();
}
