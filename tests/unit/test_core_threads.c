/*
 * test_core_threads.c: a workspace's threads (xl_workspace_set_threads, core/pool.c): forward
 * passes on 2 and 3 threads give, bit for bit, the log-probs (every row's whole distribution)
 * and the memories of 1 thread, for every weight type (f32, bf16, int8, int4) and every memory
 * dtype (f32, bf16, int8), on the kernel family in use (ctest runs it once per family): a
 * prefill, decode steps of several sessions batched together, and a batch mixing a block of
 * new tokens with decode steps. The model's sizes make every product split (5 heads over 2 and
 * 3 threads: uneven shares). Also: thread counts outside [1, XL_MAX_THREADS] refused, the count
 * changed between calls, and a pool started and stopped many times (ThreadSanitizer runs this).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pool.h"
#include "testlib.h"

#define NS 4     /* sessions */
#define NTOK 36  /* tokens per session (mem_len 24: the rings wrap) */
#define FIRST 11 /* prefill length */
#define V 256

static const char *model_dir(void) {
  static const char *dir;
  if (!dir) {
    /* d_model 256, 2 layers, 5 heads x 32, d_inner 448, mem_len 24, same_length, pre-LN off */
    tl_model_spec spec = {256, 2, 5, 32, 448, 24, 1, 0, V, 77u, 0, 0};
    dir = tl_tmpdir("threads");
    if (tl_write_model(dir, &spec)) dir = NULL;
  }
  return dir;
}

typedef struct {
  float lp[NS][NTOK][V]; /* each fed position's whole distribution */
  uint8_t *blob[NS];     /* the memories at the end */
  size_t blob_len[NS];
} run_out;

static void run_out_free(run_out *o) {
  for (int s = 0; s < NS; s++) free(o->blob[s]);
}

/* Session 0 is fed a block of FIRST tokens while sessions 1.. take decode steps, all in one
 * batch; then everyone decodes in batches of NS. */
static int run(xl_model *m, int threads, run_out *o) {
  xl_error err;
  xl_workspace *ws = NULL;
  xl_state *st[NS] = {0};
  int32_t t[NS][NTOK];
  int ok = xl_workspace_new(m, &ws, &err) == XL_OK &&
           xl_workspace_set_threads(ws, threads, &err) == XL_OK &&
           xl_workspace_threads(ws) == threads;
  memset(o->lp, 0, sizeof o->lp);
  for (int s = 0; ok && s < NS; s++) {
    ok = xl_state_new(m, &st[s], &err) == XL_OK;
    tl_tokens(t[s], NTOK, 3u + (unsigned)s);
  }
  /* sessions 1..: a prefill of FIRST - 1 tokens each, batched */
  xl_feed f[NS];
  for (int s = 1; ok && s < NS; s++)
    f[s - 1] = (xl_feed){st[s], t[s], FIRST - 1, NULL, NULL, &o->lp[s][0][0], NULL};
  ok = ok && xl_forward(m, ws, f, NS - 1, &err) == XL_OK;
  /* the mixed batch: session 0's block beside the others' decode steps */
  f[0] = (xl_feed){st[0], t[0], FIRST, NULL, NULL, NULL, &o->lp[0][0][0]};
  for (int s = 1; s < NS; s++)
    f[s] = (xl_feed){st[s], t[s] + FIRST - 1, 1, NULL, NULL, NULL, &o->lp[s][FIRST - 1][0]};
  ok = ok && xl_forward(m, ws, f, NS, &err) == XL_OK;
  for (int i = FIRST; ok && i < NTOK; i++) {
    for (int s = 0; s < NS; s++)
      f[s] = (xl_feed){st[s], t[s] + i, 1, NULL, NULL, NULL, &o->lp[s][i][0]};
    ok = xl_forward(m, ws, f, NS, &err) == XL_OK;
  }
  for (int s = 0; s < NS; s++) {
    o->blob[s] = NULL;
    if (ok) ok = xl_state_serialize(st[s], &o->blob[s], &o->blob_len[s], &err) == XL_OK;
    xl_state_free(st[s]);
  }
  if (!ok) fprintf(stderr, "run (%d threads): %s\n", threads, err.message);
  xl_workspace_free(ws);
  return ok;
}

static void test_bit_identical_any_thread_count(void) {
  static const xl_weights W[] = {XL_WEIGHTS_F32, XL_WEIGHTS_BF16, XL_WEIGHTS_INT8, XL_WEIGHTS_INT4};
  static const xl_kv_dtype KV[] = {XL_KV_F32, XL_KV_BF16, XL_KV_INT8};
  CHECK(model_dir() != NULL);
  if (!model_dir()) return;
  run_out *one = malloc(sizeof *one), *many = malloc(sizeof *many);
  CHECK(one && many);
  for (int w = 0; one && many && w < 4; w++)
    for (int d = 0; d < 3; d++) {
      xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
      lo.weights = W[w];
      lo.kv_dtype = KV[d];
      xl_model *m = NULL;
      xl_error err;
      if (xl_model_load(model_dir(), &lo, &m, &err)) {
        fprintf(stderr, "load: %s\n", err.message);
        CHECK(0);
        continue;
      }
      CHECK(run(m, 1, one));
      float lo_lp = 0;
      for (int i = 0; i < V; i++) lo_lp = fminf(lo_lp, one->lp[1][NTOK - 1][i]);
      CHECK(lo_lp < -1.0f); /* real distributions were written */
      for (int n = 2; n <= 3; n++) {
        CHECK(run(m, n, many));
        int same = memcmp(one->lp, many->lp, sizeof one->lp) == 0;
        for (int s = 0; s < NS; s++)
          same &= one->blob_len[s] == many->blob_len[s] && one->blob[s] && many->blob[s] &&
                  !memcmp(one->blob[s], many->blob[s], one->blob_len[s]);
        if (!same)
          fprintf(stderr, "  weights %s, memory %s, %d threads: results differ from 1 thread\n",
                  xl_weights_name(W[w]), xl_kv_dtype_name(KV[d]), n);
        CHECK(same);
        run_out_free(many);
      }
      run_out_free(one);
      xl_model_free(m);
    }
  free(one);
  free(many);
}

static void test_thread_counts_checked(void) {
  xl_error err;
  xl_workspace *ws = NULL;
  CHECK_CODE(xl_workspace_new(NULL, &ws, &err), XL_OK);
  CHECK_CODE(xl_workspace_set_threads(ws, 0, &err), XL_ARG);
  CHECK(strstr(err.message, "threads") != NULL);
  CHECK_CODE(xl_workspace_set_threads(ws, XL_MAX_THREADS + 1, &err), XL_ARG);
  CHECK(xl_workspace_threads(ws) == 1);
  CHECK_CODE(xl_workspace_set_threads(ws, 3, &err), XL_OK);
  CHECK(xl_workspace_threads(ws) == 3);
  CHECK_CODE(xl_workspace_set_threads(ws, 2, &err), XL_OK);
  CHECK(xl_workspace_threads(ws) == 2);
  CHECK_CODE(xl_workspace_set_threads(ws, 1, &err), XL_OK);
  CHECK(xl_workspace_threads(ws) == 1);
  xl_workspace_free(ws);
}

/* Every task of every job runs exactly once, each on a valid thread index, and its writes
 * are seen by the caller; jobs of 1 task, of fewer tasks than threads and of many; pools
 * started and stopped in a row (helpers asleep or spinning) all join. */
#define TASKS 37
typedef struct {
  int hits[TASKS];
  int bad_thread;
  int n_threads;
} count_job;

static void count_task(void *ctx, int t, int thread) {
  count_job *j = ctx;
  j->hits[t]++;
  if (thread < 0 || thread >= j->n_threads) j->bad_thread = 1;
}

static void test_pool_runs_every_task(void) {
  for (int n = 1; n <= 4; n++) {
    xl_pool *p = NULL;
    xl_error err;
    CHECK_CODE(xl_pool_new(n, &p, &err), XL_OK);
    CHECK(xl_pool_threads(p) == n);
    static const int SIZES[] = {1, 2, 3, TASKS};
    for (int k = 0; k < 4; k++) {
      count_job j;
      memset(&j, 0, sizeof j);
      j.n_threads = n;
      for (int r = 0; r < 300; r++) xl_pool_run(p, count_task, &j, SIZES[k]);
      int ok = !j.bad_thread;
      for (int t = 0; t < TASKS; t++) ok &= j.hits[t] == (t < SIZES[k] ? 300 : 0);
      CHECK(ok);
    }
    xl_pool_free(p);
  }
}

int main(void) {
  RUN(test_thread_counts_checked);
  RUN(test_pool_runs_every_task);
  RUN(test_bit_identical_any_thread_count);
  return tl_summary();
}
