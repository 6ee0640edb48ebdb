/*
 * auth.h: API keys ("Authorization: Bearer KEY"). Keys are held only as SHA-256 digests; a
 * session's owner is the digest of the key that created it (all zero when auth is off).
 * Owns: one key set. Thread: loop thread (built at start and on SIGHUP, checked per request).
 */
#ifndef XLS_AUTH_H
#define XLS_AUTH_H

#include <stddef.h>
#include <stdint.h>

typedef struct auth_keys {
  int n;
  uint8_t (*digest)[32];
} auth_keys;

/* Builds the key set from a comma-separated list and/or a key file. 0, or -1 with a message. */
int auth_load(auth_keys *a, const char *list, const char *file, char *err, size_t errcap);
void auth_free(auth_keys *a);
/* 1 when header (the Authorization value, may be NULL) carries a configured key; sets owner.
 * With auth off every request passes with the all-zero owner. */
int auth_check(const auth_keys *a, const char *header, uint8_t owner[32]);

#endif
