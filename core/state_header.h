/*
 * state_header.h: the first 40 bytes that state blobs (state_blob.c) and state deltas
 * (state_delta.c) share: magic (8), version (u32), header length (u32), model fingerprint (u64),
 * n_layer, mem_len, H*Dh, positions carried (u32 each), little-endian. Pure: any thread.
 */
#ifndef XL_STATE_HEADER_H
#define XL_STATE_HEADER_H

#include <string.h>

#include "internal.h"
#include "xl_le.h"

/* Writes the shared prefix into b[0..40); the caller zeroed b[0..header) and writes the rest. */
static inline void xl_state_header_put(uint8_t *b, const char magic[8], uint32_t version,
                                       uint32_t header, const xl_model *m, int mem_len,
                                       int positions) {
  memcpy(b, magic, 8);
  xl_put_le32(b + 8, version);
  xl_put_le32(b + 12, header);
  xl_put_le64(b + 16, m->fingerprint);
  xl_put_le32(b + 24, (uint32_t)m->cfg.n_layer);
  xl_put_le32(b + 28, (uint32_t)mem_len);
  xl_put_le32(b + 32, (uint32_t)m->hd);
  xl_put_le32(b + 36, (uint32_t)positions);
}

#endif /* XL_STATE_HEADER_H */
