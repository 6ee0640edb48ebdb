/*
 * cli_eval.c: `xlserve eval`: evaluates a text (or token ids) segment by segment with memory,
 * exactly as the reference evaluation loop: inputs t[0..n-2], targets t[1..n-1], cut into
 * consecutive segments of tgt_len, the memory carried across, empty at the start.
 * Prints bits per byte (byte models) or perplexity (word models) and tokens/s; --dump-nll
 * writes -log p(t[i+1] | t[0..i]) per line. Main thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_common.h"
#include "util.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: xlserve eval [--model DIR] (--text FILE | --ids FILE) [--tgt-len L]\n"
          "                    [--mem-len M] [--clamp-len C] [--same-length | --no-same-length]\n"
          "                    [--dump-nll OUT] [--threads N] [--cpu PATH] [--kv-dtype D]\n"
          "                    [--weights W]\n"
          "  --text FILE       text to tokenize with the model's tokenizer\n"
          "  --ids FILE        whitespace-separated token ids\n"
          "  --tgt-len L       segment length (default: config tgt_len, else 128); 1 = one-token\n"
          "                    decoding through the cached path\n"
          "  --mem-len, --clamp-len, --same-length/--no-same-length  override config.json\n"
          "  --dump-nll OUT    natural-log NLL of every predicted token, one per line\n"
          "  --threads N       threads of one step: its products with the weights and decode\n"
          "                    attention split over them (same results for any N); OpenBLAS\n"
          "                    gets N too (default 1; OpenBLAS: the library's)\n"
          "  --cpu PATH        kernels: auto, avx512, avx2, neon, portable (default: XLSERVE_CPU,\n"
          "                    else auto)\n"
          "  --kv-dtype D      memory dtype: f32, bf16, int8 (default: XLSERVE_KV_DTYPE, else f32)\n"
          "  --weights W       f32, bf16, int8 or int4 weight matrices (default: XLSERVE_WEIGHTS, else\n"
          "                    f32)\n");
}

int cli_eval_main(int argc, char **argv) {
  const char *cmd = "eval", *text_path = NULL, *ids_path = NULL, *dump_path = NULL;
  cli_engine_flags ef = {NULL, NULL, NULL, NULL};
  int tgt_len = 0, threads = 0;
  xl_load_options opts = XL_LOAD_OPTIONS_DEFAULT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int ok = 1;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (cli_engine_arg(cmd, argc, argv, &i, &ef, &ok)) {
      /* --model, --cpu, --kv-dtype, --weights */
    } else if (!strcmp(a, "--text")) ok = cli_str_arg(cmd, argc, argv, &i, &text_path);
    else if (!strcmp(a, "--ids")) ok = cli_str_arg(cmd, argc, argv, &i, &ids_path);
    else if (!strcmp(a, "--dump-nll")) ok = cli_str_arg(cmd, argc, argv, &i, &dump_path);
    else if (!strcmp(a, "--tgt-len")) ok = cli_int_arg(cmd, argc, argv, &i, 1, 1 << 20, &tgt_len);
    else if (!strcmp(a, "--mem-len")) ok = cli_int_arg(cmd, argc, argv, &i, 0, 1 << 20, &opts.mem_len);
    else if (!strcmp(a, "--clamp-len")) ok = cli_int_arg(cmd, argc, argv, &i, -1, 1 << 20, &opts.clamp_len);
    else if (!strcmp(a, "--same-length")) opts.same_length = 1;
    else if (!strcmp(a, "--no-same-length")) opts.same_length = 0;
    else if (!strcmp(a, "--threads")) ok = cli_int_arg(cmd, argc, argv, &i, 1, 256, &threads);
    else {
      fprintf(stderr, "xlserve eval: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (!ok) return 2;
  }
  if (!!text_path == !!ids_path) {
    fprintf(stderr, "xlserve eval: give exactly one of --text FILE or --ids FILE\n");
    return 2;
  }
  if (!cli_engine_select(cmd, &ef, &opts)) return 2;
  xl_set_blas_threads(threads);
  xl_model *m = cli_load_model(cmd, ef.model_dir, &opts);
  if (!m) return 1;
  const xl_config *c = xl_model_config(m);
  if (tgt_len == 0) tgt_len = c->tgt_len > 0 ? c->tgt_len : 128;

  int rc = 1;
  int32_t *ids = NULL;
  size_t n = 0;
  float *lp = NULL;
  xl_state *st = NULL;
  xl_workspace *ws = NULL;
  FILE *dump = NULL;
  xl_error err;
  if (ids_path) {
    if (!(ids = cli_read_ids(cmd, ids_path, c->vocab_size, &n))) goto out;
  } else {
    size_t len;
    char *text = cli_read_file(cmd, text_path, &len);
    if (!text) goto out;
    xl_code tc = xl_tokenize(m, text, len, &ids, &n, &err);
    free(text);
    if (tc) {
      fprintf(stderr, "xlserve eval: %s: %s\n", text_path, err.message);
      goto out;
    }
  }
  if (n < 2) {
    fprintf(stderr, "xlserve eval: %s: needs at least 2 tokens, has %zu\n",
            ids_path ? ids_path : text_path, n);
    goto out;
  }
  if (dump_path && !(dump = fopen(dump_path, "w"))) {
    perror(dump_path);
    goto out;
  }
  lp = malloc((n - 1) * sizeof *lp);
  if (!lp || xl_state_new(m, &st, &err) || xl_workspace_new(m, &ws, &err)) {
    fprintf(stderr, "xlserve eval: out of memory\n");
    goto out;
  }
  if (threads > 1 && xl_workspace_set_threads(ws, threads, &err)) {
    fprintf(stderr, "xlserve eval: --threads %d: %s\n", threads, err.message);
    goto out;
  }
  double t0 = now_mono();
  for (size_t s = 0; s < n - 1; s += (size_t)tgt_len) {
    int len = (int)(n - 1 - s < (size_t)tgt_len ? n - 1 - s : (size_t)tgt_len);
    xl_feed f = {st, ids + s, len, ids + s + 1, lp + s, NULL, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) {
      fprintf(stderr, "xlserve eval: %s\n", err.message);
      goto out;
    }
  }
  double secs = now_mono() - t0, total = 0.0;
  for (size_t i = 0; i < n - 1; i++) {
    total -= lp[i];
    if (dump) fprintf(dump, "%.9g\n", -(double)lp[i]);
  }
  double mean = total / (double)(n - 1);
  printf("model %s  tokens %zu  tgt_len %d  mem_len %d  clamp_len %d  same_length %d  weights %s\n",
         xl_model_dir(m), n, tgt_len, c->mem_len, c->clamp_len, c->same_length,
         xl_weights_name(xl_model_weights(m)));
  if (c->tokenizer == XL_TOKENIZER_BYTES || c->tokenizer == XL_TOKENIZER_BYTE_TABLE ||
      c->tokenizer == XL_TOKENIZER_CHAR_TABLE) /* character models: the authors' bpc */
    printf("nll/token %.6f  bits/%s %.4f  tokens/s %.1f\n", mean,
           c->tokenizer == XL_TOKENIZER_CHAR_TABLE ? "char" : "byte", mean / log(2.0),
           (double)(n - 1) / secs);
  else
    printf("nll/token %.6f  perplexity %.3f  tokens/s %.1f\n", mean, exp(mean),
           (double)(n - 1) / secs);
  rc = 0;
out:
  if (dump && fclose(dump) != 0 && rc == 0) {
    perror(dump_path);
    rc = 1;
  }
  free(lp);
  free(ids);
  xl_state_free(st);
  xl_workspace_free(ws);
  xl_model_free(m);
  return rc;
}
