/*
 * make_seeds.c: writes seed inputs for the fuzzers (a valid blob, a valid model file, a valid
 * config) into the directories given: make_seeds BLOB_DIR SAFETENSORS_DIR CONFIG_DIR.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testlib.h"

static int copy(const char *from, const char *to) {
  size_t n;
  FILE *f = fopen(from, "rb");
  if (!f) return -1;
  char *buf = malloc(1 << 20);
  if (!buf) {
    fclose(f);
    return -1;
  }
  n = fread(buf, 1, 1 << 20, f);
  int err = ferror(f) || !feof(f); /* a read error, or a file over 1 MiB */
  fclose(f);
  if (err) {
    free(buf);
    return -1;
  }
  int rc = tl_write_file(to, buf, n);
  free(buf);
  return rc;
}

static int fail(const char *what) {
  fprintf(stderr, "make_seeds: %s failed\n", what);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  tl_model_spec spec = TL_MODEL_SPEC_FUZZ; /* fuzz_state_blob's model: the blobs fit it */
  const char *dir = tl_tmpdir("seeds");
  xl_model *m;
  xl_workspace *ws;
  xl_state *s;
  xl_error err;
  if (tl_write_model(dir, &spec) || xl_model_load(dir, NULL, &m, &err) ||
      xl_workspace_new(m, &ws, &err) || xl_state_new(m, &s, &err))
    return fail("the model");
  int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  xl_feed f = {s, t, 9, NULL, NULL, NULL, NULL};
  if (xl_forward(m, ws, &f, 1, &err) != XL_OK) return fail("xl_forward");
  uint8_t *blob;
  size_t n;
  if (xl_state_serialize(s, &blob, &n, &err) != XL_OK) return fail("xl_state_serialize");
  uint8_t *seed = malloc(n + 1);
  if (!seed) return fail("malloc");
  seed[0] = 0;
  memcpy(seed + 1, blob, n);
  char path[2048];
  snprintf(path, sizeof path, "%s/valid", argv[1]);
  if (tl_write_file(path, seed, n + 1)) return fail(path);
  seed[0] = 1;
  snprintf(path, sizeof path, "%s/valid_repair", argv[1]);
  if (tl_write_file(path, seed, n + 1)) return fail(path);
  /* a ring not full yet (3 of mem_len 6 positions, head 0): the other side of the loader's
   * length / head / token counter checks than `valid` (9 fed: wrapped) */
  xl_state_reset(s);
  f.n_tokens = 3;
  if (xl_forward(m, ws, &f, 1, &err) != XL_OK) return fail("xl_forward (partial ring)");
  free(blob);
  free(seed);
  if (xl_state_serialize(s, &blob, &n, &err) != XL_OK) return fail("xl_state_serialize (partial)");
  seed = malloc(n + 1);
  if (!seed) return fail("malloc");
  seed[0] = 0;
  memcpy(seed + 1, blob, n);
  snprintf(path, sizeof path, "%s/partial", argv[1]);
  if (tl_write_file(path, seed, n + 1)) return fail(path);
  seed[0] = 1;
  snprintf(path, sizeof path, "%s/partial_repair", argv[1]);
  if (tl_write_file(path, seed, n + 1)) return fail(path);
  /* the wrapped state with a narrow memory (bf16, int8: version-2 blobs naming their dtype),
   * which the fuzzer's f32 model widens on load */
  for (int d = XL_KV_BF16; d < XL_KV_DTYPE_COUNT; d++) {
    xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
    lo.kv_dtype = (xl_kv_dtype)d;
    xl_model *mn;
    xl_workspace *wn;
    xl_state *sn;
    if (xl_model_load(dir, &lo, &mn, &err) || xl_workspace_new(mn, &wn, &err) ||
        xl_state_new(mn, &sn, &err))
      return fail("the model (narrow memory)");
    xl_feed fn = {sn, t, 9, NULL, NULL, NULL, NULL};
    if (xl_forward(mn, wn, &fn, 1, &err) != XL_OK) return fail("xl_forward (narrow memory)");
    free(blob);
    free(seed);
    if (xl_state_serialize(sn, &blob, &n, &err) != XL_OK) return fail("xl_state_serialize (narrow)");
    seed = malloc(n + 1);
    if (!seed) return fail("malloc");
    for (int repair = 0; repair < 2; repair++) {
      seed[0] = (uint8_t)repair;
      memcpy(seed + 1, blob, n);
      snprintf(path, sizeof path, "%s/valid_%s%s", argv[1], xl_kv_dtype_name((xl_kv_dtype)d),
               repair ? "_repair" : "");
      if (tl_write_file(path, seed, n + 1)) return fail(path);
    }
    xl_state_free(sn);
    xl_workspace_free(wn);
    xl_model_free(mn);
  }
  char src[2048];
  snprintf(src, sizeof src, "%s/model.safetensors", dir);
  snprintf(path, sizeof path, "%s/valid", argv[2]);
  if (copy(src, path)) return fail(path);
  snprintf(src, sizeof src, "%s/config.json", dir);
  snprintf(path, sizeof path, "%s/valid", argv[3]);
  if (copy(src, path)) return fail(path);
  free(seed);
  free(blob);
  xl_state_free(s);
  xl_workspace_free(ws);
  xl_model_free(m);
  return 0;
}
