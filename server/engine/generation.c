/*
 * generation.c: a request's job group (see generation.h): every choice built by job_new,
 * the chat stream's opening chunks, submission. Thread: loop thread only.
 */
#include "generation.h"

#include <stdlib.h>
#include <string.h>

#include "prefix_cache.h"
#include "util.h"

void gen_inputs_init(gen_inputs *in) {
  memset(in, 0, sizeof *in);
  in->pending = -1;
  in->prefix_hint = -1;
}

void gen_inputs_free(gen_inputs *in) {
  free(in->toks);
  for (int p = 1; p < in->groups && in->ptoks; p++) free(in->ptoks[p]);
  free(in->ptoks);
  free(in->pn);
  gen_inputs_init(in);
}

/* A choice other than main: its own session (a lead's prompt; a sibling's is replaced by the
 * fork of its lead's state), its own random state unless seeded, its stream bytes into main's. */
static job *job_other(gen_group *g, gen_params *p, int index, const int32_t *toks, size_t ntok,
                      void *owner) {
  job *c = job_new(p, NULL, index, -1, toks, ntok, owner);
  c->feed.own_session = 1;
  c->choices.sink = p->stream ? g->main : NULL;
  g->others[g->n_others++] = c;
  return c;
}

static void score_setup(job *j, const gen_params *p) {
  if (p->score_top >= 0) job_score_setup(j);
}

void gen_group_build(gen_group *g, gen_params *p, session *s, const gen_inputs *in, int per,
                     int main_index, const xl_rng *rng, int want_snapshot, void *owner) {
  memset(g, 0, sizeof *g);
  job *m = job_new(p, s, main_index, in->pending, in->toks, in->ntok, owner);
  if (!p->seeded) m->run.rng = *rng;
  m->feed.want_snapshot = want_snapshot;
  score_setup(m, p);
  g->main = m;
  int groups = in->groups > 0 ? in->groups : 1;
  if (groups * per <= 1) return;
  g->others = xcalloc((size_t)(groups * per), sizeof *g->others);
  for (int gi = 0; gi < groups; gi++) {
    job *lead = m;
    if (gi > 0) {
      lead = job_other(g, p, gi * per, in->ptoks[gi], in->pn[gi], owner);
      score_setup(lead, p);
    }
    lead->choices.sibs = xcalloc((size_t)per, sizeof *lead->choices.sibs);
    for (int k = 0; k < per; k++) {
      int idx = gi * per + k;
      if (idx == lead->index) continue;
      job *c = job_other(g, p, idx, NULL, 0, owner);
      c->links.parked = 1;
      lead->choices.sibs[lead->choices.n_sibs++] = c;
    }
  }
  for (int i = 0; i < g->n_others; i++) {
    job *c = g->others[i];
    xl_error e;
    memset(&e, 0, sizeof e);
    c->sess = session_new(c->params->model, &e);
    if (!c->sess) abort(); /* out of memory: xmalloc's policy */
    if (!p->seeded) {
      uint64_t sd;
      random_bytes((uint8_t *)&sd, sizeof sd);
      xl_rng_seed(&c->run.rng, sd);
    }
  }
}

static int by_index(const void *a, const void *b) {
  const job *x = *(job *const *)a, *y = *(job *const *)b;
  return (x->index > y->index) - (x->index < y->index);
}

void gen_group_stream_preamble(gen_group *g) {
  job *m = g->main;
  int n = 1 + g->n_others;
  job **all = xmalloc(sizeof *all * (size_t)n);
  for (int i = 0; i < n; i++) all[i] = gen_group_at(g, i);
  qsort(all, (size_t)n, sizeof *all, by_index);
  for (int i = 0; i < n; i++) {
    job_chunk_head(&m->stream.out, all[i]);
    buf_adds(&m->stream.out,
             "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
             "\"finish_reason\":null");
    job_chunk_tail(&m->stream.out, all[i]);
  }
  free(all);
}

int gen_group_submit(gen_group *g, sched *s) {
  int n = 1 + g->n_others;
  job **all = xmalloc(sizeof *all * (size_t)n);
  for (int i = 0; i < n; i++) all[i] = gen_group_at(g, i);
  /* every job feeding a prompt into an empty memory: from the longest cached prefix */
  for (int i = 0; i < n; i++)
    if (!all[i]->links.parked)
      prefix_cache_attach(all[i]->params->prefix_cache, all[i],
                          i == 0 ? all[i]->params->prefix_hint : -1);
  int failed = sched_submit_all(s, all, n);
  free(all);
  return failed ? -1 : 0;
}

void gen_group_free(gen_group *g) {
  for (int i = 0; i < g->n_others; i++) job_free(g->others[i]);
  free(g->others);
  job_free(g->main);
  memset(g, 0, sizeof *g);
}
