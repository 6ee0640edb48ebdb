/*
 * state_blob.c: a state as a versioned, checksummed byte blob carrying the model's
 * fingerprint (export, persistence, migration), and its validating loader, which trusts
 * nothing in the blob. Any thread (the state's owner).
 *
 * Layout (little-endian):
 *   0  char[8]  "XLSTATE\0"
 *   8  u32      format version: 1 (F32 memory) or 2 (the memory dtype at offset 60)
 *  12  u32      header bytes (64)
 *  16  u64      model fingerprint
 *  24  u32      n_layer      28 u32 mem_len     32 u32 H*Dh     36 u32 len (positions held)
 *  40  u64      positions fed since reset (at most XL_STATE_MAX_FED)
 *  48  u64      payload bytes = n_layer * len * (2 * H*Dh * element bytes + INT8: 2 * H * 4)
 *  56  u32      ring head (slot of the oldest position)
 *  60  u32      memory dtype: 0 f32, 1 bf16, 2 int8 (version 1: always 0; version 2: any known)
 *  64  payload: per layer, the keys as [H*Dh][len] (component-major, positions oldest first,
 *      the engine's own layout, so both directions are runs of memcpy), then the values as
 *      [len][H*Dh] rows, oldest first, in the dtype's elements (f32, bf16, int8); int8 then has
 *      the key scales as [H][len] and the value scales as [len][H], f32.
 * An F32 state is written as version 1 (what older builds read); a narrower one as version 2,
 * which older builds refuse by its version. A blob of another dtype than the model's memory is
 * widened or narrowed on load (position by position through F32).
 * Restoring puts every position back in its ring slot, so a restored state continues bit for
 * bit like the original (same attention span splits, same summation order).
 * The loader checks what the engine's states always satisfy: position p (counted from the
 * reset) lives in slot p % mem_len, so len = min(fed, mem_len) and head = (fed - len) %
 * mem_len; fed is at most XL_STATE_MAX_FED (the counter never wraps); every key and value is
 * finite (int8: every scale finite and >= 0).
 *  end u64      checksum: xl_hash64 of every byte before it
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "state_header.h"
#include "xl_le.h"

#define BLOB_MAGIC "XLSTATE"
#define BLOB_VERSION_F32 1u /* F32 memory (offset 60 is 0) */
#define BLOB_VERSION 2u     /* any memory dtype, named at offset 60 */
#define BLOB_HEADER 64u
#define BLOB_SEED 0x626c6f6273756d31ULL


xl_code xl_state_serialize(const xl_state *s, uint8_t **blob, size_t *blob_len, xl_error *err) {
  const xl_model *m = s->model;
  int L = m->cfg.n_layer;
  size_t layer = xl_kv_packed_bytes(m, s->dtype, s->len);
  size_t payload = (size_t)L * layer;
  size_t total = BLOB_HEADER + payload + 8;
  uint8_t *b = malloc(total);
  if (!b) return xl_fail(err, XL_NOMEM, "out of memory serialising a state (%zu bytes)", total);
  memset(b, 0, BLOB_HEADER);
  xl_state_header_put(b, BLOB_MAGIC, s->dtype == XL_KV_F32 ? BLOB_VERSION_F32 : BLOB_VERSION,
                      BLOB_HEADER, m, s->mem_len, s->len);
  xl_put_le64(b + 40, s->fed);
  xl_put_le64(b + 48, payload);
  xl_put_le32(b + 56, (uint32_t)s->head);
  xl_put_le32(b + 60, (uint32_t)s->dtype);
  /* the ring's positions as at most two runs of slots, oldest first */
  xl_ring_run runs[2];
  int n_runs = xl_ring_runs(s, runs);
  for (int l = 0; l < L; l++) {
    xl_kv_layer src = xl_state_layer(s, l);
    xl_kv_layer dst = xl_kv_packed_at(m, s->dtype, s->len, b + BLOB_HEADER + (size_t)l * layer);
    for (int r = 0; r < n_runs; r++) xl_kv_copy(m, &dst, runs[r].first, &src, runs[r].slot, runs[r].count);
  }
  xl_put_le64(b + BLOB_HEADER + payload, xl_hash64(b, BLOB_HEADER + payload, BLOB_SEED));
  *blob = b;
  *blob_len = total;
  return XL_OK;
}

/* The state `s` (another dtype) converted to the model's memory dtype; frees s. */
static xl_code to_model_dtype(xl_state *s, xl_state **out, xl_error *err) {
  const xl_model *m = s->model;
  xl_code rc = xl_state_new(m, out, err);
  float *tmp = rc ? NULL : malloc(2 * (size_t)m->hd * sizeof(float));
  if (!rc && !tmp) rc = xl_fail(err, XL_NOMEM, "out of memory converting a state");
  if (rc) {
    xl_state_free(*out);
    *out = NULL;
    xl_state_free(s);
    return rc;
  }
  xl_state *d = *out;
  d->len = s->len, d->head = s->head, d->fed = s->fed;
  xl_ring_run runs[2];
  int n_runs = xl_ring_runs(s, runs);
  for (int l = 0; l < m->cfg.n_layer; l++) {
    xl_kv_layer src = xl_state_layer(s, l), dst = xl_state_layer(d, l);
    for (int r = 0; r < n_runs; r++)
      xl_kv_convert(m, &dst, runs[r].slot, &src, runs[r].slot, runs[r].count, tmp);
  }
  free(tmp);
  xl_state_free(s);
  return XL_OK;
}

xl_code xl_state_deserialize(const xl_model *m, const uint8_t *b, size_t n, xl_state **out,
                             xl_error *err) {
  *out = NULL;
  if (!b || n < BLOB_HEADER + 8 || memcmp(b, BLOB_MAGIC, 8))
    return xl_fail(err, XL_STATE, "state blob: not an xlserve state (bad magic or too short)");
  uint32_t version = xl_get_le32(b + 8), code = xl_get_le32(b + 60);
  if (version != BLOB_VERSION_F32 && version != BLOB_VERSION)
    return xl_fail(err, XL_MISMATCH, "state blob: format version %u, this build reads %u and %u",
                   version, BLOB_VERSION_F32, BLOB_VERSION);
  if (xl_get_le32(b + 12) != BLOB_HEADER)
    return xl_fail(err, XL_STATE, "state blob: bad header size");
  uint64_t payload = xl_get_le64(b + 48);
  if (payload != n - BLOB_HEADER - 8)
    return xl_fail(err, XL_STATE, "state blob: %zu bytes, header announces %llu of payload (truncated?)",
                   n, (unsigned long long)payload);
  if (xl_get_le64(b + n - 8) != xl_hash64(b, n - 8, BLOB_SEED))
    return xl_fail(err, XL_STATE, "state blob: checksum mismatch (corrupted)");
  if (version == BLOB_VERSION_F32 && code != XL_KV_F32)
    return xl_fail(err, XL_STATE, "state blob: version 1 with memory dtype code %u (must be 0)", code);
  if (code >= XL_KV_DTYPE_COUNT)
    return xl_fail(err, XL_MISMATCH, "state blob: memory dtype code %u is unknown to this build "
                   "(it reads 0 f32, 1 bf16, 2 int8)", code);
  xl_kv_dtype dt = (xl_kv_dtype)code;
  if (xl_get_le64(b + 16) != m->fingerprint)
    return xl_fail(err, XL_MISMATCH, "state blob: made by another model (fingerprint %016llx, "
                   "this model %016llx)", (unsigned long long)xl_get_le64(b + 16),
                   (unsigned long long)m->fingerprint);
  uint32_t L = xl_get_le32(b + 24), M = xl_get_le32(b + 28), hd = xl_get_le32(b + 32), len = xl_get_le32(b + 36);
  if (L != (uint32_t)m->cfg.n_layer || M != (uint32_t)m->cfg.mem_len || hd != (uint32_t)m->hd)
    return xl_fail(err, XL_MISMATCH, "state blob: shape %ux%ux%u does not match the model", L, M, hd);
  uint32_t head = xl_get_le32(b + 56);
  if (len > M || (M > 0 && head >= M) || (M == 0 && head != 0) ||
      payload != (uint64_t)L * xl_kv_packed_bytes(m, dt, (int)len))
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
  if (!xl_kv_packed_finite(m, dt, b + BLOB_HEADER, payload, (int)len))
    return xl_fail(err, XL_STATE, "state blob: non-finite value");
  xl_code rc = xl_state_alloc(m, dt, (int)M, out, err);
  if (rc) return rc;
  xl_state *s = *out;
  s->len = (int)len;
  s->head = (int)head;
  s->fed = fed;
  size_t layer = xl_kv_packed_bytes(m, dt, (int)len);
  xl_ring_run runs[2];
  int n_runs = xl_ring_runs(s, runs);
  for (uint32_t l = 0; l < L; l++) { /* back into the same ring slots */
    xl_kv_layer dst = xl_state_layer(s, (int)l);
    xl_kv_layer src = xl_kv_packed_at(m, dt, (int)len, (unsigned char *)(uintptr_t)(b + BLOB_HEADER + l * layer));
    for (int r = 0; r < n_runs; r++) xl_kv_copy(m, &dst, runs[r].slot, &src, runs[r].first, runs[r].count);
  }
  if (dt != m->kv_dtype) {
    *out = NULL;
    return to_model_dtype(s, out, err);
  }
  return XL_OK;
}

size_t xl_model_state_blob_max_bytes(const xl_model *m) {
  size_t most = 0;
  for (int d = 0; d < XL_KV_DTYPE_COUNT; d++) {
    size_t n = (size_t)m->cfg.n_layer * xl_kv_packed_bytes(m, (xl_kv_dtype)d, m->cfg.mem_len);
    most = n > most ? n : most;
  }
  return BLOB_HEADER + most + 8;
}

/* ---- the range a forward pass can produce ----
 * Layer l's memory holds k = W_k h and v = W_v h (rows hd..3hd of qkv_w, no bias) of the
 * layer's input h as the projection sees it:
 *   pre-LN:  h = LN_attn(x): |h_i| <= |g_i| sqrt(d - 1) + |b_i| (a centred component is at most
 *            sqrt(d - 1) standard deviations from the mean; eps only shrinks it);
 *   post-LN, l > 0: h is the previous layer's output LN_ff(...): the same bound with its g, b;
 *   post-LN, l = 0: h = the embedding times sqrt(d_model): |h_i| <= sqrt(d_model) *
 *            max over clusters of max|table| * sum_k |proj_ik| (max|table| without a proj).
 * So |k_j| <= sum_i |W_ji| bound_i, and likewise v_j. A stored element may exceed it by its
 * rounding (bf16: 2^-8 relative; int8: none, the scale is the max) and the sums' float error:
 * RANGE_SLACK. A state outside it was not made by this model (3e38 keys overflow the attention
 * scores to Inf and every later output to NaN). */
#define RANGE_SLACK 1.01f

static void ln_bound(const float *g, const float *b, int d, float *h /* [d] */) {
  float r = sqrtf((float)(d > 1 ? d - 1 : 1));
  for (int i = 0; i < d; i++) h[i] = fabsf(g[i]) * r + (b ? fabsf(b[i]) : 0.0f);
}

static float row_abs_max(const xl_wmat *W, int rows, float *row) {
  float mx = 0.0f;
  for (int r = 0; r < rows; r++) {
    xl_wmat_row(W, r, row);
    for (int c = 0; c < W->cols; c++) mx = fabsf(row[c]) > mx ? fabsf(row[c]) : mx;
  }
  return mx;
}

/* The bound of the embedding's components (post-LN layer 0's input). */
static void embed_bound(const xl_model *m, float *h /* [d_model] */, float *row /* [d_embed] */) {
  const int dm = m->cfg.d_model;
  for (int i = 0; i < dm; i++) h[i] = 0.0f;
  for (int c = 0; c < m->n_emb_clusters; c++) {
    const xl_emb_cluster *e = &m->emb[c];
    float t = row_abs_max(&e->table, e->end - e->begin, row);
    for (int i = 0; i < dm; i++) {
      float s = t;
      if (e->proj.data) {
        xl_wmat_row(&e->proj, i, row);
        s = 0.0f;
        for (int k = 0; k < e->d_emb; k++) s += fabsf(row[k]) * t;
      }
      s *= m->emb_scale;
      h[i] = s > h[i] ? s : h[i];
    }
  }
}

xl_code xl_state_check_range(const xl_state *s, xl_error *err) {
  const xl_model *m = s->model;
  const int dm = m->cfg.d_model, hd = m->hd;
  int wide = dm > m->cfg.d_embed ? dm : m->cfg.d_embed;
  /* h[d_model] | row[wide] | bound[2 hd] (keys then values) | kv[2 hd] */
  float *h = malloc(sizeof(float) * ((size_t)dm + (size_t)wide + 4 * (size_t)hd));
  if (!h) return xl_fail(err, XL_NOMEM, "out of memory checking a state's range");
  float *row = h + dm, *bound = row + wide, *kv = bound + 2 * hd;
  xl_ring_run runs[2];
  int n_runs = xl_ring_runs(s, runs);
  xl_code rc = XL_OK;
  for (int l = 0; l < m->cfg.n_layer && rc == XL_OK && s->len > 0; l++) {
    const xl_layer *L = &m->layers[l];
    if (m->cfg.pre_lnorm) ln_bound(L->attn_ln_g, L->attn_ln_b, dm, h);
    else if (l > 0) ln_bound(m->layers[l - 1].ff_ln_g, m->layers[l - 1].ff_ln_b, dm, h);
    else embed_bound(m, h, row);
    for (int j = 0; j < 2 * hd; j++) { /* qkv rows hd.. : the keys, then the values */
      xl_wmat_row(&L->qkv_w, hd + j, row);
      float b = 0.0f;
      for (int i = 0; i < dm; i++) b += fabsf(row[i]) * h[i];
      bound[j] = b * RANGE_SLACK + 1e-30f;
    }
    xl_kv_layer kl = xl_state_layer(s, l);
    for (int r = 0; r < n_runs && rc == XL_OK; r++)
      for (int p = 0; p < runs[r].count && rc == XL_OK; p++) {
        xl_kv_load(m, &kl, runs[r].slot + p, kv, kv + hd);
        for (int j = 0; j < 2 * hd; j++) {
          if (fabsf(kv[j]) <= bound[j]) continue;
          rc = xl_fail(err, XL_STATE, "state blob: layer %d, position %d of the memory: %s "
                       "component %d is %g, beyond what this model's forward pass can produce "
                       "(|x| <= %g)", l, runs[r].first + p, j < hd ? "key" : "value",
                       j % hd, (double)kv[j], (double)bound[j]);
          break;
        }
      }
  }
  free(h);
  return rc;
}
