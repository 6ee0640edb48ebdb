/*
 * test_core_rows.c: the forward pass's per-row outputs used for prompt scoring
 * (xl_feed.row_logprobs): each row's distribution equals the one-token decoding path's
 * distribution at that position; target_logprobs are exactly the rows' entries at the targets;
 * a target of -1 leaves its entry alone; last_logprobs is exactly the last row; batched with
 * another item the rows are bit for bit the same; a target below -1 is refused. With an
 * adaptive softmax (tail clusters with projections), decode steps batched more than the tail
 * products' run of rows, one of them asking for a target only, give every step's distribution
 * bit for bit as alone (each weight type), and the target the entry of its distribution. A
 * short block continuing a memory gives the same bits with its queries grouped four to a pass
 * as each alone, its window sliding or not, and within 1e-4 of decoding over an F32 memory.
 * The last layer runs its output projection and feed-forward on the rows that need log-probs
 * only: a prompt asking for its last distribution alone (or for nothing), alone or batched
 * with others, gives that distribution and leaves its state bit for bit as one asking for
 * every row's.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h" /* xl_attn_set_query_group: the ungrouped reference */
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

/* 1 when the two states serialize to the same bytes. */
static int same_state(const xl_state *x, const xl_state *y) {
  uint8_t *bx = NULL, *by = NULL;
  size_t nx = 0, ny = 0;
  xl_error err;
  int same = !xl_state_serialize(x, &bx, &nx, &err) && !xl_state_serialize(y, &by, &ny, &err) &&
             nx == ny && memcmp(bx, by, nx) == 0;
  free(bx);
  free(by);
  return same;
}

/* The last layer keeps only the rows that need log-probs: a prompt chunk asking for its last
 * distribution (or nothing) gives the last row of the same chunk's row distributions, bit for
 * bit, and the same state, alone and batched between a chunk asking for nothing, a decode
 * step, and a chunk asking for every row. */
static void test_last_layer_output_rows(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  xl_model *m = load(&spec, "outrows");
  CHECK(m != NULL);
  if (!m) return;
  xl_workspace *ws;
  xl_state *ref, *lone, *none, *mid, *dec, *dec_ref, *all;
  xl_error err;
  CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
  xl_state **st[] = {&ref, &lone, &none, &mid, &dec, &dec_ref, &all};
  for (size_t i = 0; i < sizeof st / sizeof *st; i++)
    CHECK_CODE(xl_state_new(m, st[i], &err), XL_OK);
  int32_t t[N];
  for (int i = 0; i < N; i++) t[i] = (int32_t)((i * 53 + 7) % V);
  const int n = 17; /* a chunk: several rows, one output */
  float *rows = malloc(sizeof(float) * N * V), *rows_all = malloc(sizeof(float) * N * V);
  float last[V], last_mid[V], dec_last[V], dec_ref_last[V];
  for (int round = 0; round < 2; round++) { /* an empty memory, then one holding a chunk */
    const int32_t *chunk = t + round * n;
    xl_feed r = {ref, chunk, n, NULL, NULL, NULL, rows};
    CHECK_CODE(xl_forward(m, ws, &r, 1, &err), XL_OK);
    xl_feed f = {lone, chunk, n, NULL, NULL, last, NULL};
    CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
    CHECK(memcmp(last, rows + (size_t)(n - 1) * V, sizeof last) == 0);
    CHECK(same_state(lone, ref));
    xl_feed d = {dec_ref, chunk + 3, 1, NULL, NULL, dec_ref_last, NULL};
    CHECK_CODE(xl_forward(m, ws, &d, 1, &err), XL_OK);
    /* batched: nothing wanted, last only, a decode step, every row */
    xl_feed items[4] = {{none, chunk, n, NULL, NULL, NULL, NULL},
                        {mid, chunk, n, NULL, NULL, last_mid, NULL},
                        {dec, chunk + 3, 1, NULL, NULL, dec_last, NULL},
                        {all, chunk, n, NULL, NULL, NULL, rows_all}};
    CHECK_CODE(xl_forward(m, ws, items, 4, &err), XL_OK);
    CHECK(memcmp(last_mid, rows + (size_t)(n - 1) * V, sizeof last_mid) == 0);
    CHECK(memcmp(rows_all, rows, sizeof(float) * (size_t)n * V) == 0);
    CHECK(memcmp(dec_last, dec_ref_last, sizeof dec_last) == 0);
    CHECK(same_state(none, ref));
    CHECK(same_state(mid, ref));
    CHECK(same_state(all, ref));
    CHECK(same_state(dec, dec_ref));
  }
  free(rows);
  free(rows_all);
  for (size_t i = 0; i < sizeof st / sizeof *st; i++) xl_state_free(*st[i]);
  xl_workspace_free(ws);
  xl_model_free(m);
}

/* A short block continuing a memory (a chat turn's prompt: the attention's small-block path,
 * its queries four to a pass over the memory's rows) gives every row's distribution and the
 * state bit for bit as the same block with each query alone (xl_attn_set_query_group(1)), and
 * over an F32 memory within 1e-4 of the same tokens decoded one at a time (a narrow memory's
 * decoding reads the block's own keys back narrowed, the block reads them as computed): with
 * a memory filling up (the window's first key moving within the block) and a full, wrapped one
 * under same_length (every query its own first key), in blocks of 2-32 queries, over each
 * memory dtype, at d_head 16 and 64. */
static void test_short_block_grouping(void) {
  tl_model_spec specs[2] = {TL_MODEL_SPEC_DEFAULT, TL_MODEL_SPEC_DEFAULT};
  specs[1].d_head = 64;
  const xl_kv_dtype dtypes[3] = {XL_KV_F32, XL_KV_BF16, XL_KV_INT8};
  const int before[2] = {20, 45}; /* mem_len 24: filling across the block; full and wrapped */
  const int blocks[6] = {2, 4, 5, 9, 17, 32};
  float *rows = malloc(sizeof(float) * 32 * V), *alone = malloc(sizeof(float) * 32 * V);
  float *step = malloc(sizeof(float) * 32 * V);
  int32_t t[45 + 32];
  tl_tokens(t, 45 + 32, 11);
  for (int k = 0; k < 2; k++) {
    const char *dir = tl_tmpdir("short");
    CHECK(tl_write_model(dir, &specs[k]) == 0);
    for (int d = 0; d < 3; d++) {
      xl_model *m = tl_load_model(dir, dtypes[d]);
      CHECK(m != NULL);
      if (!m) continue;
      xl_workspace *ws;
      xl_error err;
      CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
      int differ = 0, far = 0;
      for (int p = 0; p < 2; p++)
        for (int b = 0; b < 6; b++) {
          const int n = blocks[b];
          xl_state *s4, *s1, *sd;
          CHECK_CODE(xl_state_new(m, &s4, &err), XL_OK);
          xl_feed f = {s4, t, before[p], NULL, NULL, NULL, NULL};
          CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
          CHECK_CODE(xl_state_clone(s4, &s1, &err), XL_OK);
          CHECK_CODE(xl_state_clone(s4, &sd, &err), XL_OK);
          xl_feed grouped = {s4, t + before[p], n, NULL, NULL, NULL, rows};
          CHECK_CODE(xl_forward(m, ws, &grouped, 1, &err), XL_OK);
          xl_attn_set_query_group(1);
          xl_feed single = {s1, t + before[p], n, NULL, NULL, NULL, alone};
          CHECK_CODE(xl_forward(m, ws, &single, 1, &err), XL_OK);
          xl_attn_set_query_group(4);
          for (int i = 0; i < n; i++) {
            xl_feed s = {sd, t + before[p] + i, 1, NULL, NULL, step + (size_t)i * V, NULL};
            CHECK_CODE(xl_forward(m, ws, &s, 1, &err), XL_OK);
          }
          double worst = 0;
          for (size_t e = 0; e < (size_t)n * V; e++)
            if (fabs(rows[e] - step[e]) > worst) worst = fabs(rows[e] - step[e]);
          if (memcmp(rows, alone, sizeof(float) * (size_t)n * V) || !tl_same_state(s4, s1)) {
            differ++;
            fprintf(stderr, "  d_head %d, memory %s, %d before, block of %d: grouping differs\n",
                    specs[k].d_head, xl_kv_dtype_name(dtypes[d]), before[p], n);
          }
          if (dtypes[d] == XL_KV_F32 && worst > 1e-4) {
            far++;
            fprintf(stderr, "  d_head %d, %d before, block of %d: %g from decoding\n",
                    specs[k].d_head, before[p], n, worst);
          }
          xl_state_free(s4);
          xl_state_free(s1);
          xl_state_free(sd);
        }
      CHECK(differ == 0);
      CHECK(far == 0);
      xl_workspace_free(ws);
      xl_model_free(m);
    }
  }
  free(rows);
  free(alone);
  free(step);
}

#define STEPS 21 /* more than the tail products' run of 16 rows */
#define TARGET_ONLY 7 /* the step that asks for a target in a tail cluster, no distribution */

static void batched_tails(xl_weights weights) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  spec.adaptive = 1;
  const char *dir = tl_tmpdir("tails");
  CHECK(tl_write_model(dir, &spec) == 0);
  xl_load_options o = XL_LOAD_OPTIONS_DEFAULT;
  o.weights = weights;
  xl_model *m = NULL;
  xl_workspace *ws = NULL;
  xl_error err;
  CHECK_CODE(xl_model_load(dir, &o, &m, &err), XL_OK);
  if (!m) return;
  CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
  xl_state *st[STEPS], *alone[STEPS];
  int32_t tok[STEPS], target = V - 3; /* in the last tail cluster */
  float *batched = malloc(sizeof(float) * STEPS * V), *single = malloc(sizeof(float) * STEPS * V);
  float target_lp = 0.0f;
  xl_feed items[STEPS];
  for (int b = 0; b < STEPS; b++) { /* each session its own prompt */
    int32_t prompt[12];
    const int n = 6 + b % 6;
    for (int i = 0; i < n; i++) prompt[i] = (int32_t)((b * 53 + i * 29 + 7) % V);
    CHECK_CODE(xl_state_new(m, &st[b], &err), XL_OK);
    xl_feed f = {st[b], prompt, n, NULL, NULL, NULL, NULL};
    CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
    CHECK_CODE(xl_state_clone(st[b], &alone[b], &err), XL_OK);
    tok[b] = (int32_t)((b * 97 + 3) % V);
    items[b] = (xl_feed){st[b], &tok[b], 1, NULL, NULL, batched + (size_t)b * V, NULL};
  }
  items[TARGET_ONLY] = (xl_feed){st[TARGET_ONLY], &tok[TARGET_ONLY], 1, &target, &target_lp, NULL,
                                 NULL};
  CHECK_CODE(xl_forward(m, ws, items, STEPS, &err), XL_OK);
  for (int b = 0; b < STEPS; b++) {
    xl_feed f = {alone[b], &tok[b], 1, NULL, NULL, single + (size_t)b * V, NULL};
    CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
  }
  int same = 1;
  for (int b = 0; b < STEPS; b++)
    if (b != TARGET_ONLY)
      same &= !memcmp(batched + (size_t)b * V, single + (size_t)b * V, sizeof(float) * V);
  CHECK(same);
  CHECK(target_lp == single[(size_t)TARGET_ONLY * V + (size_t)target]);
  double total = 0;
  for (int k = 0; k < V; k++) total += exp((double)single[k]);
  CHECK_NEAR(total, 1.0, 1e-4);
  for (int b = 0; b < STEPS; b++) {
    xl_state_free(st[b]);
    xl_state_free(alone[b]);
  }
  free(batched);
  free(single);
  xl_workspace_free(ws);
  xl_model_free(m);
}

static void test_batched_tails_f32(void) { batched_tails(XL_WEIGHTS_F32); }
static void test_batched_tails_int8(void) { batched_tails(XL_WEIGHTS_INT8); }
static void test_batched_tails_int4(void) { batched_tails(XL_WEIGHTS_INT4); }
static void test_batched_tails_bf16(void) { batched_tails(XL_WEIGHTS_BF16); }

int main(void) {
  RUN(test_rows_match_decoding);
  RUN(test_last_layer_output_rows);
  RUN(test_short_block_grouping);
  RUN(test_batched_tails_f32);
  RUN(test_batched_tails_int8);
  RUN(test_batched_tails_int4);
  RUN(test_batched_tails_bf16);
  return tl_summary();
}
