/*
 * session.h: one session: a core state (the Transformer-XL memory) plus the transcript
 * bookkeeping that lets the next request continue it, and table metadata.
 *
 * Ownership and threads:
 *   - Identity and table fields (id, owner, times, busy, links, ram) belong to the loop thread.
 *   - The model state and transcript fields (state, pending, digest, rng, chat record) belong
 *     to whoever holds the session: the loop thread while it is idle, the worker running its
 *     job while busy (busy is set by the loop thread before the job is submitted and cleared
 *     only after the job's completion came back). So one thread at a time touches them.
 *
 * Transcript invariant: the memory holds exactly the tokens fed; `pending` is the last token
 * sampled but not yet fed (it is fed first by the next request), so memory + pending is the
 * whole transcript as rendered (prompts, chat template text and generated replies).
 */
#ifndef XLS_SESSION_H
#define XLS_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "xl.h"

typedef enum {
  CHAT_EMPTY = 0, /* nothing fed yet */
  CHAT_MESSAGES,  /* fed as chat messages: msgs[] records them, tail holds the stop text */
  CHAT_RAW,       /* raw completions were fed: chat requests append */
  CHAT_DESYNC     /* a turn was cut short (cancel/error): the next full-history chat resets */
} chat_mode;

typedef enum { ROLE_SYSTEM = 0, ROLE_USER = 1, ROLE_ASSISTANT = 2, ROLE_TOOL = 3 } chat_role;

typedef struct chat_msg_rec {
  uint8_t role;
  uint64_t hash; /* FNV-1a of the content as the client sees it */
} chat_msg_rec;

typedef struct session {
  /* loop thread */
  char id[129];
  uint8_t owner[32];
  double created, last_used; /* wall clock */
  double last_used_mono;
  int busy;
  int in_table;
  struct session *lru_prev, *lru_next;
  size_t ram;
  uint64_t turns;
  int on_worker; /* scheduler lock: a worker holds this session's job (checked, never 2) */
  int unsaved;   /* durable table: RAM holds a state the store has not been given */
  uint64_t store_seq; /* durable table: the version of the last write submitted for it */
  uint64_t snap_tokens; /* transcript tokens as of the last release (readable while busy) */
  int snap_mem;         /* positions in memory, same */
  /* (in the padding after snap_mem: a session's size is part of its RAM accounting) */
  unsigned turn_fd1 : 30;      /* the fd + 1 of the connection of the turn holding it (0: none;
                                  so a session zeroed by calloc has none) */
  unsigned turn_cancelled : 1; /* that turn was cancelled: it ends soon (the next one waits) */
  /* holder of the session (see above) */
  xl_state *state;
  int32_t pending;
  uint64_t digest; /* FNV-1a over the ids of the tokens fed since the last reset */
  xl_rng rng;
  chat_mode chat;
  chat_msg_rec *msgs;
  int n_msgs, cap_msgs;
  char *tail; /* chat: generated text after the visible end of the last reply */
  size_t tail_len;
  /* durable table: the store holds (or its queue will) this session as of delta_base tokens
   * fed, and the state since is a continuation of that one: the next turn's delta starts
   * there (set on the loop thread between jobs, read by the worker). 0: the next write is a
   * whole snapshot (new, reset, replaced, or a write of it failed). */
  int delta_ok;
  uint64_t delta_base;
} session;

/* A session not in any table (stateless requests and the table's own use). */
session *session_new(const xl_model *model, xl_error *err);
/* session_new around a memory the caller had (taken, and emptied): no allocation of one. */
session *session_new_on(xl_state *state);
/* A copy of src's memory and transcript record in a session of no table (NULL with err). */
session *session_clone(const session *src, xl_error *err);
void session_free(session *s);
/* Frees s but its memory, which the caller gets back (NULL for NULL). */
xl_state *session_free_but_state(session *s);
/* Empties the memory and the transcript record (edited history, explicit reset); the next
 * durable write of it is a whole snapshot. */
void session_reset(session *s);
void session_set_tail(session *s, const char *t, size_t n);
void session_push_msg(session *s, chat_role role, uint64_t hash);
uint64_t session_tokens(const session *s); /* transcript tokens: fed + pending */
size_t session_ram(const session *s);
/* Folds fed tokens into the digest (holder thread). */
void session_digest_tokens(session *s, const int32_t *t, int n);
/* What the durable store lacks of s's state after a turn that fed it (holder thread): the
 * state delta since delta_base when delta_ok, else the whole state blob (malloc'd). */
xl_code session_encode_for_store(const session *s, uint8_t **blob, size_t *n, xl_error *err);

#endif
