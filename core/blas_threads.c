/*
 * blas_threads.c: how many threads OpenBLAS uses (xl_set_blas_threads, xl.h). Main thread, at
 * start, before any forward pass.
 */
#include <cblas.h>

#include "xl.h"

void xl_set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}
