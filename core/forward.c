/*
 * forward.c: the Transformer-XL forward pass over a batch of items (each: one session's state
 * and its new tokens). All items' rows go through each weight matrix as one GEMM; attention
 * runs per item over its own memory; then each layer's new keys/values enter the items' rings
 * (cat(mem, h)[-mem_len:] on the layer input). Runs on the thread that owns the workspace and,
 * for the duration of the call, every state in the batch.
 *
 *   x = embed(tokens) * sqrt(d_model)                                   [N, d_model]
 *   per layer:  (pre-LN: xn = LN(x))  qkv = xn W_qkv^T                   [N, 3*H*Dh]
 *               av = RelAttn(q, [mem_k; k], [mem_v; v])                  [N, H*Dh]
 *               x = post ? LN(x + av W_o^T) : x + av W_o^T
 *               x = post ? LN(x + FF(x))    : x + FF(LN(x))             [N, d_model]
 *   out = adaptive log-softmax(x)  (no final LayerNorm, as the reference)
 */
#include <stdlib.h>
#include <string.h>

#include "adaptive.h"
#include "attention.h"
#include "pool.h"

enum { WS_X, WS_XN, WS_QKV, WS_AV, WS_FF, WS_ATTN, WS_POSK, WS_POSB, WS_POSR, WS_OUT, WS_ROWS,
       WS_DECPOS, WS_THREAD };

#define XL_MAX_BATCH_ROWS (1 << 22)

static xl_code validate(const xl_model *m, const xl_feed *items, int n_items, size_t *rows,
                        xl_error *err) {
  if (n_items < 1 || !items) return xl_fail(err, XL_ARG, "forward: no items");
  size_t total = 0;
  for (int i = 0; i < n_items; i++) {
    const xl_feed *f = &items[i];
    if (!f->state || f->state->model != m)
      return xl_fail(err, XL_ARG, "forward: item %d has no state of this model", i);
    if (f->state->dtype != m->kv_dtype)
      return xl_fail(err, XL_ARG, "forward: item %d has a %s memory, the model %s", i,
                     xl_kv_dtype_name(f->state->dtype), xl_kv_dtype_name(m->kv_dtype));
    if (f->n_tokens < 1 || !f->tokens)
      return xl_fail(err, XL_ARG, "forward: item %d has no tokens", i);
    if (f->target_logprobs && !f->targets)
      return xl_fail(err, XL_ARG, "forward: item %d wants target log-probs without targets", i);
    for (int t = 0; t < f->n_tokens; t++) {
      if (f->tokens[t] < 0 || f->tokens[t] >= m->cfg.vocab_size)
        return xl_fail(err, XL_TOKEN, "token id %d at position %d is outside the vocabulary [0, %d)",
                       f->tokens[t], t, m->cfg.vocab_size);
      if (f->target_logprobs && (f->targets[t] < -1 || f->targets[t] >= m->cfg.vocab_size))
        return xl_fail(err, XL_TOKEN, "target id %d at position %d is outside the vocabulary [0, %d)",
                       f->targets[t], t, m->cfg.vocab_size);
    }
    for (int j = 0; j < i; j++)
      if (items[j].state == f->state)
        return xl_fail(err, XL_ARG, "forward: a state appears twice in one batch (items %d, %d)",
                       j, i);
    total += (size_t)f->n_tokens;
    if (total > XL_MAX_BATCH_ROWS)
      return xl_fail(err, XL_ARG, "forward: batch of more than %d positions", XL_MAX_BATCH_ROWS);
  }
  *rows = total;
  return XL_OK;
}

/* Writes the item's new keys/values of layer l into its ring: logical position p of
 * cat(mem, new) goes to slot (head + p) % mem_len; only the last mem_len survive. A narrow
 * memory (bf16, int8) gets them rounded (kv_store.c). */
static void ring_append(xl_state *s, int l, const float *qkv, int n) {
  int M = s->mem_len, hd = s->model->hd;
  if (M == 0) return;
  xl_kv_layer L = xl_state_layer(s, l);
  int r0 = n > M ? n - M : 0;
  for (int r = r0; r < n; r++) {
    int slot = (int)(((int64_t)s->head + s->len + r) % M);
    const float *row = qkv + (size_t)r * 3 * hd;
    xl_kv_store(s->model, &L, slot, row + hd, row + 2 * hd);
  }
}

/* ring_append of a decode step's one position, heads [h0, h1) only: the thread that has just
 * attended those heads over the memory writes their key column and value row while the
 * lines around them are still in its cache (a key column touches one line per key row). */
static void ring_append_heads(xl_state *s, int l, const float *row, int h0, int h1) {
  int M = s->mem_len, hd = s->model->hd;
  if (M == 0) return;
  xl_kv_layer L = xl_state_layer(s, l);
  int slot = (int)(((int64_t)s->head + s->len) % M);
  xl_kv_store_heads(s->model, &L, slot, row + hd, row + 2 * hd, h0, h1);
}

static void ring_commit(xl_state *s, int n) {
  int M = s->mem_len;
  s->fed += (uint64_t)n;
  if (M == 0) return;
  int64_t total = (int64_t)s->len + n;
  if (total > M) {
    s->head = (int)(((int64_t)s->head + total - M) % M);
    s->len = M;
  } else {
    s->len = (int)total;
  }
}

static void relu_inplace(float *x, size_t n) { xl_kern()->relu(x, n); }

/* One call's sizes and buffers (all in the workspace). */
typedef struct {
  size_t rows;            /* N: positions of all items */
  int out_rows;           /* rows that need log-probs */
  int pos_rows;           /* distance rows the widest item needs */
  int ext_pos;            /* 1: more than the model caches (long chunk, no same_length) */
  int n_dec, dec_pos;     /* decode steps (one token) and the most distance rows one needs */
  float *x;               /* [N, d_model] hidden states */
  float *xn;              /* [N, d_model] LayerNorm output / sublayer output */
  float *qkv;             /* [N, 3*H*Dh] */
  float *av;              /* [N, H*Dh] attention vectors */
  float *ff;              /* [N, d_inner] */
  float *out_scratch;     /* adaptive softmax scratch, then [out_rows] target log-probs */
  float *pos_k, *pos_b, *pos_r; /* ext_pos only: [pos_rows, H*Dh], [H, pos_rows], [pos_rows, d_model] */
  float *dec_p;           /* [n_dec, H, dec_pos] position products of the decode steps */
  float **full;           /* [out_rows] where each output row's distribution goes (or NULL) */
  const float **dec_q;    /* [n_dec] the decode steps' query rows */
  int32_t *tg;            /* [out_rows] target ids (-1: none) */
  int *dec_rows;          /* [n_dec] the distance rows each decode step reads (<= dec_pos) */
  int x_outputs;          /* 1: x holds only the output rows, in outputs()' order (the last
                             layer ran its output projection and feed-forward on them alone) */
  float *thread_sc;       /* [threads, thread_floats]: each thread's qu [d_head] */
  size_t thread_floats;
  xl_attn_scratch sc;
  struct xl_pool *pool;   /* the workspace's threads (NULL: the caller alone) */
} fwd_plan;

static xl_code plan(const xl_model *m, xl_workspace *ws, const xl_feed *items, int n_items,
                    size_t N, fwd_plan *p, xl_error *err) {
  const xl_config *c = &m->cfg;
  const int dm = c->d_model, hd = m->hd;
  memset(p, 0, sizeof *p);
  p->rows = N;
  int max_klen = 0;
  for (int i = 0; i < n_items; i++) {
    const xl_feed *f = &items[i];
    int a = f->state->len, klen = a + f->n_tokens;
    if (klen > max_klen) max_klen = klen;
    p->out_rows += (f->target_logprobs || f->row_logprobs) ? f->n_tokens : (f->last_logprobs ? 1 : 0);
    if (f->n_tokens == 1) {
      int rows_i = xl_pos_rows_needed(m, a + 1);
      p->n_dec++;
      if (rows_i > p->dec_pos) p->dec_pos = rows_i;
    }
  }
  p->pos_rows = xl_pos_rows_needed(m, max_klen);
  p->ext_pos = p->pos_rows > m->n_pos_cached;
  float *attn = xl_ws_get(ws, WS_ATTN, xl_attn_scratch_floats(m, max_klen, p->pos_rows));
  p->x = xl_ws_get(ws, WS_X, N * dm);
  p->xn = xl_ws_get(ws, WS_XN, N * (size_t)(dm > c->d_embed ? dm : c->d_embed)); /* + embed scratch */
  p->qkv = xl_ws_get(ws, WS_QKV, N * 3 * hd);
  p->av = xl_ws_get(ws, WS_AV, N * hd);
  p->ff = xl_ws_get(ws, WS_FF, N * c->d_inner);
  p->out_scratch = xl_ws_get(ws, WS_OUT, xl_output_scratch_floats(m) + (size_t)p->out_rows);
  if (p->ext_pos) {
    p->pos_k = xl_ws_get(ws, WS_POSK, (size_t)p->pos_rows * hd);
    p->pos_b = xl_ws_get(ws, WS_POSB, (size_t)p->pos_rows * c->n_head);
    p->pos_r = xl_ws_get(ws, WS_POSR, (size_t)p->pos_rows * dm);
  }
  /* WS_ROWS, 8-byte aligned from the start: full[out_rows] and dec_q[n_dec] pointers, then
   * tg[out_rows] and dec_rows[n_dec] (sized in floats: 2 per pointer, 1 per int). */
  p->full = (float **)(void *)xl_ws_get(ws, WS_ROWS, 3 * (size_t)p->out_rows + 3 * (size_t)p->n_dec + 1);
  if (p->full) {
    p->dec_q = (const float **)(p->full + p->out_rows);
    p->tg = (int32_t *)(void *)(p->dec_q + p->n_dec);
    p->dec_rows = (int *)(p->tg + p->out_rows);
  }
  if (p->n_dec) p->dec_p = xl_ws_get(ws, WS_DECPOS, (size_t)p->n_dec * c->n_head * p->dec_pos);
  p->pool = ws->pool;
  const int nt = xl_pool_threads(ws->pool);
  p->thread_floats = ((size_t)c->d_head + 15) & ~(size_t)15;
  if (p->n_dec && nt > 1) p->thread_sc = xl_ws_get(ws, WS_THREAD, (size_t)nt * p->thread_floats);
  if (!p->x || !p->xn || !p->qkv || !p->av || !p->ff || !attn || !p->out_scratch || !p->full ||
      (p->n_dec && !p->dec_p) || (p->ext_pos && (!p->pos_k || !p->pos_b || !p->pos_r)) ||
      (p->n_dec && nt > 1 && !p->thread_sc))
    return xl_fail(err, XL_NOMEM, "forward: out of memory for %zu positions", N);
  xl_attn_scratch_bind(m, attn, max_klen, p->pos_rows, &p->sc);
  return XL_OK;
}

/* The decode steps' attention of one layer, one task per run of hp heads: task t computes
 * heads [t hp, (t + 1) hp) of every decode step (their position products, scores and output
 * columns), with the qu scratch of the thread running it, then writes those heads of the
 * step's new key and value into its memory (no other head reads them); heads share no sum,
 * so the numbers are those of one thread over all heads. */
typedef struct {
  const xl_model *m;
  int l;
  xl_feed *items;
  int n_items;
  fwd_plan *p;
  int hp; /* heads per task */
} decode_job;

static void decode_heads(void *ctx, int t, int thread) {
  const decode_job *j = ctx;
  const xl_model *m = j->m;
  fwd_plan *p = j->p;
  const int H = m->cfg.n_head, hd = m->hd, h = t * j->hp, h1 = h + j->hp < H ? h + j->hp : H;
  xl_attn_scratch sc = p->sc;
  if (p->thread_sc) sc.qu = p->thread_sc + (size_t)thread * p->thread_floats;
  xl_decode_positions(m, j->l, p->dec_q, p->dec_rows, p->n_dec, p->dec_pos, p->dec_p, h, h1);
  size_t row = 0;
  for (int i = 0, d = 0; i < j->n_items; row += (size_t)j->items[i++].n_tokens) {
    if (j->items[i].n_tokens != 1) continue;
    xl_attn_item it = {j->items[i].state, 1, p->qkv + row * 3 * hd, p->av + row * hd,
                       p->dec_p + (size_t)d++ * H * p->dec_pos, p->dec_pos};
    xl_attend_heads(m, j->l, &it, &sc, h, h1);
    ring_append_heads(j->items[i].state, j->l, it.qkv, h, h1);
  }
}

/* The rows that need log-probs (an item's every row for targets or row distributions, else its
 * last row for last_logprobs, else none), moved to the front of x [N, d_model] and av
 * [N, H*Dh] in that order (outputs()' order); p->rows becomes their count. Rows only move
 * towards the front, in order, so no row is overwritten before it is moved. */
static void keep_output_rows(const xl_model *m, const xl_feed *items, int n_items, fwd_plan *p) {
  const size_t dm = (size_t)m->cfg.d_model, hd = (size_t)m->hd;
  size_t row = 0, o = 0;
  for (int i = 0; i < n_items; row += (size_t)items[i++].n_tokens) {
    const xl_feed *f = &items[i];
    size_t first = row, n = 0;
    if (f->target_logprobs || f->row_logprobs) n = (size_t)f->n_tokens;
    else if (f->last_logprobs) first = row + (size_t)f->n_tokens - 1, n = 1;
    if (n && first != o) {
      memmove(p->x + o * dm, p->x + first * dm, n * dm * sizeof(float));
      memmove(p->av + o * hd, p->av + first * hd, n * hd * sizeof(float));
    }
    o += n;
  }
  p->rows = o;
  p->x_outputs = 1;
}

/* x += RelAttn(x) (pre-LN: on LN(x); post-LN: x = LN(x + ...)); then the layer's new keys
 * and values are computed into qkv for the rings. With outputs_only (the last layer, when
 * some rows need no log-probs): the attention of every row as usual (its keys and values go
 * to the memories), then the output projection on the rows that need log-probs only
 * (keep_output_rows): nothing after the last layer reads the others. Every product is
 * row-independent (batch invariance), so the kept rows get the same numbers. */
static void attention_sublayer(const xl_model *m, int l, xl_feed *items, int n_items,
                               fwd_plan *p, int outputs_only) {
  const xl_config *c = &m->cfg;
  const xl_layer *L = &m->layers[l];
  const int dm = c->d_model, hd = m->hd;
  int rows = (int)p->rows;
  const float *src = p->x;
  if (c->pre_lnorm) {
    xl_layer_norm(p->x, rows, dm, L->attn_ln_g, L->attn_ln_b, c->layer_norm_epsilon, p->xn);
    src = p->xn;
  }
  xl_par_linear_w(p->pool, src, rows, dm, dm, &L->qkv_w, NULL, 3 * hd, p->qkv, 3 * hd); /* [N, 3*H*Dh] */

  xl_pos_table pt = {L->pos_k, L->pos_bias, m->n_pos_cached};
  if (p->ext_pos) {
    xl_positional_project(m, l, p->pos_rows, p->pos_k, p->pos_b, p->pos_r);
    pt = (xl_pos_table){p->pos_k, p->pos_b, p->pos_rows};
  }
  /* Decode steps read the model's cached table once, together, even when a long chunk in
   * the batch needs its own (ext_pos): the cache always covers a decode step (at most
   * mem_len + 1 keys, mem_len with same_length, clamp_len + 1 with clamping; the cache holds
   * mem_len + XL_POS_CACHE_EXTRA, mem_len, clamp_len + 1), and a step takes the same path
   * alone as in any batch (batch-invariance). */
  int shared_pos = p->n_dec > 0;
  if (shared_pos) {
    size_t row = 0;
    for (int i = 0, d = 0; i < n_items; row += (size_t)items[i++].n_tokens)
      if (items[i].n_tokens == 1) {
        p->dec_q[d] = p->qkv + row * 3 * hd;
        p->dec_rows[d++] = xl_pos_rows_needed(m, items[i].state->len + 1);
      }
    /* one task a thread, each a run of H / nt heads: a run reads its strip of every value
     * row (its heads' columns), and wider strips stream better (at the wt103 shape on two
     * threads, two tasks of 8 heads decode faster than four of 4 or eight of 2) */
    const int nt = xl_pool_threads(p->pool), H = c->n_head;
    const int hp = (H + nt - 1) / nt;
    decode_job dj = {m, l, items, n_items, p, hp};
    xl_pool_run(p->pool, decode_heads, &dj, (H + hp - 1) / hp); /* every decode step */
  }
  size_t row = 0; /* the other items (blocks of queries) on this thread */
  for (int i = 0; i < n_items; row += (size_t)items[i++].n_tokens) {
    if (shared_pos && items[i].n_tokens == 1) continue;
    xl_attn_item it = {items[i].state, items[i].n_tokens, p->qkv + row * 3 * hd,
                       p->av + row * hd, NULL, p->dec_pos};
    xl_attend(m, l, &it, &pt, &p->sc);
  }
  if (outputs_only) {
    keep_output_rows(m, items, n_items, p);
    if (!(rows = (int)p->rows)) return;
  }
  xl_par_linear_w(p->pool, p->av, rows, hd, hd, &L->o_w, NULL, dm, p->xn, dm); /* attn_out [N, d_model] */
  for (size_t k = 0; k < p->rows * dm; k++) p->x[k] += p->xn[k];
  if (!c->pre_lnorm)
    xl_layer_norm(p->x, rows, dm, L->attn_ln_g, L->attn_ln_b, c->layer_norm_epsilon, p->x);
}

/* x += W2 relu(W1 x + b1) + b2 (pre-LN on LN(x); post-LN: x = LN(x + ...)). */
static void feed_forward_sublayer(const xl_model *m, int l, fwd_plan *p) {
  const xl_config *c = &m->cfg;
  const xl_layer *L = &m->layers[l];
  const int dm = c->d_model, rows = (int)p->rows;
  if (!rows) return; /* the last layer, no row needing log-probs */
  const float *src = p->x;
  if (c->pre_lnorm) {
    xl_layer_norm(p->x, rows, dm, L->ff_ln_g, L->ff_ln_b, c->layer_norm_epsilon, p->xn);
    src = p->xn;
  }
  xl_par_linear_w(p->pool, src, rows, dm, dm, &L->ff1_w, L->ff1_b, c->d_inner, p->ff,
                  c->d_inner); /* [N, d_inner] */
  relu_inplace(p->ff, p->rows * c->d_inner);
  xl_par_linear_w(p->pool, p->ff, rows, c->d_inner, c->d_inner, &L->ff2_w, L->ff2_b, dm, p->xn,
                  dm); /* [N, d_model] */
  for (size_t k = 0; k < p->rows * dm; k++) p->x[k] += p->xn[k];
  if (!c->pre_lnorm)
    xl_layer_norm(p->x, rows, dm, L->ff_ln_g, L->ff_ln_b, c->layer_norm_epsilon, p->x);
}

/* Log-probs of the rows that need them: an item's every row (targets or row distributions), or
 * its last row (next-token distribution). Rows are gathered contiguously, scored, and scattered
 * back. */
static void outputs(const xl_model *m, xl_feed *items, int n_items, fwd_plan *p) {
  const int dm = m->cfg.d_model;
  const size_t V = (size_t)m->cfg.vocab_size;
  float *tlp = p->out_scratch + xl_output_scratch_floats(m);
  /* [out_rows, d_model]: x itself when the last layer kept only these rows, else gathered
   * into xn (free now) */
  float *gathered = p->x_outputs ? p->x : p->xn;
  int o = 0;
  size_t row = 0;
  for (int i = 0; i < n_items; row += (size_t)items[i++].n_tokens) {
    const xl_feed *f = &items[i];
    if (f->target_logprobs || f->row_logprobs) {
      if (!p->x_outputs)
        memcpy(gathered + (size_t)o * dm, p->x + row * dm,
               (size_t)f->n_tokens * dm * sizeof(float));
      for (int t = 0; t < f->n_tokens; t++) {
        p->tg[o + t] = f->target_logprobs ? f->targets[t] : -1;
        p->full[o + t] = f->row_logprobs ? f->row_logprobs + (size_t)t * V : NULL;
      }
      /* with row distributions the last one is copied into last_logprobs below */
      if (f->last_logprobs && !f->row_logprobs) p->full[o + f->n_tokens - 1] = f->last_logprobs;
      o += f->n_tokens;
    } else if (f->last_logprobs) {
      if (!p->x_outputs)
        memcpy(gathered + (size_t)o * dm, p->x + (row + (size_t)f->n_tokens - 1) * dm,
               (size_t)dm * sizeof(float));
      p->tg[o] = -1;
      p->full[o++] = f->last_logprobs;
    }
  }
  xl_output_logprobs(m, gathered, p->out_rows, p->tg, tlp, p->full, p->out_scratch, p->pool);
  o = 0;
  for (int i = 0; i < n_items; i++) {
    const xl_feed *f = &items[i];
    if (f->target_logprobs || f->row_logprobs) {
      if (f->target_logprobs)
        for (int t = 0; t < f->n_tokens; t++)
          if (f->targets[t] >= 0) f->target_logprobs[t] = tlp[o + t];
      if (f->row_logprobs && f->last_logprobs)
        memcpy(f->last_logprobs, f->row_logprobs + (size_t)(f->n_tokens - 1) * V, V * sizeof(float));
      o += f->n_tokens;
    } else if (f->last_logprobs) {
      o++;
    }
  }
}

xl_code xl_forward(const xl_model *m, xl_workspace *ws, xl_feed *items, int n_items,
                   xl_error *err) {
  xl_error_clear(err);
  size_t N = 0;
  xl_code rc = validate(m, items, n_items, &N, err);
  if (rc) return rc;
  if (ws->model != m) return xl_fail(err, XL_ARG, "forward: workspace of another model");
  fwd_plan p;
  if ((rc = plan(m, ws, items, n_items, N, &p, err))) return rc;
  const int dm = m->cfg.d_model, hd = m->hd;

  size_t row = 0; /* embedding: every item's tokens, rows in item order */
  for (int i = 0; i < n_items; row += (size_t)items[i++].n_tokens)
    xl_embed(m, items[i].tokens, items[i].n_tokens, p.x + row * dm, p.xn);

  const int last = m->cfg.n_layer - 1;
  for (int l = 0; l < m->cfg.n_layer; l++) {
    attention_sublayer(m, l, items, n_items, &p, l == last && (size_t)p.out_rows < p.rows);
    feed_forward_sublayer(m, l, &p);
    /* This layer's new keys/values join each memory (no later layer of this call reads it);
     * the decode steps' joined theirs in their attention tasks. */
    row = 0;
    for (int i = 0; i < n_items; row += (size_t)items[i++].n_tokens)
      if (!(p.n_dec && items[i].n_tokens == 1))
        ring_append(items[i].state, l, p.qkv + row * 3 * hd, items[i].n_tokens);
  }
  for (int i = 0; i < n_items; i++) ring_commit(items[i].state, items[i].n_tokens);
  if (p.out_rows) outputs(m, items, n_items, &p);
  return XL_OK;
}
