/*
 * test_server_sched.c: the worker pool / continuous-batching scheduler against a real tiny
 * model: batched and chunked runs equal lone runs (tokens identical, log-probs to 1e-4), a job
 * cancelled mid-batch leaves the others untouched, and under a stress of many sessions, two
 * workers and random cancellations every session's memory holds exactly the tokens fed
 * (the scheduler aborts if a session is ever held by two workers). Single test thread + the
 * scheduler's workers.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "job.h"
#include "metrics.h"
#include "scheduler.h"
#include "session.h"
#include "testlib.h"
#include "util.h"

static xl_model *M;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int signalled;
} notifier;

static notifier N = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void notify(void *arg) {
  notifier *n = arg;
  pthread_mutex_lock(&n->mu);
  n->signalled = 1;
  pthread_cond_signal(&n->cv);
  pthread_mutex_unlock(&n->mu);
}

static sched_event *EVS;
static int EVCAP;

/* Waits for events; calls on_event for each; returns the number of DONE events seen. */
static int pump(sched *s, void (*on_event)(sched_event *ev, void *arg), void *arg) {
  pthread_mutex_lock(&N.mu);
  while (!N.signalled) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    if (pthread_cond_timedwait(&N.cv, &N.mu, &ts)) break;
  }
  N.signalled = 0;
  pthread_mutex_unlock(&N.mu);
  int n = sched_take_events(s, &EVS, &EVCAP), done = 0;
  for (int i = 0; i < n; i++) {
    if (on_event) on_event(&EVS[i], arg);
    if (EVS[i].flags & JOB_EV_DONE) done++;
  }
  return done;
}

static job *make_job(session *s, const char *prompt, int max_tokens, uint64_t seed, int chunk,
                     int stream) {
  gen_params *p = gen_params_new(); /* one seeded choice; logprobs of the sampled tokens */
  p->seeded = 1, p->seed = seed, p->n_top = 0;
  p->kind = JOB_COMPLETION, p->model = M, p->max_tokens = max_tokens;
  p->sampling = (xl_sampling)XL_SAMPLING_DEFAULT;
  p->chunk = chunk, p->stream = stream;
  snprintf(p->id, sizeof p->id, "t");
  p->model_name = xstrdup("m");
  p->t_arrival = now_mono();
  int32_t *toks = NULL;
  size_t nt = 0;
  xl_error err;
  if (*prompt) xl_tokenize(M, prompt, strlen(prompt), &toks, &nt, &err);
  job *j = job_new(p, s, 0, s->pending, toks, nt, NULL);
  gen_params_unref(p);
  free(toks);
  return j;
}

static sched *new_sched(int workers, int max_batch, int batch_tokens) {
  sched_opts o = {workers, max_batch, batch_tokens, 64, 64, 0, 1};
  sched *s = sched_new(M, &o, notify, &N);
  xl_error err;
  CHECK(sched_start(s, &err) == 0);
  return s;
}

static void run_all(sched *s, job **jobs, int n) {
  for (int i = 0; i < n; i++) CHECK(sched_submit(s, jobs[i]) == 0);
  int done = 0;
  PUMP_UNTIL(done >= n, 60, done += pump(s, NULL, NULL));
  CHECK(done == n);
}

static const char *PROMPTS[] = {
    "a", "It is a truth universally acknowledged", "xyz xyz xyz",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, "
    "seemed to unite some of the best blessings of existence; and had lived nearly twenty-one "
    "years in the world with very little to distress or vex her.",
    "q", "The family of Dashwood had long been settled in Sussex."};
#define NP 6

static void same_as(job *a, job *b) {
  CHECK(a->run.n_gen == b->run.n_gen);
  int same = a->run.n_gen == b->run.n_gen &&
             !memcmp(a->run.hist, b->run.hist, sizeof(int32_t) * (size_t)a->run.n_gen);
  CHECK(same);
  for (int k = 0; same && k < a->text.n_recs; k++)
    CHECK_NEAR(a->text.recs[k].lp, b->text.recs[k].lp, 1e-4);
}

static void test_batched_equals_alone(void) {
  job *alone[NP], *batched[NP], *two[NP];
  session *sa[NP], *sb[NP], *sc[NP];
  xl_error err;
  for (int i = 0; i < NP; i++) {
    sa[i] = session_new(M, &err);
    sb[i] = session_new(M, &err);
    sc[i] = session_new(M, &err);
  }
  sched *s1 = new_sched(1, 1, 1 << 20); /* one row at a time, whole prompts */
  for (int i = 0; i < NP; i++) {
    alone[i] = make_job(sa[i], PROMPTS[i], 24, 100 + i, 1 << 20, 0);
    run_all(s1, &alone[i], 1);
  }
  sched_stop(s1);
  sched_free(s1);
  sched *s8 = new_sched(1, 8, 40); /* batches of 8 rows, prefill in chunks of 7 */
  for (int i = 0; i < NP; i++) batched[i] = make_job(sb[i], PROMPTS[i], 24, 100 + i, 7, i % 2);
  run_all(s8, batched, NP);
  sched_stop(s8);
  sched_free(s8);
  sched *s2 = new_sched(2, 3, 16); /* two workers, small batches */
  for (int i = 0; i < NP; i++) two[i] = make_job(sc[i], PROMPTS[i], 24, 100 + i, 5, 0);
  run_all(s2, two, NP);
  sched_stop(s2);
  sched_free(s2);
  for (int i = 0; i < NP; i++) {
    CHECK(alone[i]->run.finish == FINISH_LENGTH && batched[i]->run.finish == FINISH_LENGTH);
    same_as(alone[i], batched[i]);
    same_as(alone[i], two[i]);
    CHECK(!strcmp(alone[i]->text.reply.p ? alone[i]->text.reply.p : "",
                  batched[i]->text.reply.p ? batched[i]->text.reply.p : ""));
    CHECK(session_tokens(sb[i]) == strlen(PROMPTS[i]) + 24);
    CHECK(sb[i]->digest == sa[i]->digest && sc[i]->digest == sa[i]->digest);
    job_free(alone[i]);
    job_free(batched[i]);
    job_free(two[i]);
    session_free(sa[i]);
    session_free(sb[i]);
    session_free(sc[i]);
  }
}

/* Prompt chunks are cut at multiples of the job's chunk whatever the load, so a request gives
 * bit-identical log-probs alone or batched with others under a tight token budget (a cut at
 * the budget's edge would change the attention's blocking and the last bits). */
static void test_bit_identical_under_load(void) {
  xl_error err;
  session *sa[NP], *sb[NP];
  job *alone[NP], *busy[NP];
  sched *s1 = new_sched(1, 1, 1 << 20);
  for (int i = 0; i < NP; i++) {
    sa[i] = session_new(M, &err);
    sb[i] = session_new(M, &err);
    alone[i] = make_job(sa[i], PROMPTS[i], 20, 300 + i, 9, 0);
    run_all(s1, &alone[i], 1);
  }
  sched_stop(s1);
  sched_free(s1);
  sched *s = new_sched(1, 8, 13); /* budget 13: chunks of 9 never fit twice */
  for (int i = 0; i < NP; i++) busy[i] = make_job(sb[i], PROMPTS[i], 20, 300 + i, 9, i % 2);
  run_all(s, busy, NP);
  sched_stop(s);
  sched_free(s);
  for (int i = 0; i < NP; i++) {
    CHECK(alone[i]->run.n_gen == busy[i]->run.n_gen &&
          alone[i]->text.n_recs == busy[i]->text.n_recs);
    CHECK(!memcmp(alone[i]->run.hist, busy[i]->run.hist,
                  sizeof(int32_t) * (size_t)alone[i]->run.n_gen));
    for (int k = 0; k < alone[i]->text.n_recs && k < busy[i]->text.n_recs; k++)
      CHECK(!memcmp(&alone[i]->text.recs[k].lp, &busy[i]->text.recs[k].lp, sizeof(float)));
    job_free(alone[i]);
    job_free(busy[i]);
    session_free(sa[i]);
    session_free(sb[i]);
  }
}

typedef struct {
  job *newcomer;
  int newcomer_done, long_done;
} fair_ctx;

static void fair_event(sched_event *ev, void *arg) {
  fair_ctx *c = arg;
  if (!(ev->flags & JOB_EV_DONE)) return;
  if (ev->j == c->newcomer) c->newcomer_done = 1;
  else c->long_done++;
}

/* A new request gets into the next forward even when decoding sessions fill max_batch: it does
 * not wait for them to finish. */
static void test_prompt_not_starved_by_full_batches(void) {
  xl_error err;
  enum { NL = 4 };
  session *ls[NL], *ns = session_new(M, &err);
  job *lj[NL];
  sched *s = new_sched(1, NL, 64); /* max_batch = the number of decoding sessions */
  for (int i = 0; i < NL; i++) {
    ls[i] = session_new(M, &err);
    lj[i] = make_job(ls[i], PROMPTS[i], 3000, 40 + i, 16, 1);
    CHECK(sched_submit(s, lj[i]) == 0);
  }
  /* wait until every long job is decoding (each has streamed output) */
  int seen[NL] = {0}, all = 0;
  PUMP_UNTIL(all, 60, {
    pump(s, NULL, NULL);
    all = 1;
    for (int i = 0; i < NL; i++) {
      pthread_mutex_lock(&lj[i]->stream.mu);
      if (lj[i]->stream.out.len) seen[i] = 1;
      buf_clear(&lj[i]->stream.out);
      pthread_mutex_unlock(&lj[i]->stream.mu);
      all &= seen[i];
    }
  });
  CHECK(all);
  fair_ctx c = {make_job(ns, "Are you there?", 2, 9, 16, 0), 0, 0};
  CHECK(sched_submit(s, c.newcomer) == 0);
  PUMP_UNTIL(c.newcomer_done, 60, {
    pump(s, fair_event, &c);
    for (int i = 0; i < NL; i++) {
      pthread_mutex_lock(&lj[i]->stream.mu);
      buf_clear(&lj[i]->stream.out);
      pthread_mutex_unlock(&lj[i]->stream.mu);
    }
  });
  CHECK(c.newcomer_done && c.long_done == 0);
  CHECK(c.newcomer->run.finish == FINISH_LENGTH && c.newcomer->run.n_gen == 2);
  for (int i = 0; i < NL; i++) sched_cancel(s, lj[i]);
  PUMP_UNTIL(c.long_done >= NL, 60, pump(s, fair_event, &c));
  sched_stop(s);
  sched_free(s);
  job_free(c.newcomer);
  session_free(ns);
  for (int i = 0; i < NL; i++) {
    job_free(lj[i]);
    session_free(ls[i]);
  }
}

typedef struct {
  job **jobs;
  int n, done;
} rr_ctx;

static void rr_event(sched_event *ev, void *arg) {
  rr_ctx *c = arg;
  if (ev->flags & JOB_EV_DONE) c->done++;
}

/* More running sessions than rows: sessions take turns (round robin), so every one of them
 * streams its first token before any finishes (decode-first would run the first max_batch to
 * the end while the others wait). */
static void test_round_robin_when_rows_are_scarce(void) {
  xl_error err;
  enum { NR = 12 };
  session *ss[NR];
  job *jj[NR];
  /* every job is queued before the worker starts: submitted one by one to a running worker, a
   * slow (loaded) test thread could let the first ones finish before the last were submitted */
  sched_opts o = {1, 4, 1 << 20, 64, 64, 0, 1};
  sched *s = sched_new(M, &o, notify, &N);
  for (int i = 0; i < NR; i++) {
    ss[i] = session_new(M, &err);
    jj[i] = make_job(ss[i], PROMPTS[i % NP], 40, 90 + i, 1 << 20, 1);
  }
  rr_ctx c;
  memset(&c, 0, sizeof c);
  c.jobs = jj;
  c.n = NR;
  for (int i = 0; i < NR; i++) CHECK(sched_submit(s, jj[i]) == 0);
  CHECK(sched_start(s, &err) == 0);
  PUMP_UNTIL(c.done >= NR, 60, pump(s, rr_event, &c));
  sched_stop(s);
  sched_free(s);
  /* by the times the worker stamped on the tokens (the events may reach this thread late and
   * together, so their order here is not the order of the steps) */
  double last_first = 0, first_last = 1e300;
  for (int i = 0; i < NR; i++) {
    if (jj[i]->run.t_first_token > last_first) last_first = jj[i]->run.t_first_token;
    if (jj[i]->run.t_last_token < first_last) first_last = jj[i]->run.t_last_token;
  }
  CHECK(c.done == NR && last_first < first_last);
  for (int i = 0; i < NR; i++) {
    CHECK(jj[i]->run.n_gen == 40 || jj[i]->run.finish == FINISH_STOP);
    job_free(jj[i]);
    session_free(ss[i]);
  }
}

/* Two workers share a burst of prompts: while one is busy with a long prefill, the other takes
 * at most half of the waiting prompts per forward (ceil(6 / 2) = 3 chunks of 20 tokens), so
 * a burst of new requests does not lengthen one forward (everyone's inter-token latency and
 * the burst's time to first token). Jobs are queued before the workers start, so the first
 * selection sees all of them: the blocker (queue head) fills a whole forward's budget. */
static void test_two_workers_share_a_burst_of_prompts(void) {
  xl_error err;
  enum { NB = 7, BIG = 8000 };
  session *ss[NB];
  job *jj[NB];
  char *big = xmalloc(BIG + 1), p20[21];
  memset(big, 'q', BIG);
  big[BIG] = 0;
  memset(p20, 'r', 20);
  p20[20] = 0;
  metrics_init();
  sched_opts o = {2, 64, BIG, 64, 64, 0, 1};
  sched *s = sched_new(M, &o, notify, &N);
  for (int i = 0; i < NB; i++) {
    ss[i] = session_new(M, &err);
    jj[i] = make_job(ss[i], i ? p20 : big, 1, 5 + i, i ? 20 : BIG, 0);
    CHECK(sched_submit(s, jj[i]) == 0);
  }
  CHECK(sched_start(s, &err) == 0);
  int done = 0;
  PUMP_UNTIL(done >= NB, 60, done += pump(s, NULL, NULL));
  CHECK(done == NB);
  sched_stop(s);
  sched_free(s);
  /* forwards: the blocker's (BIG tokens), then short ones of at most 3 x 20 tokens */
  uint64_t mid = 0, small = 0;
  for (int b = 0; b < g_metrics.batch_tokens.n_bounds; b++) {
    uint64_t n = atomic_load(&g_metrics.batch_tokens.counts[b]);
    if (g_metrics.batch_tokens.bounds[b] <= 64) small += n;
    else if (g_metrics.batch_tokens.bounds[b] < BIG) mid += n;
  }
  CHECK(small >= 2 && mid == 0);
  for (int i = 0; i < NB; i++) {
    CHECK(jj[i]->run.finish == FINISH_LENGTH && jj[i]->run.n_gen == 1);
    job_free(jj[i]);
    session_free(ss[i]);
  }
  free(big);
}

/* With two workers each forward takes at most half of the running sessions, so the workers'
 * forwards run side by side (one worker taking every ready session would leave the other idle). */
static void test_two_workers_share_the_sessions(void) {
  xl_error err;
  enum { NJ = 8 };
  session *ss[NJ];
  job *jj[NJ];
  metrics_init();
  sched *s = new_sched(2, 64, 1 << 20);
  for (int i = 0; i < NJ; i++) {
    ss[i] = session_new(M, &err);
    jj[i] = make_job(ss[i], PROMPTS[i % NP], 60, 70 + i, 16, 0);
  }
  run_all(s, jj, NJ);
  sched_stop(s);
  sched_free(s);
  uint64_t small = 0, big = 0;
  for (int b = 0; b <= HIST_MAX_BUCKETS; b++) {
    uint64_t n = atomic_load(&g_metrics.batch_size.counts[b]);
    if (b < g_metrics.batch_size.n_bounds && g_metrics.batch_size.bounds[b] <= NJ / 2) small += n;
    else big += n;
  }
  CHECK(small > 0 && big == 0);
  for (int i = 0; i < NJ; i++) {
    CHECK(jj[i]->run.finish == FINISH_LENGTH && jj[i]->run.n_gen == 60);
    job_free(jj[i]);
    session_free(ss[i]);
  }
}

typedef struct {
  sched *s;
  job *victim;
  int cancelled;
} cancel_ctx;

static void cancel_on_output(sched_event *ev, void *arg) {
  cancel_ctx *c = arg;
  if (ev->j == c->victim && (ev->flags & JOB_EV_OUTPUT) && !c->cancelled) {
    sched_cancel(c->s, c->victim);
    c->cancelled = 1;
  }
}

static uint64_t fed_prompt(const job *j) {
  if (j->run.decoding) return (uint64_t)j->feed.n_prompt;
  int p = j->run.pos - j->feed.input_has_pending;
  return p > 0 ? (uint64_t)p : 0;
}

static void test_cancel_mid_batch(void) {
  xl_error err;
  session *ref[4], *ses[4];
  job *alone[4], *jobs[4];
  sched *s = new_sched(1, 8, 64);
  for (int i = 0; i < 4; i++) {
    ref[i] = session_new(M, &err);
    ses[i] = session_new(M, &err);
    alone[i] = make_job(ref[i], PROMPTS[i + 1], 30, 7 + i, 16, 0);
    run_all(s, &alone[i], 1);
    jobs[i] = make_job(ses[i], PROMPTS[i + 1], i == 2 ? 100000 : 30, 7 + i, 16, i == 2);
  }
  for (int i = 0; i < 4; i++) CHECK(sched_submit(s, jobs[i]) == 0);
  cancel_ctx c = {s, jobs[2], 0};
  int done = 0;
  PUMP_UNTIL(done >= 4, 60, done += pump(s, cancel_on_output, &c));
  CHECK(done == 4 && c.cancelled);
  CHECK(jobs[2]->run.finish == FINISH_CANCELLED && jobs[2]->run.n_gen > 0 &&
        jobs[2]->run.n_gen < 100000);
  /* the memory holds exactly what was fed: prompt + generated (the last one may be pending) */
  CHECK(session_tokens(ses[2]) == fed_prompt(jobs[2]) + (uint64_t)jobs[2]->run.n_gen);
  for (int i = 0; i < 4; i++) {
    if (i != 2) same_as(alone[i], jobs[i]);
    job_free(alone[i]);
    job_free(jobs[i]);
    session_free(ref[i]);
    session_free(ses[i]);
  }
  sched_stop(s);
  sched_free(s);
}

/* ---- stress ---- */
#define NS 24
typedef struct {
  sched *s;
  session *ses[NS];
  job *cur[NS];
  uint64_t expect[NS];
  int rounds[NS];
  int active;
  unsigned rnd;
  int checked;
} stress_ctx;

static unsigned next_rand(unsigned *r) {
  *r = *r * 1103515245u + 12345u;
  return (*r >> 16) & 0x7fff;
}

static void stress_submit(stress_ctx *c, int i) {
  int n = (int)(next_rand(&c->rnd) % 40);
  char p[64];
  for (int k = 0; k < n; k++) p[k] = (char)('a' + next_rand(&c->rnd) % 26);
  if (n == 0 && c->ses[i]->pending < 0) p[n++] = 'z'; /* something to feed */
  p[n] = 0;
  int maxt = 1 + (int)(next_rand(&c->rnd) % 30);
  c->cur[i] = make_job(c->ses[i], p, maxt, next_rand(&c->rnd), 1 + (int)(next_rand(&c->rnd) % 9),
                       (int)(next_rand(&c->rnd) % 2));
  c->cur[i]->owner = (void *)(intptr_t)i;
  CHECK(sched_submit(c->s, c->cur[i]) == 0);
  c->active++;
  if (next_rand(&c->rnd) % 4 == 0) sched_cancel(c->s, c->cur[i]);
}

static void stress_event(sched_event *ev, void *arg) {
  stress_ctx *c = arg;
  int i = (int)(intptr_t)ev->j->owner;
  if (ev->flags & JOB_EV_OUTPUT && next_rand(&c->rnd) % 5 == 0) sched_cancel(c->s, ev->j);
  if (!(ev->flags & JOB_EV_DONE)) return;
  job *j = ev->j;
  c->expect[i] += fed_prompt(j) + (uint64_t)j->run.n_gen;
  if (session_tokens(c->ses[i]) != c->expect[i]) {
    fprintf(stderr, "session %d: %llu tokens, expected %llu\n", i,
            (unsigned long long)session_tokens(c->ses[i]), (unsigned long long)c->expect[i]);
    CHECK(0);
  } else {
    c->checked++;
  }
  job_free(j);
  c->cur[i] = NULL;
  c->active--;
  if (++c->rounds[i] < 6) stress_submit(c, i);
}

static void test_stress_many_sessions_two_workers(void) {
  stress_ctx c;
  memset(&c, 0, sizeof c);
  c.rnd = 12345;
  c.s = new_sched(2, 5, 24);
  xl_error err;
  for (int i = 0; i < NS; i++) c.ses[i] = session_new(M, &err);
  for (int i = 0; i < NS; i++) stress_submit(&c, i);
  PUMP_UNTIL(c.active <= 0, 60, pump(c.s, stress_event, &c));
  CHECK(c.active == 0 && c.checked == NS * 6);
  sched_stop(c.s);
  sched_free(c.s);
  for (int i = 0; i < NS; i++) session_free(c.ses[i]);
}

/* ---- slow readers: a stream whose buffer is full leaves the running set ---- */

typedef struct {
  job *a;
  int done_a, done_b, drain;
} pause_ctx;

static void pause_event(sched_event *ev, void *arg) {
  pause_ctx *c = arg;
  if (ev->flags & JOB_EV_DONE) {
    if (ev->j == c->a) c->done_a++;
    else c->done_b++;
  }
}

/* Drains a's buffer as a reading client would (the loop thread's stream_take). */
static void drain_out(sched *s, job *a) {
  pthread_mutex_lock(&a->stream.mu);
  buf_consume(&a->stream.out, a->stream.out.len);
  pthread_mutex_unlock(&a->stream.mu);
  sched_stream_drained(s, a);
}

/* max_running 1: an unread stream (a) pauses once its buffer holds stream_buffer bytes, so the
 * queued job (b) runs to its end meanwhile; drained, a resumes and its tokens are those of an
 * uninterrupted run. A paused job that is cancelled ends at once (FINISH_CANCELLED). */
static void test_unread_stream_pauses(void) {
  xl_error err;
  session *sr = session_new(M, &err), *sa = session_new(M, &err), *sb = session_new(M, &err);
  sched *s1 = new_sched(1, 8, 1 << 20);
  job *ref = make_job(sr, "a", 120, 42, 16, 1);
  run_all(s1, &ref, 1);
  sched_stop(s1);
  sched_free(s1);

  sched_opts o = {1, 8, 1 << 20, 1, 4, 512, 1};
  sched *s = sched_new(M, &o, notify, &N);
  CHECK(sched_start(s, &err) == 0);
  pause_ctx c;
  memset(&c, 0, sizeof c);
  job *a = make_job(sa, "a", 120, 42, 16, 1), *b = make_job(sb, "b", 30, 43, 16, 0);
  c.a = a;
  CHECK(sched_submit(s, a) == 0);
  CHECK(sched_submit(s, b) == 0); /* waits: a holds the only running slot */
  PUMP_UNTIL(c.done_b == 1, 60, pump(s, pause_event, &c));
  CHECK(c.done_a == 0 && sched_paused(s) == 1);
  CHECK(a->run.n_gen < 120);
  pthread_mutex_lock(&a->stream.mu);
  size_t held = a->stream.out.len;
  pthread_mutex_unlock(&a->stream.mu);
  CHECK(held >= 512 && held < 512 + 4096); /* at most one step's chunk past the bound */
  long waiting, running;
  sched_counts(s, &waiting, &running);
  CHECK(running == 0 && waiting == 0);
  /* the client reads: a resumes, pausing again whenever its buffer fills */
  PUMP_UNTIL(c.done_a == 1, 60, drain_out(s, a); pump(s, pause_event, &c));
  CHECK(a->run.finish == FINISH_LENGTH && b->run.finish == FINISH_LENGTH);
  same_as(ref, a);
  CHECK(sched_paused(s) == 0);

  /* a paused job that is cancelled is finished by a worker */
  job *d = make_job(sb, "d", 120, 44, 16, 1);
  c.a = d;
  c.done_a = 0;
  CHECK(sched_submit(s, d) == 0);
  PUMP_UNTIL(sched_paused(s) == 1, 60, pump(s, pause_event, &c));
  sched_cancel(s, d);
  PUMP_UNTIL(c.done_a == 1, 60, pump(s, pause_event, &c));
  CHECK(d->run.finish == FINISH_CANCELLED && sched_paused(s) == 0);
  sched_stop(s);
  sched_free(s);
  job_free(ref);
  job_free(a);
  job_free(b);
  job_free(d);
  session_free(sr);
  session_free(sa);
  session_free(sb);
}

int main(void) {
  const char *dir = tl_tmpdir("server_sched");
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  spec.mem_len = 20; /* short memory: prompts wrap it */
  if (tl_write_model(dir, &spec)) return 1;
  xl_error err;
  xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
  if (xl_model_load(dir, &lo, &M, &err) != XL_OK) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  RUN(test_batched_equals_alone);
  RUN(test_cancel_mid_batch);
  RUN(test_bit_identical_under_load);
  RUN(test_prompt_not_starved_by_full_batches);
  RUN(test_round_robin_when_rows_are_scarce);
  RUN(test_two_workers_share_the_sessions);
  RUN(test_two_workers_share_a_burst_of_prompts);
  RUN(test_stress_many_sessions_two_workers);
  RUN(test_unread_stream_pauses);
  free(EVS);
  xl_model_free(M);
  return tl_summary();
}
