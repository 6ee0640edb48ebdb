/*
 * resp_table.h: the stored Responses API objects: (owner, response id) -> the response object
 * as answered (JSON text), its input items (JSON array text) and the session turn it produced
 * (session id + the session's turn count after it: its version). Bounded: beyond max_records
 * or max_bytes the oldest records leave first (a continuation of a dropped response is 404).
 * Owns: the records (their strings).
 * Thread: loop thread only.
 */
#ifndef XLS_RESP_TABLE_H
#define XLS_RESP_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct resp_rec {
  char id[64];
  uint8_t owner[32];
  char session_id[129]; /* "" : none (a response made with store: false is never stored) */
  uint64_t turns;       /* the session's turn count after this response */
  char *body;           /* the response object (JSON) */
  char *input;          /* its input items (a JSON array) */
  size_t bytes;
  struct resp_rec *older, *newer; /* insertion order */
} resp_rec;

typedef struct resp_table resp_table;

resp_table *rt_new(size_t max_records, size_t max_bytes);
void rt_free(resp_table *t);
/* Stores a record (body and input taken), replacing one of the same owner and id. */
void rt_put(resp_table *t, const uint8_t owner[32], const char *id, const char *session_id,
            uint64_t turns, char *body, char *input);
const resp_rec *rt_get(resp_table *t, const uint8_t owner[32], const char *id);
/* 1 when owner's id was there */
int rt_del(resp_table *t, const uint8_t owner[32], const char *id);
size_t rt_count(const resp_table *t);

#endif
