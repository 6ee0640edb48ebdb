/*
 * test_core_rows.c: the forward pass's per-row outputs used for prompt scoring
 * (xl_feed.row_logprobs): each row's distribution equals the one-token decoding path's
 * distribution at that position; target_logprobs are exactly the rows' entries at the targets;
 * a target of -1 leaves its entry alone; last_logprobs is exactly the last row; batched with
 * another item the rows are bit for bit the same; a target below -1 is refused.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define N 40
#define V 256

static xl_model *load(const tl_model_spec *spec, const char *tag) {
  const char *dir = tl_tmpdir(tag);
  if (tl_write_model(dir, spec)) return NULL;
  xl_model *m = NULL;
  xl_error err;
  if (xl_model_load(dir, NULL, &m, &err)) return NULL;
  return m;
}

static void test_rows_match_decoding(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT; /* mem_len 24 < N: the memory wraps */
  xl_model *m = load(&spec, "rows");
  CHECK(m != NULL);
  if (!m) return;
  xl_workspace *ws;
  xl_state *a, *b, *c, *other;
  xl_error err;
  CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
  CHECK_CODE(xl_state_new(m, &a, &err), XL_OK);
  CHECK_CODE(xl_state_new(m, &b, &err), XL_OK);
  CHECK_CODE(xl_state_new(m, &c, &err), XL_OK);
  CHECK_CODE(xl_state_new(m, &other, &err), XL_OK);
  int32_t t[N], tg[N];
  for (int i = 0; i < N; i++) t[i] = (int32_t)((i * 37 + 11) % V);
  for (int i = 0; i < N; i++) tg[i] = i + 1 < N ? t[i + 1] : -1;
  float *rows = malloc(sizeof(float) * N * V), *rows2 = malloc(sizeof(float) * N * V);
  float *step = malloc(sizeof(float) * N * V);
  float tlp[N], last[V];
  tlp[N - 1] = 12345.0f; /* no target: must stay */

  /* the whole prompt as one chunk */
  xl_feed f = {a, t, N, tg, tlp, last, rows};
  CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
  /* reference: one token at a time (the decode path), its next-token distribution each */
  for (int i = 0; i < N; i++) {
    xl_feed s = {b, t + i, 1, NULL, NULL, step + (size_t)i * V, NULL};
    CHECK_CODE(xl_forward(m, ws, &s, 1, &err), XL_OK);
  }
  double worst = 0;
  for (size_t k = 0; k < (size_t)N * V; k++)
    if (fabs(rows[k] - step[k]) > worst) worst = fabs(rows[k] - step[k]);
  CHECK(worst <= 1e-4);
  int exact = 1;
  for (int i = 0; i < N - 1; i++) exact &= tlp[i] == rows[(size_t)i * V + (size_t)tg[i]];
  CHECK(exact);
  CHECK(tlp[N - 1] == 12345.0f);
  CHECK(memcmp(last, rows + (size_t)(N - 1) * V, sizeof last) == 0);

  /* batched with another item: the same bits */
  int32_t one = 5;
  float other_last[V];
  xl_feed items[2] = {{other, &one, 1, NULL, NULL, other_last, NULL},
                      {c, t, N, tg, tlp, NULL, rows2}};
  CHECK_CODE(xl_forward(m, ws, items, 2, &err), XL_OK);
  CHECK(memcmp(rows, rows2, sizeof(float) * N * V) == 0);

  /* a target below -1 is refused, the state untouched */
  uint64_t fed = xl_state_tokens_fed(a);
  tg[3] = -2;
  xl_feed bad = {a, t, N, tg, tlp, NULL, rows};
  CHECK_CODE(xl_forward(m, ws, &bad, 1, &err), XL_TOKEN);
  CHECK(xl_state_tokens_fed(a) == fed);

  free(rows);
  free(rows2);
  free(step);
  xl_state_free(a);
  xl_state_free(b);
  xl_state_free(c);
  xl_state_free(other);
  xl_workspace_free(ws);
  xl_model_free(m);
}

int main(void) {
  RUN(test_rows_match_decoding);
  return tl_summary();
}
