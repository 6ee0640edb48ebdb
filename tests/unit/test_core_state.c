/*
 * test_core_state.c: the session state as an object: blob round trip (continuing a restored
 * state equals continuing the original, bit for bit), every corruption refused with the right
 * code (a token counter that does not match the ring, or over its ceiling; a NaN or infinite
 * key or value, even under a valid checksum), clone independence, batched forward equal to unbatched (bit for bit, also for a decode
 * step batched with a chunk longer than the cached position table), chunked equal to one-token
 * decoding under same_length, and a rejected forward leaving the state untouched; a snapshot
 * plus turn deltas rebuilding the state bit for bit (ring wrap-around, many turns), and every
 * bad delta refused with the state untouched.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* xl_hash64: re-signing edited blobs */
#include "testlib.h"

static xl_model *load(const tl_model_spec *spec, const char *tag) {
  const char *dir = tl_tmpdir(tag);
  return tl_write_model(dir, spec) ? NULL : tl_load_model(dir, XL_KV_F32);
}

/* Feeds t[0..n) in chunks of `chunk`, collecting log p(t[i+1]) for i < n-1 into lp. */
static int run(xl_model *m, xl_workspace *ws, xl_state *s, const int32_t *t, int n, int chunk,
               float *lp) {
  return tl_feed_chunks(m, ws, s, t, 0, n - 1, chunk, lp);
}

static void test_blob_round_trip(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  xl_model *m = load(&spec, "blob");
  CHECK(m != NULL);
  if (!m) return;
  xl_workspace *ws;
  xl_state *a, *b = NULL;
  xl_error err;
  CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
  CHECK_CODE(xl_state_new(m, &a, &err), XL_OK);
  int32_t t[100];
  float lp1[100], lp2[100];
  tl_tokens(t, 100, 7);
  CHECK(run(m, ws, a, t, 40, 7, lp1) == 0); /* 39 positions: ring wrapped (mem_len 24) */
  CHECK(xl_state_mem_length(a) == 24);
  CHECK(xl_state_tokens_fed(a) == 39);
  uint8_t *blob;
  size_t len;
  CHECK_CODE(xl_state_serialize(a, &blob, &len, &err), XL_OK);
  CHECK_CODE(xl_state_deserialize(m, blob, len, &b, &err), XL_OK);
  CHECK(b && xl_state_mem_length(b) == 24 && xl_state_tokens_fed(b) == 39);
  /* continue both with the same tokens: identical log-probs */
  CHECK(run(m, ws, a, t + 39, 61, 5, lp1) == 0);
  CHECK(run(m, ws, b, t + 39, 61, 5, lp2) == 0);
  CHECK(memcmp(lp1, lp2, 60 * sizeof(float)) == 0);

  /* corruptions */
  xl_state *c = NULL;
  uint8_t *bad = malloc(len);
  for (size_t pos = 0; pos < len; pos += len / 37 + 1) { /* any flipped byte is caught */
    memcpy(bad, blob, len);
    bad[pos] ^= 0x40;
    xl_code rc = xl_state_deserialize(m, bad, len, &c, &err);
    CHECK(rc == XL_STATE || rc == XL_MISMATCH);
    CHECK(c == NULL);
  }
  CHECK_CODE(xl_state_deserialize(m, blob, len - 1, &c, &err), XL_STATE);   /* truncated */
  CHECK_CODE(xl_state_deserialize(m, blob, 10, &c, &err), XL_STATE);        /* tiny */
  CHECK_CODE(xl_state_deserialize(m, NULL, 0, &c, &err), XL_STATE);
  memcpy(bad, blob, len);
  bad[8] = 3; /* a format version this build does not know: refused as a mismatch before the checksum */
  CHECK_CODE(xl_state_deserialize(m, bad, len, &c, &err), XL_MISMATCH);
  CHECK(strstr(err.message, "version") != NULL);

  /* the same blob offered to another model */
  tl_model_spec other = spec;
  other.seed = 99;
  xl_model *m2 = load(&other, "blob2");
  CHECK_CODE(xl_state_deserialize(m2, blob, len, &c, &err), XL_MISMATCH);
  CHECK(strstr(err.message, "another model") != NULL);
  xl_model_free(m2);

  free(bad);
  free(blob);
  xl_state_free(a);
  xl_state_free(b);
  xl_workspace_free(ws);
  xl_model_free(m);
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The blob's trailing checksum recomputed, as the serialiser makes it: an edited blob that
 * only the semantic checks can refuse. */
static void resign(uint8_t *b, size_t n) {
  put_le64(b + n - 8, xl_hash64(b, n - 8, 0x626c6f6273756d31ULL));
}

static void resign_delta(uint8_t *b, size_t n) {
  put_le64(b + n - 8, xl_hash64(b, n - 8, 0x64656c7461736d31ULL));
}

/* Loads blob with a header field or a payload float replaced (re-signed): the code. */
static xl_code load_edited(const xl_model *m, const uint8_t *blob, size_t n, size_t at,
                           int width, uint64_t v, xl_error *err) {
  uint8_t *b = malloc(n);
  memcpy(b, blob, n);
  if (width == 8) put_le64(b + at, v);
  else put_le32(b + at, (uint32_t)v);
  resign(b, n);
  xl_state *s = NULL;
  xl_code rc = xl_state_deserialize(m, b, n, &s, err);
  xl_state_free(s);
  free(b);
  return rc;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* The header's counters must describe a state the engine can have made: len = min(fed,
 * mem_len), head = (fed - len) % mem_len, fed at most XL_STATE_MAX_FED; and every key and value
 * is finite. Checked under a valid checksum (the blob re-signed). */
static void test_blob_refuses_bad_counters_and_non_finite(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT; /* mem_len 24, 2 layers, H*Dh 32 */
  xl_model *m = load(&spec, "blobchk");
  CHECK(m != NULL);
  if (!m) return;
  xl_workspace *ws;
  xl_error err;
  CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
  int32_t t[64];
  float lp[256]; /* the targets' log-probs, or a decode step's whole vocabulary (256) */
  tl_tokens(t, 64, 3);
  for (int n_fed = 10; n_fed <= 50; n_fed += 40) { /* a partial ring, then a wrapped one */
    xl_state *a;
    CHECK_CODE(xl_state_new(m, &a, &err), XL_OK);
    CHECK(run(m, ws, a, t, n_fed + 1, 8, lp) == 0);
    uint8_t *blob;
    size_t n;
    CHECK_CODE(xl_state_serialize(a, &blob, &n, &err), XL_OK);
    uint32_t len = (uint32_t)xl_state_mem_length(a), head = n_fed < 24 ? 0 : (uint32_t)(n_fed - 24) % 24;
    CHECK(len == (n_fed < 24 ? (uint32_t)n_fed : 24u));
    /* re-signing alone changes nothing */
    CHECK_CODE(load_edited(m, blob, n, 40, 8, (uint64_t)n_fed, &err), XL_OK);
    /* fed < len: the counter below what the ring holds */
    CHECK_CODE(load_edited(m, blob, n, 40, 8, len - 1, &err), XL_STATE);
    CHECK(strstr(err.message, "tokens fed") != NULL);
    CHECK_CODE(load_edited(m, blob, n, 40, 8, 0, &err), XL_STATE);
    /* a counter about to wrap, or over the ceiling */
    CHECK_CODE(load_edited(m, blob, n, 40, 8, UINT64_MAX, &err), XL_STATE);
    CHECK(strstr(err.message, "more than a state can count") != NULL);
    CHECK_CODE(load_edited(m, blob, n, 40, 8, XL_STATE_MAX_FED + 24 + head, &err), XL_STATE);
    if (len < 24) { /* a partial ring: fed must equal len exactly */
      CHECK_CODE(load_edited(m, blob, n, 40, 8, len + 1, &err), XL_STATE);
      CHECK_CODE(load_edited(m, blob, n, 56, 4, 1, &err), XL_STATE); /* head must be 0 */
    } else { /* a full ring: the head follows fed */
      CHECK_CODE(load_edited(m, blob, n, 40, 8, (uint64_t)n_fed + 1, &err), XL_STATE);
      CHECK_CODE(load_edited(m, blob, n, 56, 4, (head + 1) % 24, &err), XL_STATE);
      /* the largest counter that still fits, with its head: accepted, and it decodes */
      uint8_t *b = malloc(n);
      memcpy(b, blob, n);
      uint64_t fed_big = XL_STATE_MAX_FED - ((XL_STATE_MAX_FED - head) % 24); /* = head mod 24 */
      put_le64(b + 40, fed_big);
      resign(b, n);
      xl_state *s = NULL;
      CHECK_CODE(xl_state_deserialize(m, b, n, &s, &err), XL_OK);
      if (s) {
        CHECK(xl_state_tokens_fed(s) == fed_big);
        int32_t one = 5;
        xl_feed f = {s, &one, 1, NULL, NULL, lp, NULL};
        CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
        CHECK(xl_state_tokens_fed(s) == fed_big + 1);
      }
      xl_state_free(s);
      free(b);
    }
    /* non-finite keys and values: NaN, +Inf, -Inf, in the first layer's keys and the last
     * layer's values */
    size_t payload = n - 64 - 8, key0 = 64 + 4 * 3, val_last = 64 + payload - 4 * 5;
    uint32_t bad[3] = {0x7fc00000u, f32_bits(1.0f / 0.0f), f32_bits(-1.0f / 0.0f)};
    for (int k = 0; k < 3; k++) {
      CHECK_CODE(load_edited(m, blob, n, key0, 4, bad[k], &err), XL_STATE);
      CHECK(strstr(err.message, "non-finite") != NULL);
      CHECK_CODE(load_edited(m, blob, n, val_last, 4, bad[k], &err), XL_STATE);
      CHECK(strstr(err.message, "non-finite") != NULL);
    }
    /* large and tiny finite values are fine */
    CHECK_CODE(load_edited(m, blob, n, key0, 4, f32_bits(3.0e38f), &err), XL_OK);
    CHECK_CODE(load_edited(m, blob, n, val_last, 4, 1u, &err), XL_OK); /* a denormal */
    free(blob);
    xl_state_free(a);
  }
  xl_workspace_free(ws);
  xl_model_free(m);
}

static void test_clone_and_reset(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  xl_model *m = load(&spec, "clone");
  if (!m) { CHECK(0); return; }
  xl_workspace *ws;
  xl_state *a, *b, *fresh;
  xl_error err;
  xl_workspace_new(m, &ws, &err);
  xl_state_new(m, &a, &err);
  xl_state_new(m, &fresh, &err);
  int32_t t[80], u[40];
  float lp1[80], lp2[80];
  tl_tokens(t, 80, 3);
  tl_tokens(u, 40, 11);
  run(m, ws, a, t, 50, 9, lp1);
  CHECK_CODE(xl_state_clone(a, &b, &err), XL_OK);
  run(m, ws, a, u, 40, 40, lp1); /* diverge a; b must not see it */
  run(m, ws, b, t + 49, 31, 4, lp2);
  xl_state *c;
  xl_state_clone(a, &c, &err);
  xl_state_free(c);
  xl_state *a2;
  xl_state_new(m, &a2, &err);
  run(m, ws, a2, t, 50, 50, lp1);
  run(m, ws, a2, t + 49, 31, 31, lp1);
  for (int i = 0; i < 30; i++) CHECK_NEAR(lp1[i], lp2[i], 1e-5);
  xl_state_reset(a);
  CHECK(xl_state_mem_length(a) == 0 && xl_state_tokens_fed(a) == 0);
  run(m, ws, a, t, 30, 6, lp1);
  run(m, ws, fresh, t, 30, 6, lp2);
  CHECK(memcmp(lp1, lp2, 29 * sizeof(float)) == 0);
  xl_state_free(a);
  xl_state_free(a2);
  xl_state_free(b);
  xl_state_free(fresh);
  xl_workspace_free(ws);
  xl_model_free(m);
}

static void test_batched_equals_unbatched(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  xl_model *m = load(&spec, "batch");
  if (!m) { CHECK(0); return; }
  enum { B = 5, V = 256 };
  xl_workspace *ws;
  xl_error err;
  xl_workspace_new(m, &ws, &err);
  xl_state *solo[5], *multi[5];
  int32_t t[5][60];
  for (int b = 0; b < B; b++) {
    xl_state_new(m, &solo[b], &err);
    xl_state_new(m, &multi[b], &err);
    tl_tokens(t[b], 60, (unsigned)b + 20);
  }
  /* different memory lengths per session: prefill 5, 13, 21, 29, 37 tokens */
  for (int b = 0; b < B; b++) {
    int n = 5 + 8 * b;
    xl_feed f1 = {solo[b], t[b], n, NULL, NULL, NULL, NULL};
    xl_feed f2 = {multi[b], t[b], n, NULL, NULL, NULL, NULL};
    xl_forward(m, ws, &f1, 1, &err);
    xl_forward(m, ws, &f2, 1, &err);
  }
  /* then mixed steps: sessions 0-2 decode one token, 3-4 a chunk, all in one batch */
  static float out_solo[5][256], out_multi[5][256];
  xl_feed items[5];
  for (int b = 0; b < B; b++) {
    int n = b < 3 ? 1 : 6;
    const int32_t *in = t[b] + 40;
    xl_feed f = {solo[b], in, n, NULL, NULL, out_solo[b], NULL};
    CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
    items[b] = (xl_feed){multi[b], in, n, NULL, NULL, out_multi[b], NULL};
  }
  CHECK_CODE(xl_forward(m, ws, items, B, &err), XL_OK);
  double worst = 0;
  for (int b = 0; b < B; b++)
    for (int v = 0; v < V; v++) {
      double d = fabs(out_solo[b][v] - out_multi[b][v]);
      if (d > worst) worst = d;
    }
  CHECK(worst == 0.0); /* the GEMM of every kernel family is batch-invariant: bit for bit */

  /* rejected batches change nothing: a duplicated state, a bad token */
  uint64_t fed = xl_state_tokens_fed(multi[0]);
  xl_feed dup[2] = {{multi[0], t[0], 1, NULL, NULL, NULL, NULL}, {multi[0], t[0], 1, NULL, NULL, NULL, NULL}};
  CHECK_CODE(xl_forward(m, ws, dup, 2, &err), XL_ARG);
  int32_t bad_tok[2] = {3, 256};
  xl_feed bad = {multi[0], bad_tok, 2, NULL, NULL, NULL, NULL};
  CHECK_CODE(xl_forward(m, ws, &bad, 1, &err), XL_TOKEN);
  CHECK(strstr(err.message, "256") != NULL);
  CHECK(xl_state_tokens_fed(multi[0]) == fed);
  for (int b = 0; b < B; b++) {
    xl_state_free(solo[b]);
    xl_state_free(multi[b]);
  }
  xl_workspace_free(ws);
  xl_model_free(m);
}

/* A decode step batched with a chunk long enough that the forward projects its own position
 * table (more distances than the model caches: same_length off, klen > mem_len + 1024) must
 * still equal the same step alone, bit for bit. */
static void test_decode_batched_with_long_chunk(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  spec.same_length = 0;
  xl_model *m = load(&spec, "extpos");
  if (!m) { CHECK(0); return; }
  enum { B = 4, V = 256, LONG = 1100 };
  xl_workspace *ws;
  xl_error err;
  xl_workspace_new(m, &ws, &err);
  xl_state *solo[B], *multi[B];
  static int32_t t[B][LONG];
  for (int b = 0; b < B; b++) {
    xl_state_new(m, &solo[b], &err);
    xl_state_new(m, &multi[b], &err);
    tl_tokens(t[b], LONG, (unsigned)b + 40);
  }
  /* sessions 0-2 hold 3, 17 and 40 positions (the last ring wrapped, mem_len 24); session 3
   * holds 5 and then feeds a chunk of LONG - 5 tokens (klen 1100 > 1048 cached distances) */
  int prefill[B] = {3, 17, 40, 5};
  for (int b = 0; b < B; b++) {
    xl_feed f1 = {solo[b], t[b], prefill[b], NULL, NULL, NULL, NULL};
    xl_feed f2 = {multi[b], t[b], prefill[b], NULL, NULL, NULL, NULL};
    CHECK_CODE(xl_forward(m, ws, &f1, 1, &err), XL_OK);
    CHECK_CODE(xl_forward(m, ws, &f2, 1, &err), XL_OK);
  }
  static float out_solo[B][V], out_multi[B][V];
  xl_feed items[B];
  for (int b = 0; b < B; b++) {
    int n = b < 3 ? 1 : LONG - prefill[b];
    const int32_t *in = t[b] + prefill[b];
    xl_feed f = {solo[b], in, n, NULL, NULL, out_solo[b], NULL};
    CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
    items[b] = (xl_feed){multi[b], in, n, NULL, NULL, out_multi[b], NULL};
  }
  CHECK_CODE(xl_forward(m, ws, items, B, &err), XL_OK);
  for (int b = 0; b < B; b++) {
    CHECK(memcmp(out_solo[b], out_multi[b], sizeof out_solo[b]) == 0);
    CHECK(xl_state_tokens_fed(solo[b]) == xl_state_tokens_fed(multi[b]));
  }
  for (int b = 0; b < B; b++) {
    xl_state_free(solo[b]);
    xl_state_free(multi[b]);
  }
  xl_workspace_free(ws);
  xl_model_free(m);
}

static void test_chunking_invariance(void) {
  tl_model_spec specs[2] = {TL_MODEL_SPEC_DEFAULT, TL_MODEL_SPEC_DEFAULT};
  specs[1].pre_lnorm = 1;
  specs[1].mem_len = 7;
  for (int k = 0; k < 2; k++) {
    xl_model *m = load(&specs[k], "chunk");
    if (!m) { CHECK(0); return; }
    xl_workspace *ws;
    xl_error err;
    xl_workspace_new(m, &ws, &err);
    int32_t t[120];
    float ref[120], lp[120];
    tl_tokens(t, 120, 5);
    xl_state *s;
    xl_state_new(m, &s, &err);
    run(m, ws, s, t, 120, 1, ref);
    int chunks[] = {2, 5, 16, 50, 119};
    for (int c = 0; c < 5; c++) {
      xl_state_reset(s);
      run(m, ws, s, t, 120, chunks[c], lp);
      double worst = 0;
      for (int i = 0; i < 119; i++)
        if (fabs(lp[i] - ref[i]) > worst) worst = fabs(lp[i] - ref[i]);
      CHECK(worst <= 1e-4);
    }
    xl_state_free(s);
    xl_workspace_free(ws);
    xl_model_free(m);
  }
}

/* A snapshot plus the deltas of the turns since rebuild the state: turns of 1 to 60 tokens
 * (longer than the ring of 24: a delta then carries only the last 24), the ring wrapping many
 * times, a new snapshot (compaction) now and then; after every turn the rebuilt state equals
 * the live one bit for bit and continues identically. */
static void test_deltas_rebuild_the_state(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  xl_model *m = load(&spec, "delta");
  if (!m) { CHECK(0); return; }
  xl_workspace *ws;
  xl_state *live, *durable = NULL;
  xl_error err;
  xl_workspace_new(m, &ws, &err);
  xl_state_new(m, &live, &err);
  int32_t t[64];
  float lp[64], lp2[64];
  unsigned rnd = 12345;
  uint8_t *snap = NULL;
  size_t snap_len = 0;
  CHECK_CODE(xl_state_serialize(live, &snap, &snap_len, &err), XL_OK);
  CHECK_CODE(xl_state_deserialize(m, snap, snap_len, &durable, &err), XL_OK);
  free(snap);
  int all_same = 1, wraps = 0;
  for (int turn = 0; turn < 200; turn++) {
    rnd = rnd * 1103515245u + 12345u;
    int n = 1 + (int)((rnd >> 16) % (turn % 17 == 5 ? 60 : 14));
    tl_tokens(t, n + 1, (unsigned)turn + 1);
    uint64_t before = xl_state_tokens_fed(live);
    xl_feed f = {live, t, n, NULL, NULL, NULL, NULL};
    CHECK_CODE(xl_forward(m, ws, &f, 1, &err), XL_OK);
    uint8_t *d = NULL;
    size_t dn = 0;
    CHECK_CODE(xl_state_delta_encode(live, before, &d, &dn, &err), XL_OK);
    CHECK(xl_state_blob_is_delta(d, dn));
    CHECK_CODE(xl_state_delta_apply(durable, d, dn, &err), XL_OK);
    /* the same delta again does not continue the rebuilt state: refused, nothing changes */
    CHECK_CODE(xl_state_delta_apply(durable, d, dn, &err), XL_STATE);
    free(d);
    wraps += before / 24 != xl_state_tokens_fed(live) / 24;
    all_same &= tl_same_state(live, durable);
    if (turn % 37 == 36) { /* compaction: the rebuilt state becomes the snapshot */
      CHECK_CODE(xl_state_serialize(durable, &snap, &snap_len, &err), XL_OK);
      xl_state_free(durable);
      CHECK_CODE(xl_state_deserialize(m, snap, snap_len, &durable, &err), XL_OK);
      free(snap);
    }
  }
  CHECK(all_same);
  CHECK(wraps > 20);
  /* and both continue alike */
  tl_tokens(t, 30, 99);
  CHECK(run(m, ws, live, t, 30, 5, lp) == 0);
  CHECK(run(m, ws, durable, t, 30, 5, lp2) == 0);
  CHECK(memcmp(lp, lp2, 29 * sizeof(float)) == 0);
  xl_state_free(live);
  xl_state_free(durable);
  xl_workspace_free(ws);
  xl_model_free(m);
}

/* A delta is validated before use: corruption, another model, a gap, a counter past the ceiling,
 * a NaN under a valid checksum are refused with the state untouched; nothing new is XL_ARG. */
static void test_delta_refusals(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT, other = TL_MODEL_SPEC_DEFAULT;
  other.mem_len = 16;
  xl_model *m = load(&spec, "deltabad"), *m2 = load(&other, "deltabad2");
  if (!m || !m2) { CHECK(0); return; }
  xl_workspace *ws;
  xl_state *a, *b, *c;
  xl_error err;
  xl_workspace_new(m, &ws, &err);
  xl_state_new(m, &a, &err);
  xl_state_new(m, &b, &err);
  xl_state_new(m2, &c, &err);
  int32_t t[40];
  float lp[40];
  tl_tokens(t, 40, 5);
  run(m, ws, a, t, 11, 10, lp); /* a: 10 fed */
  uint8_t *d0, *d;
  size_t n0, n;
  CHECK_CODE(xl_state_delta_encode(a, 0, &d0, &n0, &err), XL_OK);
  CHECK_CODE(xl_state_delta_encode(a, 10, &d, &n, &err), XL_ARG);
  run(m, ws, a, t + 10, 6, 5, lp); /* 15 fed */
  CHECK_CODE(xl_state_delta_encode(a, 10, &d, &n, &err), XL_OK);
  CHECK_CODE(xl_state_delta_apply(b, d, n, &err), XL_STATE); /* b has 0: a gap */
  CHECK(xl_state_tokens_fed(b) == 0);
  CHECK_CODE(xl_state_delta_apply(c, d0, n0, &err), XL_MISMATCH); /* another model */
  uint8_t *e = malloc(n0);
  memcpy(e, d0, n0);
  e[70] ^= 1;
  CHECK_CODE(xl_state_delta_apply(b, e, n0, &err), XL_STATE); /* checksum */
  CHECK_CODE(xl_state_delta_apply(b, e, n0 - 3, &err), XL_STATE); /* truncated */
  memcpy(e, d0, n0);
  put_le64(e + 48, XL_STATE_MAX_FED + 1);
  resign_delta(e, n0);
  CHECK_CODE(xl_state_delta_apply(b, e, n0, &err), XL_STATE); /* over the ceiling */
  memcpy(e, d0, n0);
  put_le32(e + 36, 9); /* 9 positions for 10 tokens */
  resign_delta(e, n0);
  CHECK_CODE(xl_state_delta_apply(b, e, n0, &err), XL_STATE);
  memcpy(e, d0, n0);
  put_le32(e + 64 + 4 * 5, f32_bits(NAN));
  resign_delta(e, n0);
  CHECK_CODE(xl_state_delta_apply(b, e, n0, &err), XL_STATE); /* NaN, valid checksum */
  CHECK(xl_state_tokens_fed(b) == 0);
  CHECK_CODE(xl_state_delta_apply(b, d0, n0, &err), XL_OK);
  CHECK_CODE(xl_state_delta_apply(b, d, n, &err), XL_OK);
  CHECK(tl_same_state(a, b));
  free(e);
  free(d0);
  free(d);
  xl_state_free(a);
  xl_state_free(b);
  xl_state_free(c);
  xl_workspace_free(ws);
  xl_model_free(m);
  xl_model_free(m2);
}

/* bigmem.h: big buffers come zeroed and aligned (a mapping of 2 MiB or more: to 2 MiB), an
 * arena's pieces are 64-byte aligned and disjoint, a big piece gets a mapping of its own, and
 * everything is writable to its last byte (ASan: freed without a leak). */
static void test_big_buffers_and_arena(void) {
  const size_t sizes[] = {1, 100, (size_t)256 << 10, ((size_t)5 << 20) + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t mapped = 12345;
    unsigned char *p = xl_big_alloc(sizes[i], &mapped);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK(((uintptr_t)p & 63) == 0);
    if (mapped) CHECK(mapped >= sizes[i]);
    if (mapped && sizes[i] >= ((size_t)2 << 20))
      CHECK(((uintptr_t)p & (((uintptr_t)2 << 20) - 1)) == 0);
    int zero = 1;
    for (size_t k = 0; k < sizes[i]; k++) zero &= p[k] == 0;
    CHECK(zero);
    memset(p, 0xab, sizes[i]);
    xl_big_free(p, mapped);
  }
  xl_arena a = {0};
  unsigned char *pieces[40];
  size_t lens[40];
  for (int i = 0; i < 40; i++) {
    lens[i] = i == 7 ? (size_t)20 << 20 : (size_t)(i * 977 % 5000 + 1) << 10; /* to ~5 MiB, one 20 */
    pieces[i] = xl_arena_alloc(&a, lens[i]);
    CHECK(pieces[i] != NULL && ((uintptr_t)pieces[i] & 63) == 0);
    if (pieces[i]) memset(pieces[i], i + 1, lens[i]);
  }
  int intact = 1, disjoint = 1;
  size_t total = 0;
  for (int i = 0; i < 40; i++) {
    total += lens[i];
    if (!pieces[i]) continue;
    intact &= pieces[i][0] == i + 1 && pieces[i][lens[i] - 1] == i + 1;
    for (int j = 0; j < 40; j++)
      if (j != i && pieces[j])
        disjoint &= pieces[i] + lens[i] <= pieces[j] || pieces[j] + lens[j] <= pieces[i];
  }
  CHECK(intact && disjoint && a.bytes >= total && a.bytes < total + 40 * 64);
  xl_arena_free(&a);
  CHECK(a.chunks == NULL && a.bytes == 0);
}


/* The range check of imported states: every state the model's own forward pass makes is
 * within it (pre-LN and post-LN, partial and wrapped rings, many inputs); a finite key of
 * 3e38 (which the finiteness check lets through) or a value of -1e6 is refused, naming the
 * layer, the component and the bound. */
static void test_range_of_imported_states(void) {
  for (int pre = 0; pre <= 1; pre++) {
    tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
    spec.pre_lnorm = pre;
    spec.seed = 11 + (unsigned)pre;
    xl_model *m = load(&spec, pre ? "range_pre" : "range_post");
    CHECK(m != NULL);
    if (!m) continue;
    xl_workspace *ws;
    xl_error err;
    CHECK_CODE(xl_workspace_new(m, &ws, &err), XL_OK);
    int32_t t[200];
    float lp[256];
    for (unsigned seed = 1; seed <= 6; seed++) {
      xl_state *a;
      CHECK_CODE(xl_state_new(m, &a, &err), XL_OK);
      tl_tokens(t, 200, seed * 17);
      int n = seed < 3 ? 12 : 120;
      CHECK(run(m, ws, a, t, n, 1 + (int)seed, lp) == 0);
      CHECK_CODE(xl_state_check_range(a, &err), XL_OK);
      uint8_t *blob;
      size_t nb;
      CHECK_CODE(xl_state_serialize(a, &blob, &nb, &err), XL_OK);
      if (seed == 6) {
        size_t payload = nb - 64 - 8, key0 = 64 + 4 * 3, val_last = 64 + payload - 4 * 5;
        uint8_t *b = malloc(nb);
        struct { size_t at; float v; const char *what; } bad[] = {
            {key0, 3.0e38f, "key"}, {val_last, -1.0e6f, "value"}};
        for (int k = 0; k < 2; k++) {
          memcpy(b, blob, nb);
          uint32_t u = f32_bits(bad[k].v);
          memcpy(b + bad[k].at, &u, 4);
          resign(b, nb);
          xl_state *s = NULL;
          CHECK_CODE(xl_state_deserialize(m, b, nb, &s, &err), XL_OK); /* finite: loads */
          if (!s) continue;
          CHECK_CODE(xl_state_check_range(s, &err), XL_STATE);
          CHECK(strstr(err.message, "beyond what this model's forward pass can produce") &&
                strstr(err.message, bad[k].what));
          xl_state_free(s);
        }
        free(b);
      }
      free(blob);
      xl_state_free(a);
    }
    xl_workspace_free(ws);
    xl_model_free(m);
  }
}

int main(void) {
  RUN(test_big_buffers_and_arena);
  RUN(test_blob_round_trip);
  RUN(test_blob_refuses_bad_counters_and_non_finite);
  RUN(test_clone_and_reset);
  RUN(test_batched_equals_unbatched);
  RUN(test_decode_batched_with_long_chunk);
  RUN(test_chunking_invariance);
  RUN(test_deltas_rebuild_the_state);
  RUN(test_delta_refusals);
  RUN(test_range_of_imported_states);
  return tl_summary();
}
