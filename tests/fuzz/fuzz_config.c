/*
 * fuzz_config.c: libFuzzer target for config.json parsing and validation: any bytes are a
 * validated xl_config or an error, never a crash.
 */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include <stdint.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  xl_config cfg;
  xl_error err;
  if (xl_config_load(fuzz_memfile(data, len), &cfg, &err) == XL_OK) {
    /* a validated config never has values the loader would trip on */
    if (cfg.n_head < 1 || cfg.d_model < 2 || cfg.n_layer < 1 || cfg.n_cutoffs > XL_MAX_CLUSTERS)
      abort();
  }
  return 0;
}
