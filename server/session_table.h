/*
 * session_table.h: the sessions held in RAM: id -> session, scoped to the owner (API key
 * digest), least-recently-used order, a RAM budget, TTL expiry and tombstones for sessions
 * that left RAM without a store (their next use is 404 session_expired, never a silently
 * fresh memory). Owns: the sessions in it and their states.
 * Thread: loop thread only. A busy session (a request holds it) is never evicted, expired,
 * deleted or forked.
 */
#ifndef XLS_SESSION_TABLE_H
#define XLS_SESSION_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"
#include "session_store.h"

typedef struct session_table session_table;

typedef enum {
  ST_FOUND,     /* *out set */
  ST_MISSING,   /* never seen (may be created) */
  ST_EXPIRED,   /* evicted or expired without a store: 404 session_expired */
  ST_FORBIDDEN  /* exists but belongs to another key: answer as if missing, never create */
} st_status;

session_table *st_new(const xl_model *model, size_t ram_budget, double ttl, size_t max_tombstones,
                      session_store *store);
void st_free(session_table *t);

st_status st_lookup(session_table *t, const char *id, const uint8_t owner[32], session **out);
/* Creates a session (id NULL: mint a 128-bit random one). NULL with err on a core failure.
 * A tombstone of the same id is dropped. May evict idle sessions to respect the budget. */
session *st_create(session_table *t, const char *id, const uint8_t owner[32], xl_error *err);
/* Forks src (not busy) into a new minted id with the same owner. */
session *st_fork(session_table *t, const session *src, xl_error *err);
void st_acquire(session_table *t, session *s);  /* busy = 1 */
void st_release(session_table *t, session *s);  /* busy = 0, touch, enforce the budget */
void st_delete(session_table *t, session *s);   /* not busy */
int st_forget_tombstone(session_table *t, const char *id); /* 1 when there was one */
/* Expires idle sessions unused for ttl seconds; at most max per call. Returns the count. */
int st_expire(session_table *t, double now_mono_s, int max);

size_t st_count(const session_table *t);
size_t st_ram(const session_table *t);
/* Most-recently-used first; n is the capacity of out. Returns the number written. */
size_t st_list(session_table *t, const uint8_t owner[32], session **out, size_t n);

#endif
