/*
 * generation.h: one request's generation on the engine side. The API layer validates a request
 * into a gen_params (immutable from here, shared by reference) and plans what the turn feeds
 * (gen_inputs); this module builds the request's job group with the one job constructor, job_new (the
 * session's choice, each other prompt's lead, the parked siblings that fork a lead's state),
 * writes a chat stream's opening chunks, and submits the group to the scheduler. The outcome
 * reaches the request through the jobs' events (job.owner).
 * Thread: loop thread only.
 */
#ifndef XLS_GENERATION_H
#define XLS_GENERATION_H

#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "scheduler.h"
#include "session.h"

/* What the turn feeds: prompt 0 after the session's pending token, and the other prompts of a
 * list (groups 1..; completions without a session). */
typedef struct gen_inputs {
  int32_t *toks; /* prompt 0's tokens (malloc'd) */
  size_t ntok;
  int32_t pending; /* the session's pending token fed first; -1: none */
  int groups;      /* prompts */
  int32_t **ptoks; /* [groups]: prompt p's tokens (p >= 1; malloc'd) */
  size_t *pn;
  int prefix_hint; /* prompt 0's leading tokens shared with other requests (a chat's system
                      messages); -1: unknown (the prefix cache may use all of it) */
} gen_inputs;

void gen_inputs_init(gen_inputs *in);
void gen_inputs_free(gen_inputs *in);

/* A request's jobs: `main` feeds prompt 0 in the request's session; `others` are the other
 * choices (per prompt group p, `per` choices with indexes p*per + k; each group's first job
 * feeds its prompt, the rest are its parked siblings). */
typedef struct gen_group {
  job *main;
  job **others; /* malloc'd */
  int n_others;
} gen_group;

/* The job with index position i of the group: 0 is main, i > 0 others[i - 1]. */
static inline job *gen_group_at(const gen_group *g, int i) {
  return i == 0 ? g->main : g->others[i - 1];
}

/* Builds the group's jobs (each holds a reference to p). main: in session s, choice main_index,
 * its random state `rng` unless p is seeded, with_snapshot: its state is serialised at the end
 * (a durable session). per: choices per prompt; owner: every job's owner (the request). */
void gen_group_build(gen_group *g, gen_params *p, session *s, const gen_inputs *in, int per,
                     int main_index, const xl_rng *rng, int want_snapshot, void *owner);
/* A chat stream's opening chunks (the assistant role of every choice, by index) into main's
 * output, before any worker has the jobs. */
void gen_group_stream_preamble(gen_group *g);
/* Hands every job to the scheduler; 0, or -1 when the queue refused them (none submitted). */
int gen_group_submit(gen_group *g, sched *s);
/* Frees every job (the request is done with them). */
void gen_group_free(gen_group *g);

#endif
