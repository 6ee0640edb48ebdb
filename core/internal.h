/*
 * internal.h: xlcore's private structures (model weights, state ring, workspace) and the
 * helpers shared between the files of core/. Not installed; nothing outside core/ includes it.
 * Threading: as in xl.h (model read-only after load, state one thread, workspace one thread).
 */
#ifndef XL_INTERNAL_H
#define XL_INTERNAL_H

#include <stdint.h>

#include "bigmem.h"
#include "kernels.h"
#include "wkernels.h"
#include "xl.h"

/* ---- errors / hashing ---------------------------------------------------------------- */
xl_code xl_fail(xl_error *err, xl_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void xl_error_clear(xl_error *err);
uint64_t xl_hash64(const void *data, size_t len, uint64_t seed);

/* ---- config.json --------------------------------------------------------------------- */
xl_code xl_config_load(const char *path, xl_config *cfg, xl_error *err);
xl_code xl_config_validate(const xl_config *cfg, const char *path, xl_error *err);

/* ---- safetensors --------------------------------------------------------------------- */
typedef enum { XL_DT_F32, XL_DT_F16, XL_DT_BF16 } xl_dtype;

typedef struct {
  char *name;
  xl_dtype dtype;
  int ndim;
  int64_t shape[4];
  const uint8_t *data; /* inside the mapping */
  size_t nbytes;
  int used;            /* bound to a model weight (unused tensors are reported) */
} xl_tensor_entry;

typedef struct {
  const char *path;
  void *map;
  size_t map_len;
  xl_tensor_entry *tensors;
  int n_tensors;
} xl_safetensors;

xl_code xl_safetensors_open(const char *path, xl_safetensors *st, xl_error *err);
void xl_safetensors_close(xl_safetensors *st);
xl_tensor_entry *xl_safetensors_find(xl_safetensors *st, const char *name);
/* The whole pages of t's data leave this process's memory (the file's pages stay clean page
 * cache); a later read of t faults them in from the file again. */
void xl_safetensors_release(const xl_safetensors *st, const xl_tensor_entry *t);

/* ---- model --------------------------------------------------------------------------- */
/* One layer's memory, as pointers into a state (or a packed buffer of `M` positions). */
typedef struct {
  xl_kv_dtype dtype;
  int M;                /* position stride: the ring's capacity */
  unsigned char *keys;  /* [H*Dh][M] elements */
  unsigned char *vals;  /* [M][H*Dh] elements */
  unsigned char *kscale; /* INT8: F32 [H][M] (aligned in a state, maybe not when packed) */
  unsigned char *vscale; /* INT8: F32 [M][H] */
} xl_kv_layer;

typedef struct {
  xl_wmat qkv_w;           /* [3*H*Dh, d_model]: rows q | k | v */
  xl_wmat o_w;             /* [d_model, H*Dh] */
  xl_wmat r_w;             /* [H*Dh, d_model] */
  const float *attn_ln_g;  /* [d_model] */
  const float *attn_ln_b;  /* [d_model] */
  const float *r_w_bias;   /* [H, Dh] u: content bias (shared pointer unless untie_r) */
  const float *r_r_bias;   /* [H, Dh] v: position bias */
  xl_wmat ff1_w;           /* [d_inner, d_model] */
  const float *ff1_b;      /* [d_inner] */
  xl_wmat ff2_w;           /* [d_model, d_inner] */
  const float *ff2_b;      /* [d_model] */
  const float *ff_ln_g;    /* [d_model] */
  const float *ff_ln_b;    /* [d_model] */
  float *pos_k;            /* [n_pos_cached, H*Dh]: W_r R_d for distance index d */
  xl_kv_layer pos_keys;    /* the decode step's copy of pos_k: keys [H*Dh][n_pos_cached]
                              (kscale [H][n_pos_cached] for int8), stored as the model's session
                              memory stores keys, so a step reads it with the same kernels;
                              vals unused */
  float *pos_bias;         /* [H, n_pos_cached]: v_h . pos_k[d]_h */
} xl_layer;

typedef struct {                 /* one adaptive-input cluster (a single one if div_val == 1) */
  int begin, end;                /* token ids [begin, end) */
  int d_emb;                     /* d_embed // div_val**i */
  xl_wmat table;                 /* [end-begin, d_emb] */
  const float *proj_f32;         /* [d_model, d_emb] as bound (load only), or NULL (div_val == 1,
                                    d_embed == d_model) */
  xl_wmat proj;                  /* proj_f32 in the weight type (data NULL when none) */
} xl_emb_cluster;

typedef struct {                 /* one adaptive-softmax cluster: 0 = head shortlist */
  int begin, end;                /* token ids [begin, end) */
  int d_emb;
  xl_wmat weight;                /* [end-begin, d_emb] */
  const float *bias;             /* [end-begin] */
  const float *proj;             /* [d_model, d_emb] F32 as bound (load only), or NULL */
  xl_wmat proj_t;                /* [d_emb, d_model]: proj transposed (owned), for x proj */
} xl_out_cluster;

#define XL_MAX_PATH 4096

struct xl_model {
  char dir[XL_MAX_PATH];
  xl_config cfg;
  int hd;                        /* n_head * d_head */
  int n_emb_clusters;
  xl_emb_cluster emb[XL_MAX_CLUSTERS + 1];
  int n_out_clusters;            /* n_cutoffs + 1 */
  xl_out_cluster out[XL_MAX_CLUSTERS + 1];
  const float *cluster_weight;   /* [n_cutoffs, d_embed] (HF order: tail i uses row i-1) */
  const float *cluster_bias;     /* [n_cutoffs] */
  xl_layer *layers;              /* [n_layer] */
  int n_pos_cached;              /* rows of each layer's pos_k */
  float emb_scale;               /* sqrt(d_model) */
  xl_safetensors st;
  xl_arena arena;                /* converted/narrowed tensors and positional tables (bigmem.h) */
  size_t n_params;
  xl_weights weights;            /* the type of every xl_wmat above */
  size_t narrowed_params;        /* parameters held in xl_wmats narrower than F32 ... */
  size_t narrowed_bytes;         /* ... and the bytes they take (weights + scales) */
  uint64_t fingerprint;
  xl_kv_dtype kv_dtype;          /* memory dtype of its states (a load option) */
  /* tokenizer (tokenizer.c; its kind's state in tok, tok_internal.h) */
  char **vocab;                  /* [vocab_size] symbols, NULL for byte models */
  int32_t *vocab_index;          /* open-addressing table of ids, size vocab_index_cap */
  size_t vocab_index_cap;
  int32_t unk_id, eos_id;
  struct xl_tok *tok;
};

/* Number of distance rows a forward needs for klen keys: distances 0..klen-1, or 0..mem_len-1
 * with same_length (the window), and clamped distances share one row. */
static inline int xl_pos_rows_needed(const xl_model *m, int klen) {
  int c = m->cfg.clamp_len, rows = klen;
  if (m->cfg.same_length && rows > m->cfg.mem_len) rows = m->cfg.mem_len;
  return (c > 0 && rows > c + 1) ? c + 1 : rows;
}
static inline int xl_pos_index(const xl_model *m, int dist) {
  int c = m->cfg.clamp_len;
  return (c > 0 && dist > c) ? c : dist;
}

/* Sinusoid R for distances [0, n_rows) exactly as the reference computes it in float32:
 * R_d = [sin(d*inv_freq), cos(d*inv_freq)] concatenated. out: [n_rows, d_model]. */
void xl_sinusoid(int d_model, int n_rows, float *out);
/* pos_k = R W_r^T and pos_bias for layer `l`, rows [0, n_rows). */
void xl_positional_project(const xl_model *m, int l, int n_rows, float *pos_k, float *pos_bias,
                           float *scratch_r /* [n_rows, d_model] */);

xl_code xl_weights_bind(xl_model *m, xl_error *err);
xl_code xl_tokenizer_load(xl_model *m, xl_error *err);
void xl_tokenizer_free(xl_model *m);

/* ---- state --------------------------------------------------------------------------- */
/* Keys are stored transposed, [H*Dh][mem_len] per layer, so a decode step scores all memory
 * positions of a head with contiguous multiply-adds; values are rows, [mem_len][H*Dh]. The
 * elements are the state's dtype (F32, BF16 or INT8); INT8 layers also hold the scales, keys'
 * [H][mem_len] and values' [mem_len][H] (kv_store.c owns the layout). */
struct xl_state {
  const xl_model *model;
  int mem_len;        /* capacity in positions */
  int len;            /* positions held, <= mem_len */
  int head;           /* ring slot of the oldest position */
  uint64_t fed;       /* positions fed since reset */
  xl_kv_dtype dtype;  /* element type of kv */
  size_t layer_bytes; /* bytes of one layer's memory (xl_kv_layer_bytes) */
  unsigned char *kv;  /* per layer: keys, values (, key scales, value scales); by slot */
  size_t kv_mapped;   /* bytes of kv when it is its own mapping (state.c), else 0 */
};

size_t xl_kv_elem_bytes(xl_kv_dtype dt);
/* Bytes of one layer of M positions in a state (sections 64-byte aligned). */
size_t xl_kv_layer_bytes(const xl_model *m, xl_kv_dtype dt, int M);
/* Bytes one position takes in one layer (elements and scales, no padding). */
size_t xl_kv_position_bytes(const xl_model *m, xl_kv_dtype dt);
xl_kv_layer xl_kv_layer_at(const xl_model *m, xl_kv_dtype dt, int M, unsigned char *base);
static inline xl_kv_layer xl_state_layer(const xl_state *s, int layer) {
  if (!s->kv) return (xl_kv_layer){s->dtype, s->mem_len, NULL, NULL, NULL, NULL}; /* mem_len 0 */
  return xl_kv_layer_at(s->model, s->dtype, s->mem_len, s->kv + (size_t)layer * s->layer_bytes);
}
/* F32 states only: the layer's keys [H*Dh][mem_len] and values [mem_len][H*Dh]. */
static inline float *xl_state_keys(const xl_state *s, int layer) {
  return (float *)(void *)xl_state_layer(s, layer).keys;
}
static inline float *xl_state_values(const xl_state *s, int layer) {
  return (float *)(void *)xl_state_layer(s, layer).vals;
}
/* A state of `dtype` with room for `mem_len` positions (the model's, or fewer for scratch). */
xl_code xl_state_alloc(const xl_model *m, xl_kv_dtype dtype, int mem_len, xl_state **out,
                       xl_error *err);
/* Stores position `slot` of a layer from F32 key and value rows [H*Dh] (narrowed to the dtype:
 * bf16 round-to-nearest-even, int8 symmetric per head). */
void xl_kv_store(const xl_model *m, const xl_kv_layer *L, int slot, const float *key,
                 const float *val);
/* xl_kv_store of heads [h0, h1) only (the other heads' parts of the slot untouched): what
 * one thread's share of a decode step's heads writes. */
void xl_kv_store_heads(const xl_model *m, const xl_kv_layer *L, int slot, const float *key,
                       const float *val, int h0, int h1);
/* The key half of xl_kv_store: keys and key scales only (L->vals, L->vscale unused). */
void xl_kv_store_key(const xl_model *m, const xl_kv_layer *L, int slot, const float *key);
/* Reads position `slot` back as F32 rows [H*Dh] (widened). */
void xl_kv_load(const xl_model *m, const xl_kv_layer *L, int slot, float *key, float *val);
/* Head h's keys [Dh][count] and values [count][Dh] of `count` consecutive slots from `slot`,
 * widened to F32 into kw (row stride kld) and vw (row stride Dh) at column/row `at`. */
void xl_kv_widen_head(const xl_model *m, const xl_kv_layer *L, int h, int slot, int count,
                      float *kw, size_t kld, float *vw, int at);
/* Copies `count` positions between layers of the same dtype: src slots [src_slot, +count) to
 * dst slots [dst_slot, +count) (elements and scales; memcpy only, any alignment). */
void xl_kv_copy(const xl_model *m, const xl_kv_layer *dst, int dst_slot, const xl_kv_layer *src,
                int src_slot, int count);
/* Copies `count` positions between layers of any dtypes, widening/narrowing through F32
 * (tmp: 2*H*Dh floats). */
void xl_kv_convert(const xl_model *m, const xl_kv_layer *dst, int dst_slot,
                   const xl_kv_layer *src, int src_slot, int count, float *tmp);
/* Packed layout of `count` positions of one layer in a blob: an xl_kv_layer with M = count and
 * no padding (keys, values, key scales, value scales back to back); its byte size. */
xl_kv_layer xl_kv_packed_at(const xl_model *m, xl_kv_dtype dt, int count, unsigned char *base);
size_t xl_kv_packed_bytes(const xl_model *m, xl_kv_dtype dt, int count);
/* 1 when every value of a packed payload of `bytes` bytes (a whole number of packed layers of
 * `count` positions) is finite (INT8: its scales finite and >= 0); read with memcpy. */
int xl_kv_packed_finite(const xl_model *m, xl_kv_dtype dt, const unsigned char *p, size_t bytes,
                        int count);

/* The ring's positions as up to two runs of consecutive slots, oldest first (key order). */
typedef struct {
  int first;  /* position (key index, 0 = oldest) of the run's first slot */
  int slot;   /* ring slot of that position */
  int count;
} xl_ring_run;

/* Fills runs[0..return) (0 when the ring is empty, else 1 or 2). */
static inline int xl_ring_runs(const xl_state *s, xl_ring_run runs[2]) {
  if (s->len == 0) return 0;
  int first = s->len;
  if (s->head + first > s->mem_len) first = s->mem_len - s->head;
  runs[0] = (xl_ring_run){0, s->head, first};
  if (first == s->len) return 1;
  runs[1] = (xl_ring_run){first, 0, s->len - first};
  return 2;
}

/* ---- workspace ----------------------------------------------------------------------- */
struct xl_pool;
struct xl_workspace {
  const xl_model *model;
  struct xl_pool *pool; /* threads_per_worker > 1: the helpers (pool.h); NULL: one thread */
  float *buf[16];
  size_t cap[16];     /* in floats */
};

/* Returns buffer `slot` holding at least n floats (grown, contents not kept), or NULL. */
float *xl_ws_get(xl_workspace *ws, int slot, size_t n);

/* ---- math ---------------------------------------------------------------------------- */
/* y[rows, out] = x[rows, in] W^T (+ b): W is [out, in] row-major (a torch Linear); ldy is
 * y's row stride (>= out). */
void xl_linear(const float *x, int rows, int in, const float *w, const float *b, int out,
               float *y, int ldy);
/* y[M, N] = x[M, K] W[N, K]^T with row strides ldx, ldw, ldy; each element computed the same
 * way whatever M is (batch-invariant). */
static inline void xl_matmul_nt(const float *x, int M, int K, int ldx, const float *W, int N,
                                int ldw, float *y, int ldy) {
  if (M > 0 && N > 0) xl_kern()->matmul_nt(x, M, K, ldx, W, N, ldw, y, ldy);
}
/* dst[cols, rows] = src[rows, cols]^T (row-major, dense). */
void xl_transpose(const float *src, int rows, int cols, float *dst);
void xl_layer_norm(const float *x, int rows, int dim, const float *g, const float *b, float eps,
                   float *y);
void xl_log_softmax_inplace(float *x, int n);
/* y[i] = log_softmax(x)[i] + shift, in one pass after the sums (the same numbers as
 * xl_log_softmax_inplace and then adding shift); y may be x. */
void xl_log_softmax_shift(const float *x, int n, float shift, float *y);
/* max of x[0..n); x[i] = exp(x[i] - shift) returning the sum (deterministic). */
static inline float xl_vec_max(const float *x, int n) { return xl_kern()->max(x, n); }
static inline float xl_vec_exp_sum(float *x, int n, float shift) {
  return xl_kern()->exp_sum(x, n, shift);
}
/* s[0..n) = sum_k q[k] rows[k][0..n) over dh rows of stride ld (k in order, from 0) */
static inline void xl_vec_dot_rows(const float *q, int dh, const float *rows, size_t ld, int n,
                                   float *s) {
  xl_kern()->dot_rows(q, dh, rows, ld, n, s);
}
/* out[h*dh + i] += sum_j p[h*p_stride + j] rows[j][h*dh + i], j = 0..n-1 in order */
static inline void xl_vec_mix_rows(float *out, const float *p, size_t p_stride, const float *rows,
                                   size_t ld, int n, int H, int dh) {
  xl_kern()->mix_rows(out, p, p_stride, rows, ld, n, H, dh);
}
/* xl_vec_dot_rows of 4 queries (rows of q, stride ldq) into rows of s (stride lds): the same
 * numbers as 4 calls, by one pass over the rows where the family has the kernel */
static inline void xl_vec_dot_rows4(const float *q, size_t ldq, int dh, const float *rows,
                                    size_t ld, int n, float *s, size_t lds) {
  const xl_kernels *k = xl_kern();
  if (k->dot_rows4) {
    k->dot_rows4(q, ldq, dh, rows, ld, n, s, lds);
    return;
  }
  for (int i = 0; i < 4; i++) k->dot_rows(q + (size_t)i * ldq, dh, rows, ld, n, s + (size_t)i * lds);
}
/* xl_vec_mix_rows of 4 queries (out rows of stride ldo, probabilities of stride ldp) */
static inline void xl_vec_mix_rows4(float *out, size_t ldo, const float *p, size_t ldp,
                                    size_t p_stride, const float *rows, size_t ld, int n, int H,
                                    int dh) {
  const xl_kernels *k = xl_kern();
  if (k->mix_rows4) {
    k->mix_rows4(out, ldo, p, ldp, p_stride, rows, ld, n, H, dh);
    return;
  }
  for (int i = 0; i < 4; i++)
    k->mix_rows(out + (size_t)i * ldo, p + (size_t)i * ldp, p_stride, rows, ld, n, H, dh);
}

#endif /* XL_INTERNAL_H */
