/*
 * pool.c: the persistent thread team of a workspace (pool.h). One 64-bit atomic word holds the
 * job's generation (high half) and the next unclaimed task (low half): publishing a job first
 * closes the last one (its counter set above any task count), then writes the job's function,
 * context and task count, then bumps the generation with the counter at zero in one store. A
 * claim is a compare-and-swap under the generation the helper saw, so a helper that wakes
 * late never runs a task of another job, nor claims under an old generation with a new job's
 * count (the fields are atomics: a late helper may read them while the owner writes them; the
 * state it reads after them then tells it to stop). Helpers wait for a new
 * generation spinning a little (the forward pass hands out jobs microseconds apart), then
 * sleep on a condition variable. The caller claims tasks like any helper, then waits for the
 * done count (spinning, then yielding): it waits only for tasks a running helper has claimed.
 * Threads: the owner calls new/run/free; helpers run only claimed tasks.
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

/* Spins before a helper sleeps (some hundreds of microseconds) and before the caller yields. */
#define SPIN_WAIT 20000
#define SPIN_DONE 2000
/* The task counter of a closed job: above any task count, so nothing can be claimed. */
#define CLOSED 0x7fffffffu

typedef struct {
  xl_pool *pool;
  int index;
  pthread_t tid;
} helper;

struct xl_pool {
  int n;                    /* threads, the caller included */
  _Atomic uint64_t state;   /* generation << 32 | next task */
  _Atomic(xl_pool_job) job; /* the current generation's job */
  _Atomic(void *) ctx;
  atomic_int n_tasks;
  atomic_int done; /* tasks of the current generation finished */
  atomic_int stop;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int sleepers; /* under mu */
  helper h[XL_MAX_THREADS];
};

/* Claims and runs tasks of generation g until none is left (or g is over). */
static void work(xl_pool *p, uint32_t g, int thread) {
  xl_pool_job job = atomic_load(&p->job);
  void *ctx = atomic_load(&p->ctx);
  const int n = atomic_load(&p->n_tasks);
  uint64_t v = atomic_load(&p->state);
  for (;;) {
    if ((uint32_t)(v >> 32) != g || (int)(uint32_t)v >= n) return;
    if (!atomic_compare_exchange_weak(&p->state, &v, v + 1)) continue; /* v reloaded */
    job(ctx, (int)(uint32_t)v, thread);
    atomic_fetch_add(&p->done, 1);
    v = atomic_load(&p->state);
  }
}

static void *helper_main(void *arg) {
  helper *me = arg;
  xl_pool *p = me->pool;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    int spins = 0;
    while ((g = (uint32_t)(atomic_load(&p->state) >> 32)) == seen && !atomic_load(&p->stop)) {
      if (++spins < SPIN_WAIT) {
        CPU_RELAX();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      p->sleepers++;
      while ((uint32_t)(atomic_load(&p->state) >> 32) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
      p->sleepers--;
      pthread_mutex_unlock(&p->mu);
      spins = 0;
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = g;
    work(p, g, me->index);
  }
}

static void wake(xl_pool *p) {
  pthread_mutex_lock(&p->mu);
  if (p->sleepers) pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void xl_pool_free(xl_pool *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
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
  atomic_init(&p->state, 0);
  atomic_init(&p->job, NULL);
  atomic_init(&p->ctx, NULL);
  atomic_init(&p->n_tasks, 0);
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
      return xl_fail(err, XL_NOMEM, "thread pool: cannot start thread %d of %d", i + 1, n_threads);
    }
    p->n = i + 1;
  }
  *out = p;
  return XL_OK;
}

int xl_pool_threads(const xl_pool *p) { return p ? p->n : 1; }

void xl_pool_run(xl_pool *p, xl_pool_job job, void *ctx, int n_tasks) {
  if (n_tasks <= 0) return;
  if (!p || p->n == 1 || n_tasks == 1) {
    for (int t = 0; t < n_tasks; t++) job(ctx, t, 0);
    return;
  }
  /* Close the last job first: a helper that read the last generation but loads the new
   * job's fields (count included) must not find a task to claim under the old generation. */
  const uint32_t g = (uint32_t)(atomic_load(&p->state) >> 32) + 1;
  atomic_store(&p->state, (uint64_t)(g - 1) << 32 | CLOSED);
  atomic_store(&p->job, job);
  atomic_store(&p->ctx, ctx);
  atomic_store(&p->n_tasks, n_tasks);
  atomic_store(&p->done, 0);
  atomic_store(&p->state, (uint64_t)g << 32); /* publishes the job: task 0 next */
  wake(p);
  work(p, g, 0);
  int spins = 0;
  while (atomic_load(&p->done) < n_tasks) {
    if (++spins < SPIN_DONE) CPU_RELAX();
    else sched_yield();
  }
}
