/*
 * session_table.h: the sessions held in RAM: (owner, id) -> session (ids are per API key: the
 * owner is the key's digest, and two keys' sessions of one id are two sessions that never see
 * each other), least-recently-used order, a RAM budget and TTL expiry, in front of the durable
 * store (session_store.h) when there is one:
 *   - a session not in RAM is looked for in the store (st_find: the caller waits, then looks
 *     again) and comes back exactly as it left (its state blob restores the memory's ring);
 *   - sessions beyond the budget leave RAM least-recently-used first; one whose latest state
 *     the store has not been given is handed to the store first (never lost);
 *   - the end of a turn hands what the store lacks (the turn's delta, or the whole state when
 *     the store holds none this one continues) to the store (durability turn: the caller waits
 *     for the commit and the session stays busy until then; a failed commit rolls the session
 *     back to its last committed state; async: it does not wait); delete and TTL expiry delete
 *     the row too;
 *   - a fork is a use of its parent (LRU, TTL).
 * Without a store (durability off) a session that leaves RAM is gone, and the table keeps a
 * tombstone of its id so its next use is 404 session_expired, never a silently fresh memory.
 * Owns: the sessions in it and their states.
 * Thread: loop thread only. A busy session (a request or a store operation holds it) is never
 * evicted, expired, deleted or forked.
 */
#ifndef XLS_SESSION_TABLE_H
#define XLS_SESSION_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "prefix_cache.h"
#include "session.h"
#include "session_store.h"

typedef struct session_table session_table;

typedef enum {
  ST_FOUND,        /* *out set */
  ST_MISSING,      /* never seen (may be created) */
  ST_EXPIRED,      /* expired (or evicted without a store): 404 session_expired */
  ST_PENDING,      /* st_find: the store is asked; the callback gets the answer */
  ST_INCOMPATIBLE, /* the stored session is refused (another model/format, corrupted): 409 */
  ST_STORE_ERROR   /* the store failed: 503 */
} st_status;

typedef enum { DUR_OFF = 0, DUR_ASYNC, DUR_TURN } st_durability;

typedef struct st_answer {
  st_status status; /* ST_FOUND: the session is in RAM now (look it up again) */
  const char *message;
} st_answer;
typedef void (*st_wait_fn)(void *ctx, const st_answer *a);
/* status: 0 done, 1 nothing there (remove), -1 failed (message), -2 refused: a shared store's
 * row is at another version (another replica wrote it; st_turn_end), -3 the commit's outcome
 * is unknown (st_turn_end: the session left RAM and is re-read from the store) */
typedef void (*st_done_fn)(void *ctx, int status, const char *message);
typedef void (*st_bytes_fn)(void *ctx, uint8_t *bytes, size_t n, const char *error); /* takes bytes */
typedef void (*st_rows_fn)(void *ctx, const store_row *rows, int n, const char *error);

typedef enum {
  IMPORT_CREATED,
  IMPORT_REPLACED,
  IMPORT_INVALID,   /* corrupted / not an envelope: 400 */
  IMPORT_MISMATCH,  /* another model or format version: 409 */
  IMPORT_BUSY,      /* the session is in use: 409 */
  IMPORT_ERROR      /* the store failed: 503 */
} st_import_result;
typedef void (*st_import_fn)(void *ctx, st_import_result r, const char *message);

/* store: NULL or a started store; it persists when it has a backend (durability turn/async). */
session_table *st_new(const xl_model *model, size_t ram_budget, double ttl, size_t max_tombstones,
                      session_store *store, st_durability durability);
void st_free(session_table *t);
/* The prefix cache shares the RAM budget: it may hold what the sessions leave of it and shrinks
 * (least recently used first) before any session is evicted. NULL: none. */
void st_set_prefix_cache(session_table *t, prefix_cache *pc);
int st_persistent(const session_table *t);
/* Per-key limits (owners: API keys). max_sessions_per_key: st_key_full says when a key holds
 * that many sessions in RAM (0: never); ram_per_key: bytes one key's sessions may hold in RAM
 * before its least-recently-used idle ones leave (0: no cap). Whatever they are, when the
 * budget must evict it evicts first from the keys over their fair share (the budget split
 * evenly among the keys with sessions in RAM), so one key's sessions cannot push out those of
 * a key within its share. */
void st_set_key_limits(session_table *t, size_t max_sessions_per_key, size_t ram_per_key);
size_t st_key_sessions(const session_table *t, const uint8_t owner[32]);
int st_key_full(const session_table *t, const uint8_t owner[32]);

/* RAM (and tombstones) only. */
st_status st_lookup(session_table *t, const char *id, const uint8_t owner[32], session **out);
/* RAM, then the store: on a miss with a persistent store returns ST_PENDING and calls fn once
 * the store answered (loop thread; several callers of one id share one load). With a shared
 * store (several replicas) an idle session found in RAM is PENDING too: its stored version is
 * checked first, and a RAM copy another replica has advanced (or deleted) leaves RAM, so the
 * caller's next look (st_lookup) misses and st_find loads the stored one. */
st_status st_find(session_table *t, const char *id, const uint8_t owner[32], session **out,
                  st_wait_fn fn, void *ctx);
/* Creates a session (id NULL: mint a 128-bit random one). NULL with err on a core failure.
 * A tombstone of the same id is dropped. May evict idle sessions to respect the budget. */
session *st_create(session_table *t, const char *id, const uint8_t owner[32], xl_error *err);
/* A stateless request's session, in no table: its memory is the one the last stateless
 * request left (emptied) when the table keeps it, else new. NULL with err on a core failure. */
session *st_new_stateless(session_table *t, xl_error *err);
/* Frees a stateless request's session; the table keeps its memory for the next one when it
 * keeps none yet and the RAM budget has room beside the sessions and the prefix cache (a
 * memory kept there is the first thing to go when either needs the room). */
void st_free_stateless(session_table *t, session *s);
size_t st_spare_bytes(const session_table *t); /* what the kept memory holds (0: none) */
/* Forks src (not busy) into a new minted id with the same owner. A use of src: src becomes the
 * most recently used after the fork, and the fork's arrival never evicts it. */
session *st_fork(session_table *t, session *src, xl_error *err);
void st_acquire(session_table *t, session *s);  /* busy = 1 */
void st_release(session_table *t, session *s);  /* busy = 0, touch, enforce the budget */

/* The end of a turn on s (still busy: acquired for the job): core is what the worker encoded
 * (session_encode_for_store: a state delta, appended to the session's log, or a whole state
 * blob, its new snapshot; taken; NULL when there is none: the job fed nothing, or there is no
 * store), fed says whether the turn changed s. Returns
 *    1: durability turn: s stays busy until the commit; then fn gets its outcome. On success s
 *       is released; on failure the turn is not kept: s leaves RAM without a save, so its next
 *       use finds the store's row, its last committed state (a retry of the turn is safe);
 *    0: s is released (async: its save follows; no store: nothing to save);
 *   -1: durability turn, the turn fed s but has no snapshot: it cannot be committed, and s
 *       left RAM as on a failed commit (fn is not called). */
/* A keyed record written with a turn (an Idempotency-Key's answer): in the turn's commit
 * when there is one (kept if and only if the turn is), else on its own (no store: the store's
 * in-memory table). ns/key as store_record's; value taken. */
typedef struct st_record {
  const char *ns, *key;
  uint8_t *value;
  size_t len;
  double ttl_s;
} st_record;

int st_turn_end(session_table *t, session *s, uint8_t *core, size_t core_len, int fed,
                st_record *rec, st_done_fn fn, void *ctx);
/* Saves s (idle; held busy meanwhile) now: a creation, fork or import, answered after the
 * commit. 1: fn will be called; 0: no store. A failed save is not kept: s leaves RAM (its id
 * then holds what the store holds: the state an import replaced, or nothing). */
int st_persist(session_table *t, session *s, st_done_fn fn, void *ctx);
/* Deletes s (not busy) from RAM and the store. 1: fn will be called (durability turn). */
int st_delete(session_table *t, session *s, st_done_fn fn, void *ctx);
/* Deletes a stored row that is not in RAM (a refused one). fn is always called. */
void st_remove_stored(session_table *t, const char *id, const uint8_t owner[32], st_done_fn fn,
                      void *ctx);
/* 1 when owner's id had one */
int st_forget_tombstone(session_table *t, const char *id, const uint8_t owner[32]);
/* The envelope of s (idle; held busy meanwhile), made on the store thread. */
void st_export(session_table *t, session *s, st_bytes_fn fn, void *ctx);
/* Imports an envelope (bytes taken) as id for owner: validated on the store thread, then
 * replaces or creates the session and persists it. */
void st_import(session_table *t, const char *id, const uint8_t owner[32], uint8_t *bytes,
               size_t n, st_import_fn fn, void *ctx);
/* owner's stored sessions (metadata), most recent first. fn always called. */
void st_list_stored(session_table *t, const uint8_t owner[32], int max, st_rows_fn fn, void *ctx);

/* Expires idle sessions unused for ttl seconds: at most max from RAM per call (and their
 * rows); with a store, also starts a sweep of the store's expired rows in batches of
 * `batch` (store thread). Returns the count expired from RAM. */
int st_expire(session_table *t, double now_mono_s, int max);
/* Shutdown: hands every idle session whose latest state the store lacks to the store. */
void st_flush(session_table *t);

size_t st_count(const session_table *t);
size_t st_ram(const session_table *t);
/* Most-recently-used first; n is the capacity of out. Returns the number written. */
size_t st_list(session_table *t, const uint8_t owner[32], session **out, size_t n);

#endif
