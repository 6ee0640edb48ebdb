/*
 * api_idem.h: the Idempotency-Key header of a turn (POST /v1/completions and
 * /v1/chat/completions in a session). A turn sent with a key leaves a keyed record (store
 * namespace "idem", key "SESSION/KEY" under the request's owner) written in the SAME commit
 * as the turn: its request's digest, the session's token count after it, and its answer (the
 * full JSON body; for a stream, the non-streamed body of the same turn). A request with a key
 * already recorded is never run again: the same body gets the recorded answer back
 * (Idempotent-Replayed: true), or 409 idempotent_turn_kept with the session's token count when
 * no answer was recorded; another body gets 422 idempotency_key_reused; a key whose request is
 * still running gets 409 idempotency_key_in_progress. See docs/sessions.md.
 * Thread: loop thread only.
 */
#ifndef XLS_API_IDEM_H
#define XLS_API_IDEM_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "session_table.h"

struct req;

typedef struct idem_req {
  int on;          /* the request carries a key (idem_hash) */
  char *key;       /* the header's value */
  char digest[65]; /* SHA-256 of the route and the body, hex */
  char rkey[400];  /* the record's key: SESSION/KEY */
  int phase;       /* 0 to look up, 1 looking up, 2 answered, 3 go on (a new key) */
  int registered;  /* in the running set */
  int got;         /* phase 2: 0 found, 1 absent, -1 the store failed */
  uint8_t *value;  /* phase 2, found: the record */
  size_t len;
  char *why; /* phase 2, failed: the store's message */
} idem_req;

/* Before the body is freed: takes the header (400 when malformed: returns 1) and digests
 * the request. 0 go on. */
int idem_begin(struct req *r, idem_req *q);
/* The stage: sid is the turn's session (NULL: not a session turn, the key is ignored).
 * 0 go on (no key, or a new key: the request runs, registered as running); 1 answered or
 * suspended until the store answers (the handler then runs again). */
int idem_stage(struct req *r, idem_req *q, const char *sid);
/* The turn's record for st_turn_end (NULL: none): body is its answer (NULL: none recorded). */
st_record *idem_record(idem_req *q, st_record *out, uint64_t session_tokens, const buf *body);
/* The turn is over and its commit has an outcome (its record, if any, is where a retry reads
 * it): out of the running set, so a retry sent as soon as the answer arrives is replayed, not
 * refused as still running. */
void idem_answered(struct req *r, idem_req *q);
/* The request ends: out of the running set; frees q's buffers. */
void idem_end(struct req *r, idem_req *q);

#endif
