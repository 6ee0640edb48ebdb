/*
 * cli_common.c: option parsing, model loading and file reading for the CLI subcommands
 * (main thread only). Every failure prints one line naming the option or file.
 */
#include "cli_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cli_select_cpu(const char *cmd, const char *flag) {
  const char *env = getenv("XLSERVE_CPU"), *name = flag ? flag : env;
  xl_error err;
  if (xl_cpu_select(name, &err) == XL_OK) return 1;
  if (flag) fprintf(stderr, "xlserve %s: --cpu %s: %s\n", cmd, flag, err.message);
  else fprintf(stderr, "xlserve %s: XLSERVE_CPU=%s: %s\n", cmd, env, err.message);
  return 0;
}

int cli_kv_dtype(const char *cmd, const char *flag, xl_kv_dtype *out) {
  const char *env = getenv("XLSERVE_KV_DTYPE"), *name = flag ? flag : env;
  *out = XL_KV_F32;
  if (!name || !*name || !xl_kv_dtype_parse(name, out)) return 1;
  if (flag) fprintf(stderr, "xlserve %s: --kv-dtype %s: not one of f32, bf16, int8\n", cmd, flag);
  else fprintf(stderr, "xlserve %s: XLSERVE_KV_DTYPE=%s: not one of f32, bf16, int8\n", cmd, env);
  return 0;
}
