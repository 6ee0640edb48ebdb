/*
 * sampling.c: the RNG (xoshiro256**, seeded through splitmix64) and the token sampler:
 * penalties, greedy, temperature, top-k, top-p, min-p, and the top-n log-probability list.
 * Pure functions of their arguments: reproducible bit for bit for a given seed, on any
 * thread, alone or batched.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void xl_rng_seed(xl_rng *rng, uint64_t seed) {
  for (int i = 0; i < 4; i++) { /* splitmix64 */
    uint64_t z = (seed += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    rng->s[i] = z ^ (z >> 31);
  }
}

uint64_t xl_rng_next(xl_rng *rng) {
  uint64_t *s = rng->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double xl_rng_uniform(xl_rng *rng) { return (double)(xl_rng_next(rng) >> 11) * 0x1.0p-53; }

xl_code xl_sampling_validate(const xl_sampling *s, xl_error *err) {
  if (!(s->temperature >= 0.0f && s->temperature <= 100.0f))
    return xl_fail(err, XL_ARG, "temperature must be in [0, 100]");
  if (s->top_k < 0) return xl_fail(err, XL_ARG, "top_k must be >= 0");
  if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
    return xl_fail(err, XL_ARG, "top_p must be in (0, 1]");
  if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
    return xl_fail(err, XL_ARG, "min_p must be in [0, 1]");
  if (!(s->repetition_penalty > 0.0f && s->repetition_penalty <= 10.0f))
    return xl_fail(err, XL_ARG, "repetition_penalty must be in (0, 10]");
  if (!(s->presence_penalty >= -2.0f && s->presence_penalty <= 2.0f))
    return xl_fail(err, XL_ARG, "presence_penalty must be in [-2, 2]");
  if (!(s->frequency_penalty >= -2.0f && s->frequency_penalty <= 2.0f))
    return xl_fail(err, XL_ARG, "frequency_penalty must be in [-2, 2]");
  return XL_OK;
}

size_t xl_sampler_scratch_bytes(int vocab) { return (size_t)vocab * 20 + 16; }

static int32_t argmax(const float *v, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

/* Moves the k largest (val, idx) pairs to the front (unordered), O(n) expected. */
static void select_top(float *val, int32_t *idx, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    float pivot = val[(lo + hi) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (val[i] > pivot) i++;
      while (val[j] < pivot) j--;
      if (i <= j) {
        float tv = val[i]; val[i] = val[j]; val[j] = tv;
        int32_t ti = idx[i]; idx[i] = idx[j]; idx[j] = ti;
        i++;
        j--;
      }
    }
    if (k - 1 <= j) hi = j;
    else if (k - 1 >= i) lo = i;
    else break;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorts candidates by value descending, ties by id ascending: each pair becomes one 64-bit
 * key (order-preserving float bits, inverted, above the id), so qsort needs no context. */
static void sort_desc(float *val, int32_t *idx, int n, uint64_t *keys) {
  for (int i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &val[i], 4);
    bits = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u; /* ascending as unsigned */
    keys[i] = ((uint64_t)~bits << 32) | (uint32_t)idx[i];
  }
  qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
  for (int i = 0; i < n; i++) {
    uint32_t bits = ~(uint32_t)(keys[i] >> 32);
    bits = (bits & 0x80000000u) ? bits & 0x7fffffffu : ~bits;
    memcpy(&val[i], &bits, 4);
    idx[i] = (int32_t)(uint32_t)keys[i];
  }
}

static void apply_penalties(float *val, int vocab, const xl_sampling *s, const int32_t *history,
                            size_t n_history, int32_t *count) {
  for (size_t i = 0; i < n_history; i++)
    if (history[i] >= 0 && history[i] < vocab) count[history[i]] = 0;
  for (size_t i = 0; i < n_history; i++)
    if (history[i] >= 0 && history[i] < vocab) count[history[i]]++;
  for (size_t i = 0; i < n_history; i++) {
    int32_t t = history[i];
    if (t < 0 || t >= vocab || count[t] == 0) continue;
    float v = val[t];
    v = v > 0.0f ? v / s->repetition_penalty : v * s->repetition_penalty;
    v -= s->presence_penalty + s->frequency_penalty * (float)count[t];
    val[t] = v;
    count[t] = 0; /* once per distinct token */
  }
}

int32_t xl_sample(const float *logprobs, int vocab, const xl_sampling *s, const int32_t *history,
                  size_t n_history, xl_rng *rng, void *scratch, float *chosen_logprob) {
  uint64_t *keys = scratch;
  float *val = (float *)(keys + vocab);
  int32_t *idx = (int32_t *)(val + vocab), *count = idx + vocab;
  memcpy(val, logprobs, (size_t)vocab * sizeof *val);
  if (history && n_history &&
      (s->repetition_penalty != 1.0f || s->presence_penalty != 0.0f || s->frequency_penalty != 0.0f))
    apply_penalties(val, vocab, s, history, n_history, count);

  int32_t chosen;
  if (s->temperature == 0.0f) {
    chosen = argmax(val, vocab);
  } else {
    int n = vocab;
    for (int i = 0; i < vocab; i++) idx[i] = i;
    if (s->top_k > 0 && s->top_k < n) {
      select_top(val, idx, n, s->top_k);
      n = s->top_k;
    }
    /* top-p and min-p need the order; sorting also makes the draw independent of how top-k
     * left the candidates. Plain temperature sampling draws in vocabulary order. */
    int sorted = n < vocab || s->top_p < 1.0f || s->min_p > 0.0f;
    if (sorted) sort_desc(val, idx, n, keys);
    float mx = val[0];
    if (!sorted)
      for (int i = 1; i < n; i++)
        if (val[i] > mx) mx = val[i];
    for (int i = 0; i < n; i++) val[i] = expf((val[i] - mx) / s->temperature); /* p / p_max */
    if (s->min_p > 0.0f) /* sorted: cut at the first candidate under min_p * p_max */
      for (int i = 1; i < n; i++)
        if (val[i] < s->min_p) {
          n = i;
          break;
        }
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += val[i];
    if (s->top_p < 1.0f) { /* smallest prefix whose mass reaches top_p */
      double acc = 0.0, target = (double)s->top_p * sum;
      for (int i = 0; i < n; i++) {
        acc += val[i];
        if (acc >= target) {
          n = i + 1;
          break;
        }
      }
      sum = 0.0;
      for (int i = 0; i < n; i++) sum += val[i];
    }
    double u = xl_rng_uniform(rng) * sum, acc = 0.0;
    chosen = idx[n - 1];
    for (int i = 0; i < n; i++) {
      acc += val[i];
      if (u < acc) {
        chosen = idx[i];
        break;
      }
    }
  }
  if (chosen_logprob) *chosen_logprob = logprobs[chosen];
  return chosen;
}

int xl_top_logprobs(const float *logprobs, int vocab, int n, int32_t *ids, float *lps) {
  if (n > vocab) n = vocab;
  int have = 0;
  for (int i = 0; i < vocab; i++) {
    float v = logprobs[i];
    if (have == n && !(v > lps[n - 1])) continue;
    int pos = have < n ? have++ : n - 1;
    while (pos > 0 && v > lps[pos - 1]) {
      lps[pos] = lps[pos - 1];
      ids[pos] = ids[pos - 1];
      pos--;
    }
    lps[pos] = v;
    ids[pos] = i;
  }
  return have;
}
