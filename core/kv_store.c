/*
 * kv_store.c: how a session memory is laid out in each dtype, and the conversions between F32
 * rows and stored positions. Per layer, in a state:
 *   keys    [H*Dh][M] elements (transposed: a decode step reads one component of every position)
 *   values  [M][H*Dh] elements
 *   INT8 only: key scales F32 [H][M], value scales F32 [M][H]
 * each section 64-byte aligned. Elements: F32; BF16 (round to nearest even, widened exactly);
 * INT8 (q = round(x * 127 / max|x|) over the position's Dh components of one head, scale =
 * max|x| / 127, so x ~ q * scale). A packed layer (blobs, deltas) is the same sections for
 * `count` positions, back to back without padding. Any thread (the state's owner).
 */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "kvkernels.h"

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

static const char *const NAMES[XL_KV_DTYPE_COUNT] = {"f32", "bf16", "int8"};

const char *xl_kv_dtype_name(xl_kv_dtype dt) {
  return (unsigned)dt < XL_KV_DTYPE_COUNT ? NAMES[dt] : "unknown";
}

int xl_kv_dtype_parse(const char *name, xl_kv_dtype *out) {
  for (int i = 0; name && i < XL_KV_DTYPE_COUNT; i++)
    if (!strcmp(name, NAMES[i])) {
      *out = (xl_kv_dtype)i;
      return 0;
    }
  return -1;
}

size_t xl_kv_elem_bytes(xl_kv_dtype dt) { return dt == XL_KV_F32 ? 4 : dt == XL_KV_BF16 ? 2 : 1; }

static size_t scale_bytes(const xl_model *m, xl_kv_dtype dt, int M) {
  return dt == XL_KV_INT8 ? (size_t)m->cfg.n_head * (size_t)M * sizeof(float) : 0;
}

size_t xl_kv_layer_bytes(const xl_model *m, xl_kv_dtype dt, int M) {
  size_t elems = ALIGN64((size_t)m->hd * (size_t)M * xl_kv_elem_bytes(dt));
  return 2 * elems + 2 * ALIGN64(scale_bytes(m, dt, M));
}

size_t xl_kv_position_bytes(const xl_model *m, xl_kv_dtype dt) {
  return 2 * (size_t)m->hd * xl_kv_elem_bytes(dt) + 2 * scale_bytes(m, dt, 1);
}

xl_kv_layer xl_kv_layer_at(const xl_model *m, xl_kv_dtype dt, int M, unsigned char *base) {
  size_t elems = ALIGN64((size_t)m->hd * (size_t)M * xl_kv_elem_bytes(dt));
  size_t scales = ALIGN64(scale_bytes(m, dt, M));
  xl_kv_layer L = {dt, M, base, base + elems, NULL, NULL};
  if (dt == XL_KV_INT8) {
    L.kscale = base + 2 * elems;
    L.vscale = L.kscale + scales;
  }
  return L;
}

xl_kv_layer xl_kv_packed_at(const xl_model *m, xl_kv_dtype dt, int count, unsigned char *base) {
  size_t elems = (size_t)m->hd * (size_t)count * xl_kv_elem_bytes(dt);
  xl_kv_layer L = {dt, count, base, base + elems, NULL, NULL};
  if (dt == XL_KV_INT8) {
    L.kscale = base + 2 * elems;
    L.vscale = L.kscale + scale_bytes(m, dt, count);
  }
  return L;
}

size_t xl_kv_packed_bytes(const xl_model *m, xl_kv_dtype dt, int count) {
  return (size_t)count * xl_kv_position_bytes(m, dt);
}

/* int8 of one head's dh values: q[i] = round(x[i] / scale), returns scale = max|x| / 127
 * (0 for all zeros; NaN, with zeros stored, when a value is not finite). */
static float quantize_head(const float *x, int dh, int8_t *q, size_t q_stride) {
  float amax = 0.0f;
  int finite = 1;
  for (int i = 0; i < dh; i++) {
    float a = fabsf(x[i]);
    if (!(a <= 3.0e38f)) finite = 0; /* Inf or NaN */
    amax = a > amax ? a : amax;
  }
  if (!finite || amax == 0.0f) {
    for (int i = 0; i < dh; i++) q[(size_t)i * q_stride] = 0;
    return finite ? 0.0f : NAN;
  }
  float inv = 127.0f / amax;
  for (int i = 0; i < dh; i++) {
    float r = nearbyintf(x[i] * inv); /* |r| <= 127 (rounding can't pass it: x * inv <= 127) */
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
    q[(size_t)i * q_stride] = (int8_t)r;
  }
  return amax / 127.0f;
}

static float get_f32(const unsigned char *p, size_t i) {
  float v;
  memcpy(&v, p + 4 * i, 4);
  return v;
}
static void put_f32(unsigned char *p, size_t i, float v) { memcpy(p + 4 * i, &v, 4); }

/* Heads [h0, h1) of a position's key row (F32 [H*Dh]) into column `slot` of the transposed
 * keys, with their scales. */
static void store_key_heads(const xl_model *m, const xl_kv_layer *L, int slot, const float *key,
                            int h0, int h1) {
  const int dh = m->cfg.d_head, M = L->M;
  const int c0 = h0 * dh, c1 = h1 * dh;
  switch (L->dtype) {
    case XL_KV_F32: {
      float *K = (float *)(void *)L->keys;
      for (int c = c0; c < c1; c++) K[(size_t)c * M + slot] = key[c];
      break;
    }
    case XL_KV_BF16: {
      uint16_t *K = (uint16_t *)(void *)L->keys;
      for (int c = c0; c < c1; c++) K[(size_t)c * M + slot] = xl_f32_to_bf16(key[c]);
      break;
    }
    case XL_KV_INT8: {
      int8_t *K = (int8_t *)L->keys;
      for (int h = h0; h < h1; h++) {
        float ks = quantize_head(key + (size_t)h * dh, dh, K + (size_t)h * dh * M + slot, (size_t)M);
        put_f32(L->kscale, (size_t)h * M + slot, ks);
      }
      break;
    }
  }
}

/* Heads [h0, h1) of a position's value row (F32 [H*Dh]) into row `slot`, with their scales. */
static void store_value_heads(const xl_model *m, const xl_kv_layer *L, int slot, const float *val,
                              int h0, int h1) {
  const int hd = m->hd, H = m->cfg.n_head, dh = m->cfg.d_head;
  const size_t c0 = (size_t)h0 * dh, n = (size_t)(h1 - h0) * dh;
  switch (L->dtype) {
    case XL_KV_F32:
      memcpy((float *)(void *)L->vals + (size_t)slot * hd + c0, val + c0, n * sizeof(float));
      break;
    case XL_KV_BF16: {
      uint16_t *V = (uint16_t *)(void *)L->vals + (size_t)slot * hd;
      for (size_t c = c0; c < c0 + n; c++) V[c] = xl_f32_to_bf16(val[c]);
      break;
    }
    case XL_KV_INT8: {
      int8_t *V = (int8_t *)L->vals + (size_t)slot * hd;
      for (int h = h0; h < h1; h++) {
        float vs = quantize_head(val + (size_t)h * dh, dh, V + (size_t)h * dh, 1);
        put_f32(L->vscale, (size_t)slot * H + h, vs);
      }
      break;
    }
  }
}

void xl_kv_store_key(const xl_model *m, const xl_kv_layer *L, int slot, const float *key) {
  store_key_heads(m, L, slot, key, 0, m->cfg.n_head);
}

void xl_kv_store_heads(const xl_model *m, const xl_kv_layer *L, int slot, const float *key,
                       const float *val, int h0, int h1) {
  store_key_heads(m, L, slot, key, h0, h1);
  store_value_heads(m, L, slot, val, h0, h1);
}

void xl_kv_store(const xl_model *m, const xl_kv_layer *L, int slot, const float *key,
                 const float *val) {
  xl_kv_store_heads(m, L, slot, key, val, 0, m->cfg.n_head);
}

/* Reads with memcpy only: a packed layer inside a blob may sit at any alignment. */
void xl_kv_load(const xl_model *m, const xl_kv_layer *L, int slot, float *key, float *val) {
  const int hd = m->hd, H = m->cfg.n_head, dh = m->cfg.d_head, M = L->M;
  switch (L->dtype) {
    case XL_KV_F32:
      for (int c = 0; c < hd; c++) key[c] = get_f32(L->keys, (size_t)c * M + slot);
      memcpy(val, L->vals + (size_t)slot * hd * 4, (size_t)hd * 4);
      break;
    case XL_KV_BF16:
      for (int c = 0; c < hd; c++) {
        uint16_t kb, vb;
        memcpy(&kb, L->keys + 2 * ((size_t)c * M + slot), 2);
        memcpy(&vb, L->vals + 2 * ((size_t)slot * hd + c), 2);
        key[c] = xl_bf16_to_f32(kb);
        val[c] = xl_bf16_to_f32(vb);
      }
      break;
    case XL_KV_INT8: {
      const int8_t *K = (const int8_t *)L->keys, *V = (const int8_t *)L->vals + (size_t)slot * hd;
      for (int h = 0; h < H; h++) {
        float ks = get_f32(L->kscale, (size_t)h * M + slot), vs = get_f32(L->vscale, (size_t)slot * H + h);
        for (int i = 0; i < dh; i++) {
          key[h * dh + i] = (float)K[(size_t)(h * dh + i) * M + slot] * ks;
          val[h * dh + i] = (float)V[h * dh + i] * vs;
        }
      }
      break;
    }
  }
}

void xl_kv_widen_head(const xl_model *m, const xl_kv_layer *L, int h, int slot, int count,
                      float *kw, size_t kld, float *vw, int at) {
  const int hd = m->hd, H = m->cfg.n_head, dh = m->cfg.d_head, M = L->M;
  if (L->dtype == XL_KV_BF16) {
    const uint16_t *K = (const uint16_t *)(const void *)L->keys + (size_t)h * dh * M + slot;
    const uint16_t *V = (const uint16_t *)(const void *)L->vals + (size_t)slot * hd + (size_t)h * dh;
    for (int i = 0; i < dh; i++)
      for (int j = 0; j < count; j++) kw[(size_t)i * kld + at + j] = xl_bf16_to_f32(K[(size_t)i * M + j]);
    for (int j = 0; j < count; j++)
      for (int i = 0; i < dh; i++)
        vw[(size_t)(at + j) * dh + i] = xl_bf16_to_f32(V[(size_t)j * hd + i]);
  } else if (L->dtype == XL_KV_INT8) {
    const int8_t *K = (const int8_t *)L->keys + (size_t)h * dh * M + slot;
    const int8_t *V = (const int8_t *)L->vals + (size_t)slot * hd + (size_t)h * dh;
    const float *ks = (const float *)(const void *)L->kscale + (size_t)h * M + slot;
    const float *vs = (const float *)(const void *)L->vscale + (size_t)slot * H + h;
    for (int i = 0; i < dh; i++)
      for (int j = 0; j < count; j++) kw[(size_t)i * kld + at + j] = (float)K[(size_t)i * M + j] * ks[j];
    for (int j = 0; j < count; j++)
      for (int i = 0; i < dh; i++)
        vw[(size_t)(at + j) * dh + i] = (float)V[(size_t)j * hd + i] * vs[(size_t)j * H];
  } else {
    const float *K = (const float *)(const void *)L->keys + (size_t)h * dh * M + slot;
    const float *V = (const float *)(const void *)L->vals + (size_t)slot * hd + (size_t)h * dh;
    for (int i = 0; i < dh; i++) memcpy(kw + (size_t)i * kld + at, K + (size_t)i * M, (size_t)count * 4);
    for (int j = 0; j < count; j++) memcpy(vw + (size_t)(at + j) * dh, V + (size_t)j * hd, (size_t)dh * 4);
  }
}

void xl_kv_copy(const xl_model *m, const xl_kv_layer *dst, int dst_slot, const xl_kv_layer *src,
                int src_slot, int count) {
  const int hd = m->hd, H = m->cfg.n_head;
  const size_t eb = xl_kv_elem_bytes(dst->dtype);
  if (count <= 0) return;
  for (int c = 0; c < hd; c++) /* key component c of the positions */
    memcpy(dst->keys + ((size_t)c * dst->M + dst_slot) * eb,
           src->keys + ((size_t)c * src->M + src_slot) * eb, (size_t)count * eb);
  memcpy(dst->vals + (size_t)dst_slot * hd * eb, src->vals + (size_t)src_slot * hd * eb,
         (size_t)count * hd * eb);
  if (dst->dtype != XL_KV_INT8) return;
  for (int h = 0; h < H; h++)
    memcpy(dst->kscale + ((size_t)h * dst->M + dst_slot) * 4,
           src->kscale + ((size_t)h * src->M + src_slot) * 4, (size_t)count * 4);
  memcpy(dst->vscale + (size_t)dst_slot * H * 4, src->vscale + (size_t)src_slot * H * 4,
         (size_t)count * H * 4);
}

int xl_kv_packed_finite(const xl_model *m, xl_kv_dtype dt, const unsigned char *p, size_t bytes,
                        int count) {
  uint32_t bad = 0; /* branch-free: exponent bits all ones <=> Inf or NaN */
  if (dt == XL_KV_F32) {
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
      uint32_t u;
      memcpy(&u, p + i, 4);
      bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
  } else if (dt == XL_KV_BF16) {
    for (size_t i = 0; i + 2 <= bytes; i += 2) {
      uint16_t u;
      memcpy(&u, p + i, 2);
      bad |= (uint32_t)((u & 0x7f80u) == 0x7f80u);
    }
  } else { /* int8 elements are always finite; the scales must be finite and >= 0 */
    size_t layer = xl_kv_packed_bytes(m, dt, count), elems = 2 * (size_t)m->hd * (size_t)count;
    for (size_t off = 0; off + layer <= bytes && layer; off += layer)
      for (size_t i = off + elems; i + 4 <= off + layer; i += 4) {
        uint32_t u;
        memcpy(&u, p + i, 4);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u) | (uint32_t)(u >> 31);
      }
  }
  return !bad;
}

void xl_kv_convert(const xl_model *m, const xl_kv_layer *dst, int dst_slot,
                   const xl_kv_layer *src, int src_slot, int count, float *tmp) {
  for (int j = 0; j < count; j++) {
    xl_kv_load(m, src, src_slot + j, tmp, tmp + m->hd);
    xl_kv_store(m, dst, dst_slot + j, tmp, tmp + m->hd);
  }
}
