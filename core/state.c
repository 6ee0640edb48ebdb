/*
 * state.c: one session's Transformer-XL memory. Per layer it keeps the keys and values of
 * the last mem_len positions in a ring (oldest at `head`), which is everything a later step
 * reads of the memory: cat(mem, h)[-mem_len:] becomes "append, dropping the oldest".
 * A state is used by one thread at a time.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t kv_floats(const xl_model *m) {
  return (size_t)m->cfg.n_layer * 2 * (size_t)m->cfg.mem_len * m->hd;
}

xl_code xl_state_new(const xl_model *m, xl_state **out, xl_error *err) {
  *out = NULL;
  xl_state *s = calloc(1, sizeof *s);
  if (!s) return xl_fail(err, XL_NOMEM, "out of memory for a session state");
  s->model = m;
  s->mem_len = m->cfg.mem_len;
  size_t n = kv_floats(m);
  if (n) {
    /* Not zeroed: slots are written before they are read (len tracks what is valid). */
    s->kv = malloc(n * sizeof(float));
    if (!s->kv) {
      free(s);
      return xl_fail(err, XL_NOMEM, "out of memory for a session state (%zu bytes)",
                     n * sizeof(float));
    }
  }
  *out = s;
  return XL_OK;
}

void xl_state_free(xl_state *s) {
  if (!s) return;
  free(s->kv);
  free(s);
}

void xl_state_reset(xl_state *s) {
  s->len = 0;
  s->head = 0;
  s->fed = 0;
}

xl_code xl_state_clone(const xl_state *src, xl_state **out, xl_error *err) {
  xl_code rc = xl_state_new(src->model, out, err);
  if (rc) return rc;
  xl_state *d = *out;
  d->len = src->len;
  d->head = src->head;
  d->fed = src->fed;
  if (src->kv) memcpy(d->kv, src->kv, kv_floats(src->model) * sizeof(float));
  return XL_OK;
}

int xl_state_mem_length(const xl_state *s) { return s->len; }
uint64_t xl_state_tokens_fed(const xl_state *s) { return s->fed; }
size_t xl_state_bytes(const xl_state *s) {
  return sizeof *s + kv_floats(s->model) * sizeof(float);
}
