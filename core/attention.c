/*
 * attention.c: relative multi-head attention of one item (one session) for one layer, over
 * its memory (the state's K/V ring, read in place) followed by the item's new positions
 * (read in place from the qkv buffer). Called by the forward pass on the thread that owns the
 * state and the workspace.
 *
 * For query i (key index a = mlen + i) and key j at distance d = a - j:
 *   score(i, j) = ((q_i + u) . k_j + (q_i + v) . W_r R_d) / sqrt(d_head)
 * computed as  S = (Q + u) K^T  and  P[i][d] = Q_i . pos_k[d] + pos_bias[d]  (one GEMM over
 * distances, then the "relative shift" is an index: S[i][j] += P[i][pos_index(a - j)]).
 * Keys allowed: j <= a (causal) and, with same_length, j > a - mem_len.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "attention.h"

#define QUERY_BLOCK 64

/* C[b, n] = A[b, k] B[n, k]^T */
static void mm_nt(int b, int n, int k, const float *A, int lda, const float *B, int ldb, float *C,
                  int ldc) {
  if (b == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, B, ldb, A, 1, 0.0f, C, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, n, k, 1.0f, A, lda, B, ldb, 0.0f, C,
                ldc);
}

/* C[b, k] = A[b, n] B[n, k] + beta C */
static void mm_nn(int b, int n, int k, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
  if (b == 1)
    cblas_sgemv(CblasRowMajor, CblasTrans, n, k, 1.0f, B, ldb, A, 1, beta, C, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, k, n, 1.0f, A, lda, B, ldb, beta, C,
                ldc);
}

/* The keys/values of one item in order: up to two ring spans, then the new positions. */
typedef struct {
  int first;            /* key index of the span's first row */
  int count;
  const float *k, *v;   /* row 0 of the span (head offset added by the caller) */
  int ld;               /* row stride in floats */
} kv_span;

static int collect_spans(const xl_attn_item *it, int layer, kv_span spans[3]) {
  const xl_state *s = it->state;
  int hd = s->model->hd, n = 0;
  if (s->len > 0) {
    const float *K = xl_state_keys(s, layer), *V = xl_state_values(s, layer);
    int first_count = s->len;
    if (s->head + first_count > s->mem_len) first_count = s->mem_len - s->head;
    spans[n++] = (kv_span){0, first_count, K + (size_t)s->head * hd, V + (size_t)s->head * hd, hd};
    if (first_count < s->len)
      spans[n++] = (kv_span){first_count, s->len - first_count, K, V, hd};
  }
  spans[n++] = (kv_span){s->len, it->n, it->qkv + hd, it->qkv + 2 * hd, 3 * hd};
  return n;
}

void xl_attend(const xl_model *m, int layer, const xl_attn_item *it, const xl_pos_table *pt,
               xl_attn_scratch *sc) {
  const xl_config *c = &m->cfg;
  const xl_layer *L = &m->layers[layer];
  const int hd = m->hd, dh = c->d_head, mlen = it->state->len, n = it->n;
  const int window = c->same_length ? c->mem_len : 0;
  const float scale = (float)(1.0 / sqrt((double)dh));
  kv_span spans[3];
  int n_spans = collect_spans(it, layer, spans);

  for (int h = 0; h < c->n_head; h++) {
    const float *u = L->r_w_bias + (size_t)h * dh;
    const float *pos_k = pt->pos_k + (size_t)h * dh;          /* [rows, ld hd] */
    const float *pos_bias = pt->pos_bias + (size_t)h * pt->rows; /* [rows] */
    for (int i0 = 0; i0 < n; i0 += QUERY_BLOCK) {
      int b = n - i0 < QUERY_BLOCK ? n - i0 : QUERY_BLOCK;
      int a_first = mlen + i0, a_last = mlen + i0 + b - 1;
      int jlo = window && a_first - window + 1 > 0 ? a_first - window + 1 : 0;
      int jhi = a_last;                   /* keys [jlo, jhi] cover the block */
      int width = jhi - jlo + 1;
      int n_pos = xl_pos_index(m, a_last - jlo) + 1; /* distances in the block's rectangle */
      if (window && n_pos > xl_pos_index(m, window - 1) + 1)
        n_pos = xl_pos_index(m, window - 1) + 1; /* no allowed pair is farther than the window */

      /* Q block (this head) and Q + u: [b, dh] */
      for (int r = 0; r < b; r++) {
        const float *q = it->qkv + (size_t)(i0 + r) * 3 * hd + (size_t)h * dh;
        memcpy(sc->q + (size_t)r * dh, q, (size_t)dh * sizeof(float));
        for (int k = 0; k < dh; k++) sc->qu[(size_t)r * dh + k] = q[k] + u[k];
      }
      /* S[b, width] = (Q + u) K^T over the spans' rows in [jlo, jhi] */
      for (int sidx = 0; sidx < n_spans; sidx++) {
        const kv_span *sp = &spans[sidx];
        int s0 = sp->first > jlo ? sp->first : jlo;
        int s1 = sp->first + sp->count - 1 < jhi ? sp->first + sp->count - 1 : jhi;
        if (s1 < s0) continue;
        mm_nt(b, s1 - s0 + 1, dh, sc->qu, dh, sp->k + (size_t)(s0 - sp->first) * sp->ld + h * dh,
              sp->ld, sc->scores + (s0 - jlo), width);
      }
      /* P[b, n_pos] = Q pos_k^T (+ pos_bias below) */
      mm_nt(b, n_pos, dh, sc->q, dh, pos_k, hd, sc->pos, n_pos);

      for (int r = 0; r < b; r++) {
        int a = mlen + i0 + r;
        int lo = window && a - window + 1 > 0 ? a - window + 1 : 0; /* allowed keys [lo, a] */
        float *srow = sc->scores + (size_t)r * width;
        const float *prow = sc->pos + (size_t)r * n_pos;
        /* Position term, shifted: key j reads distance index p = pos_index(a - j). With
         * Q[p] = q.pos_k[p] + v.pos_k[p] and top the largest index used, rev[k] = Q[top - k]
         * so keys j >= a - top read rev[j - (a - top)] contiguously; keys farther than a
         * clamped top all read Q[top] = rev[0]. */
        int top = xl_pos_index(m, a - lo);
        for (int k = 0; k <= top; k++) sc->rev[k] = prow[top - k] + pos_bias[top - k];
        int j_rev = a - top > lo ? a - top : lo;
        float *s = srow + (lo - jlo);
        int n_allowed = a - lo + 1;
        for (int j = lo; j < j_rev; j++) s[j - lo] = (s[j - lo] + sc->rev[0]) * scale;
        const float *rv = sc->rev + (j_rev - (a - top));
        for (int j = j_rev; j <= a; j++) s[j - lo] = (s[j - lo] + rv[j - j_rev]) * scale;
        float mx = xl_vec_max(s, n_allowed);
        float inv = 1.0f / xl_vec_exp_sum(s, n_allowed, mx);
        for (int k = 0; k < n_allowed; k++) s[k] *= inv;
        for (int j = jlo; j < lo; j++) srow[j - jlo] = 0.0f;
        for (int j = a + 1; j <= jhi; j++) srow[j - jlo] = 0.0f;
      }
      /* O[b, dh] = P_attn[b, width] V[jlo..jhi] -> av rows (this head's columns) */
      float *out = it->out + (size_t)i0 * hd + (size_t)h * dh;
      int first = 1;
      for (int sidx = 0; sidx < n_spans; sidx++) {
        const kv_span *sp = &spans[sidx];
        int s0 = sp->first > jlo ? sp->first : jlo;
        int s1 = sp->first + sp->count - 1 < jhi ? sp->first + sp->count - 1 : jhi;
        if (s1 < s0) continue;
        mm_nn(b, s1 - s0 + 1, dh, sc->scores + (s0 - jlo), width,
              sp->v + (size_t)(s0 - sp->first) * sp->ld + h * dh, sp->ld, first ? 0.0f : 1.0f,
              out, hd);
        first = 0;
      }
    }
  }
}

size_t xl_attn_scratch_floats(const xl_model *m, int max_width, int max_pos) {
  return (size_t)QUERY_BLOCK * max_width + (size_t)QUERY_BLOCK * max_pos +
         2 * (size_t)QUERY_BLOCK * m->cfg.d_head + (size_t)max_pos;
}

void xl_attn_scratch_bind(const xl_model *m, float *buf, int max_width, int max_pos,
                          xl_attn_scratch *sc) {
  sc->scores = buf;
  sc->pos = sc->scores + (size_t)QUERY_BLOCK * max_width;
  sc->q = sc->pos + (size_t)QUERY_BLOCK * max_pos;
  sc->qu = sc->q + (size_t)QUERY_BLOCK * m->cfg.d_head;
  sc->rev = sc->qu + (size_t)QUERY_BLOCK * m->cfg.d_head;
}
