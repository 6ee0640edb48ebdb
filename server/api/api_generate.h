/*
 * api_generate.h: a generation whose HTTP shape is not chat completions' (a "flavor": the
 * Responses API, api_responses.c). The flavor turns its body into a chat-completions body, picks
 * the session, and formats the answer and the stream; api_generate.c keeps every stage between
 * (session hold, chat plan, admission, jobs, the turn's commit) as for /v1/chat/completions.
 * Thread: loop thread only.
 */
#ifndef XLS_API_GENERATE_H
#define XLS_API_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "api_errors.h"
#include "buf.h"
#include "job.h"
#include "session.h"
#include "session_table.h"

typedef struct req req;

typedef enum {
  GEN_SESS_NONE,  /* a temporary session, freed after the turn */
  GEN_SESS_NAMED, /* the session `sid` (it must exist: missing is 404) */
  GEN_SESS_MINT,  /* a new session with a minted id, kept */
  GEN_SESS_CLONE  /* a temporary copy of the session `sid` (left as it was), freed after */
} gen_sess_mode;

/* What a finished turn came to (the flavor's reply and stream tail). */
typedef struct gen_outcome {
  job *main;               /* done (reply, recs, finish, n_prompt, n_gen) */
  const char *session_id;  /* NULL: the session was temporary */
  uint64_t session_tokens; /* its transcript after the turn */
  uint64_t session_turns;  /* its turn count after the turn (the session's version) */
  api_err err;             /* API_ERR_NONE, or why the turn failed */
  const char *err_msg;
} gen_outcome;

typedef struct gen_flavor {
  void *(*ctx_new)(void);
  void (*ctx_free)(void *ctx);
  /* the body as a chat-completions body into out; 0, or -1 with e (400) */
  int (*translate)(req *r, void *ctx, const char *body, size_t len, buf *out, api_error *e);
  /* renames the chat-completions field an error of the translated body names */
  void (*fix_error)(api_error *e);
  /* which session (sid for NAMED/CLONE); 0 to go on, 1 when it answered */
  int (*session)(req *r, void *ctx, const char **sid, gen_sess_mode *mode);
  /* the session found (NAMED/CLONE, idle); 0 to go on, 1 when it answered */
  int (*check_session)(req *r, void *ctx, const session *s);
  /* the response's id into id (cap bytes), as the request starts running */
  void (*make_id)(req *r, void *ctx, char *id, size_t cap);
  /* the record kept with the turn's commit (kept if and only if the turn is), into out; NULL:
   * none. Called when the jobs are done, before the commit (o->err is API_ERR_NONE). */
  st_record *(*turn_record)(req *r, void *ctx, const gen_outcome *o, st_record *out);
  /* a stream: its first events (before any generated text) */
  void (*stream_head)(req *r, void *ctx);
  /* a stream: its last events, appended to b (err: an in-band failure) */
  void (*stream_tail)(req *r, void *ctx, const gen_outcome *o, buf *b);
  /* a full answer (no error; finished, or cancelled by gen_cancel while the client waits) */
  void (*reply)(req *r, void *ctx, const gen_outcome *o);
  /* a stream's bytes: the flavor reads the chat chunks with gen_stream_raw and rewrites them */
  size_t (*stream_take)(req *r, void *ctx, char *out, size_t max);
} gen_flavor;

/* Runs a generation request of flavor f (the handler may run again after a session restore). */
void api_generate_as(req *r, const gen_flavor *f);
/* The chat-completions chunks the jobs produced so far (moved out of the job). */
size_t gen_stream_raw(req *r, char *out, size_t max);
/* The flavor's context of r (NULL: r is no flavor's generation). */
void *gen_flavor_ctx(req *r);
/* The request's running job (its main), NULL when none: cancel by gen_cancel. */
job *gen_main_job(req *r);

#endif
