/*
 * cpu.c: which kernel family runs. Detects what the CPU can run (x86-64: AVX-512F, AVX2+FMA;
 * aarch64: NEON, always present; anything: portable C) and holds the chosen table. The choice
 * is made once per process: the best family on first use, or the one xl_cpu_select names
 * (the CLI's --cpu / XLSERVE_CPU). xl_kern() may be called by any thread; xl_cpu_select only
 * while no forward pass runs (at start, or between the benchmark's measurements).
 */
#include <stdatomic.h>
#include <string.h>

#include "internal.h"
#include "kernels.h"

typedef struct {
  const char *name;
  const xl_kernels *table; /* NULL: not built for this architecture */
  int (*runs)(void);       /* 1 when this CPU can run it */
} cpu_path;

static int always(void) { return 1; }

#if defined(__x86_64__)
static int has_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
static int has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* The dot-product instruction sets (asked by every narrow GEMM call): detected once. Relaxed
 * atomics: threads that race all store the same answer. */
static int dot_set(atomic_int *cached, int bf16) {
  int v = atomic_load_explicit(cached, memory_order_relaxed);
  if (v < 0) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        (bf16 ? __builtin_cpu_supports("avx512bf16") : __builtin_cpu_supports("avx512vnni"));
#else
    (void)bf16;
    v = 0;
#endif
    atomic_store_explicit(cached, v, memory_order_relaxed);
  }
  return v;
}

int xl_cpu_has_avx512_bf16(void) {
  static atomic_int cached = -1;
  return dot_set(&cached, 1);
}

int xl_cpu_has_avx512_vnni(void) {
  static atomic_int cached = -1;
  return dot_set(&cached, 0);
}

/* Best first: auto takes the first one the CPU runs. */
static const cpu_path PATHS[] = {
#if defined(__x86_64__)
    {"avx512", &xl_kernels_avx512, has_avx512},
    {"avx2", &xl_kernels_avx2, has_avx2},
#else
    {"avx512", NULL, NULL},
    {"avx2", NULL, NULL},
#endif
#if defined(__aarch64__)
    {"neon", &xl_kernels_neon, always},
#else
    {"neon", NULL, NULL},
#endif
    {"portable", &xl_kernels_portable, always},
};
#define N_PATHS (int)(sizeof PATHS / sizeof PATHS[0])

static const xl_kernels *current; /* NULL until first use or xl_cpu_select */

static int path_runs(const cpu_path *p) { return p->table && p->runs(); }

static const xl_kernels *best(void) {
  for (int i = 0; i < N_PATHS; i++)
    if (path_runs(&PATHS[i])) return PATHS[i].table;
  return &xl_kernels_portable;
}

const xl_kernels *xl_kern(void) {
  const xl_kernels *k = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  if (!k) { /* racing first calls store the same table */
    k = best();
    __atomic_store_n(&current, k, __ATOMIC_RELEASE);
  }
  return k;
}

int xl_cpu_can_run(const char *path) {
  if (path && !strcmp(path, "auto")) return 1;
  for (int i = 0; i < N_PATHS; i++)
    if (path && !strcmp(path, PATHS[i].name)) return path_runs(&PATHS[i]);
  return -1;
}

size_t xl_cpu_runnable(char *out, size_t cap) {
  size_t len = 0;
  if (cap) out[0] = '\0';
  for (int i = 0; i < N_PATHS; i++) {
    if (!path_runs(&PATHS[i])) continue;
    size_t n = strlen(PATHS[i].name) + (len ? 2 : 0);
    if (len + n + 1 > cap) break;
    memcpy(out + len, len ? ", " : "", len ? 2 : 0);
    memcpy(out + len + (len ? 2 : 0), PATHS[i].name, strlen(PATHS[i].name) + 1);
    len += n;
  }
  return len;
}

xl_code xl_cpu_select(const char *path, xl_error *err) {
  xl_error_clear(err);
  if (!path || !*path || !strcmp(path, "auto")) {
    __atomic_store_n(&current, best(), __ATOMIC_RELEASE);
    return XL_OK;
  }
  char runnable[64];
  xl_cpu_runnable(runnable, sizeof runnable);
  for (int i = 0; i < N_PATHS; i++) {
    if (strcmp(path, PATHS[i].name)) continue;
    if (!PATHS[i].table)
      return xl_fail(err, XL_UNSUPPORTED,
                     "CPU path '%s' is not built for this architecture (this CPU runs: %s)", path,
                     runnable);
    if (!PATHS[i].runs())
      return xl_fail(err, XL_UNSUPPORTED,
                     "CPU path '%s' needs instructions this CPU lacks (this CPU runs: %s)", path,
                     runnable);
    __atomic_store_n(&current, PATHS[i].table, __ATOMIC_RELEASE);
    return XL_OK;
  }
  return xl_fail(err, XL_ARG,
                 "unknown CPU path '%s' (auto, avx512, avx2, neon or portable; this CPU runs: %s)",
                 path, runnable);
}

const char *xl_cpu_path(void) { return xl_kern()->name; }
