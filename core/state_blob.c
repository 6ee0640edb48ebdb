/*
 * state_blob.c: a state as a versioned, checksummed byte blob carrying the model's
 * fingerprint (export, persistence, migration), and its validating loader, which trusts
 * nothing in the blob. Any thread (the state's owner).
 *
 * Layout (little-endian):
 *   0  char[8]  "XLSTATE\0"
 *   8  u32      format version (1)
 *  12  u32      header bytes (64)
 *  16  u64      model fingerprint
 *  24  u32      n_layer      28 u32 mem_len     32 u32 H*Dh     36 u32 len (positions held)
 *  40  u64      positions fed since reset (at most XL_STATE_MAX_FED)
 *  48  u64      payload bytes = n_layer * 2 * len * H*Dh * 4
 *  56  u32      ring head (slot of the oldest position)    60 u32 reserved (0)
 *  64  payload: per layer, the keys as [H*Dh][len] (component-major, positions oldest first,
 *      the engine's own layout, so both directions are runs of memcpy), then the values as
 *      [len][H*Dh] rows, oldest first; f32
 * Restoring puts every position back in its ring slot, so a restored state continues bit for
 * bit like the original (same attention span splits, same summation order).
 * The loader checks what the engine's states always satisfy: position p (counted from the
 * reset) lives in slot p % mem_len, so len = min(fed, mem_len) and head = (fed - len) %
 * mem_len; fed is at most XL_STATE_MAX_FED (the counter never wraps); every key and value is
 * finite.
 *  end u64      checksum: xl_hash64 of every byte before it
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "xl_le.h"

#define BLOB_MAGIC "XLSTATE"
#define BLOB_VERSION 1u
#define BLOB_HEADER 64u
#define BLOB_SEED 0x626c6f6273756d31ULL


xl_code xl_state_serialize(const xl_state *s, uint8_t **blob, size_t *blob_len, xl_error *err) {
  const xl_model *m = s->model;
  int hd = m->hd, L = m->cfg.n_layer;
  size_t row = (size_t)hd * sizeof(float);
  size_t payload = (size_t)L * 2 * (size_t)s->len * row;
  size_t total = BLOB_HEADER + payload + 8;
  uint8_t *b = malloc(total);
  if (!b) return xl_fail(err, XL_NOMEM, "out of memory serialising a state (%zu bytes)", total);
  memset(b, 0, BLOB_HEADER);
  memcpy(b, BLOB_MAGIC, 8);
  xl_put_le32(b + 8, BLOB_VERSION);
  xl_put_le32(b + 12, BLOB_HEADER);
  xl_put_le64(b + 16, m->fingerprint);
  xl_put_le32(b + 24, (uint32_t)L);
  xl_put_le32(b + 28, (uint32_t)s->mem_len);
  xl_put_le32(b + 32, (uint32_t)hd);
  xl_put_le32(b + 36, (uint32_t)s->len);
  xl_put_le64(b + 40, s->fed);
  xl_put_le64(b + 48, payload);
  xl_put_le32(b + 56, (uint32_t)s->head);
  uint8_t *p = b + BLOB_HEADER;
  /* the ring's positions as at most two runs of slots, oldest first */
  xl_ring_run runs[2];
  int n_runs = xl_ring_runs(s, runs), M = s->mem_len;
  for (int l = 0; l < L; l++) {
    const float *K = xl_state_keys(s, l), *V = xl_state_values(s, l);
    for (int c = 0; c < hd; c++) { /* key component c of every position */
      const float *kc = K + (size_t)c * M;
      for (int r = 0; r < n_runs; r++)
        memcpy(p + (size_t)runs[r].first * 4, kc + runs[r].slot, (size_t)runs[r].count * 4);
      p += (size_t)s->len * 4;
    }
    for (int r = 0; r < n_runs; r++)
      memcpy(p + (size_t)runs[r].first * row, V + (size_t)runs[r].slot * hd,
             (size_t)runs[r].count * row);
    p += (size_t)s->len * row;
  }
  xl_put_le64(p, xl_hash64(b, BLOB_HEADER + payload, BLOB_SEED));
  *blob = b;
  *blob_len = total;
  return XL_OK;
}

xl_code xl_state_deserialize(const xl_model *m, const uint8_t *b, size_t n, xl_state **out,
                             xl_error *err) {
  *out = NULL;
  if (!b || n < BLOB_HEADER + 8 || memcmp(b, BLOB_MAGIC, 8))
    return xl_fail(err, XL_STATE, "state blob: not an xlserve state (bad magic or too short)");
  if (xl_get_le32(b + 8) != BLOB_VERSION)
    return xl_fail(err, XL_MISMATCH, "state blob: format version %u, this build reads %u",
                   xl_get_le32(b + 8), BLOB_VERSION);
  if (xl_get_le32(b + 12) != BLOB_HEADER)
    return xl_fail(err, XL_STATE, "state blob: bad header size");
  uint64_t payload = xl_get_le64(b + 48);
  if (payload != n - BLOB_HEADER - 8)
    return xl_fail(err, XL_STATE, "state blob: %zu bytes, header announces %llu of payload (truncated?)",
                   n, (unsigned long long)payload);
  if (xl_get_le64(b + n - 8) != xl_hash64(b, n - 8, BLOB_SEED))
    return xl_fail(err, XL_STATE, "state blob: checksum mismatch (corrupted)");
  if (xl_get_le64(b + 16) != m->fingerprint)
    return xl_fail(err, XL_MISMATCH, "state blob: made by another model (fingerprint %016llx, "
                   "this model %016llx)", (unsigned long long)xl_get_le64(b + 16),
                   (unsigned long long)m->fingerprint);
  uint32_t L = xl_get_le32(b + 24), M = xl_get_le32(b + 28), hd = xl_get_le32(b + 32), len = xl_get_le32(b + 36);
  if (L != (uint32_t)m->cfg.n_layer || M != (uint32_t)m->cfg.mem_len || hd != (uint32_t)m->hd)
    return xl_fail(err, XL_MISMATCH, "state blob: shape %ux%ux%u does not match the model", L, M, hd);
  uint32_t head = xl_get_le32(b + 56);
  if (len > M || (M > 0 && head >= M) || (M == 0 && head != 0) ||
      payload != (uint64_t)L * 2 * len * hd * sizeof(float))
    return xl_fail(err, XL_STATE, "state blob: inconsistent length %u / head %u", len, head);
  uint64_t fed = xl_get_le64(b + 40);
  if (fed > XL_STATE_MAX_FED)
    return xl_fail(err, XL_STATE, "state blob: %llu tokens fed, more than a state can count (%llu)",
                   (unsigned long long)fed, (unsigned long long)XL_STATE_MAX_FED);
  uint64_t held = fed < M ? fed : M; /* positions the ring holds after `fed` tokens */
  if (len != held || (M > 0 && head != (fed - len) % M))
    return xl_fail(err, XL_STATE, "state blob: %llu tokens fed cannot leave %u positions held "
                   "from ring slot %u (memory length %u)",
                   (unsigned long long)fed, len, head, M);
  const uint8_t *p = b + BLOB_HEADER;
  uint32_t any_inf_nan = 0; /* exponent bits all ones <=> inf or nan; branch-free, vectorises */
  for (uint64_t i = 0; i < payload / 4; i++) {
    uint32_t u;
    memcpy(&u, p + 4 * i, 4);
    any_inf_nan |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
  }
  if (any_inf_nan) return xl_fail(err, XL_STATE, "state blob: non-finite value");
  xl_code rc = xl_state_new(m, out, err);
  if (rc) return rc;
  xl_state *s = *out;
  s->len = (int)len;
  s->head = (int)head;
  s->fed = fed;
  size_t row = (size_t)hd * sizeof(float);
  xl_ring_run runs[2];
  int n_runs = xl_ring_runs(s, runs);
  for (uint32_t l = 0; l < L; l++) {
    float *K = xl_state_keys(s, (int)l), *V = xl_state_values(s, (int)l);
    for (uint32_t c = 0; c < hd; c++) { /* back into the same ring slots */
      float *kc = K + (size_t)c * M;
      for (int r = 0; r < n_runs; r++)
        memcpy(kc + runs[r].slot, p + (size_t)runs[r].first * 4, (size_t)runs[r].count * 4);
      p += (size_t)len * 4;
    }
    for (int r = 0; r < n_runs; r++)
      memcpy(V + (size_t)runs[r].slot * hd, p + (size_t)runs[r].first * row,
             (size_t)runs[r].count * row);
    p += (size_t)len * row;
  }
  return XL_OK;
}
