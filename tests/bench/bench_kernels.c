/*
 * bench_kernels.c: the decode step's kernels alone, each narrow type beside F32 in one run, on
 * the kernel families named by --cpu: the weight GEMM with one row (a batch-1 decode step: the
 * weights stream from DRAM once per token), the weight GEMM with 16 rows on a matrix that stays
 * in cache (a batch-16 step: arithmetic), and the two loops over a session memory (keys times
 * the query, values times the attention probabilities; the memory streams from DRAM). It gives
 * each kernel's rate (GB/s of the bytes it reads, or GFLOP/s) and its speed beside F32's for
 * the same work (and the GEMM with 16 and with 8 rows from DRAM too: batch-16 and batch-8
 * steps), so a claim about a kernel can be checked on any machine with the build's own
 * compiler flags. Every type's DRAM set holds the same bytes (--mib; a narrow type's matrices
 * and memories copied to new addresses until they fill it), so no type reads from a cache
 * that F32's set would not fit in. Measured in rounds like `xlserve bench --weights`: each round times every
 * type once, one right after another (the first rotating), and the table gives medians over
 * the rounds with the range of the ratios. Last, per type, the arithmetic peak of the
 * instruction its GEMM multiplies with on the x86 paths (arith_peak.h) and the share of it the
 * in-cache GEMM reached. This thread's CPU time. Main thread only.
 *
 * usage: bench_kernels [--cpu P1,P2,..] [--seconds S] [--rounds R] [--mib M]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith_peak.h"
#include "cli_common.h"
#include "internal.h"
#include "kvkernels.h"
#include "wpanel.h"

#define TYPES 4 /* f32, bf16, int8: weights or memory; int4: weights only */
#define KINDS 6
#define MAX_ROUNDS 64

static const char *const TYPE_NAME[TYPES] = {"f32", "bf16", "int8", "int4"};

/* The wt103 shape's pieces: feed-forward matrices [4096, 1024]; 16 heads x 64; 1600 positions. */
enum { OUT = 4096, IN = 1024, SQ = 1024, ROWS16 = 16, ROWS8 = 8, H = 16, DH = 64, HD = H * DH, POS = 1600 };

static float frand(uint64_t *s) { /* uniform in [-1, 1) */
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*s >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* One matrix [n, k] in the four weight types, made from the same F32 values; each also in
 * panels (the layouts a model loads them in where the dot-product or F32 panel kernels run). */
typedef struct {
  float *f32;
  float *f32_panels;        /* [xl_f32p_count(n, k)] */
  uint16_t *bf16;
  int8_t *q8;
  float *scales;
  uint8_t *panels;
  uint16_t *panel_scales;   /* [xl_q8p_scale_count(n, k)] halves */
  uint16_t *bf16_panels;
  uint8_t *q4;              /* [n, xl_q4_row_bytes(k)] */
  float *q4_scales;         /* [n, blocks] */
  uint8_t *q4_panels;       /* [xl_q4p_bytes(n, k)] */
  uint16_t *q4_panel_scales; /* [xl_q8p_scale_count(n, k)] halves */
} matrix;

static int matrix_make(matrix *m, int n, int k, uint64_t *seed) {
  size_t e = (size_t)n * k;
  m->f32 = malloc(e * sizeof *m->f32);
  m->f32_panels = malloc(xl_f32p_count(n, k) * sizeof *m->f32_panels);
  m->bf16 = malloc(e * sizeof *m->bf16);
  m->q8 = malloc(e);
  m->scales = malloc((size_t)n * xl_q8_blocks(k) * sizeof *m->scales);
  m->panels = malloc(xl_q8p_bytes(n, k));
  m->panel_scales = malloc(xl_q8p_scale_count(n, k) * sizeof *m->panel_scales);
  m->bf16_panels = malloc(xl_bf16p_count(n, k) * sizeof *m->bf16_panels);
  m->q4 = malloc((size_t)n * xl_q4_row_bytes(k));
  m->q4_scales = malloc((size_t)n * xl_q8_blocks(k) * sizeof *m->q4_scales);
  m->q4_panels = malloc(xl_q4p_bytes(n, k));
  m->q4_panel_scales = malloc(xl_q8p_scale_count(n, k) * sizeof *m->q4_panel_scales);
  if (!m->f32 || !m->f32_panels || !m->bf16 || !m->q8 || !m->scales || !m->panels || !m->panel_scales ||
      !m->bf16_panels || !m->q4 || !m->q4_scales || !m->q4_panels || !m->q4_panel_scales)
    return 1;
  for (size_t i = 0; i < e; i++) {
    m->f32[i] = 0.05f * frand(seed);
    m->bf16[i] = xl_f32_to_bf16(m->f32[i]);
  }
  for (int r = 0; r < n; r++)
    for (int b = 0; b < xl_q8_blocks(k); b++) {
      int c = b * XL_Q8_BLOCK, len = k - c < XL_Q8_BLOCK ? k - c : XL_Q8_BLOCK;
      m->scales[(size_t)r * xl_q8_blocks(k) + b] =
          xl_q8_block(m->f32 + (size_t)r * k + c, len, m->q8 + (size_t)r * k + c);
      m->q4_scales[(size_t)r * xl_q8_blocks(k) + b] =
          xl_q4_block(m->f32 + (size_t)r * k + c, len,
                      m->q4 + (size_t)r * xl_q4_row_bytes(k) + (size_t)b * XL_Q4_BLOCK_BYTES);
    }
  xl_q8p_pack(m->q8, m->scales, n, k, m->panels, m->panel_scales);
  xl_q4p_pack(m->q4, m->q4_scales, n, k, m->q4_panels, m->q4_panel_scales);
  xl_bf16p_pack(m->bf16, n, k, m->bf16_panels);
  xl_f32p_pack(m->f32, n, k, m->f32_panels);
  return 0;
}

static void matrix_free(matrix *m) {
  free(m->f32);
  free(m->f32_panels);
  free(m->bf16);
  free(m->q8);
  free(m->scales);
  free(m->panels);
  free(m->panel_scales);
  free(m->bf16_panels);
  free(m->q4);
  free(m->q4_scales);
  free(m->q4_panels);
  free(m->q4_panel_scales);
}

static xl_wmat matrix_view(const matrix *m, int type, int k) {
  xl_wmat w = {XL_WEIGHTS_F32, m->f32, NULL, k, 0, 0, NULL};
  if (type == 0 && xl_f32p_wanted()) w = (xl_wmat){XL_WEIGHTS_F32, m->f32_panels, NULL, k, 1, 0, NULL};
  if (type == 1 && xl_bf16p_wanted()) w = (xl_wmat){XL_WEIGHTS_BF16, m->bf16_panels, NULL, k, 1, 0, NULL};
  else if (type == 1) w = (xl_wmat){XL_WEIGHTS_BF16, m->bf16, NULL, k, 0, 0, NULL};
  if (type == 2 && xl_q8p_wanted()) w = (xl_wmat){XL_WEIGHTS_INT8, m->panels, NULL, k, 1, 0, m->panel_scales};
  else if (type == 2) w = (xl_wmat){XL_WEIGHTS_INT8, m->q8, m->scales, k, 0, 0, NULL};
  if (type == 3 && xl_q8p_wanted())
    w = (xl_wmat){XL_WEIGHTS_INT4, m->q4_panels, NULL, k, 1, 0, m->q4_panel_scales};
  else if (type == 3) w = (xl_wmat){XL_WEIGHTS_INT4, m->q4, m->q4_scales, k, 0, 0, NULL};
  return w;
}

/* One session layer's memory in the three dtypes, laid out as the engine keeps it: keys per
 * head dimension over the positions ([HD, POS], one scale per position and head: [H, POS]),
 * values per position ([POS, HD], scales [POS, H]). */
typedef struct {
  float *k32, *v32;
  uint16_t *kbf, *vbf;
  int8_t *k8, *v8;
  float *ks, *vs;
} memory;

static float quantize(const float *x, int n, size_t stride, int8_t *q) {
  float amax = 0;
  for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i * stride]));
  float s = amax / 127.0f;
  for (int i = 0; i < n; i++) q[i * stride] = (int8_t)(s > 0 ? nearbyintf(x[i * stride] / s) : 0);
  return s;
}

static int memory_make(memory *m, uint64_t *seed) {
  size_t e = (size_t)HD * POS;
  m->k32 = malloc(e * 4), m->v32 = malloc(e * 4), m->kbf = malloc(e * 2), m->vbf = malloc(e * 2);
  m->k8 = malloc(e), m->v8 = malloc(e);
  m->ks = malloc((size_t)H * POS * 4), m->vs = malloc((size_t)H * POS * 4);
  if (!m->k32 || !m->v32 || !m->kbf || !m->vbf || !m->k8 || !m->v8 || !m->ks || !m->vs) return 1;
  for (size_t i = 0; i < e; i++) {
    m->k32[i] = frand(seed), m->v32[i] = frand(seed);
    m->kbf[i] = xl_f32_to_bf16(m->k32[i]), m->vbf[i] = xl_f32_to_bf16(m->v32[i]);
  }
  for (int h = 0; h < H; h++)
    for (int j = 0; j < POS; j++) {
      size_t kat = (size_t)h * DH * POS + j, vat = (size_t)j * HD + (size_t)h * DH;
      m->ks[(size_t)h * POS + j] = quantize(m->k32 + kat, DH, POS, m->k8 + kat);
      m->vs[(size_t)j * H + h] = quantize(m->v32 + vat, DH, 1, m->v8 + vat);
    }
  return 0;
}

static void memory_free(memory *m) {
  free(m->k32), free(m->v32), free(m->kbf), free(m->vbf), free(m->k8), free(m->v8);
  free(m->ks), free(m->vs);
}

/* What one type's DRAM pass reads: the distinct matrices (or session layers) in that type,
 * then copies of them at new addresses until the set holds as many bytes as the F32 one. Every
 * type so streams the same bytes per pass: a narrow type's own set, an eighth of F32's for int4,
 * would fit a large last-level cache (this VM's) and read faster than DRAM. */
typedef struct {
  xl_wmat *w;       /* [n] weight views (weight kinds) */
  memory *mem;      /* [n] session layers, only this type's arrays set (memory kinds) */
  int n;            /* n_big (or n_mem) x copies */
  void **blocks;    /* [n_blocks] the copies' allocations */
  int n_blocks;
} stream_set;

typedef struct {
  matrix *big;    /* [n_big] matrices [OUT, IN]: more than the caches hold */
  int n_big;
  matrix square;  /* [SQ, SQ]: stays in cache */
  memory *mem;    /* [n_mem] session layers */
  int n_mem;
  stream_set wset[TYPES], mset[TYPES - 1]; /* each type's DRAM sets: weights, memories */
  float *x;       /* [ROWS16, IN] activations; row 0 is the decode row; also the query */
  float *y;       /* [ROWS16, OUT] */
  float *p;       /* [H, POS] attention probabilities */
  float *s;       /* [POS] scores */
  float *out;     /* [HD] */
} bench_data;

/* The work of one pass: bytes of weights or memory read (kinds 0, 2, 3), or floating-point
 * operations (kinds 1, 4, 5). A type's DRAM pass covers its own set (stream_set): n matrices
 * or session layers, more than F32's n for the narrow types. */
static double work_of(const bench_data *d, int kind, int t) {
  /* bytes a weight: int8 and int4 with their scale per block of 32 (a half in panels, else F32) */
  const double scale = (xl_q8p_wanted() ? 2.0 : 4.0) / XL_Q8_BLOCK;
  const double WEIGHT_BYTES[TYPES] = {4, 2, 1 + scale, 0.5 + scale};
  if (kind == 1) return 2.0 * ROWS16 * SQ * SQ;
  if (kind == 4) return 2.0 * ROWS16 * OUT * IN * d->wset[0].n;
  if (kind == 5) return 2.0 * ROWS8 * OUT * IN * d->wset[0].n;
  if (kind == 0) return WEIGHT_BYTES[t] * OUT * IN * d->wset[0].n;
  return (double)d->mset[0].n * HD * POS * (t == 0 ? 4 : t == 1 ? 2 : 1 + 4.0 / DH);
}

/* One pass of kind `kind` on type `t` (0 f32, 1 bf16, 2 int8, 3 int4: weight kinds only). */
static void pass(const bench_data *d, int kind, int t) {
  const xl_kv_kernels *kv = xl_kv_kern();
  const xl_kernels *k = xl_kern();
  if (kind == 0) { /* weights x 1 row: every matrix of the type's set once */
    for (int i = 0; i < d->wset[t].n; i++) xl_matmul_w(d->x, 1, IN, IN, &d->wset[t].w[i], OUT, d->y, OUT);
  } else if (kind == 4 || kind == 5) { /* weights x 16 or 8 rows: every matrix of the set once */
    for (int i = 0; i < d->wset[t].n; i++)
      xl_matmul_w(d->x, kind == 4 ? ROWS16 : ROWS8, IN, IN, &d->wset[t].w[i], OUT, d->y, OUT);
  } else if (kind == 1) { /* weights x 16 rows: the square matrix, from cache */
    xl_wmat w = matrix_view(&d->square, t, SQ);
    xl_matmul_w(d->x, ROWS16, SQ, IN, &w, SQ, d->y, OUT);
  } else if (kind == 2) { /* keys x the query: every head of every session layer of the set */
    for (int i = 0; i < d->mset[t].n; i++)
      for (int h = 0; h < H; h++) {
        const memory *m = &d->mset[t].mem[i];
        size_t at = (size_t)h * DH * POS;
        if (t == 0) k->dot_rows(d->x + h * DH, DH, m->k32 + at, POS, POS, d->s);
        else if (t == 1) kv->dot_rows_bf16(d->x + h * DH, DH, m->kbf + at, POS, POS, d->s);
        else
          kv->dot_rows_i8(d->x + h * DH, DH, m->k8 + at, POS, m->ks + (size_t)h * POS, POS, d->s);
      }
  } else { /* values x the probabilities: all heads of every session layer of the set */
    for (int i = 0; i < d->mset[t].n; i++) {
      const memory *m = &d->mset[t].mem[i];
      if (t == 0) k->mix_rows(d->out, d->p, POS, m->v32, HD, POS, H, DH);
      else if (t == 1) kv->mix_rows_bf16(d->out, d->p, POS, m->vbf, HD, POS, H, DH);
      else kv->mix_rows_i8(d->out, d->p, POS, m->v8, HD, m->vs, H, POS, H, DH);
    }
  }
}

/* A pass of type t over its own set, scaled to the F32 set's count (the same work as F32's
 * pass: the ratios and rates compare like with like). */
static double per_f32_set(const bench_data *d, int kind, int t) {
  if (kind == 1) return 1.0;
  if (kind == 2 || kind == 3) return (double)d->mset[0].n / d->mset[t].n;
  return (double)d->wset[0].n / d->wset[t].n;
}

/* Seconds per pass: passes for at least `seconds`, at least 2, after one to warm up. */
static double time_pass(const bench_data *d, int kind, int t, double seconds) {
  pass(d, kind, t);
  int n = 0;
  double t0 = cli_thread_cpu_now(), el;
  do {
    pass(d, kind, t);
    n++;
  } while ((el = cli_thread_cpu_now() - t0) < seconds || n < 2);
  return el / n;
}

/* Types a kind is measured in: the weight kinds (0, 1, 4) all four, the memory loops (2, 3)
 * f32, bf16 and int8 (a session memory has no int4 dtype). */
static int types_of(int kind) { return kind == 2 || kind == 3 ? TYPES - 1 : TYPES; }

/* The instruction the path's GEMM for type t multiplies with; -1: none measured (not x86). */
static int gemm_instr(int t) {
  const char *path = xl_cpu_path();
  if (!strcmp(path, "avx2")) return PEAK_FMA256; /* the narrow types widened to F32 */
  if (strcmp(path, "avx512")) return -1;
  if (t == 1 && xl_bf16p_wanted()) return PEAK_DPBF16;
  if (t >= 2 && xl_q8p_wanted()) return PEAK_DPBUSD;
  return PEAK_FMA512;
}

/* A row per type: the peak of its GEMM's instruction (arith_peak.h; median of the rounds)
 * and the share of it the 16-row GEMM in cache reached in this run. */
static void print_peaks(const double in_cache[TYPES], int rounds, double seconds) {
  for (int t = 0; t < TYPES; t++) {
    int instr = gemm_instr(t);
    if (instr < 0) continue;
    double g[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) g[r] = arith_peak_gops((arith_instr)instr, seconds);
    double peak = cli_median(g, rounds);
    printf("%-9s %-28s %-5s %10s %9.1f %-7s %s: the 16-row GEMM in cache at %.0f%%\n",
           xl_cpu_path(), "arithmetic peak, registers", TYPE_NAME[t], "-", peak, "GFLOP/s",
           arith_peak_name((arith_instr)instr), peak > 0 ? 100 * in_cache[t] / peak : 0.0);
  }
}

static void run_family(const bench_data *d, int rounds, double seconds) {
  static const char *const KIND[KINDS] = {"weights x 1 row, from DRAM", "weights x 16 rows, in cache",
                                          "memory: keys x query", "memory: values x probs",
                                          "weights x 16 rows, from DRAM", "weights x 8 rows, from DRAM"};
  static double sec[MAX_ROUNDS][KINDS][TYPES];
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < KINDS; k++)
      for (int j = 0; j < types_of(k); j++) {
        int t = (j + r) % types_of(k);
        sec[r][k][t] = time_pass(d, k, t, seconds) * per_f32_set(d, k, t);
      }
  double in_cache[TYPES] = {0}; /* the 16-row GEMM's median rate in cache, GFLOP/s */
  for (int k = 0; k < KINDS; k++)
    for (int t = 0; t < types_of(k); t++) {
      double s[MAX_ROUNDS], x[MAX_ROUNDS], lo = 1e300, hi = 0;
      for (int r = 0; r < rounds; r++) {
        s[r] = sec[r][k][t];
        x[r] = sec[r][k][0] / sec[r][k][t]; /* the same work: the speed beside f32's */
        lo = fmin(lo, x[r]), hi = fmax(hi, x[r]);
      }
      double per = cli_median(s, rounds), ratio = cli_median(x, rounds);
      if (k == 1) in_cache[t] = work_of(d, k, t) / per / 1e9;
      printf("%-9s %-28s %-5s %10.3f %9.1f %-7s %6.2fx [%4.2f, %4.2f]\n", xl_cpu_path(), KIND[k],
             TYPE_NAME[t], per * 1e3, work_of(d, k, t) / per / 1e9, k == 1 || k >= 4 ? "GFLOP/s" : "GB/s",
             ratio, lo, hi);
    }
  print_peaks(in_cache, rounds, seconds);
  fflush(stdout);
}

/* A copy of n bytes at a new address in set s; NULL when out of memory. */
static void *set_copy(stream_set *s, const void *src, size_t n) {
  void *p = malloc(n);
  if (!p) return NULL;
  memcpy(p, src, n);
  s->blocks[s->n_blocks++] = p;
  return p;
}

/* Bytes of type t's view of one [OUT, IN] matrix: its data, and its scales (halves in panels,
 * else floats; none for f32 and bf16). */
static void view_bytes(const xl_wmat *w, size_t *data, size_t *scales) {
  const int n = OUT, k = IN;
  *scales = 0;
  switch (w->type) {
    case XL_WEIGHTS_F32: *data = w->panels ? xl_f32p_count(n, k) * 4 : (size_t)n * k * 4; break;
    case XL_WEIGHTS_BF16: *data = w->panels ? xl_bf16p_count(n, k) * 2 : (size_t)n * k * 2; break;
    case XL_WEIGHTS_INT8:
      *data = w->panels ? xl_q8p_bytes(n, k) : (size_t)n * k;
      *scales = w->panels ? xl_q8p_scale_count(n, k) * 2 : (size_t)n * xl_q8_blocks(k) * 4;
      break;
    case XL_WEIGHTS_INT4:
      *data = w->panels ? xl_q4p_bytes(n, k) : (size_t)n * xl_q4_row_bytes(k);
      *scales = w->panels ? xl_q8p_scale_count(n, k) * 2 : (size_t)n * xl_q8_blocks(k) * 4;
      break;
  }
}

/* Type t's weight set: the n_big matrices, then copies until it has F32's bytes; the views as
 * the selected CPU path reads them (matrix_view). */
static int weight_set_make(bench_data *d, int t) {
  stream_set *s = &d->wset[t];
  xl_wmat w0 = matrix_view(&d->big[0], t, IN), f0 = matrix_view(&d->big[0], 0, IN);
  size_t data, scales, f32_data, none;
  view_bytes(&w0, &data, &scales);
  view_bytes(&f0, &f32_data, &none);
  const int copies = (int)((f32_data + data + scales - 1) / (data + scales)); /* >= 1 */
  s->n = d->n_big * copies;
  s->w = calloc((size_t)s->n, sizeof *s->w);
  s->blocks = calloc((size_t)s->n * 2, sizeof *s->blocks);
  if (!s->w || !s->blocks) return 1;
  for (int i = 0; i < s->n; i++) {
    xl_wmat w = matrix_view(&d->big[i % d->n_big], t, IN);
    if (i >= d->n_big) { /* a copy at new addresses */
      if (!(w.data = set_copy(s, w.data, data))) return 1;
      if (w.scales && !(w.scales = set_copy(s, w.scales, scales))) return 1;
      if (w.panel_scales && !(w.panel_scales = set_copy(s, w.panel_scales, scales))) return 1;
    }
    s->w[i] = w;
  }
  return 0;
}

/* Memory dtype t's set: the n_mem session layers, then copies of that dtype's arrays until it
 * has F32's bytes (f32 4 bytes a value; bf16 2; int8 1 and a float per 64). */
static int memory_set_make(bench_data *d, int t) {
  stream_set *s = &d->mset[t];
  const size_t e = (size_t)HD * POS, sc = (size_t)H * POS * 4;
  const int copies = t == 0 ? 1 : t == 1 ? 2 : (int)((e * 4 + e + sc - 1) / (e + sc));
  s->n = d->n_mem * copies;
  s->mem = calloc((size_t)s->n, sizeof *s->mem);
  s->blocks = calloc((size_t)s->n * 4, sizeof *s->blocks);
  if (!s->mem || !s->blocks) return 1;
  for (int i = 0; i < s->n; i++) {
    const memory *m = &d->mem[i % d->n_mem];
    memory *c = &s->mem[i];
    *c = *m;
    if (i < d->n_mem) continue;
    if (t == 0 && (!(c->k32 = set_copy(s, m->k32, e * 4)) || !(c->v32 = set_copy(s, m->v32, e * 4))))
      return 1;
    if (t == 1 && (!(c->kbf = set_copy(s, m->kbf, e * 2)) || !(c->vbf = set_copy(s, m->vbf, e * 2))))
      return 1;
    if (t == 2 && (!(c->k8 = set_copy(s, m->k8, e)) || !(c->v8 = set_copy(s, m->v8, e)) ||
                   !(c->ks = set_copy(s, m->ks, sc)) || !(c->vs = set_copy(s, m->vs, sc))))
      return 1;
  }
  return 0;
}

static void set_free(stream_set *s) {
  for (int i = 0; i < s->n_blocks; i++) free(s->blocks[i]);
  free(s->blocks), free(s->w), free(s->mem);
}

static int data_make(bench_data *d, int mib) {
  uint64_t seed = 42;
  memset(d, 0, sizeof *d);
  d->n_big = mib * 1048576.0 / (4.0 * OUT * IN) + 0.5; /* F32 bytes of the set: about mib */
  d->n_mem = mib * 1048576.0 / (4.0 * HD * POS) + 0.5;
  if (d->n_big < 1) d->n_big = 1;
  if (d->n_mem < 1) d->n_mem = 1;
  d->big = calloc((size_t)d->n_big, sizeof *d->big);
  d->mem = calloc((size_t)d->n_mem, sizeof *d->mem);
  d->x = malloc((size_t)ROWS16 * IN * sizeof *d->x);
  d->y = malloc((size_t)ROWS16 * OUT * sizeof *d->y);
  d->p = malloc((size_t)H * POS * sizeof *d->p);
  d->s = malloc(POS * sizeof *d->s);
  d->out = calloc(HD, sizeof *d->out);
  if (!d->big || !d->mem || !d->x || !d->y || !d->p || !d->s || !d->out) return 1;
  for (int i = 0; i < ROWS16 * IN; i++) d->x[i] = frand(&seed);
  for (int i = 0; i < H * POS; i++) d->p[i] = (1.0f + frand(&seed)) / POS;
  for (int i = 0; i < d->n_big; i++)
    if (matrix_make(&d->big[i], OUT, IN, &seed)) return 1;
  if (matrix_make(&d->square, SQ, SQ, &seed)) return 1;
  for (int i = 0; i < d->n_mem; i++)
    if (memory_make(&d->mem[i], &seed)) return 1;
  for (int t = 0; t < TYPES - 1; t++)
    if (memory_set_make(d, t)) return 1;
  return 0; /* the weight sets: per CPU path (weight_sets_make) */
}

/* Every type's weight set in the layouts the selected CPU path's kernels read (panels or
 * rows); 1 when out of memory. */
static int weight_sets_make(bench_data *d) {
  for (int t = 0; t < TYPES; t++) {
    set_free(&d->wset[t]);
    memset(&d->wset[t], 0, sizeof d->wset[t]);
    if (weight_set_make(d, t)) return 1;
  }
  return 0;
}

static void data_free(bench_data *d) {
  for (int t = 0; t < TYPES; t++) set_free(&d->wset[t]);
  for (int t = 0; t < TYPES - 1; t++) set_free(&d->mset[t]);
  for (int i = 0; d->big && i < d->n_big; i++) matrix_free(&d->big[i]);
  for (int i = 0; d->mem && i < d->n_mem; i++) memory_free(&d->mem[i]);
  matrix_free(&d->square);
  free(d->big), free(d->mem), free(d->x), free(d->y), free(d->p), free(d->s), free(d->out);
}

int main(int argc, char **argv) {
  const char *cmd = "bench_kernels", *cpus = "";
  int rounds = 5, mib = 256;
  float seconds = 0.5f;
  for (int i = 1; i < argc; i++) {
    int ok = 1;
    if (!strcmp(argv[i], "--cpu")) ok = cli_str_arg(cmd, argc, argv, &i, &cpus);
    else if (!strcmp(argv[i], "--rounds")) ok = cli_int_arg(cmd, argc, argv, &i, 1, MAX_ROUNDS, &rounds);
    else if (!strcmp(argv[i], "--mib")) ok = cli_int_arg(cmd, argc, argv, &i, 1, 1 << 16, &mib);
    else if (!strcmp(argv[i], "--seconds")) ok = cli_float_arg(cmd, argc, argv, &i, 0.001, 60, &seconds);
    else {
      fprintf(stderr, "usage: bench_kernels [--cpu P1,P2,..] [--seconds S (0.5)] [--rounds R (5)] "
                      "[--mib M (256: MiB of every type's DRAM sets)]\n");
      return 2;
    }
    if (!ok) return 2;
  }
  char list[128], *paths[8], *save = NULL; /* every path checked before anything is made */
  int n = 0, rc = 0;
  snprintf(list, sizeof list, "%s", cpus);
  for (char *p = strtok_r(list, ",", &save); p && n < 8; p = strtok_r(NULL, ",", &save)) {
    if (!cli_select_cpu(cmd, p)) return 2;
    paths[n++] = p;
  }
  if (n == 0 && !cli_select_cpu(cmd, NULL)) return 2;
  bench_data d;
  if (data_make(&d, mib)) {
    fprintf(stderr, "bench_kernels: out of memory\n");
    data_free(&d);
    return 1;
  }
  printf("bench_kernels: weights [%d, %d] x %d in f32 (from DRAM: every type's set of as many bytes) "
         "and [%d, %d] (in cache); session memory %d heads x %d, %d positions, x %d layers in f32 "
         "(the same); %d rounds of at least %.2g s per rate, this "
         "thread's CPU time; time per pass and x f32 (its speed beside f32's for the same work) "
         "are medians of the rounds [lowest, highest ratio]\n\n",
         OUT, IN, d.n_big, SQ, SQ, H, DH, POS, d.n_mem, rounds, seconds);
  printf("%-9s %-28s %-5s %10s %9s %-7s %s\n", "cpu path", "kernel", "type", "ms/pass", "rate", "",
         "x f32 [low, high]");
  for (int i = 0; i < (n ? n : 1); i++) {
    if (n && !cli_select_cpu(cmd, paths[i])) rc = 2;
    else if (weight_sets_make(&d)) {
      fprintf(stderr, "bench_kernels: out of memory\n");
      rc = 1;
      break;
    } else run_family(&d, rounds, seconds);
  }
  data_free(&d);
  return rc;
}
