/*
 * pool.h: a workspace's persistent team of threads for the forward pass (threads_per_worker).
 * A pool of n threads is the calling thread plus n - 1 helpers started once (xl_pool_new) and
 * joined once (xl_pool_free). xl_pool_run publishes a job of n_tasks tasks; the caller and
 * every helper that is awake claim tasks one at a time from a shared counter until none is
 * left, and the call returns when every task is done. No thread starts per job: a helper
 * spins briefly for the next job, then sleeps on a condition variable (between requests it
 * costs nothing). A helper the system has not scheduled simply claims nothing: the caller does
 * the rest, so a busy machine never makes a job wait for a thread that is not running.
 * Which thread runs a task is not fixed; what a task computes must depend on the task alone
 * (that is how results stay bit-identical for any thread count).
 *
 * Threads: xl_pool_new, xl_pool_run and xl_pool_free are called by the thread that owns the
 * pool (the workspace's owner), one call at a time; the job function runs on the pool's
 * threads at once (thread 0 is the caller) and must only write what its task owns, plus
 * scratch of its own thread index.
 */
#ifndef XL_POOL_H
#define XL_POOL_H

#include "xl.h"

typedef struct xl_pool xl_pool;

/* job(ctx, task, thread): task in [0, n_tasks), thread in [0, xl_pool_threads) */
typedef void (*xl_pool_job)(void *ctx, int task, int thread);

/* A pool of n_threads (1..XL_MAX_THREADS; 1: no helper) in *out, or an error. */
xl_code xl_pool_new(int n_threads, xl_pool **out, xl_error *err);
void xl_pool_free(xl_pool *p);
/* Threads of p (1 for NULL). */
int xl_pool_threads(const xl_pool *p);
/* Runs job(ctx, t, thread) once for every task t < n_tasks; returns when all have returned
 * (their writes are then visible to the caller). NULL p or one thread: all on the caller. */
void xl_pool_run(xl_pool *p, xl_pool_job job, void *ctx, int n_tasks);

#endif /* XL_POOL_H */
