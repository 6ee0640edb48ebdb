/*
 * attention.c: relative multi-head attention of one item (one session) for one layer, over
 * its memory (the state's ring, read in place) followed by the item's new positions (read in
 * place from the qkv buffer). Called by the forward pass on the thread that owns the state
 * and the workspace.
 *
 * For query i (key index a = mlen + i) and key j at distance d = a - j:
 *   score(i, j) = ((q_i + u) . k_j + (q_i + v) . W_r R_d) / sqrt(d_head)
 * computed as  S = (Q + u) K^T  and  P[i][d] = Q_i . pos_k[d] + pos_bias[d]  (one product over
 * distances, then the "relative shift" is an index: S[i][j] += P[i][pos_index(a - j)]).
 * Keys allowed: j <= a (causal) and, with same_length, j > a - mem_len.
 *
 * Three paths: a block of queries (prefill, segments) uses GEMMs per head; a single query (a
 * decode step) streams each memory key row and value row once for all heads; a short block
 * continuing a memory (a chat turn's prompt) takes the single-query kernels in runs of a few
 * heads, four queries sharing each pass over a run's rows, where GEMMs would spend more on
 * packing the memory than on their few rows. A memory stored narrower than F32 (bf16, int8) is widened per
 * head into scratch for the block path, and read in place by the narrow-memory kernels
 * (kvkernels.h) on the others. Which path an item takes depends only on the item (its length,
 * its memory), never on the batch around it.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "attention.h"
#include "kvkernels.h"

#define QUERY_BLOCK 64
#define SMALL_BLOCK 32       /* blocks of up to this many queries take the single-query kernels */
#define SMALL_SCORE_ROWS 128 /* score rows of a small block's run of heads: queries x heads */
#define RUN_ROW_BYTES 256    /* a small block's run of heads: bytes of a value row it reads */

/* Queries of a small block sharing each pass over the memory's rows: 4, or 1 (tests). */
static int query_group = 4;

void xl_attn_set_query_group(int n) { query_group = n == 1 ? 1 : 4; }

/* The first key query a may attend to: a - mem_len + 1 with same_length (the window), else 0. */
static inline int first_key(const xl_model *m, int a) {
  const int window = m->cfg.same_length ? m->cfg.mem_len : 0;
  return window && a - window + 1 > 0 ? a - window + 1 : 0;
}

/* Clips a run of keys [first, first + count) to [jlo, jhi]; returns its length (<= 0: none). */
static int clip(int first, int count, int jlo, int jhi, int *k0) {
  *k0 = first > jlo ? first : jlo;
  int k1 = first + count - 1 < jhi ? first + count - 1 : jhi;
  return k1 - *k0 + 1;
}

/* Adds the shifted position term to scores s[0..n) of keys [lo, a] and scales them:
 * s[j] = (s[j] + (P[pos_index(a - j)] + pos_bias[pos_index(a - j)])) * scale.
 * Keys within the clamp (a - j <= top) read P and pos_bias at distance a - j, walking them
 * backwards in one pass (the family's add_reversed); keys farther than a clamped top all read
 * the term at top. */
static void add_position_term(const xl_model *m, int a, int lo, const float *restrict prow,
                              const float *restrict pos_bias, float scale, float *restrict s) {
  const int top = xl_pos_index(m, a - lo);
  const float far = prow[top] + pos_bias[top];
  const int j_near = a - top > lo ? a - top : lo;
  for (int j = lo; j < j_near; j++) s[j - lo] = (s[j - lo] + far) * scale;
  const int d0 = a - j_near; /* distances d0 down to 0 */
  xl_kern()->add_reversed(s + (j_near - lo), prow + d0, pos_bias + d0, d0 + 1, scale);
}

static void softmax_row(float *s, int n) {
  float mx = xl_vec_max(s, n);
  float inv = 1.0f / xl_vec_exp_sum(s, n, mx);
  for (int k = 0; k < n; k++) s[k] *= inv;
}

/* ---- a block of queries ----------------------------------------------------------------- */

static void attend_block(const xl_model *m, int layer, const xl_attn_item *it,
                         const xl_pos_table *pt, xl_attn_scratch *sc) {
  const xl_config *c = &m->cfg;
  const xl_layer *L = &m->layers[layer];
  const xl_state *st = it->state;
  const int hd = m->hd, dh = c->d_head, mlen = st->len, n = it->n, M = st->mem_len;
  const float scale = (float)(1.0 / sqrt((double)dh));
  const xl_kv_layer mem = xl_state_layer(st, layer);
  const int narrow = st->dtype != XL_KV_F32;
  const float *k_new = it->qkv + hd, *v_new = it->qkv + 2 * hd; /* rows, stride 3*hd */
  xl_ring_run ring[2], runs[2];
  int n_ring = xl_ring_runs(st, ring), n_runs = n_ring;
  /* this head's memory keys (transposed, row stride kld) and values (row stride vld) by slot;
   * a narrow memory is widened into scratch with positions in key order (one run) */
  const float *Kh, *Vh;
  size_t kld = (size_t)M, vld = (size_t)hd;
  if (narrow) {
    kld = (size_t)(mlen ? mlen : 1), vld = (size_t)dh;
    runs[0] = (xl_ring_run){0, 0, mlen};
    n_runs = mlen ? 1 : 0;
  } else {
    memcpy(runs, ring, sizeof runs);
  }

  for (int h = 0; h < c->n_head; h++) {
    const float *u = L->r_w_bias + (size_t)h * dh;
    const float *pos_bias = pt->pos_bias + (size_t)h * pt->rows;
    if (narrow) {
      for (int ri = 0; ri < n_ring; ri++)
        xl_kv_widen_head(m, &mem, h, ring[ri].slot, ring[ri].count, sc->kw, kld, sc->vw,
                         ring[ri].first);
      Kh = sc->kw, Vh = sc->vw;
    } else {
      Kh = (const float *)(const void *)mem.keys + (size_t)h * dh * M;
      Vh = (const float *)(const void *)mem.vals + (size_t)h * dh;
    }
    for (int i0 = 0; i0 < n; i0 += QUERY_BLOCK) {
      int b = n - i0 < QUERY_BLOCK ? n - i0 : QUERY_BLOCK;
      int a_first = mlen + i0, a_last = mlen + i0 + b - 1;
      int jlo = first_key(m, a_first), jhi = a_last, width = jhi - jlo + 1, k0, cnt;
      /* distances in the block's rectangle (no allowed pair is farther than the window) */
      int n_pos = xl_pos_rows_needed(m, width);

      for (int r = 0; r < b; r++) { /* Q and Q + u of this head: [b, dh] */
        const float *q = it->qkv + (size_t)(i0 + r) * 3 * hd + (size_t)h * dh;
        memcpy(sc->q + (size_t)r * dh, q, (size_t)dh * sizeof(float));
        for (int k = 0; k < dh; k++) sc->qu[(size_t)r * dh + k] = q[k] + u[k];
      }
      /* S[b, width] = (Q + u) K^T: memory keys from the transposed ring, then new keys */
      for (int ri = 0; ri < n_runs; ri++)
        if ((cnt = clip(runs[ri].first, runs[ri].count, jlo, jhi, &k0)) > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, cnt, dh, 1.0f, sc->qu, dh,
                      Kh + runs[ri].slot + (k0 - runs[ri].first), (int)kld, 0.0f,
                      sc->scores + (k0 - jlo), width);
      if ((cnt = clip(mlen, n, jlo, jhi, &k0)) > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, cnt, dh, 1.0f, sc->qu, dh,
                    k_new + (size_t)(k0 - mlen) * 3 * hd + (size_t)h * dh, 3 * hd, 0.0f,
                    sc->scores + (k0 - jlo), width);
      /* P[b, n_pos] = Q pos_k^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, n_pos, dh, 1.0f, sc->q, dh,
                  pt->pos_k + (size_t)h * dh, hd, 0.0f, sc->pos, n_pos);

      for (int r = 0; r < b; r++) {
        int a = mlen + i0 + r;
        int lo = first_key(m, a); /* allowed keys [lo, a] */
        float *srow = sc->scores + (size_t)r * width;
        add_position_term(m, a, lo, sc->pos + (size_t)r * n_pos, pos_bias, scale,
                          srow + (lo - jlo));
        softmax_row(srow + (lo - jlo), a - lo + 1);
        for (int j = jlo; j < lo; j++) srow[j - jlo] = 0.0f;
        for (int j = a + 1; j <= jhi; j++) srow[j - jlo] = 0.0f;
      }
      /* O[b, dh] = A[b, width] V[jlo..jhi] -> this head's columns of the output rows */
      float *out = it->out + (size_t)i0 * hd + (size_t)h * dh;
      float beta = 0.0f;
      for (int ri = 0; ri < n_runs; ri++)
        if ((cnt = clip(runs[ri].first, runs[ri].count, jlo, jhi, &k0)) > 0) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, dh, cnt, 1.0f,
                      sc->scores + (k0 - jlo), width,
                      Vh + (size_t)(runs[ri].slot + (k0 - runs[ri].first)) * vld, (int)vld, beta,
                      out, hd);
          beta = 1.0f;
        }
      if ((cnt = clip(mlen, n, jlo, jhi, &k0)) > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, dh, cnt, 1.0f,
                    sc->scores + (k0 - jlo), width,
                    v_new + (size_t)(k0 - mlen) * 3 * hd + (size_t)h * dh, 3 * hd, beta, out, hd);
    }
  }
}

/* ---- a single query (decode step) ------------------------------------------------------ */

/* s[j] = q . K[head h][col + j], j < n: products of head h's query (dh values) with n
 * consecutive columns of a key table stored as a memory stores keys ([H*Dh][M], in its dtype;
 * int8 with its scales [H][M]): a session memory's keys or the model's positional table. */
static void key_products(const xl_kv_kernels *kk, const xl_kv_layer *K, const float *q, int dh,
                         int h, int col, int n, float *s) {
  const size_t at = (size_t)h * dh * K->M + (size_t)col;
  switch (K->dtype) {
    case XL_KV_BF16:
      kk->dot_rows_bf16(q, dh, (const uint16_t *)(const void *)K->keys + at, (size_t)K->M, n, s);
      break;
    case XL_KV_INT8:
      kk->dot_rows_i8(q, dh, (const int8_t *)K->keys + at, (size_t)K->M,
                      (const float *)(const void *)K->kscale + (size_t)h * K->M + col, n, s);
      break;
    case XL_KV_F32:
      xl_vec_dot_rows(q, dh, (const float *)(const void *)K->keys + at, (size_t)K->M, n, s);
      break;
  }
}

/* key_products of 4 queries (q + i * ldq) into s + i * lds, i < 4: the table's rows read once
 * for the four where the family has the kernel, else key_products per query (the same numbers
 * either way). */
static void key_products4(const xl_kv_kernels *kk, const xl_kv_layer *K, const float *q, size_t ldq,
                          int dh, int h, int col, int n, float *s, size_t lds) {
  const size_t at = (size_t)h * dh * K->M + (size_t)col;
  if (K->dtype == XL_KV_F32) {
    xl_vec_dot_rows4(q, ldq, dh, (const float *)(const void *)K->keys + at, (size_t)K->M, n, s,
                     lds);
  } else if (K->dtype == XL_KV_BF16 && kk->dot_rows4_bf16) {
    kk->dot_rows4_bf16(q, ldq, dh, (const uint16_t *)(const void *)K->keys + at, (size_t)K->M, n, s,
                       lds);
  } else if (K->dtype == XL_KV_INT8 && kk->dot_rows4_i8) {
    kk->dot_rows4_i8(q, ldq, dh, (const int8_t *)K->keys + at, (size_t)K->M,
                     (const float *)(const void *)K->kscale + (size_t)h * K->M + col, n, s, lds);
  } else {
    for (int i = 0; i < 4; i++)
      key_products(kk, K, q + (size_t)i * ldq, dh, h, col, n, s + (size_t)i * lds);
  }
}

/* out[e] += sum_j p[(h - h0) * ps + j] * v_j[e] over n memory value rows from slot, heads
 * [h0, h0 + nh) (out and p start at head h0), the rows read in place in the memory's dtype. */
static void value_mix(const xl_kv_kernels *kk, const xl_kv_layer *mem, int H, int hd, int dh,
                      size_t slot, int h0, int nh, int n, const float *p, size_t ps, float *out) {
  const size_t at = slot * hd + (size_t)h0 * dh;
  switch (mem->dtype) {
    case XL_KV_BF16:
      kk->mix_rows_bf16(out, p, ps, (const uint16_t *)(const void *)mem->vals + at, (size_t)hd, n,
                        nh, dh);
      break;
    case XL_KV_INT8:
      kk->mix_rows_i8(out, p, ps, (const int8_t *)mem->vals + at, (size_t)hd,
                      (const float *)(const void *)mem->vscale + slot * H + h0, (size_t)H, n, nh,
                      dh);
      break;
    case XL_KV_F32:
      xl_vec_mix_rows(out, p, ps, (const float *)(const void *)mem->vals + at, (size_t)hd, n, nh,
                      dh);
      break;
  }
}

/* The value mix of 4 queries over n memory rows from slot, heads [h0, h0 + nh): out + i * ldo
 * (starting at head h0) += the rows weighted by probabilities p + i * ldp (starting at head h0,
 * row stride ps per head), i < 4. */
static void value_mix4(const xl_kv_kernels *kk, const xl_kv_layer *mem, int H, int hd, int dh,
                       size_t slot, int h0, int nh, int n, const float *p, size_t ldp, size_t ps,
                       float *out, size_t ldo) {
  const size_t at = slot * hd + (size_t)h0 * dh;
  if (mem->dtype == XL_KV_F32) {
    xl_vec_mix_rows4(out, ldo, p, ldp, ps, (const float *)(const void *)mem->vals + at, (size_t)hd,
                     n, nh, dh);
  } else if (mem->dtype == XL_KV_BF16 && kk->mix_rows4_bf16) {
    kk->mix_rows4_bf16(out, ldo, p, ldp, ps, (const uint16_t *)(const void *)mem->vals + at,
                       (size_t)hd, n, nh, dh);
  } else if (mem->dtype == XL_KV_INT8 && kk->mix_rows4_i8) {
    kk->mix_rows4_i8(out, ldo, p, ldp, ps, (const int8_t *)mem->vals + at, (size_t)hd,
                     (const float *)(const void *)mem->vscale + slot * H + h0, (size_t)H, n, nh,
                     dh);
  } else {
    for (int i = 0; i < 4; i++)
      value_mix(kk, mem, H, hd, dh, slot, h0, nh, n, p + (size_t)i * ldp, ps,
                out + (size_t)i * ldo);
  }
}

/* Products of nq queries (1 or 4: qu + i * ldq) in head h with the memory's keys [lo, mlen),
 * read in place over the ring's runs, into s + i * lds (s indexed by key - lo). */
static void memory_key_products(const xl_kv_kernels *kk, const xl_kv_layer *mem,
                                const xl_ring_run *runs, int n_runs, int lo, int mlen, int nq,
                                const float *qu, size_t ldq, int dh, int h, float *s, size_t lds) {
  int k0, cnt;
  for (int ri = 0; ri < n_runs; ri++)
    if ((cnt = clip(runs[ri].first, runs[ri].count, lo, mlen - 1, &k0)) > 0) {
      const int slot = runs[ri].slot + (k0 - runs[ri].first);
      if (nq == 4) key_products4(kk, mem, qu, ldq, dh, h, slot, cnt, s + (k0 - lo), lds);
      else key_products(kk, mem, qu, dh, h, slot, cnt, s + (k0 - lo));
    }
}

/* out + i * ldo (heads [h0, h0 + nh)) += the memory's value rows [lo, mlen) weighted by the
 * probabilities p + i * ldp (indexed by key - lo, row stride ps per head), for nq queries (1 or
 * 4), read in place over the ring's runs. */
static void memory_value_mix(const xl_kv_kernels *kk, const xl_kv_layer *mem, int H, int hd, int dh,
                             const xl_ring_run *runs, int n_runs, int lo, int mlen, int nq, int h0,
                             int nh, const float *p, size_t ldp, size_t ps, float *out,
                             size_t ldo) {
  int k0, cnt;
  for (int ri = 0; ri < n_runs; ri++)
    if ((cnt = clip(runs[ri].first, runs[ri].count, lo, mlen - 1, &k0)) > 0) {
      const size_t slot = (size_t)(runs[ri].slot + (k0 - runs[ri].first));
      if (nq == 4)
        value_mix4(kk, mem, H, hd, dh, slot, h0, nh, cnt, p + (k0 - lo), ldp, ps, out, ldo);
      else value_mix(kk, mem, H, hd, dh, slot, h0, nh, cnt, p + (k0 - lo), ps, out);
    }
}

/* The rest of query a's scores in head h once its memory keys' products are in s (keys lo..a):
 * its products qu . k_j with the item's new keys j in [max(lo, mlen), a] (rows of qkv), the
 * position term from prow (the query's products with the head's cached table), the scale and
 * the softmax over keys [lo, a]. */
static void finish_head_scores(const xl_model *m, const xl_attn_item *it, int layer, int h,
                               const float *qu, int a, int lo, const float *prow, float *s) {
  const int hd = m->hd, dh = m->cfg.d_head, mlen = it->state->len;
  const int j_new = lo > mlen ? lo : mlen;
  const size_t row_stride = 3 * (size_t)hd;
  const float *k_new = it->qkv + hd; /* row 0's key */
  for (int j = j_new; j <= a; j++) {
    const float *kj = k_new + (size_t)(j - mlen) * row_stride + (size_t)h * dh;
    float dot = 0.0f;
    for (int k = 0; k < dh; k++) dot += qu[k] * kj[k];
    s[j - lo] = dot;
  }
  const float scale = (float)(1.0 / sqrt((double)dh));
  add_position_term(m, a, lo, prow, m->layers[layer].pos_bias + (size_t)h * m->n_pos_cached, scale,
                    s);
  softmax_row(s, a - lo + 1);
}

/* Heads [h0, h1) of query r of the item (key index a = mlen + r): scores, position term and
 * softmax per head into sc->scores rows h (stride sc->width), then the value rows mixed into
 * those heads' columns of output row r. Keys are the memory's [lo, mlen) read in place in its
 * dtype, then the item's new keys [max(lo, mlen), a] (rows of qkv). prow: [H, pos_stride] the
 * query's products with the model's cached positional table. Heads never share a sum: any
 * split of the heads computes the same numbers. A decode step is query 0 of a one-row item. */
static void attend_query(const xl_model *m, int layer, const xl_attn_item *it, xl_attn_scratch *sc,
                         int r, const float *pos_q, size_t pos_stride, int h0, int h1) {
  const xl_config *c = &m->cfg;
  const xl_layer *L = &m->layers[layer];
  const xl_state *st = it->state;
  const int hd = m->hd, dh = c->d_head, H = c->n_head, mlen = st->len, a = mlen + r;
  const int nh = h1 - h0, lo = first_key(m, a);
  const int j_new = lo > mlen ? lo : mlen; /* the first new key allowed */
  const xl_kv_layer mem = xl_state_layer(st, layer);
  const xl_kv_kernels *kk = xl_kv_kern();
  const size_t row_stride = 3 * (size_t)hd; /* qkv rows */
  const float *q = it->qkv + (size_t)r * row_stride;
  const float *v_new = it->qkv + 2 * hd; /* row 0's value */
  const size_t ps = (size_t)sc->width;   /* row stride of probs: fixed, whatever the keys are */
  xl_ring_run runs[2];
  const int n_runs = xl_ring_runs(st, runs);
  if (nh <= 0) return;

  for (int h = h0; h < h1; h++) {
    const float *qh = q + (size_t)h * dh, *u = L->r_w_bias + (size_t)h * dh;
    float *s = sc->scores + (size_t)h * ps; /* keys lo..a */
    for (int k = 0; k < dh; k++) sc->qu[k] = qh[k] + u[k];
    memory_key_products(kk, &mem, runs, n_runs, lo, mlen, 1, sc->qu, (size_t)dh, dh, h, s, ps);
    finish_head_scores(m, it, layer, h, sc->qu, a, lo, pos_q + (size_t)h * pos_stride, s);
  }
  /* out[h] = sum_j p[h][j] v_j[h]: one pass over the value rows for the heads h0..h1 */
  const size_t e0 = (size_t)h0 * dh;
  const float *probs = sc->scores + (size_t)h0 * ps;
  float *out = it->out + (size_t)r * hd + e0;
  memset(out, 0, (size_t)nh * dh * sizeof *out);
  memory_value_mix(kk, &mem, H, hd, dh, runs, n_runs, lo, mlen, 1, h0, nh, probs, ps, ps, out,
                   (size_t)hd);
  xl_vec_mix_rows(out, probs + (j_new - lo), ps, v_new + (size_t)(j_new - mlen) * row_stride + e0,
                  row_stride, a - j_new + 1, nh, dh);
}

/* Heads a small block of n queries attends at a time: enough that a run's part of a value row
 * is RUN_ROW_BYTES (whole lines read together: 1 head of an F32 memory, 4 of an int8 one at
 * d_head 64), as many as the scores scratch holds for n queries, at least one. */
static int heads_per_run(const xl_model *m, xl_kv_dtype dt, int n) {
  const int row = m->cfg.d_head * (int)xl_kv_elem_bytes(dt);
  int run = RUN_ROW_BYTES / (row > 0 ? row : 1);
  if (run > SMALL_SCORE_ROWS / n) run = SMALL_SCORE_ROWS / n;
  if (run > m->cfg.n_head) run = m->cfg.n_head;
  return run > 1 ? run : 1;
}

/* A small block of queries (a short prompt continuing a memory, e.g. a chat turn, or the turn
 * after a cached prefix): the single-query kernels, which read the memory in place in its
 * dtype, instead of GEMMs whose packing costs more than their few rows save. In runs of a few
 * heads, so a run's memory key rows, table rows and value rows (a few hundred KB) stay in
 * cache while every query of the block reads them; four queries at a time share each pass over
 * the rows (key_products4, value_mix4). A group's passes start at the first key of its first
 * query, the smallest of the four: when the window slides within the group (same_length over a
 * full memory: every query of a chat turn its own first key) a later query's products with the
 * keys before its own first key are computed and never read, and its probabilities there are
 * zero, so the value mix adds exact zeros (0 * v, v finite) to a sum that is still +0 before its
 * first key: the same bits. Every number is the one attend_query computes (heads never share a
 * sum), so neither the order nor the grouping changes a result (xl_attn_set_query_group(1)
 * turns the grouping off, for the tests that check this). The position products come from the
 * model's cached table (the caller checks it covers the block). Query i's qu at sc->qu [i, Dh] and its position
 * products at sc->pos [i, pos_width] (one head at a time); its scores in head h of the run
 * [h0, h1) at sc->scores [i, h1 - h0, width]. */
static void attend_small_block(const xl_model *m, int layer, const xl_attn_item *it,
                               xl_attn_scratch *sc) {
  const xl_config *c = &m->cfg;
  const xl_layer *L = &m->layers[layer];
  const xl_state *st = it->state;
  const int H = c->n_head, dh = c->d_head, hd = m->hd, mlen = st->len, n = it->n;
  const size_t ps = (size_t)sc->width, pw = (size_t)sc->pos_width, row_stride = 3 * (size_t)hd;
  const xl_kv_layer mem = xl_state_layer(st, layer);
  const xl_kv_layer *T = &L->pos_keys; /* [H*Dh][n_pos_cached] */
  const xl_kv_kernels *kk = xl_kv_kern();
  const float *v_new = it->qkv + 2 * hd; /* row 0's value */
  const int run = heads_per_run(m, mem.dtype, n);
  xl_ring_run runs[2];
  const int n_runs = xl_ring_runs(st, runs);
  /* lo[i]: query i's first key; groups of queries [first, first + size), size 4 while four
   * are left (or 1: the tests' ungrouped reference), reading keys from lo[first], the
   * smallest of the group */
  int lo[SMALL_BLOCK], first[SMALL_BLOCK], size[SMALL_BLOCK], n_groups = 0;
  for (int i = 0; i < n; i++) lo[i] = first_key(m, mlen + i);
  for (int r = 0; r < n; r += size[n_groups++]) {
    first[n_groups] = r;
    size[n_groups] = r + 4 <= n && query_group == 4 ? 4 : 1;
  }
  memset(it->out, 0, (size_t)n * hd * sizeof *it->out);
  for (int h0 = 0; h0 < H; h0 += run) {
    const int h1 = h0 + run < H ? h0 + run : H, nh = h1 - h0;
    const size_t lq = (size_t)nh * ps; /* a query's scores: [nh, width] */
    for (int h = h0; h < h1; h++) {
      const float *u = L->r_w_bias + (size_t)h * dh;
      for (int i = 0; i < n; i++)
        for (int k = 0; k < dh; k++)
          sc->qu[(size_t)i * dh + k] = it->qkv[(size_t)i * row_stride + (size_t)h * dh + k] + u[k];
      for (int g = 0; g < n_groups; g++) { /* scores */
        const int r = first[g];
        const int n_pos = xl_pos_rows_needed(m, mlen + r + size[g]); /* the group's farthest */
        const float *q = it->qkv + (size_t)r * row_stride + (size_t)h * dh;
        const float *qu = sc->qu + (size_t)r * dh;
        float *pos = sc->pos + (size_t)r * pw;
        float *s = sc->scores + (size_t)r * lq + (size_t)(h - h0) * ps; /* keys lo.. */
        if (size[g] == 4) key_products4(kk, T, q, row_stride, dh, h, 0, n_pos, pos, pw);
        else key_products(kk, T, q, dh, h, 0, n_pos, pos);
        memory_key_products(kk, &mem, runs, n_runs, lo[r], mlen, size[g], qu, (size_t)dh, dh, h, s,
                            lq);
        for (int i = 0; i < size[g]; i++) { /* query r + i: keys from its own first one */
          const int skip = lo[r + i] - lo[r];
          float *si = s + (size_t)i * lq; /* keys lo[r].. */
          finish_head_scores(m, it, layer, h, qu + (size_t)i * dh, mlen + r + i, lo[r + i],
                             pos + (size_t)i * pw, si + skip);
          for (int j = 0; j < skip; j++) si[j] = 0.0f; /* before its window */
        }
      }
    }
    for (int g = 0; g < n_groups; g++) { /* out[r + i][h0..h1) = sum_j p[i][h][j] v_j[h] */
      const int r = first[g];
      const float *s = sc->scores + (size_t)r * lq;
      float *out = it->out + (size_t)r * hd + (size_t)h0 * dh;
      memory_value_mix(kk, &mem, H, hd, dh, runs, n_runs, lo[r], mlen, size[g], h0, nh, s, lq, ps,
                       out, (size_t)hd);
      for (int i = 0; i < size[g]; i++) {
        const int a = mlen + r + i, j_new = lo[r + i] > mlen ? lo[r + i] : mlen;
        xl_vec_mix_rows(out + (size_t)i * hd, s + (size_t)i * lq + (j_new - lo[r]), ps,
                        v_new + (size_t)(j_new - mlen) * row_stride + (size_t)h0 * dh, row_stride,
                        a - j_new + 1, nh, dh);
      }
    }
  }
}

void xl_decode_positions(const xl_model *m, int layer, const float *const *q, const int *n_pos,
                         int n, int stride, float *out, int h0, int h1) {
  const xl_config *c = &m->cfg;
  const int H = c->n_head, dh = c->d_head;
  const xl_kv_layer *T = &m->layers[layer].pos_keys; /* [H*Dh][n_pos_cached] */
  const xl_kv_kernels *kk = xl_kv_kern();
  const size_t lds = (size_t)H * stride; /* out: [n, H, stride] */
  /* Queries [0, n4) go four a pass over each head's table rows: the leading groups of four
   * whose rows lie at one stride (a batch of decode steps in a row), each group to the
   * farthest distance of its four (the same products; those past a query's own distances are
   * never read). The rest one at a time. */
  int n4 = 0;
  while (n4 + 4 <= n && q[n4 + 1] - q[n4] > 0 && q[n4 + 2] - q[n4 + 1] == q[n4 + 1] - q[n4] &&
         q[n4 + 3] - q[n4 + 2] == q[n4 + 1] - q[n4])
    n4 += 4;
  for (int h = h0; h < h1; h++) { /* head h's rows stay in cache while every query uses them */
    for (int i = 0; i < n4; i += 4) {
      int rows = n_pos[i];
      for (int k = 1; k < 4; k++) rows = n_pos[i + k] > rows ? n_pos[i + k] : rows;
      key_products4(kk, T, q[i] + h * dh, (size_t)(q[i + 1] - q[i]), dh, h, 0, rows,
                    out + ((size_t)i * H + h) * stride, lds);
    }
    for (int i = n4; i < n; i++)
      key_products(kk, T, q[i] + h * dh, dh, h, 0, n_pos[i], out + ((size_t)i * H + h) * stride);
  }
}

void xl_attend_heads(const xl_model *m, int layer, const xl_attn_item *it, xl_attn_scratch *sc,
                     int h0, int h1) {
  attend_query(m, layer, it, sc, 0, it->pos_q, (size_t)it->pos_stride, h0, h1);
}

void xl_attend(const xl_model *m, int layer, const xl_attn_item *it, const xl_pos_table *pt,
               xl_attn_scratch *sc) {
  if (it->n == 1 && it->pos_q) /* a decode step whose products with the cached table are given */
    attend_query(m, layer, it, sc, 0, it->pos_q, (size_t)it->pos_stride, 0, m->cfg.n_head);
  else if (it->n <= SMALL_BLOCK && it->state->len > 0 && pt->pos_k == m->layers[layer].pos_k &&
           m->cfg.n_head <= QUERY_BLOCK) /* a short prompt continuing a memory */
    attend_small_block(m, layer, it, sc);
  else attend_block(m, layer, it, pt, sc);
}

size_t xl_attn_scratch_floats(const xl_model *m, int max_width, int max_pos) {
  size_t block = (size_t)SMALL_SCORE_ROWS * max_width, one = (size_t)m->cfg.n_head * max_width;
  return (block > one ? block : one) + (size_t)QUERY_BLOCK * max_pos +
         2 * (size_t)QUERY_BLOCK * m->cfg.d_head +
         (m->kv_dtype != XL_KV_F32 ? 2 * (size_t)m->cfg.d_head * m->cfg.mem_len : 0);
}

void xl_attn_scratch_bind(const xl_model *m, float *buf, int max_width, int max_pos,
                          xl_attn_scratch *sc) {
  size_t block = (size_t)SMALL_SCORE_ROWS * max_width, one = (size_t)m->cfg.n_head * max_width;
  sc->scores = buf;
  sc->width = max_width;
  sc->pos = sc->scores + (block > one ? block : one);
  sc->pos_width = max_pos;
  sc->q = sc->pos + (size_t)QUERY_BLOCK * max_pos;
  sc->qu = sc->q + (size_t)QUERY_BLOCK * m->cfg.d_head;
  sc->kw = sc->qu + (size_t)QUERY_BLOCK * m->cfg.d_head;
  sc->vw = sc->kw + (size_t)m->cfg.d_head * m->cfg.mem_len;
}
