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
 *   8  u32      format version: 1 (F32 memory) or 2 (the memory dtype at offset 64)
 *  12  u32      header bytes (64 in version 1, 72 in version 2)
 *  16  u64      model fingerprint
 *  24  u32      n_layer      28 u32 mem_len     32 u32 H*Dh     36 u32 k (positions carried)
 *  40  u64      from: positions fed before (the state it applies to must have fed exactly this)
 *  48  u64      fed: positions fed after (at most XL_STATE_MAX_FED, more than from)
 *  56  u64      payload bytes = n_layer * k * (2 * H*Dh * element bytes + INT8: 2 * H * 4)
 *  64  version 2 only: u32 memory dtype (0 f32, 1 bf16, 2 int8), u32 reserved (0)
 *  64 / 72  payload: per layer, the keys as [H*Dh][k] (component-major, oldest first), then the
 *      values as [k][H*Dh] rows, oldest first, in the dtype's elements, then (int8) the key
 *      scales [H][k] and value scales [k][H] (the state blob's layout, for k positions)
 * An F32 state's delta is written as version 1 (what older builds read), a narrower one's as
 * version 2. A delta of another dtype than the state's is widened or narrowed as it applies.
 *  end u64      checksum: xl_hash64 of every byte before it
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "state_header.h"
#include "xl_le.h"

#define DELTA_MAGIC "XLDELTA"
#define DELTA_VERSION_F32 1u /* F32 memory */
#define DELTA_VERSION 2u     /* any memory dtype, named at offset 64 */
#define DELTA_HEADER_F32 64u
#define DELTA_HEADER 72u
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
  int L = m->cfg.n_layer, M = s->mem_len;
  int k = (int)carried(from, s->fed, M);
  uint32_t header = s->dtype == XL_KV_F32 ? DELTA_HEADER_F32 : DELTA_HEADER;
  size_t layer = xl_kv_packed_bytes(m, s->dtype, k);
  size_t payload = (size_t)L * layer;
  size_t total = header + payload + 8;
  uint8_t *b = malloc(total);
  if (!b) return xl_fail(err, XL_NOMEM, "out of memory encoding a state delta (%zu bytes)", total);
  memset(b, 0, header);
  xl_state_header_put(b, DELTA_MAGIC, s->dtype == XL_KV_F32 ? DELTA_VERSION_F32 : DELTA_VERSION,
                      header, m, M, k);
  xl_put_le64(b + 40, from);
  xl_put_le64(b + 48, s->fed);
  xl_put_le64(b + 56, payload);
  if (header == DELTA_HEADER) xl_put_le32(b + 64, (uint32_t)s->dtype);
  xl_ring_run runs[2];
  int n_runs = delta_runs(M, s->fed - (uint64_t)k, k, runs);
  for (int l = 0; l < L; l++) {
    xl_kv_layer src = xl_state_layer(s, l);
    xl_kv_layer dst = xl_kv_packed_at(m, s->dtype, k, b + header + (size_t)l * layer);
    for (int r = 0; r < n_runs; r++) xl_kv_copy(m, &dst, runs[r].first, &src, runs[r].slot, runs[r].count);
  }
  xl_put_le64(b + header + payload, xl_hash64(b, header + payload, DELTA_SEED));
  *blob = b;
  *blob_len = total;
  return XL_OK;
}

xl_code xl_state_delta_apply(xl_state *s, const uint8_t *b, size_t n, xl_error *err) {
  const xl_model *m = s->model;
  if (!b || n < DELTA_HEADER_F32 + 8 || memcmp(b, DELTA_MAGIC, 8))
    return xl_fail(err, XL_STATE, "state delta: not an xlserve delta (bad magic or too short)");
  uint32_t version = xl_get_le32(b + 8), header = xl_get_le32(b + 12);
  if (version != DELTA_VERSION_F32 && version != DELTA_VERSION)
    return xl_fail(err, XL_MISMATCH, "state delta: format version %u, this build reads %u and %u",
                   version, DELTA_VERSION_F32, DELTA_VERSION);
  if (header != (version == DELTA_VERSION_F32 ? DELTA_HEADER_F32 : DELTA_HEADER) || n < header + 8)
    return xl_fail(err, XL_STATE, "state delta: bad header size");
  uint64_t payload = xl_get_le64(b + 56);
  if (payload != n - header - 8)
    return xl_fail(err, XL_STATE, "state delta: %zu bytes, header announces %llu of payload "
                   "(truncated?)", n, (unsigned long long)payload);
  if (xl_get_le64(b + n - 8) != xl_hash64(b, n - 8, DELTA_SEED))
    return xl_fail(err, XL_STATE, "state delta: checksum mismatch (corrupted)");
  uint32_t code = version == DELTA_VERSION_F32 ? 0 : xl_get_le32(b + 64);
  if (code >= XL_KV_DTYPE_COUNT)
    return xl_fail(err, XL_MISMATCH, "state delta: memory dtype code %u is unknown to this build "
                   "(it reads 0 f32, 1 bf16, 2 int8)", code);
  xl_kv_dtype dt = (xl_kv_dtype)code;
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
  if (k != carried(from, fed, (int)M) || payload != (uint64_t)L * xl_kv_packed_bytes(m, dt, (int)k))
    return xl_fail(err, XL_STATE, "state delta: %u positions for %llu tokens fed (memory length "
                   "%u)", k, (unsigned long long)(fed - from), M);
  if (from != s->fed)
    return xl_fail(err, XL_STATE, "state delta: continues a state of %llu tokens, this one has "
                   "%llu (a delta is missing or out of order)", (unsigned long long)from,
                   (unsigned long long)s->fed);
  const uint8_t *p = b + header;
  if (!xl_kv_packed_finite(m, dt, p, payload, (int)k))
    return xl_fail(err, XL_STATE, "state delta: non-finite value");
  float *tmp = NULL;
  if (dt != s->dtype && !(tmp = malloc(2 * (size_t)hd * sizeof(float))))
    return xl_fail(err, XL_NOMEM, "out of memory applying a state delta");
  /* valid: from here on the state changes */
  size_t layer = xl_kv_packed_bytes(m, dt, (int)k);
  xl_ring_run runs[2];
  int n_runs = delta_runs((int)M, fed - k, (int)k, runs);
  for (uint32_t l = 0; l < L; l++) {
    xl_kv_layer dst = xl_state_layer(s, (int)l);
    xl_kv_layer src = xl_kv_packed_at(m, dt, (int)k, (unsigned char *)(uintptr_t)(p + l * layer));
    for (int r = 0; r < n_runs; r++) {
      if (tmp) /* another dtype: packed scales may be unaligned, xl_kv_load reads with memcpy */
        xl_kv_convert(m, &dst, runs[r].slot, &src, runs[r].first, runs[r].count, tmp);
      else
        xl_kv_copy(m, &dst, runs[r].slot, &src, runs[r].first, runs[r].count);
    }
  }
  free(tmp);
  s->fed = fed;
  s->len = fed < M ? (int)fed : (int)M;
  s->head = M ? (int)((fed - (uint64_t)s->len) % M) : 0;
  return XL_OK;
}
