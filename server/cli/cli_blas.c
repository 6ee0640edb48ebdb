/*
 * cli_blas.c: makes OpenBLAS run the kernels of the CPU it runs on. OpenBLAS built for many
 * CPUs (as Debian's) picks its kernel family ("core") from the CPUID model; on a virtual
 * machine whose model is masked it can fall back to an old family (Prescott: SSE3) while the
 * CPU has AVX2 or AVX-512, and runs every SGEMM several times slower.
 *
 * cli_blas_fix(), first thing in main(), before anything calls BLAS: when the user did not set
 * OPENBLAS_CORETYPE and the family OpenBLAS chose is weaker than the CPU's instruction set, the
 * program runs itself again once (exec, same arguments) with OPENBLAS_CORETYPE naming the
 * matching family (SkylakeX for AVX-512, Haswell or Zen for AVX2 + FMA); XLSERVE_BLAS_FIX marks
 * the re-run, so it happens once. The re-run checks one SGEMM against xlserve's own kernel
 * (xl_blas_self_check); if they disagree it runs once more with the library's own choice. An
 * OPENBLAS_CORETYPE set by the user is always kept. What was done is kept in core's
 * xl_blas_note() (the daemon's ready line) and, for the CLI tools, printed to stderr once.
 * Tests: XLSERVE_BLAS_CORE_TEST=NAME acts as if OpenBLAS had chosen NAME; XLSERVE_BLAS_CHECK_TEST=
 * fail as if the SGEMM check had failed. Main thread, at start.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli_common.h"

#define GUARD "XLSERVE_BLAS_FIX" /* "FROM>TO" on the re-run; "FROM>TO>ERROR" after a failed check */
#define CHECK_LIMIT 1e-4         /* SGEMM vs xlserve's kernel: relative to the sum of |products| */

/* How much of the x86 instruction set a core's kernels use: 0 SSE only, 1 AVX, 2 AVX2 + FMA,
 * 3 AVX-512; -1 a name not known here (other architectures, newer OpenBLAS): left alone. */
static int core_rank(const char *core) {
  static const char *const SSE[] = {"katmai", "coppermine", "northwood", "prescott", "banias",
                                    "core2", "penryn", "dunnington", "nehalem", "atom", "nano",
                                    "athlon", "opteron", "opteron_sse3", "barcelona", "bobcat"};
  static const char *const AVX[] = {"sandybridge", "bulldozer", "piledriver", "steamroller"};
  static const char *const AVX2[] = {"haswell", "zen", "excavator"};
  static const char *const AVX512[] = {"skylakex", "cooperlake", "sapphirerapids"};
  for (size_t i = 0; i < sizeof SSE / sizeof *SSE; i++)
    if (!strcasecmp(core, SSE[i])) return 0;
  for (size_t i = 0; i < sizeof AVX / sizeof *AVX; i++)
    if (!strcasecmp(core, AVX[i])) return 1;
  for (size_t i = 0; i < sizeof AVX2 / sizeof *AVX2; i++)
    if (!strcasecmp(core, AVX2[i])) return 2;
  for (size_t i = 0; i < sizeof AVX512 / sizeof *AVX512; i++)
    if (!strcasecmp(core, AVX512[i])) return 3;
  return -1;
}

/* The core matching this CPU and its rank (*isa: what the CPU has), or NULL (not x86-64, or
 * nothing past AVX). */
static const char *wanted_core(int *rank, const char **isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    *rank = 3, *isa = "AVX-512";
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *rank = 2, *isa = "AVX2 + FMA";
    return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
  }
#endif
  *rank = -1, *isa = "";
  return NULL;
}

/* Runs this program again with the same arguments (the environment as now); returns only when
 * it cannot. */
static void rerun(char **argv) {
  execv("/proc/self/exe", argv);
  execvp(argv[0], argv);
}

static void keep(const char *note, int quiet) {
  xl_blas_set_note(note);
  if (!quiet && *note) fprintf(stderr, "xlserve: %s\n", note);
}

/* The re-run: check the SGEMM under the core asked for; on a disagreement, once more without. */
static void after_rerun(char *guard, char **argv, int quiet) {
  char note[1024], from[160] = "", to[160] = "";
  double failed = -1;
  char *p = strchr(guard, '>'), *q = p ? strchr(p + 1, '>') : NULL;
  if (p) {
    *p = '\0';
    if (q) *q = '\0', failed = strtod(q + 1, NULL);
    snprintf(from, sizeof from, "%s", guard);
    snprintf(to, sizeof to, "%s", p + 1);
  }
  const char *core = xl_blas_core();
  if (failed >= 0) {
    snprintf(note, sizeof note,
             "OpenBLAS chose core %s, weaker than this CPU; under OPENBLAS_CORETYPE=%s one SGEMM "
             "disagreed with xlserve's kernel (relative difference %.3g): kept the library's "
             "choice, core %s",
             from, to, failed, core);
    unsetenv(GUARD);
    keep(note, quiet);
    return;
  }
  const char *forced = getenv("XLSERVE_BLAS_CHECK_TEST");
  double diff = xl_blas_self_check();
  if (forced && !strcmp(forced, "fail")) diff = 1.0;
  if (!(diff <= CHECK_LIMIT)) {
    char again[400];
    snprintf(again, sizeof again, "%s>%s>%g", from, to, diff);
    setenv(GUARD, again, 1);
    unsetenv("OPENBLAS_CORETYPE");
    rerun(argv);
    snprintf(note, sizeof note,
             "OpenBLAS under OPENBLAS_CORETYPE=%s disagreed with xlserve's kernel (relative "
             "difference %.3g) and the program could not run itself again: results may be wrong",
             to, diff);
  } else if (strcasecmp(core, to)) {
    snprintf(note, sizeof note,
             "OpenBLAS chose core %s, weaker than this CPU; re-ran with OPENBLAS_CORETYPE=%s but "
             "the library runs core %s (built for one CPU family?)",
             from, to, core);
  } else {
    snprintf(note, sizeof note,
             "OpenBLAS chose core %s, weaker than this CPU; re-ran with OPENBLAS_CORETYPE=%s: "
             "core %s, SGEMM checked against xlserve's kernel (relative difference %.2g)",
             from, to, core, diff);
  }
  unsetenv(GUARD);
  keep(note, quiet);
}

void cli_blas_fix(char **argv, int quiet) {
  char *guard = getenv(GUARD);
  if (guard) {
    char copy[160];
    snprintf(copy, sizeof copy, "%s", guard);
    after_rerun(copy, argv, quiet);
    return;
  }
  const char *user = getenv("OPENBLAS_CORETYPE");
  if (user && *user) return; /* the user's choice */
  const char *test = getenv("XLSERVE_BLAS_CORE_TEST");
  const char *core = test && *test ? test : xl_blas_core(), *isa;
  int want_rank, rank = core_rank(core);
  const char *want = wanted_core(&want_rank, &isa);
  if (!want || rank < 0 || rank >= want_rank) return;
  char mark[160], note[512];
  snprintf(mark, sizeof mark, "%s>%s", core, want);
  setenv(GUARD, mark, 1);
  setenv("OPENBLAS_CORETYPE", want, 1);
  rerun(argv);
  unsetenv(GUARD); /* could not: carry on with the weak core, and say so */
  unsetenv("OPENBLAS_CORETYPE");
  snprintf(note, sizeof note,
           "OpenBLAS chose core %s, weaker than this CPU (%s); could not run again with "
           "OPENBLAS_CORETYPE=%s: set it yourself",
           core, isa, want);
  keep(note, quiet);
}

size_t cli_blas_describe(char *out, size_t cap) {
  const char *core = xl_blas_core(), *user = getenv("OPENBLAS_CORETYPE"), *isa;
  int want_rank, rank = core_rank(core);
  const char *want = wanted_core(&want_rank, &isa);
  int n;
  if (*xl_blas_note())
    n = snprintf(out, cap, "%s (%s)", core, xl_blas_note());
  else if (user && *user && want && rank >= 0 && rank < want_rank)
    n = snprintf(out, cap,
                 "%s (OPENBLAS_CORETYPE=%s set by the user: kept, though this CPU has %s: %s)",
                 core, user, isa, want);
  else if (user && *user)
    n = snprintf(out, cap, "%s (OPENBLAS_CORETYPE=%s set by the user)", core, user);
  else n = snprintf(out, cap, "%s (the library's choice)", core);
  return n < 0 ? 0 : (size_t)n;
}
