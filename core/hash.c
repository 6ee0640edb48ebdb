/*
 * hash.c: a fast 64-bit non-cryptographic hash for model fingerprints and blob checksums
 * (any thread). Processes 8-byte words with a multiply-xorshift mix; stable across runs
 * and machines (little-endian reads).
 */
#include <string.h>

#include "internal.h"

#define HASH_K1 0x9E3779B97F4A7C15ULL
#define HASH_K2 0xC2B2AE3D27D4EB4FULL

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDULL;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t xl_hash64(const void *data, size_t len, uint64_t seed) {
  const uint8_t *p = data;
  uint64_t h0 = seed ^ HASH_K1, h1 = seed ^ HASH_K2, h2 = ~seed, h3 = seed + len;
  size_t i = 0;
  for (; i + 32 <= len; i += 32) { /* four independent lanes: keeps the multiplier busy */
    uint64_t w[4];
    memcpy(w, p + i, 32);
    h0 = (h0 ^ (w[0] * HASH_K2)) * HASH_K1;
    h1 = (h1 ^ (w[1] * HASH_K2)) * HASH_K1;
    h2 = (h2 ^ (w[2] * HASH_K2)) * HASH_K1;
    h3 = (h3 ^ (w[3] * HASH_K2)) * HASH_K1;
    h0 ^= h0 >> 29; h1 ^= h1 >> 29; h2 ^= h2 >> 29; h3 ^= h3 >> 29;
  }
  uint64_t h = mix64(h0) ^ mix64(h1 + HASH_K1) ^ mix64(h2 + HASH_K2) ^ mix64(h3);
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = mix64(h ^ w) * HASH_K1;
  }
  uint64_t tail = 0;
  memcpy(&tail, p + i, len - i);
  return mix64(h ^ tail ^ (uint64_t)len);
}
