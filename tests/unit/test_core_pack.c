/*
 * test_core_pack.c: packed states (the prefix cache's entries). A state packed after k chunks
 * and unpacked into an empty state of the same model equals the original bit for bit (its
 * serialisation, byte for byte), before and after the ring wrapped, in every memory dtype; the
 * packed copy holds only the positions (its bytes scale with them, not with mem_len); feeding
 * the unpacked state the same chunks as the original gives the same log-probabilities, bit for
 * bit, and leaves the packed copy unchanged (it can seed another state that matches again);
 * an empty state is refused, and so is a state of another dtype or of another model.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static const char *model_dir(unsigned seed) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT; /* 2 layers, 2 heads x 16, mem_len 24 */
  spec.seed = seed;
  const char *dir = tl_tmpdir(seed == 1 ? "pack" : "pack2");
  return tl_write_model(dir, &spec) ? NULL : dir;
}

static void test_pack_unpack_continues_bit_for_bit(void) {
  const char *dir = model_dir(1);
  CHECK(dir != NULL);
  if (!dir) return;
  enum { N = 90, CHUNK = 8 };
  int32_t t[N + 1];
  tl_tokens(t, N + 1, 3);
  for (int dt = 0; dt < XL_KV_DTYPE_COUNT; dt++) {
    xl_model *m = tl_load_model(dir, (xl_kv_dtype)dt);
    CHECK(m != NULL);
    if (!m) continue;
    xl_workspace *ws;
    xl_error err;
    CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
    int boundaries[] = {CHUNK, 2 * CHUNK, 5 * CHUNK}; /* 8 and 16 held; 40 > mem_len 24: wrapped */
    for (int b = 0; b < 3; b++) {
      int k = boundaries[b];
      float ref[N + 1], got[N + 1];
      xl_state *a, *c, *packed = NULL;
      CHECK_CODE(xl_state_new(m, &a, &err), XL_OK);
      CHECK_CODE(xl_state_new(m, &c, &err), XL_OK);
      CHECK(tl_feed_chunks(m, ws, a, t, 0, k, CHUNK, ref) == 0);
      CHECK_CODE(xl_state_pack(a, &packed, &err), XL_OK);
      if (!packed) continue;
      CHECK(xl_state_mem_length(packed) == (k < 24 ? k : 24));
      CHECK(xl_state_tokens_fed(packed) == (uint64_t)k);
      /* its bytes are those of the positions it holds, not of a whole memory */
      CHECK(xl_state_bytes(packed) < xl_state_bytes(a) || k >= 24);
      CHECK_CODE(xl_state_unpack(c, packed, &err), XL_OK);
      CHECK(tl_same_state(a, c));
      /* the same cuts from k on: the same bits */
      CHECK(tl_feed_chunks(m, ws, a, t, k, N, CHUNK, ref) == 0);
      CHECK(tl_feed_chunks(m, ws, c, t, k, N, CHUNK, got) == 0);
      CHECK(!memcmp(ref + k, got + k, sizeof(float) * (size_t)(N - k)));
      CHECK(tl_same_state(a, c));
      /* the packed copy did not move: a second state seeded from it matches again */
      xl_state *d;
      CHECK_CODE(xl_state_new(m, &d, &err), XL_OK);
      CHECK(tl_feed_chunks(m, ws, d, t, 0, 3, CHUNK, got) ==
            0); /* a used state: unpack replaces it */
      CHECK_CODE(xl_state_unpack(d, packed, &err), XL_OK);
      CHECK(tl_feed_chunks(m, ws, d, t, k, N, CHUNK, got) == 0);
      CHECK(!memcmp(ref + k, got + k, sizeof(float) * (size_t)(N - k)));
      CHECK(tl_same_state(a, d));
      xl_state_free(d);
      xl_state_free(packed);
      xl_state_free(a);
      xl_state_free(c);
    }
    xl_workspace_free(ws);
    xl_model_free(m);
  }
}

static void test_refusals(void) {
  const char *dir = model_dir(1), *dir2 = model_dir(2);
  CHECK(dir && dir2);
  if (!dir || !dir2) return;
  xl_model *m = tl_load_model(dir, XL_KV_F32), *mb = tl_load_model(dir, XL_KV_BF16),
           *m2 = tl_load_model(dir2, XL_KV_F32);
  CHECK(m && mb && m2);
  if (!m || !mb || !m2) return;
  xl_workspace *ws;
  xl_error err;
  CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
  xl_state *a, *packed = NULL, *other_dt, *other_model;
  CHECK_CODE(xl_state_new(m, &a, &err), XL_OK);
  CHECK_CODE(xl_state_pack(a, &packed, &err), XL_STATE); /* empty */
  CHECK(packed == NULL);
  int32_t t[10];
  float lp[10];
  tl_tokens(t, 10, 1);
  CHECK(tl_feed_chunks(m, ws, a, t, 0, 8, 8, lp) == 0);
  CHECK_CODE(xl_state_pack(a, &packed, &err), XL_OK);
  CHECK_CODE(xl_state_new(mb, &other_dt, &err), XL_OK);
  CHECK_CODE(xl_state_new(m2, &other_model, &err), XL_OK);
  CHECK_CODE(xl_state_unpack(other_dt, packed, &err), XL_ARG);
  CHECK_CODE(xl_state_unpack(other_model, packed, &err), XL_ARG);
  CHECK(xl_state_tokens_fed(other_dt) == 0 && xl_state_tokens_fed(other_model) == 0);
  xl_state_free(other_dt);
  xl_state_free(other_model);
  xl_state_free(packed);
  xl_state_free(a);
  xl_workspace_free(ws);
  xl_model_free(m);
  xl_model_free(mb);
  xl_model_free(m2);
}

int main(void) {
  RUN(test_pack_unpack_continues_bit_for_bit);
  RUN(test_refusals);
  return tl_summary();
}
