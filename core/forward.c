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

enum { WS_X, WS_XN, WS_QKV, WS_AV, WS_FF, WS_ATTN, WS_POSK, WS_POSB, WS_POSR, WS_OUT, WS_ROWS,
       WS_DECPOS };

#define XL_MAX_BATCH_ROWS (1 << 22)

static xl_code validate(const xl_model *m, const xl_feed *items, int n_items, size_t *rows,
                        xl_error *err) {
  if (n_items < 1 || !items) return xl_fail(err, XL_ARG, "forward: no items");
  size_t total = 0;
  for (int i = 0; i < n_items; i++) {
    const xl_feed *f = &items[i];
    if (!f->state || f->state->model != m)
      return xl_fail(err, XL_ARG, "forward: item %d has no state of this model", i);
    if (f->n_tokens < 1 || !f->tokens)
      return xl_fail(err, XL_ARG, "forward: item %d has no tokens", i);
    if (f->target_logprobs && !f->targets)
      return xl_fail(err, XL_ARG, "forward: item %d wants target log-probs without targets", i);
    for (int t = 0; t < f->n_tokens; t++) {
      if (f->tokens[t] < 0 || f->tokens[t] >= m->cfg.vocab_size)
        return xl_fail(err, XL_TOKEN, "token id %d at position %d is outside the vocabulary [0, %d)",
                       f->tokens[t], t, m->cfg.vocab_size);
      if (f->target_logprobs && (f->targets[t] < 0 || f->targets[t] >= m->cfg.vocab_size))
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
 * cat(mem, new) goes to slot (head + p) % mem_len; only the last mem_len survive. */
static void ring_append(xl_state *s, int l, const float *qkv, int n) {
  int M = s->mem_len, hd = s->model->hd;
  if (M == 0) return;
  float *K = xl_state_keys(s, l), *V = xl_state_values(s, l);
  int r0 = n > M ? n - M : 0;
  for (int r = r0; r < n; r++) {
    int slot = (int)(((int64_t)s->head + s->len + r) % M);
    const float *row = qkv + (size_t)r * 3 * hd;
    for (int c = 0; c < hd; c++) K[(size_t)c * M + slot] = row[hd + c]; /* keys transposed */
    memcpy(V + (size_t)slot * hd, row + 2 * hd, (size_t)hd * sizeof(float));
  }
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

static void relu_inplace(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

xl_code xl_forward(const xl_model *m, xl_workspace *ws, xl_feed *items, int n_items,
                   xl_error *err) {
  xl_error_clear(err);
  size_t N = 0;
  xl_code rc = validate(m, items, n_items, &N, err);
  if (rc) return rc;
  if (ws->model != m) return xl_fail(err, XL_ARG, "forward: workspace of another model");
  const xl_config *c = &m->cfg;
  const int dm = c->d_model, hd = m->hd, rows = (int)N;
  const float eps = c->layer_norm_epsilon;

  /* Sizes: widest key range and most distance rows any item needs. */
  int max_klen = 0, out_rows = 0;
  for (int i = 0; i < n_items; i++) {
    int klen = items[i].state->len + items[i].n_tokens;
    if (klen > max_klen) max_klen = klen;
    out_rows += items[i].target_logprobs ? items[i].n_tokens : (items[i].last_logprobs ? 1 : 0);
  }
  int pos_rows = xl_pos_rows_needed(m, max_klen);
  /* Decode steps (one token) share one pass over the position table per layer. */
  int n_dec = 0, dec_pos = 0;
  for (int i = 0; i < n_items; i++)
    if (items[i].n_tokens == 1) {
      int a = items[i].state->len, lo = c->same_length && a - c->mem_len + 1 > 0 ? a - c->mem_len + 1 : 0;
      int rows_i = xl_pos_index(m, a - lo) + 1;
      n_dec++;
      if (rows_i > dec_pos) dec_pos = rows_i;
    }
  int ext_pos = pos_rows > m->n_pos_cached; /* long chunk without same_length */
  size_t attn_floats = xl_attn_scratch_floats(m, max_klen, pos_rows);
  float *x = xl_ws_get(ws, WS_X, N * dm), *xn = xl_ws_get(ws, WS_XN, N * dm),
        *qkv = xl_ws_get(ws, WS_QKV, N * 3 * hd), *av = xl_ws_get(ws, WS_AV, N * hd),
        *ff = xl_ws_get(ws, WS_FF, N * c->d_inner), *attn = xl_ws_get(ws, WS_ATTN, attn_floats),
        *out_scratch = xl_ws_get(ws, WS_OUT, xl_output_scratch_floats(m) + 2 * (size_t)out_rows);
  float *pos_k = NULL, *pos_b = NULL, *pos_r = NULL;
  if (ext_pos) {
    pos_k = xl_ws_get(ws, WS_POSK, (size_t)pos_rows * hd);
    pos_b = xl_ws_get(ws, WS_POSB, (size_t)pos_rows * c->n_head);
    pos_r = xl_ws_get(ws, WS_POSR, (size_t)pos_rows * dm);
  }
  /* WS_ROWS, 8-byte aligned from the start: full[out_rows] and dec_q[n_dec] pointers, then
   * tg[out_rows] target ids (sized in floats: 2 per pointer, 1 per id). */
  float **full = (float **)(void *)xl_ws_get(ws, WS_ROWS, 3 * (size_t)out_rows + 2 * (size_t)n_dec + 1);
  const float **dec_q = (const float **)(full + out_rows);
  int32_t *tg = (int32_t *)(void *)(dec_q + n_dec);
  float *dec_p = n_dec ? xl_ws_get(ws, WS_DECPOS, (size_t)n_dec * c->n_head * dec_pos) : NULL;
  if (!x || !xn || !qkv || !av || !ff || !attn || !out_scratch || !full || (n_dec && !dec_p) ||
      (ext_pos && (!pos_k || !pos_b || !pos_r)))
    return xl_fail(err, XL_NOMEM, "forward: out of memory for %zu positions", N);
  xl_attn_scratch sc;
  xl_attn_scratch_bind(m, attn, max_klen, pos_rows, &sc);

  /* Embedding: every item's tokens, rows in item order. */
  size_t row = 0;
  for (int i = 0; i < n_items; i++) {
    xl_embed(m, items[i].tokens, items[i].n_tokens, x + row * dm);
    row += (size_t)items[i].n_tokens;
  }

  for (int l = 0; l < c->n_layer; l++) {
    const xl_layer *L = &m->layers[l];
    const float *src = x;
    if (c->pre_lnorm) {
      xl_layer_norm(x, rows, dm, L->attn_ln_g, L->attn_ln_b, eps, xn);
      src = xn;
    }
    xl_linear(src, rows, dm, L->qkv_w, NULL, 3 * hd, qkv, 3 * hd); /* [N, 3*H*Dh] */

    xl_pos_table pt = {L->pos_k, L->pos_bias, m->n_pos_cached};
    if (ext_pos) {
      xl_positional_project(m, l, pos_rows, pos_k, pos_b, pos_r);
      pt = (xl_pos_table){pos_k, pos_b, pos_rows};
    }
    int use_dec = n_dec && !ext_pos;
    if (use_dec) {
      int d = 0;
      row = 0;
      for (int i = 0; i < n_items; i++) {
        if (items[i].n_tokens == 1) dec_q[d++] = qkv + row * 3 * hd;
        row += (size_t)items[i].n_tokens;
      }
      xl_decode_positions(m, l, dec_q, n_dec, dec_pos, dec_p);
    }
    row = 0;
    for (int i = 0, d = 0; i < n_items; i++) {
      xl_attn_item it = {items[i].state, items[i].n_tokens, qkv + row * 3 * hd, av + row * hd,
                         NULL, dec_pos};
      if (use_dec && items[i].n_tokens == 1) it.pos_q = dec_p + (size_t)d++ * c->n_head * dec_pos;
      xl_attend(m, l, &it, &pt, &sc);
      row += (size_t)items[i].n_tokens;
    }
    xl_linear(av, rows, hd, L->o_w, NULL, dm, xn, dm); /* attn_out [N, d_model] */
    for (size_t k = 0; k < N * dm; k++) x[k] += xn[k];
    if (!c->pre_lnorm) xl_layer_norm(x, rows, dm, L->attn_ln_g, L->attn_ln_b, eps, x);

    /* Position-wise feed-forward */
    src = x;
    if (c->pre_lnorm) {
      xl_layer_norm(x, rows, dm, L->ff_ln_g, L->ff_ln_b, eps, xn);
      src = xn;
    }
    xl_linear(src, rows, dm, L->ff1_w, L->ff1_b, c->d_inner, ff, c->d_inner); /* [N, d_inner] */
    relu_inplace(ff, N * c->d_inner);
    xl_linear(ff, rows, c->d_inner, L->ff2_w, L->ff2_b, dm, xn, dm);          /* [N, d_model] */
    for (size_t k = 0; k < N * dm; k++) x[k] += xn[k];
    if (!c->pre_lnorm) xl_layer_norm(x, rows, dm, L->ff_ln_g, L->ff_ln_b, eps, x);

    /* This layer's new keys/values join each memory (read by no later layer of this call). */
    row = 0;
    for (int i = 0; i < n_items; i++) {
      ring_append(items[i].state, l, qkv + row * 3 * hd, items[i].n_tokens);
      row += (size_t)items[i].n_tokens;
    }
  }
  for (int i = 0; i < n_items; i++) ring_commit(items[i].state, items[i].n_tokens);

  /* Outputs: gather the rows that need log-probs (contiguous per item). */
  if (out_rows == 0) return XL_OK;
  float *tlp = out_scratch + xl_output_scratch_floats(m);
  float *gathered = xn; /* free now: [out_rows, d_model] */
  int o = 0;
  row = 0;
  for (int i = 0; i < n_items; i++) {
    const xl_feed *f = &items[i];
    if (f->target_logprobs) {
      memcpy(gathered + (size_t)o * dm, x + row * dm, (size_t)f->n_tokens * dm * sizeof(float));
      for (int t = 0; t < f->n_tokens; t++) {
        tg[o + t] = f->targets[t];
        full[o + t] = NULL;
      }
      if (f->last_logprobs) full[o + f->n_tokens - 1] = f->last_logprobs;
      o += f->n_tokens;
    } else if (f->last_logprobs) {
      memcpy(gathered + (size_t)o * dm, x + (row + (size_t)f->n_tokens - 1) * dm,
             (size_t)dm * sizeof(float));
      tg[o] = -1;
      full[o] = f->last_logprobs;
      o++;
    }
    row += (size_t)f->n_tokens;
  }
  xl_output_logprobs(m, gathered, out_rows, tg, tlp, full, out_scratch);
  o = 0;
  for (int i = 0; i < n_items; i++) {
    const xl_feed *f = &items[i];
    if (f->target_logprobs) {
      memcpy(f->target_logprobs, tlp + o, (size_t)f->n_tokens * sizeof(float));
      o += f->n_tokens;
    } else if (f->last_logprobs) {
      o++;
    }
  }
  return XL_OK;
}
