/*
 * attention.h: the relative attention kernel's interface (internal to core/; called by the
 * forward pass on the thread owning the state and workspace).
 */
#ifndef XL_ATTENTION_H
#define XL_ATTENTION_H

#include "internal.h"

typedef struct {
  const xl_state *state; /* memory: the ring of this layer, state->len positions */
  int n;                 /* new positions (queries) */
  const float *qkv;      /* [n, 3*H*Dh] this item's rows of the qkv buffer */
  float *out;            /* [n, H*Dh] attention vectors (heads concatenated) */
  const float *pos_q;    /* decode step (n == 1): [H, pos_stride] q_h . pos_k[d]_h over the
                              model's cached table, from xl_decode_positions (the single-query
                              path); NULL: the item takes a block path */
  int pos_stride;
} xl_attn_item;

typedef struct {
  const float *pos_k;    /* [rows, H*Dh] W_r R_d */
  const float *pos_bias; /* [H, rows]   v . W_r R_d */
  int rows;
} xl_pos_table;

typedef struct {
  float *scores;  /* rows of max_width floats (as many as xl_attn_scratch_floats sized) */
  float *pos;     /* [QUERY_BLOCK, max_pos] */
  float *q, *qu;  /* [QUERY_BLOCK, d_head] each */
  float *kw, *vw; /* narrow memory, block path: one head's keys [d_head, mem_len] and
                     values [mem_len, d_head] widened to F32 */
  int width;      /* max_width: the row stride of scores: [H, width] for a decode step,
                     [queries, heads of a run, width] for a small block */
  int pos_width;  /* max_pos: the small-block path's row stride of pos [queries, pos_width]
                     (one head) */
} xl_attn_scratch;

/* Position products of several decode steps at once, over the model's cached table:
 * out[(i * H + h) * stride + d] = q[i]_h . pos_k[d]_h for d < n_pos[i] (the distance rows
 * step i reads, <= stride), reading each head's table rows once for all n queries (entries
 * past n_pos[i], up to another step's, may be written too: never read). Each product is
 * computed the same way whatever n and n_pos[] are (batch-invariant). */
void xl_decode_positions(const xl_model *m, int layer, const float *const *q, const int *n_pos,
                         int n, int stride, float *out, int h0, int h1);
/* (heads h0..h1 of every step: the products of those heads only) */

/* A decode step (it->n == 1, it->pos_q given), heads [h0, h1) only: writes those heads' rows
 * of sc->scores ([H, sc->width]) and their columns of it->out, reads sc->qu as its own
 * scratch. Threads running disjoint head ranges of the same items, each with its own
 * qu, share scores safely; any split gives the numbers of one call over all heads. */
void xl_attend_heads(const xl_model *m, int layer, const xl_attn_item *it, xl_attn_scratch *sc,
                     int h0, int h1);

void xl_attend(const xl_model *m, int layer, const xl_attn_item *it, const xl_pos_table *pt,
               xl_attn_scratch *sc);
size_t xl_attn_scratch_floats(const xl_model *m, int max_width, int max_pos);
void xl_attn_scratch_bind(const xl_model *m, float *buf, int max_width, int max_pos,
                          xl_attn_scratch *sc);

/* How many queries of a short block continuing a memory share each pass over its rows: 4 (the
 * default), or 1 (each query alone: the reference the tests compare the grouping with, bit for
 * bit). Set before any forward pass runs; not for concurrent use. */
void xl_attn_set_query_group(int n);

#endif
