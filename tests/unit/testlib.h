/*
 * testlib.h: the C unit tests' tiny harness (CHECK macros, a "N passed, N failed" summary)
 * and fixtures: a random tiny Transformer-XL model directory written by C (no Python needed),
 * loading it, token ids and chunked feeding.
 * Single-threaded test code.
 */
#ifndef XL_TESTLIB_H
#define XL_TESTLIB_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "xl.h"

extern int tl_passed, tl_failed;

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (cond) tl_passed++;                                                                 \
    else {                                                                                 \
      tl_failed++;                                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
    }                                                                                      \
  } while (0)

#define CHECK_CODE(expr, code)                                                             \
  do {                                                                                     \
    xl_code c_ = (expr);                                                                   \
    if (c_ == (code)) tl_passed++;                                                         \
    else {                                                                                 \
      tl_failed++;                                                                         \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #expr,   \
              xl_code_name(c_), xl_code_name(code));                                       \
    }                                                                                      \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                              \
  do {                                                                                     \
    double a_ = (a), b_ = (b);                                                             \
    if (fabs(a_ - b_) <= (tol)) tl_passed++;                                               \
    else {                                                                                 \
      tl_failed++;                                                                         \
      fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g (tolerance %g)\n", __FILE__, __LINE__,  \
              #a, a_, #b, b_, (double)(tol));                                              \
    }                                                                                      \
  } while (0)

/* Repeats the statement(s) after `seconds` (pumping events) until `cond` holds; once `seconds`
 * of wall-clock time have passed the test fails with a message instead of hanging. */
#define PUMP_UNTIL(cond, seconds, ...)                                                     \
  do {                                                                                     \
    double until_ = tl_now() + (seconds);                                                  \
    while (!(cond)) {                                                                      \
      if (tl_now() > until_) {                                                             \
        tl_failed++;                                                                       \
        fprintf(stderr, "%s:%d: timed out after %g s waiting for %s\n", __FILE__, __LINE__, \
                (double)(seconds), #cond);                                                 \
        break;                                                                             \
      }                                                                                    \
      __VA_ARGS__;                                                                         \
    }                                                                                      \
  } while (0)

/* Runs a test function, printing its name; only the functions XL_TEST_RUN names when it is set
 * (comma-separated names or shell patterns: XL_TEST_RUN=test_words ./build/test_core_text). */
#define RUN(fn)                                                                            \
  do {                                                                                     \
    if (!tl_selected(#fn)) break;                                                          \
    int f0_ = tl_failed;                                                                   \
    fn();                                                                                  \
    printf("%-44s %s\n", #fn, tl_failed == f0_ ? "ok" : "FAILED");                         \
  } while (0)

/* Whether XL_TEST_RUN (unset: every test) selects the test function NAME; counts those run. */
int tl_selected(const char *name);
/* Prints "N passed, M failed" and returns the exit status (failure too when XL_TEST_RUN is set
 * and selected no test function: a misspelt name must not pass). */
int tl_summary(void);
/* Seconds on the monotonic clock. */
double tl_now(void);

typedef struct {
  int d_model, n_layer, n_head, d_head, d_inner, mem_len, same_length, pre_lnorm, vocab;
  unsigned seed;
  int words; /* word-level: writes vocab.txt with <eos>, <unk>, w0..wN */
  int adaptive; /* 1: cutoffs at vocab / 4 and vocab / 2 with div_val 2: an adaptive input and
                   softmax of three clusters (d_model, d_model / 2, d_model / 4 wide), each
                   with its projection (tied to the input's) */
} tl_model_spec;

#define TL_MODEL_SPEC_DEFAULT {32, 2, 2, 16, 64, 24, 1, 0, 256, 1, 0, 0}
/* The fuzzers' model (1 layer, d_model 8, mem_len 6): fuzz/make_seeds.c's seed blobs are
 * states of it, so they carry the fingerprint fuzz_state_blob.c's model checks. */
#define TL_MODEL_SPEC_FUZZ {8, 1, 2, 4, 8, 6, 1, 0, 256, 1, 0, 0}

/* A fresh temporary directory under $XL_TMP (or /tmp); returns a static-lifetime path. */
const char *tl_tmpdir(const char *tag);
/* Writes config.json + model.safetensors (+ vocab.txt) of a random model into dir. */
int tl_write_model(const char *dir, const tl_model_spec *spec);
/* Writes a file with the given bytes. */
int tl_write_file(const char *path, const void *data, size_t len);
/* Loads the model in dir with the memory dtype kv_dtype (every other option at its default);
 * NULL on failure, the error printed to stderr. */
xl_model *tl_load_model(const char *dir, xl_kv_dtype kv_dtype);
/* t[0..n): token ids in [0, 251) from seed, the same for the same seed. */
void tl_tokens(int32_t *t, int n, unsigned seed);
/* Feeds t[from..to) to state s in chunks of `chunk` tokens counted from `from` (the last one may
 * be shorter), one forward each; log p(t[i+1]) into lp[i] (lp: to entries). 0, or -1 when a
 * forward fails. */
int tl_feed_chunks(xl_model *m, xl_workspace *ws, xl_state *s, const int32_t *t, int from, int to,
                   int chunk, float *lp);
/* Whether two states are equal bit for bit in everything a later step reads: the counters and
 * every held position's keys and values (their serialisations are equal byte for byte). */
int tl_same_state(const xl_state *a, const xl_state *b);

#endif
