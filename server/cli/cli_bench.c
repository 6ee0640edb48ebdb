/*
 * cli_bench.c: `xlserve bench`: speed of the core, measured side by side in one run and
 * printed as one table: the run's limits (below); one-token decoding with a
 * full memory at batches 1, 4, 16, 32 and 64 up to --max-batch (aggregate tokens/s, and the
 * ratio to batch 1); segment evaluation; and, unless --no-recurrence, the paper's Table 9
 * comparison of recurrence (segment evaluation with memory, each query attending to L
 * positions) against recompute (the vanilla model: every prediction re-runs the last L tokens
 * with no memory) at attention lengths 800, 1800, 2800 and 3800.
 * Each rate is set against a limit measured in the same run (bench_limits): a decode step's
 * bytes (the weights + every session's full memory) at the read bandwidth of one thread
 * streaming a buffer larger than the cache, and segment evaluation's useful FLOPs at the faster
 * of OpenBLAS's SGEMM and xlserve's own F32 GEMM (named); 'of limit' is the share reached. The
 * BLAS core in use is printed at the top. Every row names the CPU
 * path (kernel family) it ran on; --cpu avx512,avx2,portable measures several paths in one run,
 * one block each (its own limits first, so each share compares like with like).
 * --weights bf16,int8 measures instead, per path, decode at batch 1 and 16 and segment
 * evaluation with the model loaded once per weight type, F32 first, each type's rate beside
 * F32's as a ratio, and each median's share of its limit; with --kv-dtype, each weight type paired with the memory dtype at its place
 * in that list. That comparison runs in --rounds rounds, every type measured once per round
 * one right after another, and gives medians of the rates and of the rounds' ratios, with the
 * ratios' range: ratios of rates taken seconds apart survive a shared machine's drift.
 * --thread-counts 1,2 measures instead one model (--weights W, --kv-dtype D: one type each)
 * decoding at batch 1 (and 16) on each count of forward-pass threads (xl_workspace_set_threads),
 * in rounds the same way, each count's rate as a ratio to the first count's, beside the read
 * bandwidth of as many threads streaming at once.
 * Main thread (and, for the bandwidth probe and the forward passes, the threads they start).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "cli.h"
#include "cli_bandwidth.h"
#include "cli_common.h"
#include "util.h"

typedef struct {
  const char *model_dir;
  int threads;
  double min_seconds; /* per measurement */
  int quick;          /* smaller recompute samples (tests) */
  int max_batch;      /* largest decode batch measured */
  int recurrence;     /* run the Table 9 comparison */
  char cpus[128];     /* --cpu: comma-separated paths; empty = XLSERVE_CPU, else auto */
  xl_kv_dtype kv[XL_KV_DTYPE_COUNT]; /* --kv-dtype: memory dtypes compared, f32 first */
  int n_kv;           /* 0: no memory dtype table */
  int decode_rows;    /* 0: --kv-only (just the memory dtype table after the SGEMM) */
  int thread_clock;   /* --clock thread: this thread's CPU time instead of wall time */
  char weights[64];   /* --weights: comma-separated types compared with f32; empty = off */
  int mem_len;        /* --mem-len: override for the weights comparison (-1 = config's) */
  int rounds;         /* --rounds: rounds of the weights comparison */
  int thread_counts[8]; /* --thread-counts: forward-pass threads compared (0: off) */
  int n_thread_counts;
} bench_opts;

/* Seconds on the clock the measurements use. The thread's CPU time (--clock thread, with
 * --threads 1: every kernel runs on this thread) leaves out the time other processes of a
 * shared machine take the core away; wall time is the default. */
static double bench_now(const bench_opts *o) {
  return o->thread_clock ? cli_thread_cpu_now() : now_mono();
}

/* GFLOP/s of a square n x n x n F32 GEMM: OpenBLAS's SGEMM (own = 0) or xlserve's own kernel
 * of the path in use (own = 1); the faster is the run's compute ceiling. */
static double bench_sgemm(const bench_opts *o, int own) {
  const int n = 1024;
  float *a = malloc((size_t)n * n * sizeof *a), *b = malloc((size_t)n * n * sizeof *b),
        *c = malloc((size_t)n * n * sizeof *c);
  double rate = -1;
  xl_f32_weights *w = NULL;
  if (a && b && c) {
    for (size_t i = 0; i < (size_t)n * n; i++) {
      a[i] = (float)(i % 13) * 0.01f;
      b[i] = (float)(i % 7) * 0.02f;
    }
    w = own ? xl_f32_weights_new(b, n, n) : NULL;
  }
  if (a && b && c && (w || !own)) {
    int reps = -1; /* the first is a warm-up */
    double t0 = 0, el;
    do {
      if (own) xl_matmul_f32(a, n, n, w, c, n);
      else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
      if (++reps == 0) t0 = bench_now(o);
    } while ((el = bench_now(o) - t0) < o->min_seconds / 2 || reps < 3);
    rate = 2.0 * n * n * n * reps / el / 1e9;
  }
  xl_f32_weights_free(w);
  free(a);
  free(b);
  free(c);
  return rate;
}

/* The run's limits, measured beside its rates: the read bandwidth of one thread streaming
 * through a buffer far larger than the last-level cache (bytes/s), and the faster of the two
 * F32 GEMMs (GFLOP/s; gemm_name says which). */
typedef struct {
  double read_bw;
  size_t probe_bytes;
  double blas_gflops, own_gflops, gemm_gflops;
  char gemm_name[96];
} bench_limits;

/* Measures the limits (the GEMMs on the path in use); 0, or 1 when memory ran out. */
static int bench_limits_measure(const bench_opts *o, bench_limits *l) {
  l->probe_bytes = cli_probe_bytes();
  l->read_bw = cli_read_bandwidth(l->probe_bytes, 3, o->thread_clock);
  l->blas_gflops = bench_sgemm(o, 0);
  l->own_gflops = bench_sgemm(o, 1);
  if (l->read_bw <= 0 || l->blas_gflops <= 0 || l->own_gflops <= 0) {
    fprintf(stderr, "xlserve bench: out of memory measuring the limits\n");
    return 1;
  }
  int blas = l->blas_gflops >= l->own_gflops;
  l->gemm_gflops = blas ? l->blas_gflops : l->own_gflops;
  if (blas) snprintf(l->gemm_name, sizeof l->gemm_name, "OpenBLAS SGEMM, core %s", xl_blas_core());
  else snprintf(l->gemm_name, sizeof l->gemm_name, "xlserve's %s GEMM", xl_cpu_path());
  return 0;
}

/* Prints the limits' rows (the columns of bench_path's table). */
static void bench_limits_print(const bench_limits *l) {
  const char *path = xl_cpu_path();
  char label[96];
  snprintf(label, sizeof label, "F32 GEMM 1024^3, OpenBLAS SGEMM (core %s)", xl_blas_core());
  printf("%-9s %-58s %12s %10s %9.1f %9s %10s %s\n", path, label, "", "", l->blas_gflops, "", "",
         l->gemm_gflops == l->blas_gflops ? "<- compute limit" : "");
  snprintf(label, sizeof label, "F32 GEMM 1024^3, xlserve's own kernel (%s)", path);
  printf("%-9s %-58s %12s %10s %9.1f %9s %10s %s\n", path, label, "", "", l->own_gflops, "", "",
         l->gemm_gflops == l->blas_gflops ? "" : "<- compute limit");
  snprintf(label, sizeof label, "read bandwidth: 1 thread sums %zu MiB, best of 3",
           l->probe_bytes >> 20);
  printf("%-9s %-58s %12s %10s %9s %9s %10s %.2f GB/s <- memory limit\n", path, label, "", "", "",
         "", "", l->read_bw / 1e9);
}

/* The bytes a decode step reads once whatever its batch: the weights and the positional table
 * (each session adds its memory, xl_model_state_bytes). */
static double step_fixed_bytes(const xl_model *m) {
  return (double)xl_model_weight_bytes(m) + (double)xl_model_decode_table_bytes(m);
}

/* Useful floating-point operations to process one token that attends to `attended` positions:
 * per layer the q/k/v and output projections, the three attention products (content scores,
 * position scores, weighted values) over the attended positions, the feed-forward; plus the
 * input projection and the whole output layer (every cluster, as when log-probs are returned;
 * exact for plain softmax, an upper bound for adaptive softmax scoring targets only).
 * The positional projections W_r R are cached per model: no FLOPs here (their bytes are in
 * step_fixed_bytes). */
static double flops_per_token(const xl_config *c, double attended) {
  double d = c->d_model, hd = (double)c->n_head * c->d_head;
  double layer = 2 * d * 3 * hd + 2 * hd * d + 3 * 2 * hd * attended + 2 * 2 * d * c->d_inner;
  int n_clusters = c->n_cutoffs, lo = 0, has_proj = c->div_val > 1 || c->d_embed != c->d_model;
  double io = has_proj ? 2 * d * c->d_embed : 0; /* input projection (cluster 0's width) */
  double de = c->d_embed;                        /* cluster i's width: d_embed / div_val^i */
  for (int i = 0; i <= n_clusters; i++) {
    int hi = i < n_clusters ? c->cutoffs[i] : c->vocab_size;
    io += (has_proj ? 2 * d * de : 0) + 2 * de * (hi - lo + (i == 0 ? n_clusters : 0));
    lo = hi;
    if (c->div_val > 1) de = (int)(de / c->div_val);
  }
  return c->n_layer * layer + io;
}

/* A workspace of m on o->threads forward-pass threads (0 or 1: this one); 1 on failure. */
static int bench_ws_new(xl_model *m, const bench_opts *o, xl_workspace **ws, xl_error *err) {
  if (xl_workspace_new(m, ws, err)) return 1;
  return o->threads > 1 && xl_workspace_set_threads(*ws, o->threads, err);
}

/* Aggregate tokens/s of one-token decoding of the `batch` sessions st[] stepped together (one
 * forward per step, log-probs out for each); their memories stay full (a ring). */
static double decode_steps(xl_model *m, xl_workspace *ws, xl_state **st, int batch,
                           const bench_opts *o, xl_rng *rng) {
  const xl_config *c = xl_model_config(m);
  xl_error err;
  double rate = -1;
  int n_tok = c->vocab_size < 4096 ? c->vocab_size : 4096;
  int32_t *t = malloc((size_t)n_tok * sizeof *t), *step = malloc((size_t)batch * sizeof *step);
  float *lp = malloc((size_t)batch * c->vocab_size * sizeof *lp); /* [batch, vocab] */
  xl_feed *items = calloc((size_t)batch, sizeof *items);
  if (!t || !step || !lp || !items) goto out;
  cli_random_tokens(t, n_tok, c->vocab_size, rng);
  int steps = 0;
  double t0 = bench_now(o), el;
  do {
    for (int b = 0; b < batch; b++) {
      step[b] = t[(steps + 7 * b) % n_tok];
      items[b] = (xl_feed){st[b], &step[b], 1, NULL, NULL, lp + (size_t)b * c->vocab_size, NULL};
    }
    if (xl_forward(m, ws, items, batch, &err)) goto out;
    steps++;
  } while ((el = bench_now(o) - t0) < o->min_seconds || steps < 4);
  rate = (double)steps * batch / el;
out:
  free(items);
  free(t);
  free(step);
  free(lp);
  return rate;
}

/* Aggregate tokens/s of one-token decoding for `batch` sessions stepped together, every memory
 * full: each session a copy of `full` (a state of m with a full memory; NULL: one is made). */
static double bench_decode(xl_model *m, const xl_state *full, int batch, const bench_opts *o,
                           xl_rng *rng) {
  xl_workspace *ws = NULL;
  xl_state *made = full ? NULL : cli_full_state("bench", m, rng);
  xl_error err;
  double rate = -1;
  xl_state **st = calloc((size_t)batch, sizeof *st);
  if (!full) full = made;
  if (!full || !st || bench_ws_new(m, o, &ws, &err)) goto out;
  for (int b = 0; b < batch; b++)
    if (xl_state_clone(full, &st[b], &err)) goto out;
  rate = decode_steps(m, ws, st, batch, o, rng);
out:
  if (st)
    for (int b = 0; b < batch; b++) xl_state_free(st[b]);
  free(st);
  xl_state_free(made);
  xl_workspace_free(ws);
  return rate;
}

/* The session memory dtypes side by side: per dtype (a model loaded with it), bytes per
 * session and decode rates at each batch, every session a copy of one full memory (made once
 * in F32, converted into each dtype by a state blob round trip), each rate beside F32's. */
static int bench_kv_dtypes(xl_model *m, const bench_opts *o, xl_rng *rng) {
  static const int BATCHES[] = {1, 4, 16, 32, 64};
  const char *path = xl_cpu_path();
  int nb = 0;
  while (nb < 5 && BATCHES[nb] <= o->max_batch) nb++;
  xl_state *full32 = cli_full_state("bench", m, rng);
  uint8_t *blob = NULL;
  size_t blob_len = 0;
  xl_error err;
  if (!full32 || xl_state_serialize(full32, &blob, &blob_len, &err)) {
    xl_state_free(full32);
    return 1;
  }
  printf("\nsession memory dtypes on cpu path %s (decode, memory full, aggregate tokens/s; each\n"
         "beside f32 in this run)\n%-9s %-5s %14s %12s", path, "cpu path", "kv", "bytes/session",
         "bytes/token");
  for (int i = 0; i < nb; i++) printf(" %9s%-3d %6s", "batch ", BATCHES[i], "x f32");
  printf("\n");
  double base[5] = {0};
  int rc = 0;
  for (int d = 0; d < o->n_kv && !rc; d++) {
    xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
    lo.kv_dtype = o->kv[d];
    xl_model *md = cli_load_model("bench", o->model_dir, &lo);
    xl_state *full = NULL;
    if (!md || xl_state_deserialize(md, blob, blob_len, &full, &err)) {
      if (md) fprintf(stderr, "xlserve bench: %s\n", err.message);
      xl_model_free(md);
      rc = 1;
      break;
    }
    printf("%-9s %-5s %14zu %12zu", path, xl_kv_dtype_name(o->kv[d]), xl_model_state_bytes(md),
           xl_model_state_bytes_per_token(md));
    fflush(stdout);
    for (int i = 0; i < nb && !rc; i++) {
      double r = bench_decode(md, full, BATCHES[i], o, rng);
      if (r < 0) rc = 1;
      if (o->kv[d] == XL_KV_F32) base[i] = r;
      if (base[i] > 0) printf(" %12.1f %5.2fx", r, r / base[i]);
      else printf(" %12.1f %6s", r, "");
      fflush(stdout);
    }
    printf("\n");
    xl_state_free(full);
    xl_model_free(md);
  }
  free(blob);
  xl_state_free(full32);
  return rc;
}

#define SEGMENT_POOL 8 /* segments of distinct random tokens scored in turn */

/* Tokens/s of segment evaluation: segments of tgt_len from t[0, SEGMENT_POOL * tgt_len + 1)
 * scored against their next tokens, continuing st (its memory warm). */
static double segment_steps(xl_model *m, xl_workspace *ws, xl_state *st, const int32_t *t,
                            int tgt_len, const bench_opts *o) {
  xl_error err;
  float *lp = malloc((size_t)tgt_len * sizeof *lp); /* [tgt_len] */
  long tokens = 0;
  int seg = 0;
  double rate = -1, t0 = bench_now(o), el;
  if (!lp) return -1;
  do {
    const int32_t *in = t + (seg % SEGMENT_POOL) * tgt_len;
    xl_feed f = {st, in, tgt_len, in + 1, lp, NULL, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) goto out;
    tokens += tgt_len;
    seg++;
  } while ((el = bench_now(o) - t0) < o->min_seconds || seg < 2);
  rate = tokens / el;
out:
  free(lp);
  return rate;
}

/* Tokens/s of segment evaluation: segments of tgt_len scored against targets, memory warm. */
static double bench_segments(xl_model *m, int tgt_len, const bench_opts *o, xl_rng *rng) {
  const xl_config *c = xl_model_config(m);
  xl_state *st = NULL;
  xl_workspace *ws = NULL;
  xl_error err;
  double rate = -1;
  int n_warm = c->mem_len, pool = c->mem_len + SEGMENT_POOL * tgt_len + 1;
  int32_t *t = malloc((size_t)pool * sizeof *t);
  if (!t || xl_state_new(m, &st, &err) || bench_ws_new(m, o, &ws, &err)) goto out;
  cli_random_tokens(t, pool, c->vocab_size, rng);
  if (!cli_prefill("bench", m, ws, st, t, n_warm)) goto out;
  rate = segment_steps(m, ws, st, t + n_warm, tgt_len, o);
out:
  free(t);
  xl_state_free(st);
  xl_workspace_free(ws);
  return rate;
}

/* Tokens/s of the vanilla baseline: each prediction runs the last L tokens from scratch. */
static double bench_recompute(xl_model *m, int L, const bench_opts *o, xl_rng *rng) {
  const xl_config *c = xl_model_config(m);
  xl_state *st = NULL;
  xl_workspace *ws = NULL;
  xl_error err;
  double rate = -1;
  int32_t *t = malloc((size_t)(L + 64) * sizeof *t);
  float *lp = malloc((size_t)c->vocab_size * sizeof *lp);
  if (!t || !lp || xl_state_new(m, &st, &err) || bench_ws_new(m, o, &ws, &err)) goto out;
  cli_random_tokens(t, L + 64, c->vocab_size, rng);
  int preds = 0, min_preds = o->quick ? 1 : 2;
  double t0 = bench_now(o), el;
  do {
    xl_state_reset(st);
    xl_feed f = {st, t + preds % 64, L, NULL, NULL, lp, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) goto out;
    preds++;
  } while (((el = bench_now(o) - t0) < o->min_seconds && preds < 64) || preds < min_preds);
  rate = preds / el;
out:
  free(t);
  free(lp);
  xl_state_free(st);
  xl_workspace_free(ws);
  return rate;
}

/* One block of the table (SGEMM, decode, segments, then recurrence) on the path in use. */
static int bench_path(const bench_opts *o, int tgt_len, int first) {
  const char *cmd = "bench";
  xl_model *m = cli_load_model(cmd, o->model_dir, NULL);
  if (!m) return 1;
  const xl_config *c = xl_model_config(m);
  if (tgt_len == 0) tgt_len = c->tgt_len > 0 ? c->tgt_len : 128;
  xl_rng rng;
  xl_rng_seed(&rng, 1234);
  const char *path = xl_cpu_path();
  if (first)
    printf("xlserve bench: %s (n_layer %d, d_model %d, %d heads x %d, d_inner %d, vocab %d, "
           "mem_len %d), threads %d (forward pass and BLAS), %s\n",
           xl_model_dir(m), c->n_layer, c->d_model, c->n_head, c->d_head, c->d_inner,
           c->vocab_size, c->mem_len, o->threads,
           o->thread_clock ? "thread CPU time" : "wall-clock time");
  bench_limits lim;
  if (bench_limits_measure(o, &lim)) {
    xl_model_free(m);
    return 1;
  }
  if (first) {
    char blas[640];
    cli_blas_describe(blas, sizeof blas);
    printf("BLAS core %s\n", blas);
    printf("limits: decode rows, the bytes a step reads (weights, the positional table and every\n"
           "session's memory, full) at the read bandwidth measured below; segment rows, the\n"
           "useful FLOPs at the faster GEMM measured below; 'of limit' is the rate over that\n"
           "limit\n");
  }
  printf("\n%-9s %-58s %12s %10s %9s %9s %10s %8s\n", "cpu path", "", "tokens/s", "x batch 1",
         "GFLOP/s", "MB/step", "limit t/s", "of limit");
  bench_limits_print(&lim);
  static const int BATCHES[] = {1, 4, 16, 32, 64};
  const double wbytes = step_fixed_bytes(m), sbytes = (double)xl_model_state_bytes(m);
  double dec1 = 0, decode_flops = flops_per_token(c, c->mem_len + 1);
  for (int i = 0; i < 5 && BATCHES[i] <= o->max_batch && o->decode_rows; i++) {
    double d = bench_decode(m, NULL, BATCHES[i], o, &rng);
    if (d < 0) {
      xl_model_free(m);
      return 1;
    }
    if (i == 0) dec1 = d;
    char label[96];
    snprintf(label, sizeof label, "decode, batch %d, memory full (cached K/V), aggregate", BATCHES[i]);
    const double step = wbytes + BATCHES[i] * sbytes, limit = BATCHES[i] * lim.read_bw / step;
    printf("%-9s %-58s %12.1f %9.1fx %9.1f %9.1f %10.1f %7.0f%%\n", path, label, d, d / dec1,
           d * decode_flops / 1e9, step / 1e6, limit, 100 * d / limit);
    fflush(stdout);
  }
  if (o->n_kv && bench_kv_dtypes(m, o, &rng)) {
    xl_model_free(m);
    return 1;
  }
  if (!o->decode_rows) {
    xl_model_free(m);
    return 0;
  }
  double seg = bench_segments(m, tgt_len, o, &rng);
  /* attended positions per query: mem_len + 1 under same_length, else mem_len + i + 1 */
  double seg_flops = flops_per_token(c, c->mem_len + (c->same_length ? 1 : (tgt_len + 1) / 2.0));
  char label[96];
  snprintf(label, sizeof label, "segment evaluation (tgt_len %d, mem_len %d)", tgt_len, c->mem_len);
  const double seg_limit = lim.gemm_gflops * 1e9 / seg_flops;
  printf("%-9s %-58s %12.1f %10s %9.1f %9s %10.1f %7.0f%%\n", path, label, seg, "",
         seg * seg_flops / 1e9, "", seg_limit, 100 * seg / seg_limit);
  xl_model_free(m);
  if (seg < 0) return 1;
  if (!o->recurrence) return 0;

  static const int LENS[] = {800, 1800, 2800, 3800};
  static const double PAPER[] = {363, 773, 1409, 1874};
  printf("\nrecurrence vs recompute on cpu path %s (each query attends to L positions; recurrence\n"
         "= segments of %d with memory, same_length; recompute = the last L tokens re-run per\n"
         "prediction)\n",
         path, tgt_len);
  printf("%8s %18s %18s %10s %10s\n", "L", "recurrence tok/s", "recompute tok/s", "speedup",
         "paper");
  int rc = 0;
  for (int i = 0; i < 4; i++) {
    xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
    lo.mem_len = LENS[i];
    lo.same_length = 1;
    xl_model *ml = cli_load_model(cmd, o->model_dir, &lo);
    if (!ml) return 1;
    double rec = bench_segments(ml, tgt_len, o, &rng);
    double van = bench_recompute(ml, LENS[i], o, &rng);
    xl_model_free(ml);
    if (rec < 0 || van < 0) {
      rc = 1;
      break;
    }
    printf("%8d %18.1f %18.3f %9.0fx %9.0fx\n", LENS[i], rec, van, rec / van, PAPER[i]);
    fflush(stdout);
  }
  return rc;
}

/* What one weight type's measurements reuse from round to round: its model, a workspace,
 * WEIGHTS_BATCH sessions with full memories (decode at batch 1 steps the first) and a session
 * and token pool for segment evaluation. */
#define WEIGHTS_BATCH 16
#define WEIGHTS_TYPES 4
#define WEIGHTS_KINDS 3 /* decode batch 1, decode batch 16, segments */
typedef struct {
  xl_model *m;
  xl_workspace *ws;
  xl_state *dec[WEIGHTS_BATCH];
  xl_state *seg;
  int32_t *seg_tokens; /* [SEGMENT_POOL * tgt_len + 1] */
} weights_subject;

static void weights_subject_free(weights_subject *w) {
  for (int b = 0; b < WEIGHTS_BATCH; b++) xl_state_free(w->dec[b]);
  xl_state_free(w->seg);
  free(w->seg_tokens);
  xl_workspace_free(w->ws);
  xl_model_free(w->m);
  memset(w, 0, sizeof *w);
}

/* Sessions of w->m from `blob` (one full memory, made once in F32 and read into each model's
 * memory dtype): `batch` for decoding, one for segments. 0, or 1 with a message. */
static int weights_subject_ready(weights_subject *w, const uint8_t *blob, size_t blob_len,
                                 int batch, int tgt_len, xl_rng *rng) {
  const xl_config *c = xl_model_config(w->m);
  xl_error err;
  int n_tok = SEGMENT_POOL * tgt_len + 1;
  if (xl_workspace_new(w->m, &w->ws, &err) ||
      xl_state_deserialize(w->m, blob, blob_len, &w->seg, &err))
    goto fail;
  for (int b = 0; b < batch; b++)
    if (xl_state_clone(w->seg, &w->dec[b], &err)) goto fail;
  if (!(w->seg_tokens = malloc((size_t)n_tok * sizeof *w->seg_tokens))) {
    fprintf(stderr, "xlserve bench: out of memory\n");
    return 1;
  }
  cli_random_tokens(w->seg_tokens, n_tok, c->vocab_size, rng);
  return 0;
fail:
  fprintf(stderr, "xlserve bench: %s\n", err.message);
  return 1;
}

#define BENCH_MAX_ROUNDS 64

/* The weight types side by side on the path in use: decode batch 1 and 16, segments; F32 first
 * and every rate as a ratio to F32's. With --kv-dtype too, the weight type at place k of its
 * list runs with the memory dtype at place k of its own list (the last one repeating; f32
 * weights with f32 memory): --weights bf16,int8 --kv-dtype bf16,int8 compares f32+f32,
 * bf16+bf16 and int8+int8.
 * The speed of a shared machine drifts (here by up to 4x within minutes), so the comparison is
 * made in rounds: a round measures each kind once for every type, the types one right after
 * another (the first type rotating from round to round), and gives each type's ratio to F32 in
 * that round. The table gives each rate's median over the rounds, and each ratio's median over
 * the rounds with its lowest and highest: a slow spell moves the rates of one round, but the
 * ratios of a round are of rates measured seconds apart. Every round is printed too. */
static int bench_weights(const bench_opts *o, int tgt_len, int first) {
  static const char *const KIND[WEIGHTS_KINDS] = {"decode b1", "decode b16", "segments"};
  static const char *const RATE[WEIGHTS_KINDS] = {"decode b1 t/s", "decode b16 t/s", "segment t/s"};
  char list[80];
  snprintf(list, sizeof list, "f32,%s", o->weights);
  weights_subject w[WEIGHTS_TYPES];
  memset(w, 0, sizeof w);
  int n = 0, rc = 1, rounds = o->rounds;
  uint8_t *blob = NULL;
  size_t blob_len = 0;
  xl_error err;
  char *save = NULL;
  for (char *t = strtok_r(list, ",", &save); t && n < WEIGHTS_TYPES; t = strtok_r(NULL, ",", &save)) {
    xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
    lo.weights = (xl_weights)xl_weights_parse(t); /* checked before */
    lo.mem_len = o->mem_len;
    if (o->n_kv > 1) lo.kv_dtype = o->kv[n < o->n_kv ? n : o->n_kv - 1];
    int seen = 0;
    for (int k = 0; k < n; k++) seen |= xl_model_weights(w[k].m) == lo.weights;
    if (seen) continue;
    if (!(w[n].m = cli_load_model("bench", o->model_dir, &lo))) goto out;
    n++;
  }
  const xl_config *c = xl_model_config(w[0].m);
  int tl = tgt_len ? tgt_len : c->tgt_len > 0 ? c->tgt_len : 128, b16 = o->max_batch >= 16;
  xl_rng rng;
  xl_rng_seed(&rng, 1234);
  /* one full memory, in every model's dtype */
  xl_state *full = cli_full_state("bench", w[0].m, &rng);
  if (!full || xl_state_serialize(full, &blob, &blob_len, &err)) {
    if (full) fprintf(stderr, "xlserve bench: %s\n", err.message);
    xl_state_free(full);
    goto out;
  }
  xl_state_free(full);
  for (int i = 0; i < n; i++)
    if (weights_subject_ready(&w[i], blob, blob_len, b16 ? WEIGHTS_BATCH : 1, tl, &rng)) goto out;
  bench_limits lim;
  if (bench_limits_measure(o, &lim)) goto out;
  if (first) {
    char blas[640];
    cli_blas_describe(blas, sizeof blas);
    printf("BLAS core %s\n", blas);
  }
  if (first)
    printf("xlserve bench --weights: %s (n_layer %d, d_model %d, d_inner %d, vocab %d, mem_len "
           "%d), BLAS threads %d, %s, %d rounds of at least %.2g s per rate; each round measures\n"
           "every type one after another (the first rotating); the table: rates as the median of\n"
           "the rounds, x f32 as the median of the rounds' ratios [lowest, highest]\n",
           xl_model_dir(w[0].m), c->n_layer, c->d_model, c->d_inner, c->vocab_size, c->mem_len,
           o->threads, o->thread_clock ? "thread CPU time" : "wall-clock time", rounds,
           o->min_seconds);
  printf("limits (measured in this run): read bandwidth %.2f GB/s (1 thread sums %zu MiB, best of "
         "3); F32 GEMM %.1f GFLOP/s (%s; the other %.1f)\n",
         lim.read_bw / 1e9, lim.probe_bytes >> 20, lim.gemm_gflops, lim.gemm_name,
         lim.gemm_gflops == lim.blas_gflops ? lim.own_gflops : lim.blas_gflops);
  printf("%s weight kernels:", xl_cpu_path());
  for (int i = 0; i < n; i++)
    printf("%s %s %s", i ? "," : "", xl_weights_name(xl_model_weights(w[i].m)),
           xl_model_weights_kernel(w[i].m));
  printf("\n\n");
  double rate[BENCH_MAX_ROUNDS][WEIGHTS_TYPES][WEIGHTS_KINDS] = {{{0}}};
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < WEIGHTS_KINDS; k++) {
      if (k == 1 && !b16) continue;
      for (int j = 0; j < n; j++) {
        int i = (j + r) % n;
        double x = k == 2 ? segment_steps(w[i].m, w[i].ws, w[i].seg, w[i].seg_tokens, tl, o)
                          : decode_steps(w[i].m, w[i].ws, w[i].dec, k ? WEIGHTS_BATCH : 1, o, &rng);
        if (x < 0) goto out;
        rate[r][i][k] = x;
      }
      printf("%-9s round %2d %-10s t/s:", xl_cpu_path(), r + 1, KIND[k]);
      for (int i = 0; i < n; i++) {
        printf("  %s+%s %.2f", xl_weights_name(xl_model_weights(w[i].m)),
               xl_kv_dtype_name(xl_model_kv_dtype(w[i].m)), rate[r][i][k]);
        if (i) printf(" (%.2fx)", rate[r][i][k] / rate[r][0][k]);
      }
      printf("\n");
      fflush(stdout);
    }
  printf("\n%-9s %-7s %-5s %7s", "cpu path", "weights", "kv", "MiB");
  for (int k = 0; k < WEIGHTS_KINDS; k++) printf(" %14s %-18s", RATE[k], "x f32 [low, high]");
  printf(" %9s %9s %9s %9s %9s\n", "b1 MB", "b1 limit", "b16 MB", "b16 limit", "seg GEMM");
  /* per type: the bytes of a decode step at batch 1 and 16 (weights + memories) and the median
   * rate's share of the bandwidth limit; segments' share of the GEMM limit */
  const double seg_flops =
      flops_per_token(c, c->mem_len + (c->same_length ? 1 : (tl + 1) / 2.0));
  for (int i = 0; i < n; i++) {
    printf("%-9s %-7s %-5s %7.1f", xl_cpu_path(), xl_weights_name(xl_model_weights(w[i].m)),
           xl_kv_dtype_name(xl_model_kv_dtype(w[i].m)), xl_model_weight_bytes(w[i].m) / 1048576.0);
    double med[WEIGHTS_KINDS] = {0};
    for (int k = 0; k < WEIGHTS_KINDS; k++) {
      double v[BENCH_MAX_ROUNDS], x[BENCH_MAX_ROUNDS], lo = 1e300, hi = 0;
      for (int r = 0; r < rounds; r++) {
        v[r] = rate[r][i][k];
        x[r] = rate[r][0][k] > 0 ? rate[r][i][k] / rate[r][0][k] : 0;
        lo = x[r] < lo ? x[r] : lo;
        hi = x[r] > hi ? x[r] : hi;
      }
      med[k] = cli_median(v, rounds);
      if (k == 1 && !b16) printf(" %14s %-18s", "-", "");
      else printf(" %14.2f %5.2fx [%4.2f, %4.2f]", med[k], cli_median(x, rounds), lo, hi);
    }
    const double wb = step_fixed_bytes(w[i].m), sb = (double)xl_model_state_bytes(w[i].m);
    const double step1 = wb + sb, step16 = wb + WEIGHTS_BATCH * sb;
    printf(" %9.1f %8.0f%%", step1 / 1e6, 100 * med[0] * step1 / lim.read_bw);
    if (b16) printf(" %9.1f %8.0f%%", step16 / 1e6, 100 * med[1] * step16 / WEIGHTS_BATCH / lim.read_bw);
    else printf(" %9s %9s", "-", "-");
    printf(" %8.0f%%\n", 100 * med[2] * seg_flops / 1e9 / lim.gemm_gflops);
  }
  fflush(stdout);
  rc = 0;
out:
  free(blob);
  for (int i = 0; i < WEIGHTS_TYPES; i++) weights_subject_free(&w[i]);
  return rc;
}

/* Forward-pass threads side by side (--thread-counts): one model, decode at batch 1 (and 16)
 * with every memory full, on a workspace of each thread count, in rounds as bench_weights:
 * each round measures every count one right after another (the first rotating), and each
 * count's rate is set against the first count's of that round. Every count's sessions are
 * copies of one full memory. The limit of a count: the step's bytes at the read bandwidth of
 * as many threads streaming at once, measured in this run. */
#define THREAD_COUNTS_MAX 8
static int bench_threads(const bench_opts *o, int first) {
  const int nt = o->n_thread_counts, b16 = o->max_batch >= 16, rounds = o->rounds;
  const int nb = b16 ? WEIGHTS_BATCH : 1;
  xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
  lo.weights = *o->weights ? (xl_weights)xl_weights_parse(o->weights) : XL_WEIGHTS_F32;
  lo.kv_dtype = o->kv[o->n_kv > 1 ? o->n_kv - 1 : 0];
  lo.mem_len = o->mem_len;
  xl_model *m = cli_load_model("bench", o->model_dir, &lo);
  if (!m) return 1;
  const xl_config *c = xl_model_config(m);
  xl_rng rng;
  xl_rng_seed(&rng, 1234);
  xl_workspace *ws[THREAD_COUNTS_MAX] = {0};
  xl_state *st[THREAD_COUNTS_MAX][WEIGHTS_BATCH];
  memset(st, 0, sizeof st);
  xl_error err;
  int rc = 1;
  xl_state *full = cli_full_state("bench", m, &rng);
  if (!full) goto out;
  for (int i = 0; i < nt; i++) {
    if (xl_workspace_new(m, &ws[i], &err) ||
        xl_workspace_set_threads(ws[i], o->thread_counts[i], &err)) {
      fprintf(stderr, "xlserve bench: %s\n", err.message);
      goto out;
    }
    for (int b = 0; b < nb; b++)
      if (xl_state_clone(full, &st[i][b], &err)) {
        fprintf(stderr, "xlserve bench: %s\n", err.message);
        goto out;
      }
  }
  bench_limits lim;
  if (bench_limits_measure(o, &lim)) goto out;
  double bw[THREAD_COUNTS_MAX];
  for (int i = 0; i < nt; i++) /* one thread's: the limits' own probe */
    if ((bw[i] = o->thread_counts[i] == 1 ? lim.read_bw
                                          : cli_read_bandwidth_threads(lim.probe_bytes, 3,
                                                                         o->thread_counts[i])) <= 0) {
      fprintf(stderr, "xlserve bench: cannot measure the read bandwidth of %d threads\n",
              o->thread_counts[i]);
      goto out;
    }
  if (first) {
    char blas[640];
    cli_blas_describe(blas, sizeof blas);
    printf("BLAS core %s\n", blas);
    printf("xlserve bench --thread-counts: %s (n_layer %d, d_model %d, d_inner %d, vocab %d, "
           "mem_len %d), weights %s (%s), memory %s, wall-clock time, %d rounds of at least "
           "%.2g s per rate;\neach round measures every thread count one after another (the "
           "first rotating); the table: rates as the median of the rounds, x %d as the median "
           "of the rounds' ratios [lowest, highest]\n",
           xl_model_dir(m), c->n_layer, c->d_model, c->d_inner, c->vocab_size, c->mem_len,
           xl_weights_name(xl_model_weights(m)), xl_model_weights_kernel(m),
           xl_kv_dtype_name(xl_model_kv_dtype(m)), rounds, o->min_seconds, o->thread_counts[0]);
  }
  printf("limits (measured in this run): read bandwidth");
  for (int i = 0; i < nt; i++)
    printf("%s %d thread%s %.2f GB/s", i ? "," : "", o->thread_counts[i],
           o->thread_counts[i] > 1 ? "s" : "", bw[i] / 1e9);
  printf(" (summing %zu MiB, best of 3)\n\n", lim.probe_bytes >> 20);
  double rate[BENCH_MAX_ROUNDS][THREAD_COUNTS_MAX][2];
  memset(rate, 0, sizeof rate);
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < (b16 ? 2 : 1); k++) {
      for (int j = 0; j < nt; j++) {
        int i = (j + r) % nt;
        double x = decode_steps(m, ws[i], st[i], k ? WEIGHTS_BATCH : 1, o, &rng);
        if (x < 0) goto out;
        rate[r][i][k] = x;
      }
      printf("%-9s round %2d decode b%-2d t/s:", xl_cpu_path(), r + 1, k ? WEIGHTS_BATCH : 1);
      for (int i = 0; i < nt; i++) {
        printf("  %d thr %.2f", o->thread_counts[i], rate[r][i][k]);
        if (i) printf(" (%.2fx)", rate[r][i][k] / rate[r][0][k]);
      }
      printf("\n");
      fflush(stdout);
    }
  printf("\n%-9s %-7s %-5s %7s %14s %-18s %9s %9s %9s", "cpu path", "threads", "kv", "weights",
         "decode b1 t/s", "x first [low, high]", "b1 MB", "read GB/s", "b1 limit");
  if (b16) printf(" %14s %-18s %9s %9s", "decode b16 t/s", "x first [low, high]", "b16 MB", "b16 limit");
  printf("\n");
  const double wb = step_fixed_bytes(m), sb = (double)xl_model_state_bytes(m);
  for (int i = 0; i < nt; i++) {
    printf("%-9s %-7d %-5s %7s", xl_cpu_path(), o->thread_counts[i],
           xl_kv_dtype_name(xl_model_kv_dtype(m)), xl_weights_name(xl_model_weights(m)));
    for (int k = 0; k < (b16 ? 2 : 1); k++) {
      double v[BENCH_MAX_ROUNDS], x[BENCH_MAX_ROUNDS], lo_r = 1e300, hi_r = 0;
      for (int r = 0; r < rounds; r++) {
        v[r] = rate[r][i][k];
        x[r] = rate[r][0][k] > 0 ? rate[r][i][k] / rate[r][0][k] : 0;
        lo_r = x[r] < lo_r ? x[r] : lo_r;
        hi_r = x[r] > hi_r ? x[r] : hi_r;
      }
      const int batch = k ? WEIGHTS_BATCH : 1;
      const double step = wb + batch * sb, med = cli_median(v, rounds);
      printf(" %14.2f %5.2fx [%4.2f, %4.2f] %9.3f", med, cli_median(x, rounds), lo_r, hi_r,
             step / 1e6);
      if (!k) printf(" %9.2f", bw[i] / 1e9);
      printf(" %8.0f%%", 100 * med * step / batch / bw[i]);
    }
    printf("\n");
  }
  fflush(stdout);
  rc = 0;
out:
  for (int i = 0; i < nt; i++) {
    for (int b = 0; b < nb; b++) xl_state_free(st[i][b]);
    xl_workspace_free(ws[i]);
  }
  xl_state_free(full);
  xl_model_free(m);
  return rc;
}

int cli_bench_main(int argc, char **argv) {
  const char *cmd = "bench";
  bench_opts o = {NULL, 0, 2.0, 0, 64, 1, "", {XL_KV_F32}, 0, 1, 0, "", -1, 5, {0}, 0};
  int tgt_len = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int ok = 1;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: xlserve bench [--model DIR] [--threads N] [--seconds S] [--tgt-len L]\n"
             "                     [--max-batch B] [--no-recurrence] [--quick] [--cpu P1,P2,..]\n"
             "                     [--clock wall|thread] [--kv-dtype D1,D2,..] [--kv-only]\n"
             "                     [--weights W1,..] [--mem-len M] [--rounds R]\n"
             "                     [--thread-counts N1,N2,..]\n"
             "  --seconds S       minimum time per measurement (default 2)\n"
             "  --max-batch B     largest decode batch (1, 4, 16, 32, 64 up to B; default 64)\n"
             "  --no-recurrence   skip the recurrence-vs-recompute table\n"
             "  --cpu P1,P2,..    CPU paths to measure, one block each (auto, avx512, avx2, neon,\n"
             "                    portable; default: XLSERVE_CPU, else auto)\n"
             "  --clock thread    time by this thread's CPU time, not wall time (needs --threads 1;\n"
             "                    for a shared, busy machine)\n"
             "  --kv-dtype D1,..  also a table of session memory dtypes (f32, bf16, int8; f32 is\n"
             "                    always measured, first): bytes per session, decode rates beside f32\n"
             "  --kv-only         with --kv-dtype: only that table (no decode rows, segments,\n"
             "                    recurrence)\n"
             "  --weights W1,..   instead of the table: decode (batch 1, 16) and segments with\n"
             "                    each weight type (bf16, int8, int4) beside f32, as ratios; with\n"
             "                    --kv-dtype, each paired with the memory dtype at its place\n"
             "  --mem-len M       memory length for --weights (default: the model's)\n"
             "  --rounds R        rounds of the --weights comparison (default 5; each round\n"
             "                    measures every type, the table gives medians)\n"
             "  --thread-counts N1,N2,..  instead of the table: decode (batch 1, 16) with each\n"
             "                    count of forward-pass threads, in rounds, as ratios to N1's,\n"
             "                    beside the read bandwidth of as many threads; the model is\n"
             "                    loaded once with --weights W and --kv-dtype D (one each)\n"
             "  --threads N       forward-pass threads of the other tables (and OpenBLAS's)\n");
      return 0;
    } else if (!strcmp(a, "--model")) ok = cli_str_arg(cmd, argc, argv, &i, &o.model_dir);
    else if (!strcmp(a, "--threads")) ok = cli_int_arg(cmd, argc, argv, &i, 1, 256, &o.threads);
    else if (!strcmp(a, "--tgt-len")) ok = cli_int_arg(cmd, argc, argv, &i, 1, 1 << 16, &tgt_len);
    else if (!strcmp(a, "--max-batch")) ok = cli_int_arg(cmd, argc, argv, &i, 1, 4096, &o.max_batch);
    else if (!strcmp(a, "--no-recurrence")) o.recurrence = 0;
    else if (!strcmp(a, "--kv-only")) o.decode_rows = 0;
    else if (!strcmp(a, "--kv-dtype")) {
      const char *v;
      char list[64];
      if ((ok = cli_str_arg(cmd, argc, argv, &i, &v))) {
        snprintf(list, sizeof list, "%s", v);
        o.n_kv = 1; /* f32 first: the column every ratio is against */
        char *sv = NULL;
        for (char *p = strtok_r(list, ",", &sv); p && ok; p = strtok_r(NULL, ",", &sv)) {
          xl_kv_dtype dt;
          if (xl_kv_dtype_parse(p, &dt)) {
            fprintf(stderr, "xlserve bench: --kv-dtype: '%s' is not one of f32, bf16, int8\n", p);
            ok = 0;
          } else if (dt != XL_KV_F32 && o.n_kv < XL_KV_DTYPE_COUNT) {
            int seen = 0;
            for (int k = 0; k < o.n_kv; k++) seen |= o.kv[k] == dt;
            if (!seen) o.kv[o.n_kv++] = dt;
          }
        }
      }
    }
    else if (!strcmp(a, "--rounds"))
      ok = cli_int_arg(cmd, argc, argv, &i, 1, BENCH_MAX_ROUNDS, &o.rounds);
    else if (!strcmp(a, "--thread-counts")) {
      const char *v;
      char copy[64], *sv = NULL;
      o.n_thread_counts = 0;
      if ((ok = cli_str_arg(cmd, argc, argv, &i, &v)) && strlen(v) < sizeof copy) {
        snprintf(copy, sizeof copy, "%s", v);
        for (char *p = strtok_r(copy, ",", &sv); p && ok; p = strtok_r(NULL, ",", &sv)) {
          char *end;
          long n = strtol(p, &end, 10);
          if (*end || n < 1 || n > THREAD_COUNTS_MAX || o.n_thread_counts == THREAD_COUNTS_MAX) ok = 0;
          else o.thread_counts[o.n_thread_counts++] = (int)n;
        }
      } else {
        ok = 0;
      }
      if (!ok || !o.n_thread_counts) {
        fprintf(stderr, "xlserve bench: --thread-counts: give up to %d counts of 1..%d, e.g. 1,2\n",
                THREAD_COUNTS_MAX, THREAD_COUNTS_MAX);
        ok = 0;
      }
    }
    else if (!strcmp(a, "--mem-len")) ok = cli_int_arg(cmd, argc, argv, &i, 0, 1 << 20, &o.mem_len);
    else if (!strcmp(a, "--weights")) {
      const char *v;
      char copy[64], *save = NULL;
      if ((ok = cli_str_arg(cmd, argc, argv, &i, &v)) && (!*v || strlen(v) >= sizeof o.weights))
        ok = 0;
      if (ok) snprintf(copy, sizeof copy, "%s", v);
      for (char *w = ok ? strtok_r(copy, ",", &save) : NULL; w; w = strtok_r(NULL, ",", &save))
        if (xl_weights_parse(w) < 0) ok = 0;
      if (!ok) fprintf(stderr, "xlserve bench: --weights: give weight types, e.g. bf16,int8\n");
      else snprintf(o.weights, sizeof o.weights, "%s", v);
    }
    else if (!strcmp(a, "--clock")) {
      const char *v;
      if ((ok = cli_str_arg(cmd, argc, argv, &i, &v))) {
        if (!strcmp(v, "thread")) o.thread_clock = 1;
        else if (!strcmp(v, "wall")) o.thread_clock = 0;
        else {
          fprintf(stderr, "xlserve bench: --clock: '%s' is not one of wall, thread\n", v);
          ok = 0;
        }
      }
    } else if (!strcmp(a, "--cpu")) {
      const char *v;
      if ((ok = cli_str_arg(cmd, argc, argv, &i, &v)) && (!*v || strlen(v) >= sizeof o.cpus)) {
        fprintf(stderr, "xlserve bench: --cpu: give one or more paths, e.g. avx512,avx2\n");
        ok = 0;
      }
      if (ok) snprintf(o.cpus, sizeof o.cpus, "%s", v);
    }
    else if (!strcmp(a, "--seconds")) {
      float s;
      ok = cli_float_arg(cmd, argc, argv, &i, 0.01, 3600, &s);
      o.min_seconds = s;
    } else if (!strcmp(a, "--quick")) {
      o.quick = 1;
      o.min_seconds = 0.2;
    } else {
      fprintf(stderr, "xlserve bench: unknown option '%s'\n", a);
      return 2;
    }
    if (!ok) return 2;
  }
  if (!o.decode_rows && !o.n_kv) {
    fprintf(stderr, "xlserve bench: --kv-only needs --kv-dtype\n");
    return 2;
  }
  if (o.n_thread_counts && (strchr(o.weights, ',') || o.n_kv > 2)) {
    fprintf(stderr, "xlserve bench: --thread-counts takes one --weights type and one --kv-dtype\n");
    return 2;
  }
  if (o.thread_clock && o.n_thread_counts) {
    fprintf(stderr, "xlserve bench: --thread-counts: --clock thread cannot time several "
                    "threads; use --clock wall\n");
    return 2;
  }
  if (o.thread_clock && o.threads != 1) {
    fprintf(stderr, "xlserve bench: --clock thread needs --threads 1 (other threads' time is "
                    "not on this thread's clock)\n");
    return 2;
  }
  /* every path is checked before anything is measured: a bad name fails at once */
  char *paths[8];
  int n_paths = 0;
  char *save = NULL;
  for (char *p = strtok_r(o.cpus, ",", &save); p && n_paths < 8; p = strtok_r(NULL, ",", &save)) {
    if (!cli_select_cpu(cmd, p)) return 2;
    paths[n_paths++] = p;
  }
  if (!n_paths) {
    if (!cli_select_cpu(cmd, NULL)) return 2;
    paths[n_paths++] = NULL;
  }
  xl_set_blas_threads(o.threads);
  int rc = 0;
  for (int i = 0; i < n_paths && !rc; i++) {
    if (paths[i] && !cli_select_cpu(cmd, paths[i])) return 2;
    rc = o.n_thread_counts ? bench_threads(&o, i == 0)
         : *o.weights      ? bench_weights(&o, tgt_len, i == 0)
                           : bench_path(&o, tgt_len, i == 0);
  }
  return rc;
}
