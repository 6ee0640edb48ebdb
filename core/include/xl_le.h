/*
 * xl_le.h: little-endian integer fields of the byte formats (core's state blobs, the server's
 * session envelopes): fixed byte order whatever the host. Public (core/include) so that a format
 * built on top of a state blob writes its fields the same way. Pure inline functions, any thread.
 */
#ifndef XL_LE_H
#define XL_LE_H

#include <stdint.h>

static inline void xl_put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void xl_put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t xl_get_le32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t xl_get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

#endif
