/*
 * scheduler.h: the worker pool and its continuous-batching scheduler.
 *
 * Jobs (job.h) are admitted by the loop thread: up to max_running are "running" (each iteration
 * may schedule them), up to max_queue more wait FIFO, beyond that submit refuses (429). Each
 * worker iteration gathers the running jobs that no other worker holds: decode steps first (one
 * token each, oldest first), then prefill chunks (prefill_chunk tokens each) up to batch_tokens
 * and max_batch rows, and runs them as ONE xl_forward call (one GEMM per weight for all rows).
 * Fairness: when more sessions are ready than a forward has rows, sessions take rows in round
 * robin order, decoding or prefilling alike (a new prompt never waits for the decoding sessions
 * to finish); at least one prefill chunk runs per iteration; with several workers each takes at
 * most its share of the running jobs (ceil(running / workers)) and of the waiting prompts, so
 * their forwards run side by side and a burst of new requests is prefilled by all of them.
 * Prompts are cut
 * at multiples of the job's chunk from its start, never at the budget's edge: a request
 * computes the same bits alone or batched.
 * A job is held by at most one worker at a time, so its session is touched by one thread.
 *
 * Several choices (n > 1, best_of, a list of prompts): the jobs of one prompt form a group. The
 * first (the group's main job) feeds the prompt; the others (its siblings) are submitted with
 * it, parked: never selected. When the main job's prompt is in, its worker gives each sibling a
 * copy of the state and samples the sibling's first token from the same log-probabilities
 * (job_release_siblings), then unparks them: from there they decode as ordinary jobs, batched
 * with the main job. A main job that ends before its prompt is in cancels its siblings.
 *
 * Results go back through a locked event list plus one coalescing notification (the daemon
 * passes uv_async_send); the loop thread drains it with sched_take_events.
 *
 * Threads: sched_new/start/stop/free on the main or loop thread; submit, cancel, take_events,
 * counts on the loop thread; everything else runs on the workers.
 */
#ifndef XLS_SCHEDULER_H
#define XLS_SCHEDULER_H

#include "job.h"
#include "xl.h"

typedef struct sched sched;

typedef struct sched_opts {
  int workers, max_batch, batch_tokens, max_running, max_queue;
  /* Slow readers: a streaming job whose sink holds this many unsent bytes is paused (it leaves
   * the running set, so it holds no slot of max_running) until the loop has sent all but half
   * of them (sched_stream_drained); 0: never paused. */
  size_t stream_buffer;
  int threads_per_worker; /* threads of each worker's forward pass (0 or 1: the worker alone) */
} sched_opts;

typedef struct sched_event {
  job *j;
  int flags; /* JOB_EV_OUTPUT | JOB_EV_DONE */
} sched_event;

sched *sched_new(const xl_model *model, const sched_opts *o, void (*notify)(void *), void *arg);
int sched_start(sched *s, xl_error *err); /* creates workspaces and threads (signals blocked) */
/* Joins the workers once every admitted job is done (cancel them first for a fast stop). */
void sched_stop(sched *s);
void sched_free(sched *s);

int sched_submit(sched *s, job *j); /* 0, or -1 when the queue is full */
/* All of them or none (-1): under one lock, so no worker sees a group half submitted (a main
 * job could otherwise release siblings that are not queued yet). */
int sched_submit_all(sched *s, job **jobs, int n);
/* 1 when a submit now would be accepted. Workers only ever free room, so a yes stays true
 * until the loop thread itself submits. */
int sched_has_room(sched *s);
int sched_has_room_for(sched *s, int n); /* n submits now would all be accepted */
void sched_cancel(sched *s, job *j);
/* Moves the pending events into *ev (grown as needed); returns their count. */
int sched_take_events(sched *s, sched_event **ev, int *cap);
void sched_counts(sched *s, long *waiting, long *running);
/* Loop thread, after taking bytes from sink->out: resumes the jobs paused on it once it holds
 * at most half of stream_buffer (they wait for a running slot ahead of the queue). */
void sched_stream_drained(sched *s, job *sink);
long sched_paused(sched *s); /* jobs paused on a full stream buffer now */

#endif
