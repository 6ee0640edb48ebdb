/*
 * util.h: small helpers shared by the daemon: clocks, randomness, hashing, UTF-8 checks and
 * JSON string escaping into a buf. Thread: any (pure functions; random_bytes uses getrandom).
 */
#ifndef XLS_UTIL_H
#define XLS_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "buf.h"

/* seconds, CLOCK_MONOTONIC (inline: the CLI tools, built without the daemon, use it too) */
static inline double now_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double now_wall(void);     /* seconds since the epoch */

/* pthread_create for a daemon thread: it starts with every signal blocked, so signals reach
 * the loop thread; returns pthread_create's code (the caller's mask is unchanged). */
int thread_create_nosig(pthread_t *th, void *(*fn)(void *), void *arg);
void random_bytes(void *out, size_t n);
void hex_encode(const uint8_t *in, size_t n, char *out); /* out: 2n+1 */

uint64_t fnv1a64(uint64_t h, const void *data, size_t n);
#define FNV64_INIT 0xcbf29ce484222325ULL

/* 1 when s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int utf8_valid(const char *s, size_t n);

/* Appends s[0..n) as a JSON string literal (with quotes). Invalid UTF-8 becomes U+FFFD,
 * control characters are \u-escaped. */
void json_escape(buf *b, const char *s, size_t n);

/* Session ids: 1..128 chars of [A-Za-z0-9._-]. */
int session_id_valid(const char *s, size_t n);

/* Decodes C-style escapes (\n \t \r \\ \" \xNN) in a config string; returns malloc'd text
 * or NULL when an escape is malformed. */
char *unescape_c(const char *s);

#endif
