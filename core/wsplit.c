/*
 * wsplit.c: a product with a weight matrix split over the workspace's threads (pool.h): each
 * thread computes a run of whole output rows (64 at a time, a whole number of the dot-product
 * kernels' 16-row panels) by the same kernel call it would make alone, so every output is
 * computed by the same arithmetic for any thread count and any split (the kernels' contract:
 * an output does not depend on which others are computed with it). Called by the thread that
 * owns the pool; the shares run on the pool's threads.
 */
#include "internal.h"
#include "pool.h"

#define SPLIT_ROWS 64
/* Products smaller than this (weights read) run on the caller alone: a handoff costs more. */
#define SPLIT_MIN_WEIGHTS 32768
#define TASKS_PER_THREAD 4

typedef struct {
  const float *x;
  int M, K, ldx;
  const xl_wmat *W;
  const float *b;
  int N;
  float *y;
  int ldy;
  int rows; /* output rows per task: a multiple of SPLIT_ROWS */
} split_job;

/* Task t: output rows [t * rows, (t + 1) * rows) (the last task to N). */
static void split_task(void *ctx, int t, int thread) {
  const split_job *j = ctx;
  (void)thread;
  int lo = t * j->rows, hi = lo + j->rows < j->N ? lo + j->rows : j->N;
  if (lo >= hi) return;
  xl_wmat v = xl_wmat_from_row(j->W, lo); /* rows lo..hi of W: outputs lo..hi of y */
  xl_matmul_w(j->x, j->M, j->K, j->ldx, &v, hi - lo, j->y + lo, j->ldy);
  if (j->b) xl_kern()->add_bias(j->y + lo, j->M, hi - lo, j->ldy, j->b + lo);
}

void xl_par_linear_w(struct xl_pool *pool, const float *x, int M, int K, int ldx, const xl_wmat *W,
                     const float *b, int N, float *y, int ldy) {
  if (M <= 0 || N <= 0) return;
  const int nt = xl_pool_threads(pool);
  split_job j = {x, M, K, ldx, W, b, N, y, ldy, N};
  if (nt == 1 || (size_t)N * K < SPLIT_MIN_WEIGHTS || N <= SPLIT_ROWS) {
    split_task(&j, 0, 0);
    return;
  }
  /* about TASKS_PER_THREAD tasks a thread: a thread the machine delays leaves little behind */
  int units = (N + SPLIT_ROWS - 1) / SPLIT_ROWS, want = TASKS_PER_THREAD * nt;
  j.rows = (units + want - 1) / want * SPLIT_ROWS;
  xl_pool_run(pool, split_task, &j, (N + j.rows - 1) / j.rows);
}
