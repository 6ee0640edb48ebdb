/*
 * cli_bandwidth.c: the benchmarks' read-bandwidth probes (cli_bandwidth.h): one thread, or n
 * threads at once, summing a buffer far larger than the last-level cache. Main thread (the
 * n-thread probe starts and joins its own threads).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli_bandwidth.h"
#include "cli_common.h"
#include "util.h"

size_t cli_probe_bytes(void) {
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  size_t probe = (size_t)512 << 20;
  if (llc > 0 && (size_t)llc * 4 > probe) probe = (size_t)llc * 4;
  if (probe > ((size_t)1 << 30)) probe = (size_t)1 << 30;
  return probe;
}

/* The bandwidth probe's reading loop: the sum of a buffer of n 64-byte lines, four independent
 * 64-byte vector sums (GCC/Clang vector extensions: the widest loads the build's target has,
 * on any architecture). A scalar loop of 64-bit adds keeps too few loads in flight to reach
 * one core's read bandwidth (on an AVX-512 VM about two thirds of it, less than the decode
 * step's own kernels read): the limit must be what a good kernel can reach. */
typedef uint64_t bw_line __attribute__((vector_size(64)));

static uint64_t bw_sum(const bw_line *mem, size_t n_lines) {
  bw_line s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
  size_t i = 0;
  for (; i + 4 <= n_lines; i += 4) {
    s0 += mem[i];
    s1 += mem[i + 1];
    s2 += mem[i + 2];
    s3 += mem[i + 3];
  }
  for (; i < n_lines; i++) s0 += mem[i];
  bw_line s = s0 + s1 + s2 + s3;
  return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

/* A buffer of n_lines 64-byte lines, aligned, every byte written (mapped in); NULL when out of
 * memory. */
static bw_line *bw_buffer(size_t n_lines) {
  bw_line *mem = aligned_alloc(64, n_lines * sizeof *mem);
  if (!mem) return NULL;
  uint64_t *w = (uint64_t *)(void *)mem;
  for (size_t i = 0; i < n_lines * 8; i++) w[i] = i * 0x9E3779B97F4A7C15ULL;
  return mem;
}

double cli_read_bandwidth(size_t bytes, int passes, int thread_clock) {
  size_t n = bytes / sizeof(bw_line);
  bw_line *mem = bw_buffer(n);
  if (!mem) return -1;
  double best = 0;
  volatile uint64_t sink = 0;
  for (int p = 0; p < passes; p++) {
    double t0 = thread_clock ? cli_thread_cpu_now() : now_mono();
    sink += bw_sum(mem, n);
    double el = (thread_clock ? cli_thread_cpu_now() : now_mono()) - t0;
    if (el > 0 && n * sizeof *mem / el > best) best = n * sizeof *mem / el;
  }
  (void)sink;
  free(mem);
  return best;
}

typedef struct {
  const bw_line *mem;
  size_t n;
  double t0, t1;
  uint64_t sum;
} bw_share;

static void *bw_thread(void *arg) {
  bw_share *b = arg;
  b->t0 = now_mono();
  b->sum = bw_sum(b->mem, b->n);
  b->t1 = now_mono();
  return NULL;
}

double cli_read_bandwidth_threads(size_t bytes, int passes, int n_threads) {
  if (n_threads < 1 || n_threads > 8) return -1;
  size_t n = bytes / sizeof(bw_line) / (size_t)n_threads * (size_t)n_threads;
  bw_line *mem = bw_buffer(n);
  if (!mem) return -1;
  double best = 0;
  volatile uint64_t sink = 0;
  const size_t per = n / (size_t)n_threads;
  for (int p = 0; p < passes; p++) {
    pthread_t th[8];
    bw_share sh[8];
    int started = 1;
    for (int t = 0; t < n_threads; t++) sh[t] = (bw_share){mem + per * t, per, 0, 0, 0};
    for (int t = 1; t < n_threads && !pthread_create(&th[t], NULL, bw_thread, &sh[t]); t++)
      started++;
    bw_thread(&sh[0]);
    double t0 = sh[0].t0, t1 = sh[0].t1;
    for (int t = 1; t < started; t++) {
      pthread_join(th[t], NULL);
      t0 = sh[t].t0 < t0 ? sh[t].t0 : t0;
      t1 = sh[t].t1 > t1 ? sh[t].t1 : t1;
    }
    for (int t = 0; t < started; t++) sink += sh[t].sum;
    if (started < n_threads) { /* a thread could not start: no figure */
      free(mem);
      return -1;
    }
    if (t1 > t0 && per * n_threads * sizeof *mem / (t1 - t0) > best)
      best = per * n_threads * sizeof *mem / (t1 - t0);
  }
  (void)sink;
  free(mem);
  return best;
}
