/*
 * cli_common.c: option parsing, model loading and file reading for the CLI subcommands
 * (main thread only). Every failure prints one line naming the option or file.
 */
#include "cli_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "default_model.h"

int cli_str_arg(const char *cmd, int argc, char **argv, int *i, const char **out) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "xlserve %s: %s needs a value\n", cmd, argv[*i]);
    return 0;
  }
  *out = argv[++*i];
  return 1;
}

int cli_int_arg(const char *cmd, int argc, char **argv, int *i, long lo, long hi, int *out) {
  const char *v;
  if (!cli_str_arg(cmd, argc, argv, i, &v)) return 0;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "xlserve %s: %s: '%s' is not an integer in [%ld, %ld]\n", cmd, argv[*i - 1],
            v, lo, hi);
    return 0;
  }
  *out = (int)x;
  return 1;
}

int cli_u64_arg(const char *cmd, int argc, char **argv, int *i, uint64_t *out) {
  const char *v;
  if (!cli_str_arg(cmd, argc, argv, i, &v)) return 0;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end || *v == '-') {
    fprintf(stderr, "xlserve %s: %s: '%s' is not a non-negative integer\n", cmd, argv[*i - 1], v);
    return 0;
  }
  *out = x;
  return 1;
}

int cli_float_arg(const char *cmd, int argc, char **argv, int *i, double lo, double hi,
                  float *out) {
  const char *v;
  if (!cli_str_arg(cmd, argc, argv, i, &v)) return 0;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= lo && x <= hi)) {
    fprintf(stderr, "xlserve %s: %s: '%s' is not a number in [%g, %g]\n", cmd, argv[*i - 1], v,
            lo, hi);
    return 0;
  }
  *out = (float)x;
  return 1;
}

xl_model *cli_load_model(const char *cmd, const char *dir, const xl_load_options *opts) {
  xl_model *m = NULL;
  xl_error err;
  if (!dir) dir = xl_default_model_dir(); /* installed or build-tree bundled model */
  if (xl_model_load(dir, opts, &m, &err) != XL_OK) {
    fprintf(stderr, "xlserve %s: %s\n", cmd, err.message);
    return NULL;
  }
  return m;
}

char *cli_read_file(const char *cmd, const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "xlserve %s: %s: %s\n", cmd, path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n + 1 >= cap) {
      char *b = realloc(buf, cap *= 2);
      if (!b) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f), read_errno = errno;
  fclose(f);
  if (!buf || bad) {
    fprintf(stderr, "xlserve %s: %s: %s\n", cmd, path,
            buf ? strerror(read_errno) : "out of memory");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

int32_t *cli_read_ids(const char *cmd, const char *path, int vocab, size_t *n_out) {
  size_t len;
  char *text = cli_read_file(cmd, path, &len);
  if (!text) return NULL;
  size_t cap = len / 2 + 1, n = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  if (!ids) fprintf(stderr, "xlserve %s: out of memory\n", cmd);
  char *p = text;
  while (ids) {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || (*end && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r')) {
      fprintf(stderr, "xlserve %s: %s: token %zu is not an integer\n", cmd, path, n + 1);
      free(ids);
      ids = NULL;
      break;
    }
    if (v < 0 || v >= vocab) {
      fprintf(stderr, "xlserve %s: %s: token id %ld (token %zu) is outside the vocabulary [0, %d)\n",
              cmd, path, v, n + 1, vocab);
      free(ids);
      ids = NULL;
      break;
    }
    ids[n++] = (int32_t)v; /* n <= len/2 + 1: every id takes at least one digit and a space */
    p = end;
  }
  free(text);
  *n_out = n;
  return ids;
}

int cli_engine_arg(const char *cmd, int argc, char **argv, int *i, cli_engine_flags *f, int *ok) {
  const char *a = argv[*i], **to = !strcmp(a, "--model")      ? &f->model_dir
                                   : !strcmp(a, "--cpu")      ? &f->cpu
                                   : !strcmp(a, "--kv-dtype") ? &f->kv_dtype
                                   : !strcmp(a, "--weights")  ? &f->weights
                                                              : NULL;
  if (!to) return 0;
  *ok = cli_str_arg(cmd, argc, argv, i, to);
  return 1;
}

/* The value of a choice: `flag` if given, else the environment variable `env`, else NULL. */
static const char *flag_or_env(const char *flag, const char *env) { return flag ? flag : getenv(env); }

/* Prints "xlserve CMD: --FLAG NAME: problem" or "xlserve CMD: ENV=NAME: problem"; returns 0. */
static int bad_choice(const char *cmd, const char *flag_name, const char *flag, const char *env,
                      const char *problem) {
  if (flag) fprintf(stderr, "xlserve %s: %s %s: %s\n", cmd, flag_name, flag, problem);
  else fprintf(stderr, "xlserve %s: %s=%s: %s\n", cmd, env, getenv(env), problem);
  return 0;
}

int cli_select_cpu(const char *cmd, const char *flag) {
  xl_error err;
  if (xl_cpu_select(flag_or_env(flag, "XLSERVE_CPU"), &err) == XL_OK) return 1;
  return bad_choice(cmd, "--cpu", flag, "XLSERVE_CPU", err.message);
}

int cli_engine_select(const char *cmd, const cli_engine_flags *f, xl_load_options *opts) {
  if (!cli_select_cpu(cmd, f->cpu)) return 0;
  const char *kv = flag_or_env(f->kv_dtype, "XLSERVE_KV_DTYPE");
  opts->kv_dtype = XL_KV_F32;
  if (kv && *kv && xl_kv_dtype_parse(kv, &opts->kv_dtype))
    return bad_choice(cmd, "--kv-dtype", f->kv_dtype, "XLSERVE_KV_DTYPE",
                      "not one of f32, bf16, int8");
  const char *w = flag_or_env(f->weights, "XLSERVE_WEIGHTS");
  int wt = w && *w ? xl_weights_parse(w) : XL_WEIGHTS_F32;
  if (wt < 0) return bad_choice(cmd, "--weights", f->weights, "XLSERVE_WEIGHTS",
                                "not one of f32, bf16, int8, int4");
  opts->weights = (xl_weights)wt;
  return 1;
}

double cli_thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double cli_median(double *v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: n is small */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void cli_random_tokens(int32_t *t, int n, int vocab, xl_rng *rng) {
  for (int i = 0; i < n; i++) t[i] = (int32_t)(xl_rng_next(rng) % (uint64_t)vocab);
}

int cli_prefill(const char *cmd, xl_model *m, xl_workspace *ws, xl_state *st, const int32_t *t,
                int n) {
  xl_error err;
  for (int s = 0; s < n; s += 512) {
    xl_feed f = {st, t + s, n - s < 512 ? n - s : 512, NULL, NULL, NULL, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) {
      fprintf(stderr, "xlserve %s: %s\n", cmd, err.message);
      return 0;
    }
  }
  return 1;
}

xl_state *cli_full_state(const char *cmd, xl_model *m, xl_rng *rng) {
  const xl_config *c = xl_model_config(m);
  xl_workspace *ws = NULL;
  xl_state *st = NULL;
  xl_error err;
  int n_warm = c->mem_len > 0 ? c->mem_len : 1;
  int32_t *t = malloc((size_t)n_warm * sizeof *t);
  int ok = t && !xl_workspace_new(m, &ws, &err) && !xl_state_new(m, &st, &err);
  if (!ok)
    fprintf(stderr, "xlserve %s: no session with a full memory: %s\n", cmd,
            t ? err.message : "out of memory");
  if (ok) {
    cli_random_tokens(t, n_warm, c->vocab_size, rng);
    ok = cli_prefill(cmd, m, ws, st, t, n_warm);
  }
  if (!ok) {
    xl_state_free(st);
    st = NULL;
  }
  free(t);
  xl_workspace_free(ws);
  return st;
}
