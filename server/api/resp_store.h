/*
 * resp_store.h: the stored Responses API objects, as keyed records of the session store
 * (session_store.h; namespace "resp"): SQLite or Redis when a store is configured (they survive
 * a restart and are shared by the replicas of one Redis), else the store's bounded in-memory
 * table. A stored response's id names its session: "resp_" + the session id + "_" + 16 hex
 * digits, and its record's key is "SESSION/ID" (with Redis, in the session's hash slot, so
 * the turn's commit writes both). Its value: "xlresp1 TURNS\n" (the session's turn count after
 * the response: its version), the response object (JSON), "\n", its input items (JSON array).
 * Thread: loop thread only.
 */
#ifndef XLS_RESP_STORE_H
#define XLS_RESP_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "session_table.h"

typedef struct req req;

#define RESP_TTL_S (30.0 * 24 * 3600) /* how long a response object is kept */

/* A lookup in progress or done (in the request's context, zeroed at first). */
typedef struct resp_lookup {
  int phase; /* 0 not started, 1 waiting, 2 answered */
  int got;   /* answered: 0 found, 1 absent (or not a stored id), -1 store error (why) */
  char *why;
  uint64_t turns; /* found: the record's fields */
  char session_id[129];
  char *object; /* the response object's JSON (malloc'd) */
  char *items;  /* its input items' JSON array (malloc'd) */
} resp_lookup;

/* The session id a stored response id names into sid (cap bytes); -1 when id is no stored
 * response's id (then it is absent). */
int resp_id_session(const char *id, char *sid, size_t cap);
/* Looks up owner's response id: 0 when l is answered, 1 when r waits (its handler runs again
 * once the store answered; call again then). */
int resp_lookup_run(req *r, resp_lookup *l, const char *id);
void resp_lookup_free(resp_lookup *l);
/* The record of a finished response for the turn's commit: out filled (value malloc'd; key
 * written into keybuf), NULL when id is not a stored id. */
st_record *resp_record(st_record *out, char *keybuf, size_t cap, const char *id, uint64_t turns,
                       const char *object, const char *items);
/* Deletes owner's response id (found by a lookup): r waits, then is answered by done(r, ok)
 * (ok: 1 deleted, 0 absent, -1 store error). */
void resp_delete(req *r, const char *id, void (*done)(req *r, int ok, const char *why));

#endif
