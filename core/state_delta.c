/*
 * state_delta.c: what a turn changed in a state, as a versioned, checksummed byte blob (a
 * "delta"), and its validating applier. A durable session is a state blob (state_blob.c) plus
 * the deltas of the turns since: applying them in order rebuilds the state bit for bit.
 * Any thread (the state's owner).
 *
 * A delta from `from` to `fed` tokens holds the positions fed in between that the ring still
 * holds: the newest k = min(fed - from, mem_len) of them. Position p lives in ring slot
 * p % mem_len (the engine's invariant), so the delta names its slots implicitly; applying it
 * writes those k slots, leaves every other slot as it was (the older positions still held),
 * and sets the counters: fed, len = min(fed, mem_len), head = (fed - len) % mem_len.
 *
 * Layout (little-endian):
 *   0  char[8]  "XLDELTA\0"
 *   8  u32      format version (1)
 *  12  u32      header bytes (64)
 *  16  u64      model fingerprint
 *  24  u32      n_layer      28 u32 mem_len     32 u32 H*Dh     36 u32 k (positions carried)
 *  40  u64      from: positions fed before (the state it applies to must have fed exactly this)
 *  48  u64      fed: positions fed after (at most XL_STATE_MAX_FED, more than from)
 *  56  u64      payload bytes = n_layer * 2 * k * H*Dh * 4
 *  64  payload: per layer, the keys as [H*Dh][k] (component-major, oldest first), then the
 *      values as [k][H*Dh] rows, oldest first; f32 (the state blob's layout, for k positions)
 *  end u64      checksum: xl_hash64 of every byte before it
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "xl_le.h"

#define DELTA_MAGIC "XLDELTA"
#define DELTA_VERSION 1u
#define DELTA_HEADER 64u
#define DELTA_SEED 0x64656c7461736d31ULL

/* The slots of positions [p0, p0 + k) as up to two runs (the ring wraps at most once). */
static int delta_runs(int M, uint64_t p0, int k, xl_ring_run runs[2]) {
  if (k == 0 || M == 0) return 0;
  int slot = (int)(p0 % (uint64_t)M), first = k;
  if (slot + first > M) first = M - slot;
  runs[0] = (xl_ring_run){0, slot, first};
  if (first == k) return 1;
  runs[1] = (xl_ring_run){first, 0, k - first};
  return 2;
}

static uint64_t carried(uint64_t from, uint64_t fed, int M) {
  uint64_t n = fed - from;
  return n < (uint64_t)M ? n : (uint64_t)M;
}

int xl_state_blob_is_delta(const uint8_t *blob, size_t blob_len) {
  return blob && blob_len >= 8 && !memcmp(blob, DELTA_MAGIC, 8);
}

xl_code xl_state_delta_encode(const xl_state *s, uint64_t from, uint8_t **blob,
                              size_t *blob_len, xl_error *err) {
  *blob = NULL;
  *blob_len = 0;
  if (from >= s->fed)
    return xl_fail(err, XL_ARG, "state delta: from %llu tokens, but the state has fed "
                   "%llu (nothing new)", (unsigned long long)from, (unsigned long long)s->fed);
  const xl_model *m = s->model;
  int hd = m->hd, L = m->cfg.n_layer, M = s->mem_len;
  int k = (int)carried(from, s->fed, M);
  size_t row = (size_t)hd * sizeof(float);
  size_t payload = (size_t)L * 2 * (size_t)k * row;
  size_t total = DELTA_HEADER + payload + 8;
  uint8_t *b = malloc(total);
  if (!b) return xl_fail(err, XL_NOMEM, "out of memory encoding a state delta (%zu bytes)", total);
  memset(b, 0, DELTA_HEADER);
  memcpy(b, DELTA_MAGIC, 8);
  xl_put_le32(b + 8, DELTA_VERSION);
  xl_put_le32(b + 12, DELTA_HEADER);
  xl_put_le64(b + 16, m->fingerprint);
  xl_put_le32(b + 24, (uint32_t)L);
  xl_put_le32(b + 28, (uint32_t)M);
  xl_put_le32(b + 32, (uint32_t)hd);
  xl_put_le32(b + 36, (uint32_t)k);
  xl_put_le64(b + 40, from);
  xl_put_le64(b + 48, s->fed);
  xl_put_le64(b + 56, payload);
  uint8_t *p = b + DELTA_HEADER;
  xl_ring_run runs[2];
  int n_runs = delta_runs(M, s->fed - (uint64_t)k, k, runs);
  for (int l = 0; l < L; l++) {
    const float *K = xl_state_keys(s, l), *V = xl_state_values(s, l);
    for (int c = 0; c < hd; c++) { /* key component c of the k positions */
      const float *kc = K + (size_t)c * M;
      for (int r = 0; r < n_runs; r++)
        memcpy(p + (size_t)runs[r].first * 4, kc + runs[r].slot, (size_t)runs[r].count * 4);
      p += (size_t)k * 4;
    }
    for (int r = 0; r < n_runs; r++)
      memcpy(p + (size_t)runs[r].first * row, V + (size_t)runs[r].slot * hd,
             (size_t)runs[r].count * row);
    p += (size_t)k * row;
  }
  xl_put_le64(p, xl_hash64(b, DELTA_HEADER + payload, DELTA_SEED));
  *blob = b;
  *blob_len = total;
  return XL_OK;
}

xl_code xl_state_delta_apply(xl_state *s, const uint8_t *b, size_t n, xl_error *err) {
  const xl_model *m = s->model;
  if (!b || n < DELTA_HEADER + 8 || memcmp(b, DELTA_MAGIC, 8))
    return xl_fail(err, XL_STATE, "state delta: not an xlserve delta (bad magic or too short)");
  if (xl_get_le32(b + 8) != DELTA_VERSION)
    return xl_fail(err, XL_MISMATCH, "state delta: format version %u, this build reads %u",
                   xl_get_le32(b + 8), DELTA_VERSION);
  if (xl_get_le32(b + 12) != DELTA_HEADER)
    return xl_fail(err, XL_STATE, "state delta: bad header size");
  uint64_t payload = xl_get_le64(b + 56);
  if (payload != n - DELTA_HEADER - 8)
    return xl_fail(err, XL_STATE, "state delta: %zu bytes, header announces %llu of payload "
                   "(truncated?)", n, (unsigned long long)payload);
  if (xl_get_le64(b + n - 8) != xl_hash64(b, n - 8, DELTA_SEED))
    return xl_fail(err, XL_STATE, "state delta: checksum mismatch (corrupted)");
  if (xl_get_le64(b + 16) != m->fingerprint)
    return xl_fail(err, XL_MISMATCH, "state delta: made by another model (fingerprint %016llx, "
                   "this model %016llx)", (unsigned long long)xl_get_le64(b + 16),
                   (unsigned long long)m->fingerprint);
  uint32_t L = xl_get_le32(b + 24), M = xl_get_le32(b + 28), hd = xl_get_le32(b + 32),
           k = xl_get_le32(b + 36);
  if (L != (uint32_t)m->cfg.n_layer || M != (uint32_t)s->mem_len || hd != (uint32_t)m->hd)
    return xl_fail(err, XL_MISMATCH, "state delta: shape %ux%ux%u does not match the model", L,
                   M, hd);
  uint64_t from = xl_get_le64(b + 40), fed = xl_get_le64(b + 48);
  if (fed > XL_STATE_MAX_FED || from >= fed)
    return xl_fail(err, XL_STATE, "state delta: inconsistent counters (from %llu to %llu tokens)",
                   (unsigned long long)from, (unsigned long long)fed);
  if (k != carried(from, fed, (int)M) || payload != (uint64_t)L * 2 * k * hd * sizeof(float))
    return xl_fail(err, XL_STATE, "state delta: %u positions for %llu tokens fed (memory length "
                   "%u)", k, (unsigned long long)(fed - from), M);
  if (from != s->fed)
    return xl_fail(err, XL_STATE, "state delta: continues a state of %llu tokens, this one has "
                   "%llu (a delta is missing or out of order)", (unsigned long long)from,
                   (unsigned long long)s->fed);
  const uint8_t *p = b + DELTA_HEADER;
  uint32_t any_inf_nan = 0; /* exponent bits all ones <=> inf or nan */
  for (uint64_t i = 0; i < payload / 4; i++) {
    uint32_t u;
    memcpy(&u, p + 4 * i, 4);
    any_inf_nan |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
  }
  if (any_inf_nan) return xl_fail(err, XL_STATE, "state delta: non-finite value");
  /* valid: from here on the state changes */
  size_t row = (size_t)hd * sizeof(float);
  xl_ring_run runs[2];
  int n_runs = delta_runs((int)M, fed - k, (int)k, runs);
  for (uint32_t l = 0; l < L; l++) {
    float *K = xl_state_keys(s, (int)l), *V = xl_state_values(s, (int)l);
    for (uint32_t c = 0; c < hd; c++) {
      float *kc = K + (size_t)c * M;
      for (int r = 0; r < n_runs; r++)
        memcpy(kc + runs[r].slot, p + (size_t)runs[r].first * 4, (size_t)runs[r].count * 4);
      p += (size_t)k * 4;
    }
    for (int r = 0; r < n_runs; r++)
      memcpy(V + (size_t)runs[r].slot * hd, p + (size_t)runs[r].first * row,
             (size_t)runs[r].count * row);
    p += (size_t)k * row;
  }
  s->fed = fed;
  s->len = fed < M ? (int)fed : (int)M;
  s->head = M ? (int)((fed - (uint64_t)s->len) % M) : 0;
  return XL_OK;
}
