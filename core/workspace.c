/*
 * workspace.c: a worker thread's scratch buffers for the forward pass, grown on demand and
 * reused across calls (one thread at a time), and its thread pool (pool.h) when it uses more
 * than one thread. The owner thread calls everything here.
 */
#include <stdlib.h>

#include "internal.h"
#include "pool.h"

xl_code xl_workspace_new(const xl_model *m, xl_workspace **out, xl_error *err) {
  *out = calloc(1, sizeof **out);
  if (!*out) return xl_fail(err, XL_NOMEM, "out of memory for a workspace");
  (*out)->model = m;
  return XL_OK;
}

void xl_workspace_free(xl_workspace *ws) {
  if (!ws) return;
  xl_pool_free(ws->pool);
  for (int i = 0; i < 16; i++) free(ws->buf[i]);
  free(ws);
}

xl_code xl_workspace_set_threads(xl_workspace *ws, int n_threads, xl_error *err) {
  xl_error_clear(err);
  if (n_threads < 1 || n_threads > XL_MAX_THREADS)
    return xl_fail(err, XL_ARG, "threads: %d is not in [1, %d]", n_threads, XL_MAX_THREADS);
  if (n_threads == xl_pool_threads(ws->pool)) return XL_OK;
  xl_pool *p = NULL;
  if (n_threads > 1) {
    xl_code rc = xl_pool_new(n_threads, &p, err);
    if (rc) return rc;
  }
  xl_pool_free(ws->pool);
  ws->pool = p;
  return XL_OK;
}

int xl_workspace_threads(const xl_workspace *ws) { return ws ? xl_pool_threads(ws->pool) : 1; }

float *xl_ws_get(xl_workspace *ws, int slot, size_t n) {
  if (n == 0) n = 1;
  if (ws->cap[slot] < n) {
    free(ws->buf[slot]);
    size_t cap = n + n / 4; /* headroom: batches vary a little between calls */
    /* 64-byte aligned (whole cache lines): rows of d floats then start on a line whenever d
     * is a multiple of 16, and no vector load of them straddles two lines */
    size_t bytes = (cap * sizeof(float) + 63) & ~(size_t)63;
    ws->buf[slot] = aligned_alloc(64, bytes);
    ws->cap[slot] = ws->buf[slot] ? cap : 0;
  }
  return ws->buf[slot];
}
