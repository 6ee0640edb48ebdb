/*
 * test_server_generation.c: the generation module (server/engine/generation.c): the job group
 * one constructor builds for a request (indexes, prompts, parked siblings, shared parameters,
 * seeds, stream sink), and the group run through the scheduler to the end: every choice of every
 * prompt generates, the siblings fork their lead's state, and seeded choices sample as the
 * same choice built alone does. Main thread; the scheduler's workers run the jobs.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "generation.h"
#include "scheduler.h"
#include "session.h"
#include "testlib.h"
#include "util.h"

static xl_model *M;

static pthread_mutex_t MU = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t CV = PTHREAD_COND_INITIALIZER;
static int SIGNALLED;

static void notify(void *arg) {
  (void)arg;
  pthread_mutex_lock(&MU);
  SIGNALLED = 1;
  pthread_cond_signal(&CV);
  pthread_mutex_unlock(&MU);
}

/* A request's parameters: seeded or not, stream or not, a stop string and a bias. */
static gen_params *params(int seeded, int stream, int max_tokens) {
  gen_params *p = gen_params_new();
  p->kind = JOB_COMPLETION;
  p->model = M;
  p->max_tokens = max_tokens;
  xl_sampling def = XL_SAMPLING_DEFAULT;
  p->sampling = def;
  p->seeded = seeded;
  p->seed = 100;
  p->stream = stream;
  p->n_top = -1;
  p->score_top = -1;
  p->chunk = 8;
  snprintf(p->id, sizeof p->id, "cmpl-test");
  p->model_name = xstrdup("m");
  p->fingerprint = "fp_0";
  p->bias_ids = xmalloc(sizeof *p->bias_ids);
  p->bias_vals = xmalloc(sizeof *p->bias_vals);
  p->bias_ids[0] = 'q';
  p->bias_vals[0] = -100;
  p->n_bias = 1;
  gen_params_add_stop(p, "zz", 2);
  gen_params_add_stop(p, "zz", 2); /* a repeat: kept once */
  gen_params_add_stop(p, "", 0);   /* empty: ignored */
  return p;
}

/* Two prompts ("ab", "xyz"), three choices each. */
static void inputs(gen_inputs *in) {
  gen_inputs_init(in);
  in->ntok = 2;
  in->toks = xmalloc(2 * sizeof(int32_t));
  in->toks[0] = 'a', in->toks[1] = 'b';
  in->groups = 2;
  in->ptoks = xcalloc(2, sizeof *in->ptoks);
  in->pn = xcalloc(2, sizeof *in->pn);
  in->pn[1] = 3;
  in->ptoks[1] = xmalloc(3 * sizeof(int32_t));
  in->ptoks[1][0] = 'x', in->ptoks[1][1] = 'y', in->ptoks[1][2] = 'z';
}

static void test_group_shape(void) {
  xl_error e;
  session *s = session_new(M, &e);
  gen_params *p = params(1, 1, 5);
  gen_inputs in;
  inputs(&in);
  gen_group g;
  gen_group_build(&g, p, s, &in, 3, 0, &s->rng, 1, (void *)&g);
  CHECK(p->n_stops == 1 && p->refs == 7); /* the caller's and six jobs' */
  gen_params_unref(p);
  CHECK(g.n_others == 5);
  int seen[6] = {0};
  for (int i = 0; i <= g.n_others; i++) {
    job *j = gen_group_at(&g, i);
    CHECK(j->index >= 0 && j->index < 6);
    if (j->index >= 0 && j->index < 6) seen[j->index]++;
    CHECK(j->params == p); /* read through the shared parameters, never copied */
    CHECK(j->owner == (void *)&g && j->params->max_tokens == 5 && j->params->stream);
    xl_rng want;
    xl_rng_seed(&want, 100 + (uint64_t)j->index); /* choice k: seed + k */
    CHECK(!memcmp(&j->run.rng, &want, sizeof want));
    if (i == 0) {
      CHECK(j->sess == s && !j->feed.own_session && j->choices.sink == NULL &&
            j->feed.want_snapshot);
      CHECK(j->feed.n_input == 2 && j->feed.input[1] == 'b' && j->choices.n_sibs == 2);
    } else {
      CHECK(j->sess && j->sess != s && j->feed.own_session && j->choices.sink == g.main &&
            !j->feed.want_snapshot);
    }
  }
  for (int k = 0; k < 6; k++) CHECK(seen[k] == 1);
  job *lead = NULL;
  for (int i = 0; i < g.n_others; i++)
    if (g.others[i]->index == 3) lead = g.others[i];
  CHECK(lead && !lead->links.parked && lead->feed.n_input == 3 && lead->feed.input[2] == 'z');
  CHECK(lead && lead->choices.n_sibs == 2 && lead->choices.sibs[0]->links.parked &&
        lead->choices.sibs[0]->feed.n_input == 0);
  CHECK(lead && lead->choices.sibs[0]->index == 4 && lead->choices.sibs[1]->index == 5);
  CHECK(g.main->choices.sibs[0]->index == 1 && g.main->choices.sibs[1]->index == 2);
  for (int i = 0; i < g.n_others; i++) session_free(g.others[i]->sess);
  gen_group_free(&g);
  gen_inputs_free(&in);
  session_free(s);
}

/* Unseeded: the session's choice continues the session's random state. */
static void test_unseeded_main_takes_the_session_rng(void) {
  xl_error e;
  session *s = session_new(M, &e);
  gen_params *p = params(0, 0, 3);
  gen_inputs in;
  inputs(&in);
  in.groups = 1; /* one prompt, two choices; the session keeps choice 1 */
  gen_group g;
  gen_group_build(&g, p, s, &in, 2, 1, &s->rng, 0, NULL);
  gen_params_unref(p);
  CHECK(g.main->index == 1 && g.n_others == 1 && g.others[0]->index == 0);
  CHECK(!memcmp(&g.main->run.rng, &s->rng, sizeof s->rng) && g.others[0]->choices.sink == NULL);
  session_free(g.others[0]->sess);
  gen_group_free(&g);
  in.groups = 2; /* what inputs() allocated */
  gen_inputs_free(&in);
  session_free(s);
}

/* The group runs to the end; returns 0 when every job is done within 60 s. */
static int run(gen_group *g, sched *sc) {
  int left = 1 + g->n_others;
  double until = tl_now() + 60;
  sched_event *evs = NULL;
  int cap = 0;
  while (left > 0 && tl_now() < until) {
    pthread_mutex_lock(&MU);
    while (!SIGNALLED) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 2;
      if (pthread_cond_timedwait(&CV, &MU, &ts)) break;
    }
    SIGNALLED = 0;
    pthread_mutex_unlock(&MU);
    int n = sched_take_events(sc, &evs, &cap);
    for (int i = 0; i < n; i++)
      if (evs[i].flags & JOB_EV_DONE) left--;
  }
  free(evs);
  return left;
}

static void test_group_runs_and_seeds_like_alone(void) {
  sched_opts so = {2, 16, 256, 16, 16, 0, 1};
  sched *sc = sched_new(M, &so, notify, NULL);
  xl_error e;
  memset(&e, 0, sizeof e);
  CHECK(sched_start(sc, &e) == 0);
  session *s = session_new(M, &e);
  gen_params *p = params(1, 0, 6);
  gen_inputs in;
  inputs(&in);
  gen_group g;
  gen_group_build(&g, p, s, &in, 3, 0, &s->rng, 0, NULL);
  gen_params_unref(p);
  CHECK(gen_group_submit(&g, sc) == 0);
  CHECK(run(&g, sc) == 0);
  /* choice 4 (prompt "xyz", a sibling) against the same choice built alone: one prompt group */
  session *s2 = session_new(M, &e);
  gen_params *p2 = params(1, 0, 6);
  gen_inputs in2;
  gen_inputs_init(&in2);
  in2.ntok = 3;
  in2.toks = xmalloc(3 * sizeof(int32_t));
  memcpy(in2.toks, in.ptoks[1], 3 * sizeof(int32_t));
  gen_group alone;
  gen_group_build(&alone, p2, s2, &in2, 1, 4, &s2->rng, 0, NULL);
  gen_params_unref(p2);
  CHECK(gen_group_submit(&alone, sc) == 0);
  CHECK(run(&alone, sc) == 0);
  job *c4 = NULL;
  for (int i = 0; i <= g.n_others; i++) {
    job *j = gen_group_at(&g, i);
    CHECK(j->run.finish == FINISH_LENGTH || j->run.finish == FINISH_STOP);
    CHECK(j->run.n_gen > 0 && j->run.n_gen <= 6);
    if (j->index == 4) c4 = j;
  }
  CHECK(c4 && c4->run.n_gen == alone.main->run.n_gen &&
        c4->text.reply.len == alone.main->text.reply.len);
  CHECK(c4 && (!c4->text.reply.len ||
               !memcmp(c4->text.reply.p, alone.main->text.reply.p, c4->text.reply.len)));
  /* the bias keeps 'q' out of every reply */
  for (int i = 0; i <= g.n_others; i++) {
    job *j = gen_group_at(&g, i);
    CHECK(!j->text.reply.len || !memchr(j->text.reply.p, 'q', j->text.reply.len));
  }
  for (int i = 0; i < g.n_others; i++) session_free(g.others[i]->sess);
  gen_group_free(&g);
  gen_group_free(&alone);
  gen_inputs_free(&in);
  gen_inputs_free(&in2);
  session_free(s);
  session_free(s2);
  sched_stop(sc);
  sched_free(sc);
}

int main(void) {
  const char *dir = tl_tmpdir("server_generation");
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  if (tl_write_model(dir, &spec)) return 1;
  xl_error err;
  xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
  if (xl_model_load(dir, &lo, &M, &err) != XL_OK) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  RUN(test_group_shape);
  RUN(test_unseeded_main_takes_the_session_rng);
  RUN(test_group_runs_and_seeds_like_alone);
  xl_model_free(M);
  return tl_summary();
}
