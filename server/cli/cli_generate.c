/*
 * cli_generate.c: `xlserve generate`: feeds a prompt, then samples N tokens one at a time
 * through the cached decode path, streaming complete UTF-8 text to stdout. Main thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_common.h"
#include "util.h"

#define PROMPT_CHUNK 512

static void usage(FILE *f) {
  fprintf(f,
          "usage: xlserve generate [--model DIR] (--prompt TEXT | --prompt-file FILE) [-n N]\n"
          "                        [--seed S] [--temperature T] [--top-k K] [--top-p P]\n"
          "                        [--min-p P] [--repetition-penalty R] [--threads N]\n"
          "                        [--cpu PATH] [--kv-dtype D] [--weights W]\n"
          "  defaults: -n 200, temperature 1, top-k 0 (off), top-p 1 (off), seed from time\n"
          "  --cpu PATH: kernels auto, avx512, avx2, neon, portable (default: XLSERVE_CPU, else auto)\n"
          "  --kv-dtype D: memory dtype f32, bf16, int8 (default: XLSERVE_KV_DTYPE, else f32)\n"
          "  --weights W: f32, bf16, int8 or int4 weight matrices (default: XLSERVE_WEIGHTS, else f32)\n"
          "  --threads N: threads of one step (its products with the weights and its attention\n"
          "               split over them, same results for any N; OpenBLAS gets N too; default 1)\n");
}

int cli_generate_main(int argc, char **argv) {
  const char *cmd = "generate", *prompt = NULL, *prompt_file = NULL;
  cli_engine_flags ef = {NULL, NULL, NULL, NULL};
  int n_new = 200, threads = 0, seeded = 0;
  uint64_t seed = 0;
  xl_sampling sp = XL_SAMPLING_DEFAULT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int ok = 1;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (cli_engine_arg(cmd, argc, argv, &i, &ef, &ok)) {
      /* --model, --cpu, --kv-dtype, --weights */
    } else if (!strcmp(a, "--prompt")) ok = cli_str_arg(cmd, argc, argv, &i, &prompt);
    else if (!strcmp(a, "--prompt-file")) ok = cli_str_arg(cmd, argc, argv, &i, &prompt_file);
    else if (!strcmp(a, "-n")) ok = cli_int_arg(cmd, argc, argv, &i, 0, 1 << 24, &n_new);
    else if (!strcmp(a, "--seed")) ok = seeded = cli_u64_arg(cmd, argc, argv, &i, &seed);
    else if (!strcmp(a, "--temperature")) ok = cli_float_arg(cmd, argc, argv, &i, 0, 100, &sp.temperature);
    else if (!strcmp(a, "--top-k")) ok = cli_int_arg(cmd, argc, argv, &i, 0, 1 << 30, &sp.top_k);
    else if (!strcmp(a, "--top-p")) ok = cli_float_arg(cmd, argc, argv, &i, 1e-6, 1, &sp.top_p);
    else if (!strcmp(a, "--min-p")) ok = cli_float_arg(cmd, argc, argv, &i, 0, 1, &sp.min_p);
    else if (!strcmp(a, "--repetition-penalty"))
      ok = cli_float_arg(cmd, argc, argv, &i, 1e-3, 10, &sp.repetition_penalty);
    else if (!strcmp(a, "--threads")) ok = cli_int_arg(cmd, argc, argv, &i, 1, 256, &threads);
    else {
      fprintf(stderr, "xlserve generate: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (!ok) return 2;
  }
  if (!!prompt == !!prompt_file) {
    fprintf(stderr, "xlserve generate: give exactly one of --prompt TEXT or --prompt-file FILE\n");
    return 2;
  }
  xl_load_options opts = XL_LOAD_OPTIONS_DEFAULT;
  if (!cli_engine_select(cmd, &ef, &opts)) return 2;
  xl_set_blas_threads(threads);
  xl_model *m = cli_load_model(cmd, ef.model_dir, &opts);
  if (!m) return 1;
  const int vocab = xl_model_config(m)->vocab_size;
  int rc = 1;
  char *file_text = NULL;
  int32_t *ids = NULL, *history = NULL;
  float *lp = NULL;
  void *scratch = NULL;
  xl_state *st = NULL;
  xl_workspace *ws = NULL;
  xl_error err;
  size_t len, n_ids;
  if (prompt_file) {
    if (!(file_text = cli_read_file(cmd, prompt_file, &len))) goto out;
    prompt = file_text;
  } else {
    len = strlen(prompt);
  }
  if (xl_tokenize(m, prompt, len, &ids, &n_ids, &err)) {
    fprintf(stderr, "xlserve generate: prompt: %s\n", err.message);
    goto out;
  }
  if (n_ids == 0) {
    fprintf(stderr, "xlserve generate: the prompt is empty (it needs at least one token)\n");
    goto out;
  }
  lp = malloc((size_t)vocab * sizeof *lp);
  history = malloc((n_ids + (size_t)n_new) * sizeof *history);
  scratch = malloc(xl_sampler_scratch_bytes(vocab));
  if (!lp || !history || !scratch || xl_state_new(m, &st, &err) || xl_workspace_new(m, &ws, &err)) {
    fprintf(stderr, "xlserve generate: out of memory\n");
    goto out;
  }
  if (threads > 1 && xl_workspace_set_threads(ws, threads, &err)) {
    fprintf(stderr, "xlserve generate: --threads %d: %s\n", threads, err.message);
    goto out;
  }
  memcpy(history, ids, n_ids * sizeof *ids);
  xl_rng rng;
  xl_rng_seed(&rng, seeded ? seed : (uint64_t)(now_mono() * 1e9));
  for (size_t s = 0; s < n_ids; s += PROMPT_CHUNK) {
    int chunk = (int)(n_ids - s < PROMPT_CHUNK ? n_ids - s : PROMPT_CHUNK);
    xl_feed f = {st, ids + s, chunk, NULL, NULL, s + (size_t)chunk == n_ids ? lp : NULL, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) {
      fprintf(stderr, "xlserve generate: %s\n", err.message);
      goto out;
    }
  }
  xl_detok dt;
  xl_detok_init(&dt);
  char text[4096];
  size_t n_hist = n_ids;
  for (int t = 0; t < n_new; t++) {
    int32_t tok = xl_sample(lp, vocab, &sp, history, n_hist, &rng, scratch, NULL);
    history[n_hist++] = tok;
    size_t w = xl_detok_push(m, &dt, tok, text, sizeof text);
    if (w) {
      fwrite(text, 1, w, stdout);
      fflush(stdout);
    }
    if (t + 1 == n_new) break; /* the last token needs no forward */
    xl_feed f = {st, &tok, 1, NULL, NULL, lp, NULL};
    if (xl_forward(m, ws, &f, 1, &err)) {
      fprintf(stderr, "\nxlserve generate: %s\n", err.message);
      goto out;
    }
  }
  size_t w = xl_detok_flush(m, &dt, text, sizeof text);
  fwrite(text, 1, w, stdout);
  fputc('\n', stdout);
  rc = 0;
out:
  free(file_text);
  free(ids);
  free(history);
  free(lp);
  free(scratch);
  xl_state_free(st);
  xl_workspace_free(ws);
  xl_model_free(m);
  return rc;
}
