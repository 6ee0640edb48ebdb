/*
 * fuzz_state_blob.c: libFuzzer target for state blobs. The first byte chooses whether the
 * checksum is repaired before loading, so the fuzzer also explores everything behind the
 * checksum; a blob that loads must then run a decode step cleanly, leaving a state whose
 * token counter covers the positions it holds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testlib.h"

static xl_model *model;
static xl_workspace *ws;

static void setup(void) {
  tl_model_spec spec = TL_MODEL_SPEC_FUZZ;
  const char *dir = tl_tmpdir("fuzzblob");
  xl_error err;
  if (tl_write_model(dir, &spec) || xl_model_load(dir, NULL, &model, &err) ||
      xl_workspace_new(model, &ws, &err))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  if (!model) setup();
  if (len < 1) return 0;
  int repair = data[0] & 1;
  size_t n = len - 1;
  uint8_t *blob = malloc(n + 1);
  memcpy(blob, data + 1, n);
  if (repair && n >= 8) {
    /* the model's fingerprint, so repaired blobs get past the model check too */
    if (n >= 24) {
      uint64_t fp = xl_model_fingerprint(model);
      for (int i = 0; i < 8; i++) blob[16 + i] = (uint8_t)(fp >> (8 * i));
    }
    /* then the trailing checksum, recomputed like the serialiser */
    uint64_t h = xl_hash64(blob, n - 8, 0x626c6f6273756d31ULL);
    for (int i = 0; i < 8; i++) blob[n - 8 + i] = (uint8_t)(h >> (8 * i));
  }
  xl_state *s = NULL;
  xl_error err;
  if (xl_state_deserialize(model, blob, n, &s, &err) == XL_OK) {
    int32_t tok = 65;
    float lp[256];
    xl_feed f = {s, &tok, 1, NULL, NULL, lp, NULL};
    uint64_t fed = xl_state_tokens_fed(s);
    if (xl_forward(model, ws, &f, 1, &err) != XL_OK) abort();
    if (xl_state_tokens_fed(s) != fed + 1 ||
        xl_state_tokens_fed(s) < (uint64_t)xl_state_mem_length(s))
      abort();
    xl_state_free(s);
  }
  free(blob);
  return 0;
}
