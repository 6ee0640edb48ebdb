/*
 * pool.c: the persistent thread team of a workspace (pool.h). A job is published by bumping
 * an atomic generation number; helpers wait for a new generation spinning a little (the
 * forward pass hands out jobs microseconds apart), then sleep on a condition variable; the
 * caller runs share 0, then waits for the helpers' done count (spinning, then yielding).
 * Threads: the owner calls new/run/free; helpers run only the job's shares.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "internal.h"
#include "pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spins before a helper sleeps (about 50-100 us) and before the caller starts yielding. */
#define SPIN_WAIT 20000
#define SPIN_DONE 4000

typedef struct {
  xl_pool *pool;
  int share;
  pthread_t tid;
} helper;

struct xl_pool {
  int n;                      /* threads, the caller included */
  atomic_uint gen;            /* job number; a new one publishes job and ctx */
  atomic_int done;            /* helpers finished with the current job */
  atomic_int stop;
  xl_pool_job job;            /* written by the owner before gen is bumped */
  void *ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int sleepers;               /* under mu */
  helper h[XL_MAX_THREADS];
};

static void *helper_main(void *arg) {
  helper *me = arg;
  xl_pool *p = me->pool;
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
           !atomic_load_explicit(&p->stop, memory_order_acquire)) {
      if (++spins < SPIN_WAIT) {
        CPU_RELAX();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      p->sleepers++;
      while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
             !atomic_load_explicit(&p->stop, memory_order_acquire))
        pthread_cond_wait(&p->cv, &p->mu);
      p->sleepers--;
      pthread_mutex_unlock(&p->mu);
      spins = 0;
    }
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
    seen = g;
    p->job(p->ctx, me->share, p->n);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
  }
}

static void wake(xl_pool *p) {
  pthread_mutex_lock(&p->mu);
  if (p->sleepers) pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void xl_pool_free(xl_pool *p) {
  if (!p) return;
  atomic_store_explicit(&p->stop, 1, memory_order_release);
  wake(p);
  for (int i = 1; i < p->n; i++) pthread_join(p->h[i].tid, NULL);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

xl_code xl_pool_new(int n_threads, xl_pool **out, xl_error *err) {
  *out = NULL;
  if (n_threads < 1 || n_threads > XL_MAX_THREADS)
    return xl_fail(err, XL_ARG, "threads: %d is not in [1, %d]", n_threads, XL_MAX_THREADS);
  xl_pool *p = calloc(1, sizeof *p);
  if (!p) return xl_fail(err, XL_NOMEM, "out of memory for a thread pool");
  p->n = 1;
  atomic_init(&p->gen, 0);
  atomic_init(&p->done, 0);
  atomic_init(&p->stop, 0);
  if (pthread_mutex_init(&p->mu, NULL)) {
    free(p);
    return xl_fail(err, XL_NOMEM, "thread pool: no mutex");
  }
  if (pthread_cond_init(&p->cv, NULL)) {
    pthread_mutex_destroy(&p->mu);
    free(p);
    return xl_fail(err, XL_NOMEM, "thread pool: no condition variable");
  }
  for (int i = 1; i < n_threads; i++) {
    p->h[i] = (helper){p, i, 0};
    if (pthread_create(&p->h[i].tid, NULL, helper_main, &p->h[i])) {
      xl_pool_free(p); /* joins the p->n - 1 started so far */
      return xl_fail(err, XL_NOMEM, "thread pool: cannot start thread %d of %d", i + 1,
                     n_threads);
    }
    p->n = i + 1;
  }
  *out = p;
  return XL_OK;
}

int xl_pool_threads(const xl_pool *p) { return p ? p->n : 1; }

void xl_pool_run(xl_pool *p, xl_pool_job job, void *ctx) {
  if (!p || p->n == 1) {
    job(ctx, 0, 1);
    return;
  }
  p->job = job;
  p->ctx = ctx;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
  wake(p);
  job(ctx, 0, p->n);
  int spins = 0;
  while (atomic_load_explicit(&p->done, memory_order_acquire) < p->n - 1) {
    if (++spins < SPIN_DONE) CPU_RELAX();
    else sched_yield();
  }
}
