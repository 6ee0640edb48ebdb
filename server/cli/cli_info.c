/*
 * cli_info.c: `xlserve info`: a model's configuration, parameter count, per-session state
 * size and fingerprint, and the CPU path (kernel family) in use. Main thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_common.h"

int cli_info_main(int argc, char **argv) {
  const char *cmd = "info";
  cli_engine_flags ef = {NULL, NULL, NULL, NULL};
  xl_load_options opts = XL_LOAD_OPTIONS_DEFAULT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int ok = 1;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: xlserve info [--model DIR] [--mem-len M] [--cpu PATH] [--kv-dtype D]\n"
             "                   [--weights W]\n"
             "  --cpu PATH  kernels: auto, avx512, avx2, neon, portable (default: XLSERVE_CPU,\n"
             "              else auto); printed as 'cpu path' with the paths this CPU runs\n"
             "  --kv-dtype D  memory dtype f32, bf16, int8 (default: XLSERVE_KV_DTYPE, else f32);\n"
             "              the state lines give its bytes per session and per token\n"
             "  --weights W f32, bf16, int8 or int4 weight matrices (default: XLSERVE_WEIGHTS, else\n"
             "              f32); their RAM is printed as 'weights'\n");
      return 0;
    } else if (cli_engine_arg(cmd, argc, argv, &i, &ef, &ok)) {
      /* --model, --cpu, --kv-dtype, --weights */
    } else if (!strcmp(a, "--mem-len"))
      ok = cli_int_arg(cmd, argc, argv, &i, 0, 1 << 20, &opts.mem_len);
    else {
      fprintf(stderr, "xlserve info: unknown option '%s'\n", a);
      return 2;
    }
    if (!ok) return 2;
  }
  if (!cli_engine_select(cmd, &ef, &opts)) return 2;
  xl_model *m = cli_load_model(cmd, ef.model_dir, &opts);
  if (!m) return 1;
  const xl_config *c = xl_model_config(m);
  char runnable[64];
  xl_cpu_runnable(runnable, sizeof runnable);
  printf("model            %s\n", xl_model_dir(m));
  printf("cpu path         %s  (this CPU runs: %s)\n", xl_cpu_path(), runnable);
  char blas[640];
  cli_blas_describe(blas, sizeof blas);
  printf("blas core        %s\n", blas);
  printf("fingerprint      %016" PRIx64 "\n", xl_model_fingerprint(m));
  printf("tokenizer        %s%s\n", xl_tokenizer_kind_name(c->tokenizer),
         c->tokenizer == XL_TOKENIZER_BYTES ? "" : " (vocab.txt)");
  printf("vocab_size       %d\n", c->vocab_size);
  printf("cutoffs          [");
  for (int i = 0; i < c->n_cutoffs; i++) printf("%s%d", i ? ", " : "", c->cutoffs[i]);
  printf("]  div_val %d\n", c->div_val);
  printf("n_layer          %d\n", c->n_layer);
  printf("d_model          %d  d_embed %d  d_inner %d\n", c->d_model, c->d_embed, c->d_inner);
  printf("n_head x d_head  %d x %d\n", c->n_head, c->d_head);
  printf("mem_len          %d  clamp_len %d  same_length %s  tgt_len %d\n", c->mem_len,
         c->clamp_len, c->same_length ? "true" : "false", c->tgt_len);
  printf("layer norm       %s  eps %g\n", c->pre_lnorm ? "pre" : "post", (double)c->layer_norm_epsilon);
  printf("r biases         %s\n", c->untie_r ? "per layer (untie_r)" : "shared");
  printf("tied embeddings  %s\n", c->tie_word_embeddings ? "yes" : "no");
  printf("parameters       %zu (%.2f M)\n", xl_model_param_count(m), xl_model_param_count(m) / 1e6);
  size_t wb = xl_model_weight_bytes(m);
  printf("weights          %s: %zu bytes (%.2f MiB)\n", xl_weights_name(xl_model_weights(m)), wb,
         wb / 1048576.0);
  printf("weight kernel    %s\n", xl_model_weights_kernel(m));
  size_t sb = xl_model_state_bytes(m), tb = xl_model_state_bytes_per_token(m);
  const char *kvd = xl_kv_dtype_name(xl_model_kv_dtype(m));
  printf("kv dtype         %s\n", kvd);
  printf("state/session    %zu bytes (%.2f MiB): n_layer x mem_len x 2 (K,V) x n_head*d_head %s%s\n",
         sb, sb / 1048576.0, kvd,
         xl_model_kv_dtype(m) == XL_KV_INT8 ? " + an f32 scale per position, head, K/V" : "");
  printf("state/token      %zu bytes (%.2f KiB): all layers, keys and values\n", tb, tb / 1024.0);
  const size_t pt = xl_model_decode_table_bytes(m);
  printf("position table   %zu bytes (%.2f MiB): read by every decode step, as the weights are\n",
         pt, pt / 1048576.0);
  xl_model_free(m);
  return 0;
}
