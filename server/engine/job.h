/*
 * job.h: one generation: feed a session's new tokens (its pending token, then the prompt, in
 * chunks), then sample token after token until a stop string, max_tokens or cancellation.
 *
 * Threads and ownership:
 *   - The loop thread builds the job (job_new; its request parameters are the shared,
 *     immutable gen_params it points to), then hands it to the scheduler (sched_submit); from
 *     then on `params` and `feed` are read-only.
 *   - The worker that holds the job (the scheduler guarantees one at a time) owns `run`, `text`,
 *     `tools`, the scoring rows and the session's state/transcript fields.
 *   - `stream.out` (stream bytes, pre-formatted SSE events) is shared: guarded by `stream.mu`.
 *   - `cancel` is set by the loop thread, read by workers; `links`: the scheduler's lock.
 *   - Once the scheduler has posted the job's DONE event, no worker touches it again: the loop
 *     thread owns all of it (and frees it).
 */
#ifndef XLS_JOB_H
#define XLS_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "buf.h"
#include "json_constraint.h"
#include "session.h"
#include "tool_calls.h"
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

/* Tool calls (tool_calls.h): off; forced (the reply is a call under the constraint: tool_choice
 * required or a named function); auto (the first sampled token decides: a token that starts
 * the call grammar makes the reply a call, any other token makes it text and the constraint
 * is dropped; tokens that start like a call but cannot continue one are masked). */
typedef enum { TOOLS_OFF = 0, TOOLS_FORCED, TOOLS_AUTO } tool_mode;

typedef struct tok_rec {
  int32_t id;
  float lp;
  size_t off;       /* where its text starts in the decoded reply (text_offset; detokenizers that
                       place spaces by context, transfo_xl) */
  int n_top;
  int32_t top_ids[JOB_MAX_TOP];
  float top_lps[JOB_MAX_TOP];
} tok_rec;

/* where the job is, under the scheduler's lock */
/* JQ_PAUSED: a stream whose client does not read (its sink's `out` reached the scheduler's
 * stream_buffer): out of the running set until the loop drains it; JQ_RESUMED: drained, waiting
 * for a running slot ahead of the queue. */
typedef enum { JQ_NONE, JQ_WAIT, JQ_RUN, JQ_WORKER, JQ_DONE, JQ_PAUSED, JQ_RESUMED } job_queue;

enum { JOB_EV_OUTPUT = 1, JOB_EV_DONE = 2 };

/* The parameters of one request's generation, shared by all its jobs (every choice of every
 * prompt): built by the loop thread before the jobs (generation.c), immutable afterwards, freed
 * with the last job (refs: loop thread only; the jobs are made and freed there). */
typedef struct gen_params {
  int refs;
  job_kind kind;
  const xl_model *model;
  int max_tokens;
  xl_sampling sampling;
  int seeded;
  uint64_t seed; /* seeded: choice k samples with seed + k */
  int stream, include_usage;
  int n_top;       /* -1: no logprobs; else alternatives per token (0..JOB_MAX_TOP) */
  int score_top;   /* prompt scoring (echo with logprobs, prompt_logprobs): -1 none, else the */
  int score_rank;  /* alternatives per scored token; and whether ranks are wanted */
  int chunk;       /* prefill chunk */
  char id[64];     /* the response's id, every choice's */
  long long created;
  const char *fingerprint; /* chat: the system_fingerprint (the app's string) */
  double t_arrival;        /* monotonic */
  int32_t *bias_ids; /* logit_bias: added to log-probabilities before sampling */
  float *bias_vals;
  int n_bias;
  jc_schema *constraint; /* structured output or the tool-call grammar, else NULL */
  tool_mode tools;       /* the constraint is the tool-call grammar (TOOLS_OFF: not) */
  char **stops;          /* the request's stop strings, then the chat template's */
  int n_stops;
  char *model_name;
  struct prefix_cache *prefix_cache; /* NULL: none */
  int prefix_hint; /* prompt 0's tokens shared with other requests (chat: its leading system
                      messages); -1: all of it */
} gen_params;

gen_params *gen_params_new(void);
gen_params *gen_params_ref(gen_params *p);
void gen_params_unref(gen_params *p);
void gen_params_add_stop(gen_params *p, const char *s, size_t n); /* "" and repeats: ignored */

/* What the job feeds: set by job_new on the loop thread, then read-only (want_snapshot: the
 * scheduler may clear it). */
typedef struct job_feed {
  int32_t *input; /* pending token (if any) + prompt tokens */
  int n_input;
  int input_has_pending;
  int n_prompt;      /* prompt tokens of this request (usage.prompt_tokens) */
  int want_snapshot; /* durable session: serialise its state when the job ends */
  int own_session;   /* the loop frees sess when the job is done (a choice's own fork) */
} job_feed;

/* Several choices (n > 1, best_of, a list of prompts); see "Several choices" in scheduler.h. */
typedef struct job_choices {
  struct job **sibs; /* the choices that fork this job's state after its prompt (malloc'd) */
  int n_sibs;
  struct job *sink; /* stream bytes go to sink->stream.out (the request's first job); NULL: self */
  int released;     /* worker: the siblings have their fork and first token */
} job_choices;

/* Generation state of the worker holding the job. */
typedef struct job_run {
  xl_rng rng;   /* choice k of a seeded request: seeded with seed + k (per choice, not shared) */
  int pos;      /* input tokens fed */
  int decoding; /* prefill done: next step feeds `next` */
  int32_t next;
  int n_gen;
  double sum_lp; /* the sampled tokens' log-probabilities summed (best_of ranks by it) */
  int32_t *hist; /* [max_tokens] generated ids (penalties) */
  float *adj;    /* [vocab] log-probabilities after logit_bias and the output constraint */
  jc_state *jc;  /* the constraint's automaton over the bytes generated so far */
  finish_reason finish;
  xl_error error;
  uint8_t *snap; /* the session's state blob at the end (want_snapshot and it changed) */
  size_t snap_len;
  double t_sched, t_first_token, t_last_token;
} job_run;

/* The reply's text and token records (worker holding the job). */
typedef struct job_text {
  xl_detok detok;
  size_t detok_out; /* bytes the detokeniser has produced for the reply */
  buf hold;         /* generated text not yet released (could start a stop string) */
  buf reply;        /* released (visible) text */
  buf tail;         /* generated text after the visible reply (the stop string, cut text) */
  tok_rec *recs;
  int n_recs, cap_recs;
} job_text;

/* Tool calls (params->tools != TOOLS_OFF; worker holding the job). */
typedef struct job_tools {
  int is_call;                      /* the reply is a tool call (stop strings do not apply to it) */
  int free_text;                    /* tools auto: the reply is text; the constraint is dropped */
  int named;                        /* stream: calls whose opening delta (id, name) went out */
  size_t args_sent[TOOL_MAX_CALLS]; /* stream: argument bytes sent, per call */
} job_tools;

/* Stream formatting (the job's formatter) and the sink's shared output. */
typedef struct job_stream {
  int recs_sent;
  size_t text_sent;       /* bytes of reply already formatted into out */
  size_t lp_off;          /* token bytes of the records already sent (text_offset) */
  buf head;               /* the chunks' start, built at first use by job_chunk_head/prefix */
  size_t head_prefix_len; /* head's bytes up to the end of "model":... */
  pthread_mutex_t mu;
  buf out;             /* SSE bytes to send (mu) */
  atomic_int n_paused; /* jobs paused on this sink's full `out` (written under mu and the
                             scheduler's lock; the loop reads it to know when to resume them) */
} job_stream;

/* Prompt scoring (echo with logprobs, prompt_logprobs; job_score.c): row k of the input scores
 * input[k + 1] as it is fed. Set up by the loop thread, filled by the worker. */
typedef struct job_score {
  int prompt;       /* 1: score the prompt rows (a job feeding a prompt; siblings do not) */
  int32_t *targets; /* [n_input]: input[k + 1]; -1 for the last row */
  float *lp;        /* [n_input]: log p(input[k + 1] | memory, input[..k]) */
  tok_rec *recs;    /* [n_input]: alternatives of row k (params->score_top > 0) */
  int32_t *ranks;   /* [n_input]: 1-based rank of input[k + 1] in row k (params->score_rank) */
  float *rows;      /* [chunk, vocab]: the rows' distributions (top or rank wanted); freed once
                     * the prompt is in */
} job_score;

/* Prefix cache (prefix_cache.h): set by prefix_cache_attach before submit. */
typedef struct job_prefix {
  struct prefix_cache *pc; /* the cache it was attached to; NULL: none (parked siblings) */
  struct pc_entry *hit;    /* the entry the worker copies in before the first forward */
  int store_at;            /* >0: the worker stores the state once pos reaches it */
  int applied;             /* worker: the hit was copied (pos moved past it) */
} job_prefix;

/* Queue and event links (the scheduler's lock). */
typedef struct job_links {
  struct job *q_prev, *q_next;
  job_queue where;
  int parked;        /* a sibling waiting for its group's prompt: never selected */
  int sibs_unparked; /* this job's siblings were let go (released, or cancelled with it) */
  int ev_flags;
  struct job *ev_next;
} job_links;

/* A job: a pointer to its request's parameters plus its own state, by section. Threads: see
 * the header comment; each section says who writes it. */
typedef struct job {
  gen_params *params;  /* the request's parameters (a reference, never NULL): read through it */
  session *sess;       /* the session it feeds (the worker holding the job owns its state) */
  int index;           /* the choice's index in the response */
  job_feed feed;       /* what it feeds: set by job_new, then read-only */
  job_choices choices; /* several choices: the siblings that fork its state */
  job_run run;         /* the worker holding the job: sampling, outcome, timings */
  job_text text;       /* the worker holding the job: detokenised reply and records */
  job_tools tools;     /* the worker holding the job: tool-call state */
  job_stream stream;   /* stream formatting, and the sink's shared `out` (mu) */
  job_score score;     /* prompt scoring (job_score.c) */
  job_prefix prefix;   /* prefix cache (prefix_cache.h) */
  job_links links;     /* queue and event links: under the scheduler's lock */
  atomic_int cancel;   /* set by the loop thread, read by workers */
  void *owner;         /* loop thread: the request the job's events go to */
} job;

/* The one job constructor (loop thread): a job of p's request (it takes a reference) with
 * index `index`, in session s, fed `pending` (if >= 0) then toks[0..ntok); seeded requests seed
 * its random state with p->seed + index. */
job *job_new(gen_params *p, session *s, int index, int32_t pending, const int32_t *toks,
             size_t ntok, void *owner);
void job_free(job *j);

/* Worker side (holder of the job). */
/* After a forward whose last row was this job's: samples the next token from logprobs. */
void job_take_token(job *j, const float *logprobs, void *scratch, double now);
/* Ends the job (reason != NONE); formats the stream's closing chunks when appropriate; with
 * want_snapshot, encodes what the store lacks of the session's state if the job fed anything:
 * the turn's delta, or the whole state when the store has no state it continues (the worker
 * holds the session, so the store never copies a state on the loop thread). */
void job_finish(job *j, finish_reason reason);
/* After the job's prompt (lp: the log-probabilities after it, NULL when max_tokens is 0):
 * gives each sibling a copy of the job's state and samples its first token from lp (or ends it,
 * FINISH_LENGTH, without lp). The caller holds the job; siblings are parked (no one holds
 * them). A sibling may be finished on return. */
void job_release_siblings(job *j, const float *lp, void *scratch, double now);
/* The job whose `stream.out` (and `stream.mu`) receive this job's stream bytes. */
static inline job *job_sink(job *j) { return j->choices.sink ? j->choices.sink : j; }
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
/* The job's finish_reason as answered: "tool_calls" for a call that completed. */
const char *job_finish_name(const job *j);

/* Token formatting shared with job_score.c (any thread): a token's text as OpenAI shows it
 * (its bytes, or "bytes:\xNN..." when not valid UTF-8), and a log-prob. */
void job_fmt_token(buf *b, const xl_model *m, int32_t id);
void job_fmt_lp(buf *b, float v);
/* Detokenises ids[0..n) as the reply's detokeniser does (one stream, flushed at the end):
 * appends the text to text (NULL: not kept), writes offs[i] (NULL: not kept), where token i's
 * text starts, and returns the text's length. Any thread. */
size_t job_detok_placed(const xl_model *m, const int32_t *ids, int n, buf *text, size_t *offs);

/* ---- prompt scoring (job_score.c) ---- */
/* Loop thread, before submit: sets up scoring of the prompt rows (targets, buffers) as
 * params->score_top and score_rank ask. */
void job_score_setup(job *j);
/* Worker, before the forward of input rows [pos, pos + n): points the feed's outputs there. */
void job_score_feed(job *j, xl_feed *f, int n);
/* Worker, after that forward: alternatives and ranks of those rows. */
void job_score_rows(job *j, int pos, int n);
/* Formats the legacy completions logprobs of an echoed prompt: the prompt tokens scored by pj
 * (the job that fed the prompt), then j's generated records (j: pj, or a choice forked from pj's
 * state after the prompt); the first prompt token is null unless a pending token scored it. */
void job_fmt_echo_logprobs(buf *b, const job *pj, const job *j);
/* Appends the echoed prompt: pj's prompt tokens detokenised (the text whose offsets
 * job_fmt_echo_logprobs reports). */
void job_echo_prompt(buf *b, const job *pj);
/* vLLM's prompt_logprobs: [null, {"id": {"logprob","rank","decoded_token"}, ...}, ...]. */
void job_fmt_prompt_logprobs(buf *b, const job *j, int top);

#endif
