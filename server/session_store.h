/*
 * session_store.h: the seam for a durable session store (SQLite, Redis: issue 6).
 *
 * The session table (session_table.c) is the only caller. It consults the store
 *   - on a lookup miss (a session not in RAM): the store may hold it (evicted, or saved by a
 *     previous run); the request waits while the store loads the blob on a store thread;
 *   - on eviction (RAM budget) and at the end of a turn (durability "turn"/"async");
 *   - on delete and TTL expiry.
 * Store I/O never runs on the loop thread: every operation is asynchronous and completes on the
 * loop thread through the `done` callback (the store posts it via the daemon's wake-up path).
 *
 * Until a store exists the table runs with store == NULL: an evicted or expired session is gone
 * and remembered as a tombstone, so its next use gets 404 session_expired.
 */
#ifndef XLS_SESSION_STORE_H
#define XLS_SESSION_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct session_store session_store;

typedef void (*store_done_fn)(void *ctx, int status, const uint8_t *blob, size_t blob_len,
                              const char *error);

typedef struct session_store_ops {
  /* Loads id's metadata and state blob. status: 0 found, 1 not found, -1 error. */
  void (*load)(session_store *st, const char *id, store_done_fn done, void *ctx);
  /* Saves id's blob (already serialised by a worker). status 0 when committed. */
  void (*save)(session_store *st, const char *id, const uint8_t owner[32], const uint8_t *blob,
               size_t blob_len, store_done_fn done, void *ctx);
  void (*remove)(session_store *st, const char *id, store_done_fn done, void *ctx);
  void (*close)(session_store *st);
} session_store_ops;

struct session_store {
  const session_store_ops *ops;
};

#endif
