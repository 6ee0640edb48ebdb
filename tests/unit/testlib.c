/*
 * testlib.c: the unit-test harness and the C model fixture (see testlib.h).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fnmatch.h>
#include <ftw.h>
#include <time.h>
#include <unistd.h>

int tl_passed, tl_failed;

static int tl_ran;

int tl_selected(const char *name) {
  const char *want = getenv("XL_TEST_RUN");
  int yes = !want || !*want;
  for (const char *p = want; !yes && p && *p;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    char pattern[256];
    if (n < sizeof pattern) {
      memcpy(pattern, p, n);
      pattern[n] = 0;
      yes = fnmatch(pattern, name, 0) == 0;
    }
    p = comma ? comma + 1 : NULL;
  }
  tl_ran += yes;
  return yes;
}

/* XLSERVE_CPU=PATH runs the whole test executable (unit test, fuzzer, seeder) on that kernel
 * family, before main: ctest registers the engine tests once per path this way. A path this
 * CPU cannot run exits 77 (ctest: skipped); an unknown name is an error. */
__attribute__((constructor)) static void tl_select_cpu_from_env(void) {
  const char *path = getenv("XLSERVE_CPU");
  if (!path || !*path) return;
  xl_error err;
  if (xl_cpu_select(path, &err) == XL_OK) return;
  if (xl_cpu_can_run(path) == 0) {
    printf("skipped: XLSERVE_CPU=%s: %s\n", path, err.message);
    exit(77);
  }
  fprintf(stderr, "XLSERVE_CPU=%s: %s\n", path, err.message);
  exit(2);
}

int tl_summary(void) {
  const char *want = getenv("XL_TEST_RUN");
  if (want && *want && !tl_ran) {
    printf("no test function matches XL_TEST_RUN=%s\n", want);
    return 1;
  }
  printf("%d passed, %d failed\n", tl_passed, tl_failed);
  return tl_failed ? 1 : 0;
}

double tl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define TL_MAX_TMPDIRS 64
static char tl_dirs[TL_MAX_TMPDIRS][1024];
static int tl_n_dirs;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void remove_tmpdirs(void) {
  for (int i = 0; i < tl_n_dirs; i++) nftw(tl_dirs[i], remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

const char *tl_tmpdir(const char *tag) {
  const char *base = getenv("XL_TMP");
  if (!base || !*base) base = "/tmp";
  mkdir(base, 0755);
  if (tl_n_dirs == TL_MAX_TMPDIRS) {
    fprintf(stderr, "tl_tmpdir: too many temporary directories\n");
    exit(2);
  }
  char *d = tl_dirs[tl_n_dirs];
  snprintf(d, sizeof tl_dirs[0], "%s/xl-%s-XXXXXX", base, tag);
  if (!mkdtemp(d)) {
    perror("mkdtemp");
    exit(2);
  }
  if (tl_n_dirs++ == 0) atexit(remove_tmpdirs);
  return d; /* removed at exit */
}

int tl_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, len, f);
  return (fclose(f) == 0 && w == len) ? 0 : -1;
}

typedef struct {
  char name[128];
  int rows, cols; /* cols 0: 1-D */
  float *data;
} fx_tensor;

static uint32_t fx_rng;
static float fx_uniform(void) { /* xorshift32 in [-1, 1) */
  fx_rng ^= fx_rng << 13;
  fx_rng ^= fx_rng >> 17;
  fx_rng ^= fx_rng << 5;
  return (float)((fx_rng >> 8) * (2.0 / 16777216.0) - 1.0);
}

static void fx_add(fx_tensor *t, int *n, const char *name, int rows, int cols, float scale,
                   float offset) {
  fx_tensor *x = &t[(*n)++];
  snprintf(x->name, sizeof x->name, "%s", name);
  x->rows = rows;
  x->cols = cols;
  size_t cnt = (size_t)rows * (cols ? cols : 1);
  x->data = malloc(cnt * sizeof(float));
  for (size_t i = 0; i < cnt; i++) x->data[i] = offset + scale * fx_uniform();
}

int tl_write_model(const char *dir, const tl_model_spec *s) {
  fx_rng = s->seed * 2654435761u + 1u;
  int hd = s->n_head * s->d_head, n = 0;
  fx_tensor *t = calloc((size_t)(16 * s->n_layer + 16), sizeof *t);
  char name[128];
  const int ends[4] = {0, s->vocab / 4, s->vocab / 2, s->vocab}; /* adaptive: the clusters */
  if (!s->adaptive) {
    fx_add(t, &n, "transformer.word_emb.emb_layers.0.weight", s->vocab, s->d_model, 0.5f, 0);
  } else {
    for (int i = 0; i < 3; i++) {
      snprintf(name, sizeof name, "transformer.word_emb.emb_layers.%d.weight", i);
      fx_add(t, &n, name, ends[i + 1] - ends[i], s->d_model >> i, 0.5f, 0);
      snprintf(name, sizeof name, "transformer.word_emb.emb_projs.%d", i);
      fx_add(t, &n, name, s->d_model, s->d_model >> i, 0.5f, 0);
    }
  }
  for (int l = 0; l < s->n_layer; l++) {
#define L(suffix) (snprintf(name, sizeof name, "transformer.layers.%d.%s", l, suffix), name)
    fx_add(t, &n, L("dec_attn.qkv_net.weight"), 3 * hd, s->d_model, 0.3f, 0);
    fx_add(t, &n, L("dec_attn.o_net.weight"), s->d_model, hd, 0.3f, 0);
    fx_add(t, &n, L("dec_attn.r_net.weight"), hd, s->d_model, 0.3f, 0);
    fx_add(t, &n, L("dec_attn.layer_norm.weight"), s->d_model, 0, 0.2f, 1.0f);
    fx_add(t, &n, L("dec_attn.layer_norm.bias"), s->d_model, 0, 0.2f, 0);
    fx_add(t, &n, L("dec_attn.r_w_bias"), s->n_head, s->d_head, 0.3f, 0);
    fx_add(t, &n, L("dec_attn.r_r_bias"), s->n_head, s->d_head, 0.3f, 0);
    fx_add(t, &n, L("pos_ff.CoreNet.0.weight"), s->d_inner, s->d_model, 0.3f, 0);
    fx_add(t, &n, L("pos_ff.CoreNet.0.bias"), s->d_inner, 0, 0.1f, 0);
    fx_add(t, &n, L("pos_ff.CoreNet.3.weight"), s->d_model, s->d_inner, 0.3f, 0);
    fx_add(t, &n, L("pos_ff.CoreNet.3.bias"), s->d_model, 0, 0.1f, 0);
    fx_add(t, &n, L("pos_ff.layer_norm.weight"), s->d_model, 0, 0.2f, 1.0f);
    fx_add(t, &n, L("pos_ff.layer_norm.bias"), s->d_model, 0, 0.2f, 0);
#undef L
  }
  if (!s->adaptive) {
    fx_add(t, &n, "crit.out_layers.0.bias", s->vocab, 0, 0.3f, 0);
  } else {
    for (int i = 0; i < 3; i++) {
      snprintf(name, sizeof name, "crit.out_layers.%d.bias", i);
      fx_add(t, &n, name, ends[i + 1] - ends[i], 0, 0.3f, 0);
    }
    fx_add(t, &n, "crit.cluster_weight", 2, s->d_model, 0.5f, 0);
    fx_add(t, &n, "crit.cluster_bias", 2, 0, 0.3f, 0);
  }

  /* safetensors: header JSON, padded to 8 bytes, then the tensors in order */
  size_t hcap = (size_t)n * 200 + 64, hlen = 0, off = 0;
  char *h = malloc(hcap);
  hlen += (size_t)snprintf(h + hlen, hcap - hlen, "{");
  for (int i = 0; i < n; i++) {
    size_t bytes = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1) * 4;
    if (t[i].cols)
      hlen += (size_t)snprintf(h + hlen, hcap - hlen,
                               "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "", t[i].name, t[i].rows, t[i].cols, off, off + bytes);
    else
      hlen += (size_t)snprintf(h + hlen, hcap - hlen,
                               "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "", t[i].name, t[i].rows, off, off + bytes);
    off += bytes;
  }
  hlen += (size_t)snprintf(h + hlen, hcap - hlen, "}");
  while (hlen % 8) h[hlen++] = ' ';
  char path[1200];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  fwrite(len8, 1, 8, f);
  fwrite(h, 1, hlen, f);
  for (int i = 0; i < n; i++) {
    fwrite(t[i].data, 4, (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1), f);
    free(t[i].data);
  }
  fclose(f);
  free(h);
  free(t);

  snprintf(path, sizeof path, "%s/config.json", dir);
  f = fopen(path, "w");
  if (!f) return -1;
  char cutoffs[64] = "[]";
  if (s->adaptive)
    snprintf(cutoffs, sizeof cutoffs, "[%d, %d], \"tie_projs\": [true, true, true]", ends[1],
             ends[2]);
  fprintf(f,
          "{\"vocab_size\": %d, \"cutoffs\": %s, \"d_model\": %d, \"d_embed\": %d, \"n_head\": %d,"
          " \"d_head\": %d, \"d_inner\": %d, \"div_val\": %d, \"pre_lnorm\": %s, \"n_layer\": %d,"
          " \"mem_len\": %d, \"clamp_len\": -1, \"same_length\": %s, \"untie_r\": true,"
          " \"tie_word_embeddings\": true, \"attn_type\": 0, \"tgt_len\": 8,"
          " \"xlserve_tokenizer\": \"%s\"}\n",
          s->vocab, cutoffs, s->d_model, s->d_model, s->n_head, s->d_head, s->d_inner,
          s->adaptive ? 2 : 1, s->pre_lnorm ? "true" : "false", s->n_layer, s->mem_len,
          s->same_length ? "true" : "false", s->words ? "words" : "bytes");
  fclose(f);
  if (s->words) {
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "<eos>\n<unk>\n");
    for (int i = 2; i < s->vocab; i++) fprintf(f, "w%d\n", i);
    fclose(f);
  }
  return 0;
}

xl_model *tl_load_model(const char *dir, xl_kv_dtype kv_dtype) {
  xl_load_options o = XL_LOAD_OPTIONS_DEFAULT;
  o.kv_dtype = kv_dtype;
  xl_model *m = NULL;
  xl_error err;
  if (xl_model_load(dir, &o, &m, &err)) {
    fprintf(stderr, "load: %s\n", err.message);
    return NULL;
  }
  return m;
}

void tl_tokens(int32_t *t, int n, unsigned seed) {
  for (int i = 0; i < n; i++) t[i] = (int32_t)((seed * 2654435761u + (unsigned)i * 40503u) % 251u);
}

int tl_feed_chunks(xl_model *m, xl_workspace *ws, xl_state *s, const int32_t *t, int from, int to,
                   int chunk, float *lp) {
  xl_error err;
  for (int i = from; i < to; i += chunk) {
    int len = to - i < chunk ? to - i : chunk;
    xl_feed f = {s, t + i, len, t + i + 1, lp + i, NULL, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) return -1;
  }
  return 0;
}

int tl_same_state(const xl_state *a, const xl_state *b) {
  uint8_t *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  xl_error err;
  if (xl_state_serialize(a, &x, &nx, &err) || xl_state_serialize(b, &y, &ny, &err)) return 0;
  int same = nx == ny && !memcmp(x, y, nx);
  free(x);
  free(y);
  return same;
}
