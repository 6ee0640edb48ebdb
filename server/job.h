/*
 * job.h: one generation: feed a session's new tokens (its pending token, then the prompt, in
 * chunks), then sample token after token until a stop string, max_tokens or cancellation.
 *
 * Threads and ownership:
 *   - The loop thread fills the "request" fields, then hands the job to the scheduler
 *     (sched_submit); from then on those fields are read-only.
 *   - The worker that holds the job (the scheduler guarantees one at a time) owns the "run"
 *     fields and the session's state/transcript fields.
 *   - `out` (stream bytes, pre-formatted SSE events) is shared: guarded by `mu`.
 *   - `cancel` is set by the loop thread, read by workers.
 *   - Once the scheduler has posted the job's DONE event, no worker touches it again: the loop
 *     thread owns all of it (and frees it).
 */
#ifndef XLS_JOB_H
#define XLS_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "buf.h"
#include "session.h"
#include "xl.h"

typedef enum { JOB_COMPLETION, JOB_CHAT } job_kind;

typedef enum {
  FINISH_NONE = 0,
  FINISH_STOP,
  FINISH_LENGTH,
  FINISH_CANCELLED,
  FINISH_ERROR
} finish_reason;

#define JOB_MAX_TOP 20

typedef struct tok_rec {
  int32_t id;
  float lp;
  int n_top;
  int32_t top_ids[JOB_MAX_TOP];
  float top_lps[JOB_MAX_TOP];
} tok_rec;

/* where the job is, under the scheduler's lock */
typedef enum { JQ_NONE, JQ_WAIT, JQ_RUN, JQ_WORKER, JQ_DONE } job_queue;

enum { JOB_EV_OUTPUT = 1, JOB_EV_DONE = 2 };

typedef struct job {
  /* ---- request: written by the loop thread before submit, then read-only ---- */
  job_kind kind;
  const xl_model *model;
  session *sess;
  int32_t *input; /* pending token (if any) + prompt tokens */
  int n_input;
  int input_has_pending;
  int n_prompt; /* prompt tokens of this request (usage.prompt_tokens) */
  int max_tokens;
  xl_sampling sampling;
  int seeded;
  int stream, include_usage;
  int n_top; /* -1: no logprobs; else alternatives per token (0..JOB_MAX_TOP) */
  char **stops;
  int n_stops;
  int chunk; /* prefill chunk */
  char id[64];
  long long created;
  char *model_name;
  const char *fingerprint; /* chat: the system_fingerprint ("fp_" + hex; the app's string) */
  double t_arrival; /* monotonic */
  int want_snapshot; /* durable session: serialise its state when the job ends */
  /* ---- run: the worker holding the job ---- */
  xl_rng rng;
  int pos;      /* input tokens fed */
  int decoding; /* prefill done: next step feeds `next` */
  int32_t next;
  int n_gen;
  int32_t *hist; /* [max_tokens] generated ids (penalties) */
  xl_detok detok;
  buf hold;  /* generated text not yet released (could start a stop string) */
  buf reply; /* released (visible) text */
  buf tail;  /* generated text after the visible reply (the stop string, cut text) */
  tok_rec *recs;
  int n_recs, cap_recs, recs_sent;
  size_t text_sent; /* stream: bytes of reply already formatted into out */
  size_t lp_off;    /* stream: token bytes of the records already sent (text_offset) */
  buf head;         /* stream: the chunks' start, built at first use by job_chunk_head/prefix */
  size_t head_prefix_len; /* head's bytes up to the end of "model":... */
  finish_reason finish;
  xl_error error;
  uint8_t *snap; /* the session's state blob at the end (want_snapshot and it changed) */
  size_t snap_len;
  double t_sched, t_first_token, t_last_token;
  /* ---- shared ---- */
  atomic_int cancel;
  pthread_mutex_t mu;
  buf out; /* stream: SSE bytes to send (mu) */
  /* ---- scheduler lock ---- */
  struct job *q_prev, *q_next;
  job_queue where;
  int ev_flags;
  struct job *ev_next;
  /* ---- loop thread ---- */
  void *owner;
} job;

job *job_new(void);
void job_free(job *j);
void job_add_stop(job *j, const char *s, size_t n);

/* Worker side (holder of the job). */
/* After a forward whose last row was this job's: samples the next token from logprobs. */
void job_take_token(job *j, const float *logprobs, void *scratch, double now);
/* Ends the job (reason != NONE); formats the stream's closing chunks when appropriate; with
 * want_snapshot, encodes what the store lacks of the session's state if the job fed anything:
 * the turn's delta, or the whole state when the store has no state it continues (the worker
 * holds the session, so the store never copies a state on the loop thread). */
void job_finish(job *j, finish_reason reason);
/* Appends a formatted stream chunk for newly released text/logprobs (if any) to out. */
void job_emit_stream(job *j, int final);

/* Stream chunks, by whoever formats the job's output (its holder; the loop thread before
 * submit and after DONE). job_chunk_head: `data: {"id":...,"choices":[{"index":0,`;
 * job_chunk_tail: `}]` (`,"usage":null` when usage comes last) `}` and the blank line;
 * job_chunk_prefix: the head up to the end of "model":... (the usage chunk's start). */
void job_chunk_head(buf *b, job *j);
void job_chunk_tail(buf *b, const job *j);
void job_chunk_prefix(buf *b, job *j);

/* Formatting shared by streaming chunks and full responses (any thread). job_fmt_logprobs
 * formats records [from, to) whose text starts at text_offset; returns the offset after them. */
size_t job_fmt_logprobs(buf *b, const job *j, int from, int to, size_t text_offset);
const char *finish_name(finish_reason r);

#endif
