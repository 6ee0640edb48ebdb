/*
 * pool.h: a workspace's persistent team of threads for the forward pass (threads_per_worker).
 * A pool of n threads is the calling thread plus n - 1 helpers started once (xl_pool_new) and
 * joined once (xl_pool_free); xl_pool_run hands every thread one share of a job and returns
 * when all shares are done. No thread is started per job: a helper spins briefly for the next
 * job, then sleeps on a condition variable (between requests it costs nothing).
 *
 * Threads: xl_pool_new, xl_pool_run and xl_pool_free are called by the thread that owns the
 * pool (the workspace's owner), one call at a time; the job function runs on every thread of
 * the pool at once (share 0 on the caller), and must only write what its share owns.
 */
#ifndef XL_POOL_H
#define XL_POOL_H

#include "xl.h"

typedef struct xl_pool xl_pool;

/* job(ctx, share, n_shares): share in [0, n_shares) */
typedef void (*xl_pool_job)(void *ctx, int share, int n_shares);

/* A pool of n_threads (1..XL_MAX_THREADS; 1: no helper) in *out, or an error. */
xl_code xl_pool_new(int n_threads, xl_pool **out, xl_error *err);
void xl_pool_free(xl_pool *p);
/* Threads of p (1 for NULL). */
int xl_pool_threads(const xl_pool *p);
/* Runs job(ctx, s, n) for every share s < n = xl_pool_threads(p), share 0 on the caller;
 * returns when all have returned (their writes are then visible to the caller). NULL p: the
 * caller runs share 0 of 1. */
void xl_pool_run(xl_pool *p, xl_pool_job job, void *ctx);

/* [*lo, *hi) of n items for share s of k, whole units of `align` items (the last share ends
 * at n): a split fixed by n, k and align alone. */
static inline void xl_pool_split(int n, int s, int k, int align, int *lo, int *hi) {
  int units = (n + align - 1) / align;
  int a = (int)((long long)units * s / k), b = (int)((long long)units * (s + 1) / k);
  *lo = a * align < n ? a * align : n;
  *hi = b * align < n ? b * align : n;
}

#endif /* XL_POOL_H */
