/*
 * test_core_text.c: tokenizers (bytes round-trip any text; words: <eos>, <unk>), the
 * streaming detokeniser (only complete UTF-8, U+FFFD for broken input), and the sampler
 * (seed reproducibility, greedy equivalences, penalties, the sampled distribution).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static xl_model *load(tl_model_spec spec, const char *tag) {
  const char *dir = tl_tmpdir(tag);
  xl_model *m = NULL;
  xl_error err;
  if (tl_write_model(dir, &spec) || xl_model_load(dir, NULL, &m, &err)) return NULL;
  return m;
}

/* Detokenises ids one at a time, returning the concatenated output. */
static size_t detok_all(const xl_model *m, const int32_t *ids, size_t n, char *out) {
  xl_detok d;
  xl_detok_init(&d);
  size_t w = 0;
  for (size_t i = 0; i < n; i++) w += xl_detok_push(m, &d, ids[i], out + w, 2048);
  w += xl_detok_flush(m, &d, out + w, 16);
  out[w] = '\0';
  return w;
}

static void test_bytes_round_trip(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  xl_model *m = load(spec, "tokb");
  if (!m) { CHECK(0); return; }
  const char *text = "Emma Woodhouse, handsome — clever, and rich 😀 naïve\n\tend";
  int32_t *ids;
  size_t n;
  xl_error err;
  CHECK_CODE(xl_tokenize(m, text, strlen(text), &ids, &n, &err), XL_OK);
  CHECK(n == strlen(text));
  static char out[8192];
  size_t w = detok_all(m, ids, n, out);
  CHECK(w == strlen(text) && !memcmp(out, text, w));
  /* streaming: a 4-byte emoji arrives over 4 tokens, nothing is emitted until complete */
  xl_detok d;
  xl_detok_init(&d);
  const uint8_t emoji[4] = {0xF0, 0x9F, 0x98, 0x80};
  char buf[64];
  for (int i = 0; i < 3; i++) CHECK(xl_detok_push(m, &d, emoji[i], buf, sizeof buf) == 0);
  CHECK(xl_detok_push(m, &d, emoji[3], buf, sizeof buf) == 4 && !memcmp(buf, emoji, 4));
  /* broken sequences become U+FFFD and never swallow the next character */
  const int32_t broken[] = {0xE2, 0x82, 'A', 0xFF, 0xC0, 0xAF, 0xED, 0xA0, 0x80, 0xE2};
  w = detok_all(m, broken, sizeof broken / sizeof *broken, out);
  const char *want = "\xEF\xBF\xBD" "A" "\xEF\xBF\xBD" "\xEF\xBF\xBD" "\xEF\xBF\xBD"
                     "\xEF\xBF\xBD" "\xEF\xBF\xBD" "\xEF\xBF\xBD" "\xEF\xBF\xBD";
  CHECK(!strcmp(out, want));
  free(ids);
  xl_model_free(m);
}

static void test_words(void) {
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  spec.words = 1;
  spec.vocab = 300;
  xl_model *m = load(spec, "tokw");
  if (!m) { CHECK(0); return; }
  int32_t *ids;
  size_t n;
  xl_error err;
  const char *text = "w5 w17  nothere\tw299\nw2\n";
  CHECK_CODE(xl_tokenize(m, text, strlen(text), &ids, &n, &err), XL_OK);
  int32_t want[] = {5, 17, 1, 299, 0, 2, 0}; /* <eos>=0, <unk>=1 */
  CHECK(n == 7 && !memcmp(ids, want, sizeof want));
  static char out[4096];
  detok_all(m, ids, n, out);
  CHECK(!strcmp(out, "w5 w17 <unk> w299\nw2\n"));
  free(ids);
  xl_model_free(m);
}

static void test_sampling(void) {
  enum { V = 8 };
  float lp[V];
  double p[V] = {0.30, 0.25, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02};
  for (int i = 0; i < V; i++) lp[i] = (float)log(p[i]);
  void *scratch = malloc(xl_sampler_scratch_bytes(V));
  xl_rng r1, r2;
  xl_sampling s = XL_SAMPLING_DEFAULT;
  xl_error err;
  CHECK_CODE(xl_sampling_validate(&s, &err), XL_OK);

  /* same seed, same sequence */
  xl_rng_seed(&r1, 42);
  xl_rng_seed(&r2, 42);
  int same = 1;
  for (int i = 0; i < 200; i++)
    same &= xl_sample(lp, V, &s, NULL, 0, &r1, scratch, NULL) ==
            xl_sample(lp, V, &s, NULL, 0, &r2, scratch, NULL);
  CHECK(same);

  /* the sampled distribution matches p (60k draws: each frequency within 0.01) */
  int count[V] = {0};
  xl_rng_seed(&r1, 7);
  for (int i = 0; i < 60000; i++) count[xl_sample(lp, V, &s, NULL, 0, &r1, scratch, NULL)]++;
  for (int i = 0; i < V; i++) CHECK_NEAR(count[i] / 60000.0, p[i], 0.01);

  /* top-k 2: only the two best, in proportion 0.30 : 0.25 */
  memset(count, 0, sizeof count);
  s.top_k = 2;
  for (int i = 0; i < 20000; i++) count[xl_sample(lp, V, &s, NULL, 0, &r1, scratch, NULL)]++;
  CHECK(count[0] + count[1] == 20000);
  CHECK_NEAR(count[0] / 20000.0, 0.30 / 0.55, 0.02);

  /* top-p 0.5: {0.30, 0.25} reach 0.55 >= 0.5 */
  s.top_k = 0;
  s.top_p = 0.5f;
  memset(count, 0, sizeof count);
  for (int i = 0; i < 5000; i++) count[xl_sample(lp, V, &s, NULL, 0, &r1, scratch, NULL)]++;
  CHECK(count[0] + count[1] == 5000 && count[1] > 0);

  /* min-p 0.5: keeps p >= 0.15 (half of 0.30) */
  s.top_p = 1.0f;
  s.min_p = 0.5f;
  memset(count, 0, sizeof count);
  for (int i = 0; i < 5000; i++) count[xl_sample(lp, V, &s, NULL, 0, &r1, scratch, NULL)]++;
  CHECK(count[0] + count[1] + count[2] == 5000 && count[2] > 0);

  /* greedy, and a presence penalty that moves the argmax */
  xl_sampling g = XL_SAMPLING_DEFAULT;
  g.temperature = 0.0f;
  float chosen_lp;
  CHECK(xl_sample(lp, V, &g, NULL, 0, &r1, scratch, &chosen_lp) == 0);
  CHECK_NEAR(chosen_lp, log(0.30), 1e-6);
  int32_t hist[3] = {0, 0, 5};
  g.presence_penalty = 1.0f;
  CHECK(xl_sample(lp, V, &g, hist, 3, &r1, scratch, NULL) == 1);
  g.presence_penalty = 0.0f;
  g.repetition_penalty = 2.0f; /* log p(0) * 2 = -2.41 < log p(1) = -1.39 */
  CHECK(xl_sample(lp, V, &g, hist, 3, &r1, scratch, NULL) == 1);

  /* invalid settings name the field */
  xl_sampling bad = XL_SAMPLING_DEFAULT;
  bad.top_p = 0.0f;
  CHECK_CODE(xl_sampling_validate(&bad, &err), XL_ARG);
  CHECK(strstr(err.message, "top_p") != NULL);
  bad = (xl_sampling)XL_SAMPLING_DEFAULT;
  bad.temperature = -1.0f;
  CHECK_CODE(xl_sampling_validate(&bad, &err), XL_ARG);

  /* top log-probs */
  int32_t ids[3];
  float tl[3];
  CHECK(xl_top_logprobs(lp, V, 3, ids, tl) == 3);
  CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2 && tl[0] >= tl[1] && tl[1] >= tl[2]);
  free(scratch);
}

int main(void) {
  RUN(test_bytes_round_trip);
  RUN(test_words);
  RUN(test_sampling);
  return tl_summary();
}
