/*
 * bench_step.c: where one decode step's time goes, on a loaded model with every session's
 * memory full. First the whole step, as `xlserve bench` times it: one xl_forward of B one-token
 * items, each asking for its full next-token distribution. Then its parts alone, on the same
 * model and the same memories:
 *   weight GEMMs    every layer's four matrices and the output clusters' projections and
 *                   weights, at B rows (the step's xl_matmul_w calls, without their biases);
 *   positions       every layer's products of the B queries with the model's cached positional
 *                   table (xl_decode_positions, all heads);
 *   attention       every layer's attention of each of the B sessions over its memory, all
 *                   heads (xl_attend_heads: the memory's keys and values read in place, the
 *                   scores, position terms and softmax);
 * and the rest of the step (layer norms, biases, residuals, the outputs' log-softmax, the new
 * keys and values stored) as the difference. Each row gives milliseconds per step and its share
 * of the step, the bytes it must read (the weights, the positional table, the B memories) and
 * the rate it reads them at, and its share of its read limit: those bytes at one thread's read
 * bandwidth, measured in the same run (cli_bandwidth.h). The GEMMs also give GOP/s. In rounds,
 * every part timed once per round right after the step; the table gives medians. This thread's
 * CPU time, one forward-pass thread. Main thread only.
 *
 * With --turn N, then a chat turn: one session's prompt of N tokens continuing its full memory
 * (the attention's small-block path), timed with the block's queries four to a pass over the
 * memory's rows and with each query alone (xl_attn_set_query_group), alternating in each
 * round, and the ratio of the two medians (the same run, the same memory).
 *
 * usage: bench_step --model DIR [--weights W] [--kv-dtype D] [--cpu P] [--batch B1,B2,..]
 *                   [--rounds R] [--seconds S] [--probe-mib M] [--turn N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "cli_bandwidth.h"
#include "cli_common.h"
#include "internal.h"

#define MAX_BATCHES 8
#define MAX_ROUNDS 64
#define MAX_BATCH 64
#define MAX_TURN 32 /* the attention's short-block path: prompts of up to 32 tokens */

enum { STEP, GEMMS, POSITIONS, ATTENTION, REST, PARTS };
static const char *const PART_NAME[PARTS] = {"whole step", "weight GEMMs", "positions", "attention",
                                             "rest"};

/* One batch's sessions and buffers: B states cloned from one full memory, their decode rows. */
typedef struct {
  const xl_model *m;
  int B;
  xl_state *st[MAX_BATCH];
  float *x, *y; /* GEMM input [B, widest K] and output [B, widest N] */
  float *qkv;   /* [B, 3*H*Dh] the queries (keys and values unread) */
  float *av;    /* [B, H*Dh] attention outputs */
  float *dec_p; /* [B, H, pos_rows] position products */
  float *lp;    /* [B, vocab] the step's distributions */
  const float *q[MAX_BATCH];
  int n_pos[MAX_BATCH];
  int pos_rows;
  float *attn_buf;
  xl_attn_scratch sc;
  xl_workspace *ws; /* the whole step's */
} batch_data;

/* The widest input (K) and output (N) of the step's weight GEMMs. */
static void gemm_widths(const xl_model *m, size_t *k, size_t *n) {
  const xl_config *c = &m->cfg;
  size_t kk = (size_t)(c->d_inner > c->d_model ? c->d_inner : c->d_model), nn = 3 * (size_t)m->hd;
  if ((size_t)m->hd > kk) kk = (size_t)m->hd;
  if ((size_t)c->d_inner > nn) nn = (size_t)c->d_inner;
  for (int i = 0; i < m->n_out_clusters; i++) {
    const size_t rows = (size_t)(m->out[i].end - m->out[i].begin);
    if (rows > nn) nn = rows;
  }
  *k = kk, *n = nn;
}

/* Multiply-adds x 2 of the step's weight GEMMs for one row. */
static double gemm_ops_per_row(const xl_model *m) {
  const xl_config *c = &m->cfg;
  double per_layer =
      3.0 * m->hd * c->d_model + (double)m->hd * c->d_model + 2.0 * c->d_inner * c->d_model;
  double out = 0;
  for (int i = 0; i < m->n_out_clusters; i++) {
    const xl_out_cluster *o = &m->out[i];
    out += (double)(o->end - o->begin) * o->d_emb +
           (o->proj_t.data ? (double)o->d_emb * c->d_model : 0);
  }
  return 2.0 * (per_layer * c->n_layer + out);
}

static void run_gemms(const batch_data *d) {
  const xl_model *m = d->m;
  const xl_config *c = &m->cfg;
  const int B = d->B, dm = c->d_model, hd = m->hd;
  for (int l = 0; l < c->n_layer; l++) {
    const xl_layer *L = &m->layers[l];
    xl_matmul_w(d->x, B, dm, dm, &L->qkv_w, 3 * hd, d->y, 3 * hd);
    xl_matmul_w(d->x, B, hd, hd, &L->o_w, dm, d->y, dm);
    xl_matmul_w(d->x, B, dm, dm, &L->ff1_w, c->d_inner, d->y, c->d_inner);
    xl_matmul_w(d->x, B, c->d_inner, c->d_inner, &L->ff2_w, dm, d->y, dm);
  }
  for (int i = 0; i < m->n_out_clusters; i++) {
    const xl_out_cluster *o = &m->out[i];
    if (o->proj_t.data) xl_matmul_w(d->x, B, dm, dm, &o->proj_t, o->d_emb, d->y, o->d_emb);
    xl_matmul_w(d->x, B, o->d_emb, o->d_emb, &o->weight, o->end - o->begin, d->y,
                o->end - o->begin);
  }
}

static void run_positions(const batch_data *d) {
  for (int l = 0; l < d->m->cfg.n_layer; l++)
    xl_decode_positions(d->m, l, d->q, d->n_pos, d->B, d->pos_rows, d->dec_p, 0, d->m->cfg.n_head);
}

static void run_attention(batch_data *d) {
  const xl_model *m = d->m;
  const int H = m->cfg.n_head, hd = m->hd;
  for (int l = 0; l < m->cfg.n_layer; l++)
    for (int b = 0; b < d->B; b++) {
      xl_attn_item it = {d->st[b],
                         1,
                         d->qkv + (size_t)b * 3 * hd,
                         d->av + (size_t)b * hd,
                         d->dec_p + (size_t)b * H * d->pos_rows,
                         d->pos_rows};
      xl_attend_heads(m, l, &it, &d->sc, 0, H);
    }
}

/* One decode step of the batch (tokens from a counter); 0, or 1 with a message. */
static int run_step(batch_data *d, int step) {
  const xl_config *c = &d->m->cfg;
  xl_feed items[MAX_BATCH];
  int32_t tok[MAX_BATCH];
  xl_error err;
  for (int b = 0; b < d->B; b++) {
    tok[b] = (int32_t)(((unsigned)step * 7919u + (unsigned)b * 104729u) % (unsigned)c->vocab_size);
    items[b] = (xl_feed){d->st[b], &tok[b], 1, NULL, NULL, d->lp + (size_t)b * c->vocab_size, NULL};
  }
  if (!xl_forward(d->m, d->ws, items, d->B, &err)) return 0;
  fprintf(stderr, "bench_step: %s\n", err.message);
  return 1;
}

/* Seconds per run of `part` (one warm-up, then runs for at least `seconds`, at least 2). */
static double time_part(batch_data *d, int part, double seconds, int *steps, int *failed) {
  int n = 0;
  double t0 = 0, el = 0;
  for (int warm = 1;; warm = 0) {
    if (part == STEP) *failed |= run_step(d, (*steps)++);
    else if (part == GEMMS) run_gemms(d);
    else if (part == POSITIONS) run_positions(d);
    else run_attention(d);
    if (warm) t0 = cli_thread_cpu_now();
    else if (++n >= 2 && (el = cli_thread_cpu_now() - t0) >= seconds) break;
    if (*failed) return -1;
  }
  return el / n;
}

/* Seconds per turn of n tokens continuing the memory `packed` holds, copied into s before each
 * turn outside the clock, with the block's queries in groups of `group` (one warm-up, then
 * turns for at least `seconds`, at least 2); -1 with a message on a failure. */
static double time_turn(const xl_model *m, xl_workspace *ws, const xl_state *packed, xl_state *s,
                        int n, int group, double seconds, float *lp) {
  const int V = m->cfg.vocab_size;
  int32_t tok[MAX_TURN];
  for (int i = 0; i < n; i++) tok[i] = (int32_t)(((unsigned)i * 7919u + 13u) % (unsigned)V);
  xl_attn_set_query_group(group);
  double el = 0;
  int runs = 0;
  for (int warm = 1;; warm = 0) {
    xl_error err;
    if (xl_state_unpack(s, packed, &err)) {
      fprintf(stderr, "bench_step: %s\n", err.message);
      el = -1;
      break;
    }
    xl_feed f = {s, tok, n, NULL, NULL, lp, NULL};
    const double t0 = cli_thread_cpu_now();
    const xl_code rc = xl_forward(m, ws, &f, 1, &err);
    const double t1 = cli_thread_cpu_now();
    if (rc) {
      fprintf(stderr, "bench_step: %s\n", err.message);
      el = -1;
      break;
    }
    if (!warm) el += t1 - t0, runs++;
    if (runs >= 2 && el >= seconds) break;
  }
  xl_attn_set_query_group(4);
  return el < 0 ? -1 : el / runs;
}

/* The chat-turn table (--turn n): 0, or 1 with a message. */
static int turn_table(const xl_model *m, const xl_state *full, int n, int rounds, double seconds) {
  xl_workspace *ws = NULL;
  xl_state *packed = NULL, *s = NULL;
  xl_error err;
  float *lp = malloc(sizeof(float) * (size_t)m->cfg.vocab_size);
  int status = 0;
  if (!lp || xl_workspace_new(m, &ws, &err) || xl_state_pack(full, &packed, &err) ||
      xl_state_new(m, &s, &err)) {
    fprintf(stderr, "bench_step: out of memory for the turn\n");
    status = 1;
  }
  double t[2][MAX_ROUNDS];
  for (int r = 0; r < rounds && !status; r++)
    for (int g = 0; g < 2; g++) /* grouped, then each query alone */
      status |= (t[g][r] = time_turn(m, ws, packed, s, n, g ? 1 : 4, seconds, lp)) < 0;
  if (!status) {
    const double four = cli_median(t[0], rounds), one = cli_median(t[1], rounds);
    printf(
        "\nturn of %d tokens over the full memory: %.2f ms with queries four to a pass over "
        "the memory, %.2f ms each alone: %.2fx (rounds:",
        n, four * 1e3, one * 1e3, one / four);
    for (int r = 0; r < rounds; r++) printf(" %.2f", t[1][r] / t[0][r]);
    printf(")\n");
  }
  xl_state_free(s);
  xl_state_free(packed);
  xl_workspace_free(ws);
  free(lp);
  return status;
}

/* The batch's states and buffers; 0, or 1 with a message. */
static int batch_make(const xl_model *m, const xl_state *full, int B, batch_data *d) {
  const xl_config *c = &m->cfg;
  const int H = c->n_head, hd = m->hd;
  xl_error err;
  size_t kmax, nmax;
  xl_rng rng;
  memset(d, 0, sizeof *d);
  d->m = m, d->B = B;
  gemm_widths(m, &kmax, &nmax);
  const int klen = full->len + 1;
  d->pos_rows = xl_pos_rows_needed(m, klen);
  d->x = malloc((size_t)B * kmax * sizeof(float));
  d->y = malloc((size_t)B * nmax * sizeof(float));
  d->qkv = malloc((size_t)B * 3 * hd * sizeof(float));
  d->av = malloc((size_t)B * hd * sizeof(float));
  d->dec_p = malloc((size_t)B * H * d->pos_rows * sizeof(float));
  d->lp = malloc((size_t)B * c->vocab_size * sizeof(float));
  d->attn_buf = malloc(xl_attn_scratch_floats(m, klen, d->pos_rows) * sizeof(float));
  if (!d->x || !d->y || !d->qkv || !d->av || !d->dec_p || !d->lp || !d->attn_buf) {
    fprintf(stderr, "bench_step: out of memory for batch %d\n", B);
    return 1;
  }
  xl_rng_seed(&rng, 7); /* inputs and queries uniform in [-1, 1) */
  for (size_t i = 0; i < (size_t)B * kmax; i++) d->x[i] = (float)(2 * xl_rng_uniform(&rng) - 1);
  for (size_t i = 0; i < (size_t)B * 3 * hd; i++) d->qkv[i] = (float)(2 * xl_rng_uniform(&rng) - 1);
  memset(d->y, 0, (size_t)B * nmax * sizeof(float));
  memset(d->lp, 0, (size_t)B * c->vocab_size * sizeof(float));
  xl_attn_scratch_bind(m, d->attn_buf, klen, d->pos_rows, &d->sc);
  if (xl_workspace_new(m, &d->ws, &err)) {
    fprintf(stderr, "bench_step: %s\n", err.message);
    return 1;
  }
  for (int b = 0; b < B; b++) {
    if (xl_state_clone(full, &d->st[b], &err)) {
      fprintf(stderr, "bench_step: %s\n", err.message);
      return 1;
    }
    d->q[b] = d->qkv + (size_t)b * 3 * hd;
    d->n_pos[b] = d->pos_rows;
  }
  run_positions(d); /* the attention part reads them */
  return 0;
}

static void batch_free(batch_data *d) {
  for (int b = 0; b < d->B; b++) xl_state_free(d->st[b]);
  xl_workspace_free(d->ws);
  free(d->x), free(d->y), free(d->qkv), free(d->av), free(d->dec_p), free(d->lp), free(d->attn_buf);
}

static int parse_batches(const char *s, int *out) {
  int n = 0;
  while (*s && n < MAX_BATCHES) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > MAX_BATCH || (*end && *end != ',')) return -1;
    out[n++] = (int)v;
    s = *end ? end + 1 : end;
  }
  return *s ? -1 : n;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_step --model DIR [--weights W] [--kv-dtype D] [--cpu P]\n"
          "                  [--batch B1,B2,..] [--rounds R] [--seconds S] [--probe-mib M]\n"
          "                  [--turn N]\n");
}

int main(int argc, char **argv) {
  cli_engine_flags f = {0};
  const char *batch_arg = "1,16";
  int rounds = 3, probe_mib = 0, turn = 0, batches[MAX_BATCHES];
  float seconds = 1.0f;
  for (int i = 1; i < argc; i++) {
    int ok = 1;
    if (cli_engine_arg("bench_step", argc, argv, &i, &f, &ok)) {
      if (!ok) return 2;
    } else if (!strcmp(argv[i], "--batch")) {
      if (!cli_str_arg("bench_step", argc, argv, &i, &batch_arg)) return 2;
    } else if (!strcmp(argv[i], "--rounds")) {
      if (!cli_int_arg("bench_step", argc, argv, &i, 1, MAX_ROUNDS, &rounds)) return 2;
    } else if (!strcmp(argv[i], "--seconds")) {
      if (!cli_float_arg("bench_step", argc, argv, &i, 0.0, 600.0, &seconds)) return 2;
    } else if (!strcmp(argv[i], "--turn")) {
      if (!cli_int_arg("bench_step", argc, argv, &i, 1, MAX_TURN, &turn)) return 2;
    } else if (!strcmp(argv[i], "--probe-mib")) {
      if (!cli_int_arg("bench_step", argc, argv, &i, 1, 4096, &probe_mib)) return 2;
    } else {
      usage();
      return 2;
    }
  }
  const int n_batches = parse_batches(batch_arg, batches);
  if (!f.model_dir || n_batches <= 0) {
    if (n_batches <= 0)
      fprintf(stderr, "bench_step: --batch %s: want sizes 1-%d, commas between\n", batch_arg,
              MAX_BATCH);
    usage();
    return 2;
  }
  xl_load_options opts = XL_LOAD_OPTIONS_DEFAULT;
  if (!cli_engine_select("bench_step", &f, &opts)) return 2;
  xl_model *m = cli_load_model("bench_step", f.model_dir, &opts);
  if (!m) return 1;
  xl_rng rng;
  xl_rng_seed(&rng, 1);
  xl_state *full = cli_full_state("bench_step", m, &rng);
  if (!full) {
    xl_model_free(m);
    return 1;
  }
  const size_t probe = probe_mib ? (size_t)probe_mib << 20 : cli_probe_bytes();
  const double bw = cli_read_bandwidth(probe, 3, 1);
  if (bw <= 0) {
    fprintf(stderr, "bench_step: out of memory for the bandwidth probe\n");
    return 1;
  }
  printf(
      "bench_step: %s, weights %s (%s), memory %s, %d positions; cpu path %s; %d rounds of at "
      "least %g s per part, this thread's CPU time, medians; read bandwidth %.2f GB/s (1 "
      "thread sums %zu MiB, best of 3)\n\n",
      f.model_dir, xl_weights_name(xl_model_weights(m)), xl_model_weights_kernel(m),
      xl_kv_dtype_name(xl_model_kv_dtype(m)), full->len, xl_cpu_path(), rounds, seconds, bw / 1e9,
      probe >> 20);
  printf("%-6s %-13s %9s %8s %10s %10s %9s %9s\n", "batch", "part", "ms/step", "of step", "MB read",
         "read GB/s", "of limit", "GOP/s");
  int status = 0;
  for (int bi = 0; bi < n_batches && !status; bi++) {
    batch_data d;
    if (batch_make(m, full, batches[bi], &d)) {
      batch_free(&d);
      status = 1;
      break;
    }
    double t[PARTS][MAX_ROUNDS];
    int steps = 0, failed = 0;
    for (int r = 0; r < rounds && !failed; r++) {
      for (int p = STEP; p < REST; p++) t[p][r] = time_part(&d, p, seconds, &steps, &failed);
      t[REST][r] = t[STEP][r] - t[GEMMS][r] - t[POSITIONS][r] - t[ATTENTION][r];
    }
    if (failed) {
      batch_free(&d);
      status = 1;
      break;
    }
    const double bytes[PARTS] = {
        (double)xl_model_weight_bytes(m) + (double)xl_model_decode_table_bytes(m) +
            (double)d.B * (double)xl_model_state_bytes(m),
        (double)xl_model_weight_bytes(m), (double)xl_model_decode_table_bytes(m),
        (double)d.B * (double)xl_model_state_bytes(m), 0};
    const double step = cli_median(t[STEP], rounds);
    for (int p = 0; p < PARTS; p++) {
      const double s = cli_median(t[p], rounds);
      printf("%-6d %-13s %9.2f %7.0f%%", d.B, PART_NAME[p], s * 1e3, 100.0 * s / step);
      if (bytes[p] > 0 && s > 0)
        printf(" %10.1f %10.2f %8.0f%%", bytes[p] / 1e6, bytes[p] / s / 1e9,
               100.0 * bytes[p] / bw / s);
      else printf(" %10s %10s %9s", "", "", "");
      if (p == GEMMS && s > 0) printf(" %9.1f", gemm_ops_per_row(m) * d.B / s / 1e9);
      printf("\n");
    }
    batch_free(&d);
  }
  if (!status && turn) status = turn_table(m, full, turn, rounds, seconds);
  xl_state_free(full);
  xl_model_free(m);
  return status;
}
