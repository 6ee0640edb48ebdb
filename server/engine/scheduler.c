/*
 * scheduler.c: worker pool + continuous batching (see scheduler.h for the contract and threads).
 */
#include "scheduler.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dlist.h"
#include "metrics.h"
#include "prefix_cache.h"
#include "util.h"
#include "xlog.h"

typedef struct worker {
  struct sched *s;
  pthread_t th;
  int started;
  xl_workspace *ws;
  float *lp;       /* [max_batch][vocab] */
  xl_feed *feeds;  /* [max_batch] */
  job **batch;     /* [max_batch] */
  int *take;       /* tokens fed per batch entry */
  int *flags;      /* events per batch entry */
  void *scratch;   /* sampler scratch */
} worker;

typedef struct jq {
  job *head, *tail;
  long n;
} jq;

struct sched {
  const xl_model *model;
  int vocab;
  sched_opts o;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  jq wait, run;
  jq paused, resumed; /* streams whose client does not read; drained ones waiting for a slot */
  long n_active; /* running jobs: in run or on a worker */
  int stop;
  int idle_workers;
  worker *w;
  pthread_mutex_t ev_mu;
  sched_event *ev;
  int n_ev, cap_ev;
  void (*notify)(void *);
  void *notify_arg;
};

static void jq_push(jq *q, job *j) {
  DLIST_APPEND(q->head, q->tail, j, links.q_prev, links.q_next);
  q->n++;
}

static void jq_remove(jq *q, job *j) {
  DLIST_REMOVE(q->head, q->tail, j, links.q_prev, links.q_next);
  q->n--;
}

sched *sched_new(const xl_model *model, const sched_opts *o, void (*notify)(void *), void *arg) {
  sched *s = xcalloc(1, sizeof *s);
  s->model = model;
  s->vocab = xl_model_config(model)->vocab_size;
  s->o = *o;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_mutex_init(&s->ev_mu, NULL);
  s->notify = notify;
  s->notify_arg = arg;
  s->w = xcalloc((size_t)o->workers, sizeof *s->w);
  return s;
}

static void unpark_siblings(sched *s, job *j);

/* Posts an event; after JOB_EV_DONE the caller must not touch j again. */
static void post(sched *s, job *j, int flags) {
  pthread_mutex_lock(&s->ev_mu);
  if (!j->links.ev_flags) {
    if (s->n_ev == s->cap_ev) {
      s->cap_ev = s->cap_ev ? 2 * s->cap_ev : 64;
      s->ev = xrealloc(s->ev, sizeof *s->ev * (size_t)s->cap_ev);
    }
    s->ev[s->n_ev].j = j;
    s->ev[s->n_ev].flags = 0;
    s->n_ev++;
  }
  j->links.ev_flags |= flags;
  pthread_mutex_unlock(&s->ev_mu);
  if (s->notify) s->notify(s->notify_arg);
}

int sched_take_events(sched *s, sched_event **ev, int *cap) {
  pthread_mutex_lock(&s->ev_mu);
  int n = s->n_ev;
  if (n > *cap) {
    *cap = n;
    *ev = xrealloc(*ev, sizeof **ev * (size_t)n);
  }
  for (int i = 0; i < n; i++) {
    (*ev)[i].j = s->ev[i].j;
    (*ev)[i].flags = s->ev[i].j->links.ev_flags;
    s->ev[i].j->links.ev_flags = 0;
  }
  s->n_ev = 0;
  pthread_mutex_unlock(&s->ev_mu);
  return n;
}

/* mu held. Drained streams first: they were admitted before anything in the queue. */
static void promote(sched *s) {
  while (s->n_active < s->o.max_running && (s->resumed.head || s->wait.head)) {
    jq *q = s->resumed.head ? &s->resumed : &s->wait;
    job *j = q->head;
    jq_remove(q, j);
    j->links.where = JQ_RUN;
    jq_push(&s->run, j);
    s->n_active++;
  }
}

/* mu held. A paused or resumed job goes back to the running set at once (cancelled, or the
 * scheduler stops): a worker finishes it (its closing chunks, its snapshot). */
static void unpause(sched *s, job *j) {
  if (j->links.where == JQ_PAUSED) {
    jq_remove(&s->paused, j);
    atomic_fetch_sub(&job_sink(j)->stream.n_paused, 1);
  } else {
    jq_remove(&s->resumed, j);
  }
  j->links.where = JQ_RUN;
  jq_push(&s->run, j);
  s->n_active++;
  pthread_cond_signal(&s->cv);
}

/* mu held; j came back from a worker, not done. Pauses it when its stream's buffer is full:
 * checked under the sink's lock, so a loop that drains it meanwhile either sees the pause
 * (n_paused) and resumes it, or drained it before and the job is not paused. */
static int maybe_pause(sched *s, job *j) {
  if (!s->o.stream_buffer || !j->params->stream || s->stop || !j->run.decoding || j->links.parked ||
      atomic_load(&j->cancel) || (j->choices.n_sibs && !j->choices.released))
    return 0;
  job *o = job_sink(j);
  pthread_mutex_lock(&o->stream.mu);
  int full = o->stream.out.len >= s->o.stream_buffer;
  if (full) {
    j->links.where = JQ_PAUSED;
    jq_push(&s->paused, j);
    s->n_active--;
    atomic_fetch_add(&o->stream.n_paused, 1);
  }
  pthread_mutex_unlock(&o->stream.mu);
  return full;
}

void sched_stream_drained(sched *s, job *sink) {
  if (!s->o.stream_buffer || atomic_load(&sink->stream.n_paused) == 0) return;
  pthread_mutex_lock(&s->mu);
  pthread_mutex_lock(&sink->stream.mu);
  int low = sink->stream.out.len <= s->o.stream_buffer / 2;
  pthread_mutex_unlock(&sink->stream.mu);
  if (low) {
    for (job *j = s->paused.head, *next; j; j = next) {
      next = j->links.q_next;
      if (job_sink(j) != sink) continue;
      jq_remove(&s->paused, j);
      atomic_fetch_sub(&sink->stream.n_paused, 1);
      j->links.where = JQ_RESUMED;
      jq_push(&s->resumed, j);
    }
    promote(s);
    pthread_cond_signal(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
}

long sched_paused(sched *s) {
  pthread_mutex_lock(&s->mu);
  long n = s->paused.n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int sched_submit(sched *s, job *j) { return sched_submit_all(s, &j, 1); }

int sched_submit_all(sched *s, job **jobs, int n) {
  pthread_mutex_lock(&s->mu);
  long free_run = s->o.max_running - s->n_active - s->resumed.n;
  long free_wait = s->o.max_queue - s->wait.n;
  if ((free_run > 0 ? free_run : 0) + (free_wait > 0 ? free_wait : 0) < n) {
    pthread_mutex_unlock(&s->mu);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    job *j = jobs[i];
    if (s->n_active < s->o.max_running && !s->resumed.head) {
      j->links.where = JQ_RUN;
      jq_push(&s->run, j);
      s->n_active++;
    } else {
      j->links.where = JQ_WAIT;
      jq_push(&s->wait, j);
    }
  }
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

int sched_has_room(sched *s) { return sched_has_room_for(s, 1); }

int sched_has_room_for(sched *s, int n) {
  pthread_mutex_lock(&s->mu);
  long free_run = s->o.max_running - s->n_active - s->resumed.n;
  long free_wait = s->o.max_queue - s->wait.n;
  int ok = (free_run > 0 ? free_run : 0) + (free_wait > 0 ? free_wait : 0) >= n;
  pthread_mutex_unlock(&s->mu);
  return ok;
}

void sched_cancel(sched *s, job *j) {
  atomic_store(&j->cancel, 1);
  pthread_mutex_lock(&s->mu);
  int waiting =
      j->links.where == JQ_WAIT && !j->links.parked; /* a parked one is let go by its group */
  if (waiting) {
    jq_remove(&s->wait, j);
    j->links.where = JQ_DONE;
    j->run.finish = FINISH_CANCELLED; /* never ran: the session is untouched */
    unpark_siblings(s, j);        /* cancelled with it */
  } else if (j->links.where == JQ_RUN) {
    pthread_cond_signal(&s->cv); /* a worker finishes it on its next iteration */
  } else if (j->links.where == JQ_PAUSED || j->links.where == JQ_RESUMED) {
    unpause(s, j); /* it ran: a worker finishes it */
  }
  pthread_mutex_unlock(&s->mu);
  if (waiting) post(s, j, JOB_EV_DONE);
}

void sched_counts(sched *s, long *waiting, long *running) {
  pthread_mutex_lock(&s->mu);
  *waiting = s->wait.n;
  *running = s->n_active;
  pthread_mutex_unlock(&s->mu);
}

/* mu held. A session is touched by one worker at a time: checked, not assumed. */
static void take(sched *s, worker *w, int n, job *j, int tokens) {
  jq_remove(&s->run, j);
  j->links.where = JQ_WORKER;
  if (j->sess->on_worker) {
    xlog_msg("fatal", "scheduler", "session %s taken by two workers", j->sess->id);
    abort();
  }
  j->sess->on_worker = 1;
  w->batch[n] = j;
  w->take[n] = tokens;
}

/* mu held. Picks this iteration's batch out of the run queue (round robin: a job goes back to
 * its tail after each step, so the head has waited longest).
 *  - rows: at most max_batch sessions; with several workers at most this worker's share of the
 *    running jobs (ceil(running / workers)), so the workers' forwards run side by side instead
 *    of one worker taking every ready session while the others wait;
 *  - cancelled jobs are taken first (no tokens, no row);
 *  - when every ready session fits in the rows: all decode steps, then prefill chunks in queue
 *    order with the rest of the token budget (batch_tokens), at least one per iteration;
 *  - when rows are scarce (more ready sessions than rows): sessions in queue order, decoding
 *    or prefilling alike, so each gets a row every ceil(ready / rows) iterations: a new prompt
 *    never waits for the decoding sessions to finish (decode-first would starve it), and the
 *    budget left for prompts keeps one token for every decode row.
 * A prompt is always cut at multiples of its job's chunk from its start, never at the budget's
 * edge, so a request computes exactly the same bits alone or batched. */
static int select_batch(sched *s, worker *w) {
  int n = 0, rows = 0, budget = s->o.batch_tokens, prefills = 0, cap = s->o.max_batch;
  if (s->o.workers > 1) {
    long share = (s->n_active + s->o.workers - 1) / s->o.workers;
    if (share < cap) cap = share > 0 ? (int)share : 1;
  }
  int ready = 0, decoders = 0;
  for (job *j = s->run.head, *next; j && n < s->o.max_batch; j = next) {
    next = j->links.q_next;
    if (j->links.parked) continue; /* its group's prompt is still being fed */
    if (atomic_load(&j->cancel)) take(s, w, n++, j, 0);
    else ready++, decoders += j->run.decoding;
  }
  int scarce = ready > cap;
  /* several workers: at most a share of the waiting prompts, so a burst of new requests is
   * prefilled by all workers side by side rather than lengthening one worker's forward */
  int prompts = ready - decoders, max_prompts = prompts;
  if (s->o.workers > 1) max_prompts = (prompts + s->o.workers - 1) / s->o.workers;
  /* tokens prompts may use: what the decode rows this iteration can take leave over */
  int dec_rows = decoders < cap ? decoders : cap;
  int prompt_budget = budget - dec_rows;
  for (job *j = s->run.head, *next; j && n < s->o.max_batch && rows < cap; j = next) {
    next = j->links.q_next;
    if (j->links.parked) continue;
    if (j->run.decoding) {
      if (budget <= 0) continue;
      budget--;
      rows++;
      take(s, w, n++, j, 1);
    } else if (scarce && prefills < max_prompts) {
      int want = j->feed.n_input - j->run.pos;
      if (want > j->params->chunk) want = j->params->chunk;
      /* progress guarantee: one chunk per iteration even when decoding used the budget */
      if (want > prompt_budget && prefills) continue;
      prompt_budget -= want;
      budget -= want;
      prefills++;
      rows++;
      take(s, w, n++, j, want);
    }
  }
  if (scarce) return n;
  for (job *j = s->run.head, *next;
       j && n < s->o.max_batch && (rows < cap || !prefills) && prefills < max_prompts; j = next) {
    next = j->links.q_next;
    /* parked first: a parked job's fields are the releasing worker's until it is let go */
    if (j->links.parked || j->run.decoding || atomic_load(&j->cancel))
      continue; /* left over: no budget or room */
    int want = j->feed.n_input - j->run.pos;
    if (want > j->params->chunk) want = j->params->chunk;
    if (want > budget && prefills) continue;
    budget -= want;
    prefills++;
    rows++;
    take(s, w, n++, j, want);
    if (budget <= 0) break;
  }
  return n;
}

/* mu held. Once a job's siblings have their fork (or the job ended before its prompt was in:
 * then they are cancelled), they become selectable; those already finished leave the queues
 * and are reported done (nothing touches them after that). */
static void unpark_siblings(sched *s, job *j) {
  if (!j->choices.n_sibs || j->links.sibs_unparked) return;
  if (!j->choices.released && j->run.finish == FINISH_NONE) return; /* still feeding its prompt */
  j->links.sibs_unparked = 1;
  for (int i = 0; i < j->choices.n_sibs; i++) {
    job *c = j->choices.sibs[i];
    c->links.parked = 0;
    if (!j->choices.released) atomic_store(&c->cancel, 1);
    if (c->run.finish == FINISH_NONE && c->links.where == JQ_WAIT && atomic_load(&c->cancel))
      c->run.finish = FINISH_CANCELLED; /* waiting, never ran: done now */
    if (c->run.finish == FINISH_NONE) continue;
    if (c->links.where == JQ_RUN) {
      jq_remove(&s->run, c);
      s->n_active--;
    } else if (c->links.where == JQ_WAIT) {
      jq_remove(&s->wait, c);
    }
    c->links.where = JQ_DONE;
    int flags = JOB_EV_DONE;
    if (c->params->stream) flags |= JOB_EV_OUTPUT;
    post(s, c, flags);
  }
}

static int finite_row(const float *x, int n) {
  int ok = 1;
  for (int i = 0; i < n; i++) ok &= isfinite(x[i]) != 0;
  return ok;
}

/* Phase 1 of a batch: stamps the jobs' first scheduling, applies cached prefixes and fills
 * one feed per job that takes tokens (w->feeds[0..k-1]). Returns k. */
static int fill_feeds(sched *s, worker *w, int n, double t0) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    job *j = w->batch[i];
    if (!j->run.t_sched) {
      j->run.t_sched = t0;
      hist_observe(&g_metrics.queue_wait, t0 - j->params->t_arrival);
    }
    if (w->take[i] == 0) continue;
    if (j->prefix.hit &&
        !j->prefix.applied) { /* a cached prefix: its memory, then the rest's cuts */
      prefix_cache_apply(j);
      if (w->take[i] > j->feed.n_input - j->run.pos) w->take[i] = j->feed.n_input - j->run.pos;
    }
    xl_feed *f = &w->feeds[k];
    memset(f, 0, sizeof *f);
    f->state = j->sess->state;
    if (j->run.decoding) {
      f->tokens = &j->run.next;
      f->n_tokens = 1;
      f->last_logprobs = w->lp + (size_t)k * (size_t)s->vocab;
    } else {
      f->tokens = j->feed.input + j->run.pos;
      f->n_tokens = w->take[i];
      if (j->run.pos + w->take[i] == j->feed.n_input && j->params->max_tokens > 0)
        f->last_logprobs = w->lp + (size_t)k * (size_t)s->vocab;
      if (j->score.prompt) job_score_feed(j, f, w->take[i]);
    }
    k++;
  }
  return k;
}

/* Phase 2 (k > 0): one forward pass over the k feeds, timed into the metrics. */
static xl_code forward_feeds(sched *s, worker *w, int k, double t0, xl_error *err) {
  int rows = 0;
  for (int r = 0; r < k; r++) rows += w->feeds[r].n_tokens;
  xl_code rc = xl_forward(s->model, w->ws, w->feeds, k, err);
  double t1 = now_mono();
  hist_observe(&g_metrics.batch_size, k);
  hist_observe(&g_metrics.batch_tokens, rows);
  hist_observe(&g_metrics.forward_seconds, t1 - t0);
  if (rc != XL_OK) xlog_msg("error", "forward_failed", "%s", err->message);
  return rc;
}

/* Phase 3: takes in what the forward pass gave each job: rolls the turn back on an error or a
 * non-finite row, advances the prompt, or samples the next token; finishes cancelled jobs. */
static void absorb_results(sched *s, worker *w, int n, xl_code rc, const xl_error *err,
                           double now) {
  int r = 0;
  for (int i = 0; i < n; i++) {
    job *j = w->batch[i];
    const float *lp = NULL;
    if (w->take[i]) {
      xl_feed *f = &w->feeds[r];
      lp = f->last_logprobs;
      r++;
      if (rc != XL_OK) {
        j->run.error = *err;
        job_finish(j, FINISH_ERROR);
        continue;
      }
      if (lp && !finite_row(lp, s->vocab)) { /* a memory no forward pass of the model makes */
        j->run.error.code = XL_STATE;
        snprintf(j->run.error.message, sizeof j->run.error.message,
                 "the forward pass produced a non-finite value: the session's memory holds "
                 "values this model cannot have made; the turn was not kept");
        if (!j->run.decoding)
          j->run.pos += w->take[i]; /* it fed the session: the turn is rolled back */
        j->feed.want_snapshot = 0;  /* nothing of it is committed */
        job_finish(j, FINISH_ERROR);
        continue;
      }
      /* the tokens are in the memory now */
      session_digest_tokens(j->sess, f->tokens, f->n_tokens);
      if (j->run.decoding) {
        j->sess->pending = -1;
      } else {
        if (j->run.pos == 0 && j->feed.input_has_pending) j->sess->pending = -1;
        if (j->score.prompt) job_score_rows(j, j->run.pos, w->take[i]);
        int prompt_fed = w->take[i] - (j->run.pos == 0 && j->feed.input_has_pending ? 1 : 0);
        ctr_add(&g_metrics.tokens_in, (uint64_t)prompt_fed);
        j->run.pos += w->take[i];
        if (j->prefix.store_at && j->run.pos == j->prefix.store_at) prefix_cache_capture(j);
      }
    }
    if (atomic_load(&j->cancel)) {
      job_finish(j, FINISH_CANCELLED);
      ctr_add(&g_metrics.cancelled, 1);
      continue;
    }
    if (!w->take[i]) continue; /* cannot happen: take 0 only for cancelled jobs */
    if (!j->run.decoding && j->run.pos < j->feed.n_input) continue; /* more prompt to feed */
    if (j->choices.n_sibs &&
        !j->choices.released) /* the prompt is in: fork it for the other choices */
      job_release_siblings(j, j->params->max_tokens > 0 ? lp : NULL, w->scratch, now);
    if (j->params->max_tokens == 0) {
      job_finish(j, FINISH_LENGTH);
      continue;
    }
    job_take_token(j, lp, w->scratch, now);
  }
}

/* Phase 4: tells the loop, requeues or retires each job of the batch. */
static void hand_back(sched *s, worker *w, int n) {
  /* Tell the loop, requeue or retire. Once a job is back in the run queue another worker may
   * take it (and finish it, and the loop free it): so everything this worker reads of a job
   * happens before it is requeued, and a DONE event is posted only after the job left the
   * queues (after DONE the job belongs to the loop). */
  int *flags = w->flags;
  for (int i = 0; i < n; i++) {
    job *j = w->batch[i];
    flags[i] = j->run.finish != FINISH_NONE ? JOB_EV_DONE : 0;
    if (j->params->stream) {
      job *o = job_sink(j);
      pthread_mutex_lock(&o->stream.mu);
      if (o->stream.out.len) flags[i] |= JOB_EV_OUTPUT;
      pthread_mutex_unlock(&o->stream.mu);
    }
    if (flags[i] == JOB_EV_OUTPUT) post(s, j, JOB_EV_OUTPUT);
  }
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < n; i++) {
    job *j = w->batch[i];
    unpark_siblings(s, j);
    j->sess->on_worker = 0;
    if (!(flags[i] & JOB_EV_DONE)) {
      if (maybe_pause(s, j)) continue;
      j->links.where = JQ_RUN;
      jq_push(&s->run, j);
    } else {
      j->links.where = JQ_DONE;
      s->n_active--;
    }
  }
  promote(s);
  /* No wake-up here: this worker selects again at once and wakes an idle one only if work is
   * left after taking its share (worker_main). Waking one for the jobs just requeued made two
   * workers ping-pong a lone session (a futex wake-up per token, its memory moving between
   * cores' caches: slower decoding). */
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < n; i++)
    if (flags[i] & JOB_EV_DONE) post(s, w->batch[i], flags[i]);
}

/* Runs one batch of n jobs (w->batch, w->take) on worker w: feed, forward, take in the
 * results, hand the jobs back. */
static void run_batch(sched *s, worker *w, int n) {
  double t0 = now_mono();
  int k = fill_feeds(s, w, n, t0);
  xl_error err;
  memset(&err, 0, sizeof err);
  xl_code rc = k ? forward_feeds(s, w, k, t0, &err) : XL_OK;
  absorb_results(s, w, n, rc, &err, now_mono());
  hand_back(s, w, n);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  sched *s = w->s;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    int n = select_batch(s, w);
    if (!n) {
      if (s->stop && !s->run.head) break; /* stop only once every admitted job is done */
      s->idle_workers++;
      pthread_cond_wait(&s->cv, &s->mu);
      s->idle_workers--;
      continue;
    }
    if (s->run.head && s->idle_workers) pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    run_batch(s, w, n);
    pthread_mutex_lock(&s->mu);
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int sched_start(sched *s, xl_error *err) {
  size_t mb = (size_t)s->o.max_batch;
  for (int i = 0; i < s->o.workers; i++) {
    worker *w = &s->w[i];
    w->s = s;
    if (xl_workspace_new(s->model, &w->ws, err) != XL_OK) return -1;
    if (s->o.threads_per_worker > 1) { /* the helpers inherit a mask with every signal blocked */
      sigset_t all, old;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old);
      xl_code rc = xl_workspace_set_threads(w->ws, s->o.threads_per_worker, err);
      pthread_sigmask(SIG_SETMASK, &old, NULL);
      if (rc != XL_OK) return -1;
    }
    w->lp = xmalloc(sizeof(float) * mb * (size_t)s->vocab);
    w->feeds = xcalloc(mb, sizeof *w->feeds);
    w->batch = xcalloc(mb, sizeof *w->batch);
    w->take = xcalloc(mb, sizeof *w->take);
    w->flags = xcalloc(mb, sizeof *w->flags);
    w->scratch = xmalloc(xl_sampler_scratch_bytes(s->vocab));
  }
  for (int i = 0; i < s->o.workers; i++) {
    if (thread_create_nosig(&s->w[i].th, worker_main, &s->w[i])) {
      snprintf(err->message, sizeof err->message, "cannot create worker thread %d", i);
      err->code = XL_NOMEM;
      return -1;
    }
    s->w[i].started = 1;
  }
  return 0;
}

void sched_stop(sched *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  while (s->paused.head) unpause(s, s->paused.head); /* every admitted job runs to its end */
  while (s->resumed.head) unpause(s, s->resumed.head);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < s->o.workers; i++)
    if (s->w[i].started) {
      pthread_join(s->w[i].th, NULL);
      s->w[i].started = 0;
    }
}

void sched_free(sched *s) {
  if (!s) return;
  for (int i = 0; i < s->o.workers; i++) {
    worker *w = &s->w[i];
    xl_workspace_free(w->ws);
    free(w->lp);
    free(w->feeds);
    free(w->batch);
    free(w->take);
    free(w->flags);
    free(w->scratch);
  }
  free(s->w);
  free(s->ev);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->ev_mu);
  free(s);
}
