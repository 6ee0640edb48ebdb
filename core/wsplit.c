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

typedef struct {
  const float *x;
  int M, K, ldx;
  const xl_wmat *W;
  const float *b;
  int N;
  float *y;
  int ldy;
} split_job;

static void split_share(void *ctx, int s, int k) {
  const split_job *j = ctx;
  int lo, hi;
  xl_pool_split(j->N, s, k, SPLIT_ROWS, &lo, &hi);
  if (lo >= hi) return;
  xl_wmat v = xl_wmat_from_row(j->W, lo); /* rows lo..hi of W: outputs lo..hi of y */
  xl_matmul_w(j->x, j->M, j->K, j->ldx, &v, hi - lo, j->y + lo, j->ldy);
  if (j->b) xl_kern()->add_bias(j->y + lo, j->M, hi - lo, j->ldy, j->b + lo);
}

void xl_par_linear_w(struct xl_pool *pool, const float *x, int M, int K, int ldx,
                     const xl_wmat *W, const float *b, int N, float *y, int ldy) {
  if (M <= 0 || N <= 0) return;
  split_job j = {x, M, K, ldx, W, b, N, y, ldy};
  if (xl_pool_threads(pool) == 1 || (size_t)N * K < SPLIT_MIN_WEIGHTS || N <= SPLIT_ROWS)
    split_share(&j, 0, 1);
  else
    xl_pool_run(pool, split_share, &j);
}
