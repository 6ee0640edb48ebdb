/*
 * xl.h: the public API of xlcore, the Transformer-XL inference library.
 *
 * Owns: nothing itself; declares the model (immutable weights + config + tokenizer),
 * the per-session state (the memory's cached keys/values), the per-thread workspace,
 * the forward pass, tokenizers, sampling and state (de)serialisation.
 *
 * Threading contract:
 *   - xl_model is immutable after xl_model_load(): any number of threads may use it at once.
 *   - xl_state belongs to one session; one thread at a time may touch it.
 *   - xl_workspace belongs to one thread (a worker); never share it between threads that run
 *     concurrently.
 *   - Every function here is reentrant. Core code never prints and never exits: every failure
 *     is an xl_code, with a message in the caller's xl_error naming the file/tensor/field.
 *
 * Semantics: the reference implementation's (kimiyoung/transformer-xl MemTransformerLM,
 * Hugging Face TransfoXL), attn_type 0. A new state has EMPTY memory (authors' evaluation),
 * not mem_len zero vectors (HF's default). See README "Model semantics".
 */
#ifndef XL_H
#define XL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Errors: one table, libuv-style. */

#define XL_ERROR_MAP(X)                                                                  \
  X(OK, "ok")                                                                            \
  X(NOMEM, "out of memory")                                                              \
  X(IO, "cannot read file")                                                              \
  X(FORMAT, "malformed file")                                                            \
  X(CONFIG, "invalid model configuration")                                               \
  X(TENSOR, "missing or mismatched tensor")                                              \
  X(TOKENIZER, "tokenizer problem")                                                      \
  X(ARG, "invalid argument")                                                             \
  X(TOKEN, "token id out of range")                                                      \
  X(STATE, "invalid state blob")                                                         \
  X(MISMATCH, "state blob belongs to another model or format version")                   \
  X(UNSUPPORTED, "unsupported model feature")

typedef enum {
#define XL_ERROR_ENUM(name, text) XL_##name,
  XL_ERROR_MAP(XL_ERROR_ENUM)
#undef XL_ERROR_ENUM
  XL_ERROR_COUNT
} xl_code;

typedef struct xl_error {
  xl_code code;
  char message[512]; /* "FILE: problem" or "tensor NAME: problem"; empty when code == XL_OK */
} xl_error;

const char *xl_code_name(xl_code code);  /* "XL_FORMAT" */
const char *xl_code_text(xl_code code);  /* "malformed file" */

/* ---------------------------------------------------------------------------------------- */
/* Model configuration (TransfoXLConfig keys; read from config.json). */

#define XL_MAX_CLUSTERS 8

/* Tokenizer kinds (config.json "xlserve_tokenizer"; docs/models.md describes each). */
typedef enum {
  XL_TOKENIZER_BYTES = 0,      /* id = byte value (vocab_size 256) */
  XL_TOKENIZER_WORDS = 1,      /* vocab.txt, whitespace split, <eos> per newline */
  XL_TOKENIZER_TRANSFO_XL = 2, /* Hugging Face TransfoXLTokenizer: Moses pipeline (wt103) */
  XL_TOKENIZER_BYTE_TABLE = 3, /* symbols are byte values as decimal strings (enwik8) */
  XL_TOKENIZER_CHAR_TABLE = 4  /* symbols are characters, one stands for space (text8) */
} xl_tokenizer_kind;
#define XL_TOKENIZER_KIND_COUNT 5
const char *xl_tokenizer_kind_name(xl_tokenizer_kind kind); /* "transfo_xl", ... */

typedef struct xl_config {
  int vocab_size;          /* n_token */
  int n_cutoffs;           /* len(cutoffs); 0 = plain softmax */
  int cutoffs[XL_MAX_CLUSTERS];
  int d_model, d_embed, n_head, d_head, d_inner, div_val, n_layer;
  int pre_lnorm;           /* 0/1 */
  int mem_len;             /* memory length (positions per layer kept between segments) */
  int clamp_len;           /* <= 0: no clamping */
  int same_length;         /* 0/1: each query attends to exactly mem_len positions */
  int untie_r;             /* 1: per-layer r_w_bias/r_r_bias; 0: one pair for all layers */
  int tie_word_embeddings; /* crit.out_layers[i].weight == word_emb.emb_layers[i].weight */
  int tie_projs[XL_MAX_CLUSTERS + 1]; /* per softmax cluster: out_projs[i] tied to emb_projs */
  float layer_norm_epsilon;
  int tgt_len;             /* training segment length (advisory; used to cut prompts when
                              same_length is off); 0 if absent */
  xl_tokenizer_kind tokenizer;
} xl_config;

/* Element type of the session memory (each state's cached keys/values). F32: exact. BF16: each
 * value rounded to nearest-even bfloat16 when stored, widened when read (half the bytes). INT8:
 * symmetric int8 with one F32 scale per position and head (max |x| / 127), a quarter of the bytes
 * plus the scales. Codes are stable: they are written into state blobs and deltas. */
typedef enum { XL_KV_F32 = 0, XL_KV_BF16 = 1, XL_KV_INT8 = 2 } xl_kv_dtype;
#define XL_KV_DTYPE_COUNT 3
const char *xl_kv_dtype_name(xl_kv_dtype dtype);          /* "f32", "bf16", "int8" */
int xl_kv_dtype_parse(const char *name, xl_kv_dtype *out); /* 0, or -1 for an unknown name */

/* How the big weight matrices (attention q/k/v, output and position projections, the
 * feed-forward layers, the adaptive input/softmax tables and projections) are held in RAM:
 * F32 (as stored), bf16 (round-to-nearest-even; a bf16 file is used in place), int8 with
 * one scale per 32 weights of a row, or int4: symmetric 4-bit (-7..7) with one scale per 32
 * weights of a row, two weights a byte (a scale is a value an IEEE half holds; wkernels.h).
 * LayerNorm parameters, biases and r_w_bias/r_r_bias stay F32 in every case; so do
 * activations. */
typedef enum {
  XL_WEIGHTS_F32 = 0,
  XL_WEIGHTS_BF16 = 1,
  XL_WEIGHTS_INT8 = 2,
  XL_WEIGHTS_INT4 = 3
} xl_weights;
const char *xl_weights_name(xl_weights w);    /* "f32", "bf16", "int8", "int4" */
int xl_weights_parse(const char *name);       /* the xl_weights, or -1 for an unknown name */

/* Overrides applied at load time (xlserve eval --mem-len etc.). -1 = keep config.json's.
 * kv_dtype: the memory dtype of every state of the model (not part of its fingerprint: a state
 * blob of one dtype loads into a model of another, converted). */
typedef struct xl_load_options {
  int mem_len;
  int clamp_len;
  int same_length;
  xl_kv_dtype kv_dtype;
  xl_weights weights; /* XL_WEIGHTS_F32 by default */
} xl_load_options;

#define XL_LOAD_OPTIONS_DEFAULT {-1, -1, -1, XL_KV_F32, XL_WEIGHTS_F32}

/* ---------------------------------------------------------------------------------------- */
/* Model: weights (mmapped, F32; F16/BF16 converted at load) + config + tokenizer. */

typedef struct xl_model xl_model;

/* Loads DIR/config.json, DIR/model.safetensors and the tokenizer (DIR/vocab.txt for word-level
 * models, else bytes). Validates every tensor's name, dtype, shape and offsets. */
xl_code xl_model_load(const char *dir, const xl_load_options *opts, xl_model **out,
                      xl_error *err);
void xl_model_free(xl_model *model);

const xl_config *xl_model_config(const xl_model *model);
size_t xl_model_param_count(const xl_model *model);   /* distinct parameters (tied counted once) */
size_t xl_model_state_bytes(const xl_model *model);   /* RAM of one full xl_state */
/* Memory bytes one position adds to a state, all layers (keys, values and int8 scales). */
size_t xl_model_state_bytes_per_token(const xl_model *model);
xl_kv_dtype xl_model_kv_dtype(const xl_model *model);
/* The largest state blob of this model in any memory dtype (an import may come from a server
 * of another dtype): a bound for request bodies carrying one. */
size_t xl_model_state_blob_max_bytes(const xl_model *model);
uint64_t xl_model_fingerprint(const xl_model *model); /* hash of config + weights (+ overrides) */
const char *xl_model_dir(const xl_model *model);
xl_weights xl_model_weights(const xl_model *model);    /* the weight type chosen at load */
size_t xl_model_weight_bytes(const xl_model *model);   /* RAM of the weights in that type */
/* Bytes of the positional table (W_r R_d per distance, kept as the memory keeps its keys, and
 * the v-bias terms) that one decode step reads with its memory full, all layers: like the
 * weights, read once a step whatever the batch. */
size_t xl_model_decode_table_bytes(const xl_model *model);
/* How the weights are multiplied: "f32 GEMM" (F32 rows), "f32 panels" (F32 in panels, one
 * output a lane: the AVX-512 path), "widening" (narrow weights widened to F32, F32
 * activations), or the dot-product instructions with narrowed activations ("dot-product
 * (vdpbf16ps)", "dot-product (vpdpbusd)"); chosen at load from the type and the CPU path. */
const char *xl_model_weights_kernel(const xl_model *model);

/* ---------------------------------------------------------------------------------------- */
/* State: one session's memory. Holds, per layer, the keys and values of the last mem_len
 * positions (a ring), which is all a future step reads of the memory. */

typedef struct xl_state xl_state;

xl_code xl_state_new(const xl_model *model, xl_state **out, xl_error *err);
void xl_state_free(xl_state *state);
void xl_state_reset(xl_state *state);                       /* empty memory */
xl_code xl_state_clone(const xl_state *src, xl_state **out, xl_error *err); /* fork */
int xl_state_mem_length(const xl_state *state);             /* positions held, <= mem_len */
/* Prefix cache: a packed copy of a state (room for exactly the positions it holds; its RAM is
 * xl_state_bytes) and the placement of one back into a state of the same model and dtype, slot
 * for slot as the source held them, so the state then equals the packed one's source bit for
 * bit. xl_state_pack fails (XL_STATE) on an empty state; xl_state_unpack (XL_ARG) when dst is
 * of another model or dtype or has room for fewer positions than the source had. */
xl_code xl_state_pack(const xl_state *src, xl_state **out, xl_error *err);
xl_code xl_state_unpack(xl_state *dst, const xl_state *packed, xl_error *err);
uint64_t xl_state_tokens_fed(const xl_state *state);        /* positions fed since reset */
/* The token counter's ceiling (2^53: exact in a double and in JSON numbers). A state blob
 * claiming more is refused; from there, feeding 2^64 - 2^53 more tokens (centuries) would be
 * needed to wrap the counter. */
#define XL_STATE_MAX_FED ((uint64_t)1 << 53)
size_t xl_state_bytes(const xl_state *state);               /* RAM held by this state */
xl_kv_dtype xl_state_kv_dtype(const xl_state *state);       /* its memory dtype (the model's) */

/* Blob: magic, format version, model fingerprint, header (with the memory dtype), K/V payload
 * in the state's dtype, checksum. A blob of another dtype than the model's is widened or
 * narrowed on load; a dtype this build does not know is refused (XL_MISMATCH).
 * xl_state_serialize allocates *blob with malloc (free it with free()). */
xl_code xl_state_serialize(const xl_state *state, uint8_t **blob, size_t *blob_len,
                           xl_error *err);
/* Validates everything (magic, version, checksum, fingerprint, sizes, the ring's length and
 * head against the token counter, the counter's ceiling, finite keys and values) before use;
 * never trusts the blob. XL_MISMATCH for another model/version, XL_STATE for corruption. */
xl_code xl_state_deserialize(const xl_model *model, const uint8_t *blob, size_t blob_len,
                             xl_state **out, xl_error *err);

/* Checks that every key and value the state holds is one this model's forward pass can put
 * in its memory: a per-component bound derived from the weights (the LayerNorm before the
 * projection bounds its input; see state_blob.c). XL_STATE naming the layer, position and
 * value otherwise. Reads the embedding tables and the attention projections once per call:
 * meant for states from outside (imports), not for every load of one's own. */
xl_code xl_state_check_range(const xl_state *state, xl_error *err);

/* Delta: what feeding changed since the state had fed `from` tokens (the newest
 * min(fed - from, mem_len) positions and the ring counters), so a durable copy can be brought
 * up to date without rewriting the whole state. from < fed (else XL_ARG). *blob is malloc'd. */
xl_code xl_state_delta_encode(const xl_state *state, uint64_t from, uint8_t **blob,
                              size_t *blob_len, xl_error *err);
/* Applies a delta to the state it continues (its token counter must equal the delta's `from`):
 * the state then equals, bit for bit, the one the delta was encoded from. Validates everything
 * first (like xl_state_deserialize); on error the state is unchanged. */
xl_code xl_state_delta_apply(xl_state *state, const uint8_t *blob, size_t blob_len,
                             xl_error *err);
/* 1 when the blob claims to be a delta (its magic), 0 for a state blob or anything else. */
int xl_state_blob_is_delta(const uint8_t *blob, size_t blob_len);

/* ---------------------------------------------------------------------------------------- */
/* Workspace: per-thread scratch buffers, grown on demand. */

typedef struct xl_workspace xl_workspace;

xl_code xl_workspace_new(const xl_model *model, xl_workspace **out, xl_error *err);
void xl_workspace_free(xl_workspace *ws);

#define XL_MAX_THREADS 64
/* Threads a forward pass on this workspace uses (1, the default: the calling thread alone).
 * n > 1 starts n - 1 helper threads kept by the workspace until it is freed or set again
 * (none starts per step; between calls they sleep). One step's products with the weights are
 * split over output rows and its decode attention over heads, never over a sum, so every
 * result is bit-identical for any n. Called by the workspace's owner, between forward passes. */
xl_code xl_workspace_set_threads(xl_workspace *ws, int n_threads, xl_error *err);
int xl_workspace_threads(const xl_workspace *ws);

/* ---------------------------------------------------------------------------------------- */
/* Forward pass. Each item feeds n_tokens new positions into its own state (appending them to
 * the memory, exactly the reference's cat(mem, h)[-mem_len:] per layer input). Several items
 * run as one batched forward: one GEMM per weight matrix over all items' rows, attention per
 * item over its own memory. A state may appear in at most one item of a call. */

typedef struct xl_feed {
  xl_state *state;
  const int32_t *tokens;      /* [n_tokens] input ids */
  int n_tokens;               /* >= 1 */
  /* Optional outputs (NULL = not wanted): */
  const int32_t *targets;     /* [n_tokens]: target ids to score (e.g. tokens shifted by one);
                                 -1 = no target for that row (its target_logprobs entry is left
                                 as it was) */
  float *target_logprobs;     /* [n_tokens]: log p(targets[i] | history up to tokens[i]) */
  float *last_logprobs;       /* [vocab_size]: log-distribution after the last token */
  float *row_logprobs;        /* [n_tokens, vocab_size]: the log-distribution after every token
                                 (prompt scoring with alternatives); same values as
                                 target_logprobs and last_logprobs for the same rows */
} xl_feed;

/* On error no state is modified (inputs are validated first). */
xl_code xl_forward(const xl_model *model, xl_workspace *ws, xl_feed *items, int n_items,
                   xl_error *err);

/* ---------------------------------------------------------------------------------------- */
/* Tokenizer (owned by the model): the kind config.json names, with its options
 * ("xlserve_tokenizer_options"). Newlines: every kind but bytes/byte_table/char_table maps each
 * newline to the end-of-line token (<eos>) and decodes it back to "\n"; transfo_xl runs the Moses
 * pipeline on each line separately. */

typedef struct xl_tokenizer_info {
  xl_tokenizer_kind kind;
  const char *name;          /* "bytes", "words", "transfo_xl", "byte_table", "char_table" */
  int lower_case;            /* transfo_xl, char_table: input lowercased first */
  const char *delimiter;     /* transfo_xl: NULL = Moses pipeline; "" = characters; else split */
  const char *const *never_split; /* transfo_xl: kept whole (special tokens) */
  int n_never_split;
  const char *eos_token;     /* the end-of-line symbol, NULL when the vocabulary has none */
  const char *unk_token;     /* the unknown-word symbol, NULL when none */
  int unknown_drop;          /* byte_table, char_table: 1 = drop what the table cannot spell,
                                0 = refuse (XL_TOKENIZER naming it) */
  const char *space_symbol;  /* char_table: the symbol standing for a space */
  int spell_digits;          /* char_table: digits spelled out as words first */
  int spells_any_text;       /* 1 when every byte string has an encoding (bytes only) */
} xl_tokenizer_info;
const xl_tokenizer_info *xl_model_tokenizer(const xl_model *model);

/* Encodes text into *ids (malloc'd; free()). Text without a final newline gets no end-of-line
 * token. XL_TOKENIZER (message naming the character, byte or word) when the text cannot be
 * encoded: a table kind without the symbol (unknown: refuse), a word model without <unk>. */
xl_code xl_tokenize(const xl_model *model, const char *text, size_t len, int32_t **ids,
                    size_t *n_ids, xl_error *err);
/* Appends the bytes of one token to out (cap bytes); returns the byte count (may exceed cap:
 * then nothing is written). Word and transfo_xl tokens are preceded by a space unless
 * first_in_line (the surface form: transfo_xl's detokenizer may join them differently). */
size_t xl_token_bytes(const xl_model *model, int32_t id, int first_in_line, char *out,
                      size_t cap);
/* The vocabulary symbol of id (NULL for bytes models or an id out of range). */
const char *xl_token_symbol(const xl_model *model, int32_t id);

/* Streaming detokeniser: emits only complete UTF-8 sequences (bytes models split multi-byte
 * characters over several tokens) and, for transfo_xl, only text that later tokens cannot
 * change (the Moses detokenizer looks backwards, except that "@-@" joins its neighbours and
 * " @,@ " / " @.@ " become "," / "."). The concatenation of every push and the flush is the
 * decoded text, byte for byte, however the tokens are split between calls. Plain data: no
 * resources to free. */
typedef struct xl_detok {
  char pending[8];
  int n_pending;
  int line_start;        /* word models: next token starts a line */
  /* transfo_xl: the current line's Moses state */
  int mx_tokens;         /* tokens placed in this line */
  int mx_prepend;        /* the next token gets a space (Moses' prepend_space) */
  int mx_join;           /* the last token was a joining "@-@" */
  int mx_in_merged;      /* inside a token joined by "@-@" */
  int32_t mx_held;       /* token whose spacing waits for the next token, -1 none */
  uint32_t mx_prev_last; /* last character of the previous token */
  uint64_t mx_quotes[3]; /* parity of each quote token seen (Moses' quote_counts) */
  char mx_num[2][8];     /* partial matches of " @,@ " and " @.@ " */
  int mx_num_n[2];
} xl_detok;
void xl_detok_init(xl_detok *d);
/* Feeds one token; writes complete text to out (cap >= 64 + 2 x the longest vocab entry);
 * returns bytes written. Invalid UTF-8 from a byte model is passed through as U+FFFD. */
size_t xl_detok_push(const xl_model *model, xl_detok *d, int32_t id, char *out, size_t cap);
/* Ends the stream: writes what was held back (transfo_xl) and an incomplete trailing UTF-8
 * sequence as U+FFFD. The detokeniser can then start a new stream. */
size_t xl_detok_flush(const xl_model *model, xl_detok *d, char *out, size_t cap);

/* ---------------------------------------------------------------------------------------- */
/* Sampling. The RNG is explicit state, so a seeded request reproduces bit for bit (alone or
 * batched, on any thread). */

typedef struct xl_rng { uint64_t s[4]; } xl_rng; /* xoshiro256** */
void xl_rng_seed(xl_rng *rng, uint64_t seed);
uint64_t xl_rng_next(xl_rng *rng);
double xl_rng_uniform(xl_rng *rng); /* [0, 1) with 53 bits */

typedef struct xl_sampling {
  float temperature;        /* 0 = greedy (argmax) */
  int top_k;                /* 0 = off */
  float top_p;              /* 1 = off */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off (CTRL-style: divides positive logits) */
  float presence_penalty;   /* 0 = off (OpenAI) */
  float frequency_penalty;  /* 0 = off (OpenAI) */
} xl_sampling;

#define XL_SAMPLING_DEFAULT {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f}

/* Validates ranges; XL_ARG with the offending field named in err. */
xl_code xl_sampling_validate(const xl_sampling *s, xl_error *err);

/* Picks a token from logprobs[vocab] (as produced by xl_forward). history/n_history are the
 * tokens the penalties look at (may be NULL/0). scratch must hold 2*vocab floats + vocab ints
 * (xl_sampler_scratch_bytes). Returns the token id; *chosen_logprob gets its log-probability
 * under the model (before penalties and temperature). */
size_t xl_sampler_scratch_bytes(int vocab);
int32_t xl_sample(const float *logprobs, int vocab, const xl_sampling *s, const int32_t *history,
                  size_t n_history, xl_rng *rng, void *scratch, float *chosen_logprob);

/* Top-n alternatives by model log-probability (for the logprobs API field). */
int xl_top_logprobs(const float *logprobs, int vocab, int n, int32_t *ids, float *lps);

/* ---------------------------------------------------------------------------------------- */
/* CPU paths: which kernel family runs the forward pass. "avx512" (AVX-512F), "avx2" (AVX2 +
 * FMA), "neon" (aarch64), "portable" (plain C); "auto" (or NULL/"") = the best this CPU runs,
 * the default. Chosen once per process: call xl_cpu_select before the first forward pass (or
 * between passes, never during one). Every path gives each session the same results alone or
 * in any batch; paths differ from each other in the last bits. */
xl_code xl_cpu_select(const char *path, xl_error *err); /* XL_ARG: unknown name;
                                                           XL_UNSUPPORTED: this CPU cannot */
const char *xl_cpu_path(void);           /* the path in use: "avx512", "avx2", ... */
int xl_cpu_can_run(const char *path);    /* 1 yes, 0 not this CPU/build, -1 unknown name */
size_t xl_cpu_runnable(char *out, size_t cap); /* "avx512, avx2, portable": the paths it runs */

/* Threads for the BLAS library's matrix products (0 = leave the library's default). Call it
 * before the first forward pass; the CLI tools and the daemon both do. */
void xl_set_blas_threads(int n);
/* xlserve's own F32 GEMM as the forward pass runs it for F32 weights (`xlserve bench` sets it
 * beside the BLAS library's SGEMM): W[N, K] (row-major) laid out as a model of the family in use
 * keeps its F32 weights (panels on AVX-512, else rows; NULL without memory), then
 * y[M, N] = x[M, K] W^T with row strides ldx, ldy. */
typedef struct xl_f32_weights xl_f32_weights;
xl_f32_weights *xl_f32_weights_new(const float *W, int N, int K);
void xl_f32_weights_free(xl_f32_weights *w);
void xl_matmul_f32(const float *x, int M, int ldx, const xl_f32_weights *W, float *y, int ldy);
/* The kernel family the BLAS library runs (OpenBLAS's core name: "Haswell", "SkylakeX"). */
const char *xl_blas_core(void);
/* One SGEMM of odd sizes by the BLAS library against xlserve's own F32 kernel (the family in
 * use): the largest |difference| of an output over the sum of |products| it adds (a few 1e-7
 * when both are right; a wrong kernel gives O(1)); +Inf without memory. */
double xl_blas_self_check(void);
/* A line saying what the program did about the BLAS library's kernel family at start (the
 * CLI's re-run with another OPENBLAS_CORETYPE), kept for whoever reports it (the daemon's ready
 * line); "" when nothing was done. Set once, at start, on the main thread. */
void xl_blas_set_note(const char *note);
const char *xl_blas_note(void);

#ifdef __cplusplus
}
#endif
#endif /* XL_H */
