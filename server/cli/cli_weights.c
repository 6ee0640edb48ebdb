/*
 * cli_weights.c: the CLI subcommands' --weights choice (f32, bf16, int8; else XLSERVE_WEIGHTS,
 * else f32), with one clear message for an unknown name. Main thread only.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli_common.h"

int cli_select_weights(const char *cmd, const char *flag, xl_load_options *opts) {
  const char *env = getenv("XLSERVE_WEIGHTS"), *name = flag ? flag : env;
  if (!name || !*name) {
    opts->weights = XL_WEIGHTS_F32;
    return 1;
  }
  int w = xl_weights_parse(name);
  if (w >= 0) {
    opts->weights = (xl_weights)w;
    return 1;
  }
  fprintf(stderr, "xlserve %s: %s%s: unknown weight type (f32, bf16 or int8)\n", cmd,
          flag ? "--weights " : "XLSERVE_WEIGHTS=", name);
  return 0;
}
