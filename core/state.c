/*
 * state.c: one session's Transformer-XL memory. Per layer it keeps the keys and values of
 * the last mem_len positions in a ring (oldest at `head`), which is everything a later step
 * reads of the memory: cat(mem, h)[-mem_len:] becomes "append, dropping the oldest". The
 * elements are the model's memory dtype (kv_store.c: F32, BF16 or INT8 with scales).
 * A state is used by one thread at a time.
 *
 * A state's memory of STATE_MAP_MIN bytes or more is a mapping of its own (bigmem.h: 2 MiB
 * aligned, huge pages where the kernel gives them), populated at once: freeing it returns it to
 * the system whatever the allocator keeps (a session that leaves RAM gives its bytes back), and
 * filling it takes no page fault per page (a trap costs about 10 us in some virtual machines:
 * 0.6 s for a 225 MiB memory). Smaller ones come from the heap.
 */
#include <stdlib.h>
#include <string.h>

#include "bigmem.h"
#include "internal.h"

#define STATE_MAP_MIN ((size_t)256 << 10)

/* n bytes, 64-byte aligned; *mapped: n when they are a mapping of their own, else 0 */
static unsigned char *kv_alloc(size_t n, size_t *mapped) {
  *mapped = 0;
  if (n >= STATE_MAP_MIN) return xl_big_alloc(n, mapped);
  return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

xl_code xl_state_alloc(const xl_model *m, xl_kv_dtype dtype, int mem_len, xl_state **out,
                       xl_error *err) {
  *out = NULL;
  xl_state *s = calloc(1, sizeof *s);
  if (!s) return xl_fail(err, XL_NOMEM, "out of memory for a session state");
  s->model = m;
  s->mem_len = mem_len;
  s->dtype = dtype;
  s->layer_bytes = mem_len ? xl_kv_layer_bytes(m, dtype, mem_len) : 0;
  size_t n = (size_t)m->cfg.n_layer * s->layer_bytes;
  if (n) {
    /* Not zeroed: slots are written before they are read (len tracks what is valid). */
    s->kv = kv_alloc(n, &s->kv_mapped);
    if (!s->kv) {
      free(s);
      return xl_fail(err, XL_NOMEM, "out of memory for a session state (%zu bytes)", n);
    }
  }
  *out = s;
  return XL_OK;
}

xl_code xl_state_new(const xl_model *m, xl_state **out, xl_error *err) {
  return xl_state_alloc(m, m->kv_dtype, m->cfg.mem_len, out, err);
}

void xl_state_free(xl_state *s) {
  if (!s) return;
  xl_big_free(s->kv, s->kv_mapped); /* a mapping, or the heap's when 0 */
  free(s);
}

void xl_state_reset(xl_state *s) {
  s->len = 0;
  s->head = 0;
  s->fed = 0;
}

xl_code xl_state_clone(const xl_state *src, xl_state **out, xl_error *err) {
  xl_code rc = xl_state_alloc(src->model, src->dtype, src->mem_len, out, err);
  if (rc) return rc;
  xl_state *d = *out;
  d->len = src->len;
  d->head = src->head;
  d->fed = src->fed;
  if (src->kv) memcpy(d->kv, src->kv, (size_t)src->model->cfg.n_layer * src->layer_bytes);
  return XL_OK;
}

int xl_state_mem_length(const xl_state *s) { return s->len; }
uint64_t xl_state_tokens_fed(const xl_state *s) { return s->fed; }
xl_kv_dtype xl_state_kv_dtype(const xl_state *s) { return s->dtype; }
size_t xl_state_bytes(const xl_state *s) {
  return sizeof *s + (size_t)s->model->cfg.n_layer * s->layer_bytes;
}

/* Copies every position src holds into dst (same model and dtype, dst->mem_len >= src->len):
 * absolute position p lives in slot p % mem_len of either ring, runs split where a ring wraps. */
static void copy_positions(xl_state *dst, const xl_state *src) {
  const xl_model *m = src->model;
  uint64_t first = src->fed - (uint64_t)src->len; /* absolute position of the oldest */
  for (int i = 0; i < src->len;) {
    uint64_t p = first + (uint64_t)i;
    int ss = (int)(p % (uint64_t)src->mem_len), ds = (int)(p % (uint64_t)dst->mem_len);
    int n = src->len - i;
    if (n > src->mem_len - ss) n = src->mem_len - ss;
    if (n > dst->mem_len - ds) n = dst->mem_len - ds;
    for (int l = 0; l < m->cfg.n_layer; l++) {
      xl_kv_layer dl = xl_state_layer(dst, l), sl = xl_state_layer(src, l);
      xl_kv_copy(m, &dl, ds, &sl, ss, n);
    }
    i += n;
  }
  dst->len = src->len;
  dst->fed = src->fed;
  dst->head = (int)((src->fed - (uint64_t)src->len) % (uint64_t)dst->mem_len);
}

xl_code xl_state_pack(const xl_state *src, xl_state **out, xl_error *err) {
  *out = NULL;
  if (src->len == 0) return xl_fail(err, XL_STATE, "an empty state has nothing to pack");
  xl_code rc = xl_state_alloc(src->model, src->dtype, src->len, out, err);
  if (rc) return rc;
  copy_positions(*out, src);
  return XL_OK;
}

xl_code xl_state_unpack(xl_state *dst, const xl_state *packed, xl_error *err) {
  if (dst->model != packed->model || dst->dtype != packed->dtype)
    return xl_fail(err, XL_ARG, "the packed state is of another model or memory dtype");
  if (dst->mem_len != dst->model->cfg.mem_len || packed->len > dst->mem_len)
    return xl_fail(err, XL_ARG, "the state has room for %d positions, the packed one holds %d",
                   dst->mem_len, packed->len);
  copy_positions(dst, packed);
  return XL_OK;
}
