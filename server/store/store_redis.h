/*
 * store_redis.h: the Redis backend of the session store (store = redis), shared by several
 * daemons. Opening parses the URL and reads the password file (no connection yet: each store
 * thread connects, and reconnects with backoff while Redis is unreachable).
 * Thread: store_redis_open and store_redis_durability on the main thread, at start.
 */
#ifndef XLS_STORE_REDIS_H
#define XLS_STORE_REDIS_H

#include <stddef.h>

#include "session_store.h"

typedef struct store_redis_opts {
  const char *url;           /* redis://[:PASSWORD@]HOST[:PORT][/DB] or unix:/PATH[?db=N] */
  const char *password_file; /* "" or a file whose first line is the password */
  const char *prefix;        /* key prefix (no braces) */
  int wait_replicas;         /* WAIT for this many replicas after each batch (0: none) */
  int wait_timeout_ms;
} store_redis_opts;

/* NULL with a message naming the problem (a malformed URL, an unreadable password file). */
store_backend *store_redis_open(const store_redis_opts *o, char *err, size_t cap);

/* Asks the server (one short connection) what an acknowledged commit survives, from CONFIG GET
 * appendonly/appendfsync (and save); writes one sentence to out. 0, or -1 when Redis could not
 * be asked (out says why). */
int store_redis_durability(store_backend *b, char *out, size_t cap);

#endif
