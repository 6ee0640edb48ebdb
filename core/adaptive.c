/*
 * adaptive.c: the adaptive input embedding (token -> d_model vector: cluster table lookup,
 * projection, sqrt(d_model) scale) and the adaptive log-softmax (head = shortlist + one logit
 * per tail cluster; tail cluster c's log-probs are log_softmax(tail logits) + the head's
 * cluster column, HF order: column shortlist + c - 1). A plain softmax is the case with no
 * cutoffs. Called by the forward pass on the workspace-owning thread (the products with the
 * output weights split over its pool's threads: wsplit.c).
 */
#include <string.h>

#include "adaptive.h"

#define OUT_BLOCK 32
#define TAIL_ROWS 16 /* rows whose tail logits one product computes */

static int cluster_of(const int *ends, int n, int id) {
  int c = 0;
  while (c < n - 1 && id >= ends[c]) c++;
  return c;
}

void xl_embed(const xl_model *m, const int32_t *tokens, int n, float *x /* [n, d_model] */,
              float *scratch /* [d_embed] */) {
  const int dm = m->cfg.d_model;
  for (int r = 0; r < n; r++) {
    int id = tokens[r], c = 0;
    while (c < m->n_emb_clusters - 1 && id >= m->emb[c].end) c++;
    const xl_emb_cluster *e = &m->emb[c];
    float *xr = x + (size_t)r * dm;
    if (e->proj.data) { /* x[d_model] = proj[d_model, d_emb] row */
      xl_wmat_row(&e->table, id - e->begin, scratch); /* [d_emb] */
      xl_matmul_w(scratch, 1, e->d_emb, e->d_emb, &e->proj, dm, xr, dm);
    } else {
      xl_wmat_row(&e->table, id - e->begin, xr);
    }
    for (int j = 0; j < dm; j++) xr[j] *= m->emb_scale;
  }
}

/* Tail cluster c's log-probs of n hidden rows h [n, d_model] (n <= TAIL_ROWS): the logits of
 * all n in one product (the cluster's weights read once for them) into logits [n, size], then
 * each row's log-softmax plus its cluster log-prob (its head row's column, head rows at stride
 * head_n) into out[r] + the cluster's first id (out NULL: in place in logits). A row's numbers
 * are the same in any n (the products are row-invariant). proj: [n, d_emb] scratch. */
static void tail_logprobs(const xl_model *m, int c, const float *h, int n, const float *head,
                          int head_n, float *proj, float *logits, float *const *out,
                          struct xl_pool *pool) {
  const xl_out_cluster *o = &m->out[c];
  const int dm = m->cfg.d_model, size = o->end - o->begin;
  const float *ph = h;
  int ldp = dm;
  if (o->proj) { /* ph[n, d_emb] = h[n, d_model] proj[d_model, d_emb] */
    xl_par_linear_w(pool, h, n, dm, dm, &o->proj_t, NULL, o->d_emb, proj, o->d_emb);
    ph = proj;
    ldp = o->d_emb;
  }
  /* logits[n, size] = ph W[size, d_emb]^T + b */
  xl_par_linear_w(pool, ph, n, o->d_emb, ldp, &o->weight, o->bias, size, logits, size);
  for (int r = 0; r < n; r++) {
    float *row = logits + (size_t)r * size;
    const float cluster_lp = head[(size_t)r * head_n + m->out[0].end + c - 1];
    xl_log_softmax_shift(row, size, cluster_lp, out ? out[r] + o->begin : row);
  }
}

static int max_tail_size(const xl_model *m) {
  int n = 0;
  for (int i = 1; i < m->n_out_clusters; i++)
    if (m->out[i].end - m->out[i].begin > n) n = m->out[i].end - m->out[i].begin;
  return n;
}

size_t xl_output_scratch_floats(const xl_model *m) {
  const xl_config *c = &m->cfg;
  int head = m->out[0].end + c->n_cutoffs;
  return (size_t)OUT_BLOCK * head + (size_t)OUT_BLOCK * c->d_embed +
         (size_t)TAIL_ROWS * max_tail_size(m) + (size_t)TAIL_ROWS * c->d_embed;
}

void xl_output_logprobs(const xl_model *m, const float *hidden, int rows, const int32_t *targets,
                        float *target_lp, float *const *full, float *scratch,
                        struct xl_pool *pool) {
  const xl_config *c = &m->cfg;
  const int dm = c->d_model, nc = c->n_cutoffs;
  const xl_out_cluster *o0 = &m->out[0];
  const int short_n = o0->end, head_n = short_n + nc, d0 = o0->d_emb;
  float *head = scratch;                                   /* [OUT_BLOCK, head_n] */
  float *ph = head + (size_t)OUT_BLOCK * head_n;           /* [OUT_BLOCK, d_emb0] */
  float *tail = ph + (size_t)OUT_BLOCK * c->d_embed;       /* [TAIL_ROWS, max_tail] */
  float *tproj = tail + (size_t)TAIL_ROWS * max_tail_size(m); /* [TAIL_ROWS, d_embed] */
  int ends[XL_MAX_CLUSTERS + 1];
  for (int i = 0; i < m->n_out_clusters; i++) ends[i] = m->out[i].end;

  for (int r0 = 0; r0 < rows; r0 += OUT_BLOCK) {
    int b = rows - r0 < OUT_BLOCK ? rows - r0 : OUT_BLOCK;
    const float *hb = hidden + (size_t)r0 * dm;
    const float *src = hb;
    int lds = dm;
    if (o0->proj) { /* ph[b, d0] = hb[b, dm] proj0[dm, d0] */
      xl_par_linear_w(pool, hb, b, dm, dm, &o0->proj_t, NULL, d0, ph, d0);
      src = ph;
      lds = d0;
    }
    /* head[b, head_n] = src W0^T + b0 | src cluster_weight^T + cluster_bias */
    xl_par_linear_w(pool, src, b, d0, lds, &o0->weight, o0->bias, short_n, head, head_n);
    if (nc) xl_matmul_nt(src, b, d0, lds, m->cluster_weight, nc, d0, head + short_n, head_n);
    for (int r = 0; r < b; r++) {
      float *hr = head + (size_t)r * head_n;
      for (int j = 0; j < nc; j++) hr[short_n + j] += m->cluster_bias[j];
      xl_log_softmax_inplace(hr, head_n);
    }
    /* full distributions: runs of up to TAIL_ROWS consecutive rows that want one, each tail
     * cluster's logits for a run in one product */
    for (int r = 0; full && r < b;) {
      int n = 0;
      while (r + n < b && n < TAIL_ROWS && full[r0 + r + n]) n++;
      if (!n) { /* a row without one */
        r++;
        continue;
      }
      for (int i = 0; i < n; i++)
        memcpy(full[r0 + r + i], head + (size_t)(r + i) * head_n, (size_t)short_n * sizeof(float));
      for (int cl = 1; cl <= nc; cl++)
        tail_logprobs(m, cl, hb + (size_t)r * dm, n, head + (size_t)r * head_n, head_n, tproj, tail,
                      full + r0 + r, pool);
      r += n;
    }
    for (int r = 0; targets && r < b; r++) {
      const int t = targets[r0 + r];
      const float *hr = head + (size_t)r * head_n;
      float *f = full ? full[r0 + r] : NULL;
      if (t < 0) continue;
      if (t < short_n) target_lp[r0 + r] = hr[t];
      else if (f) target_lp[r0 + r] = f[t];
      else {
        int cl = cluster_of(ends, m->n_out_clusters, t);
        tail_logprobs(m, cl, hb + (size_t)r * dm, 1, hr, head_n, tproj, tail, NULL, pool);
        target_lp[r0 + r] = tail[t - m->out[cl].begin];
      }
    }
  }
}
