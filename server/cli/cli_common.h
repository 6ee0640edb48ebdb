/*
 * cli_common.h: helpers shared by the CLI subcommands (main thread only): option parsing
 * with range checks, model loading with one clear message, and token/text file reading.
 */
#ifndef XL_CLI_COMMON_H
#define XL_CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "xl.h"

/* Parses argv[*i + 1] as the value of option argv[*i]; prints "xlserve CMD: --opt: problem"
 * and returns 0 on a missing or bad value. */
int cli_int_arg(const char *cmd, int argc, char **argv, int *i, long lo, long hi, int *out);
int cli_u64_arg(const char *cmd, int argc, char **argv, int *i, uint64_t *out);
int cli_float_arg(const char *cmd, int argc, char **argv, int *i, double lo, double hi, float *out);
int cli_str_arg(const char *cmd, int argc, char **argv, int *i, const char **out);

/* Loads a model (default: the bundled one), printing "xlserve CMD: message" on failure. */
xl_model *cli_load_model(const char *cmd, const char *dir, const xl_load_options *opts);

/* Whole file into a NUL-terminated malloc'd buffer; prints "xlserve CMD: FILE: problem". */
char *cli_read_file(const char *cmd, const char *path, size_t *len);

/* Whitespace-separated token ids from a file, each checked against the vocabulary. */
int32_t *cli_read_ids(const char *cmd, const char *path, int vocab, size_t *n);

/* The median of v[0..n) (n >= 1; the mean of the middle two when n is even); sorts v in place.
 * The benchmarks' summary of their rounds. */
double cli_median(double *v, int n);

/* Seconds of this thread's CPU time: the benchmarks' clock where other processes of a shared
 * machine take the core away (only this thread's own work counts). */
double cli_thread_cpu_now(void);

/* Chooses the kernel family: `flag` (--cpu) if given, else XLSERVE_CPU, else auto. Prints
 * "xlserve CMD: --cpu NAME: problem" (or "XLSERVE_CPU=NAME: ...") and returns 0 when the name is
 * unknown or this CPU cannot run it. */
int cli_select_cpu(const char *cmd, const char *flag);

/* The flags every model-loading subcommand takes: --model DIR, --cpu PATH, --kv-dtype D,
 * --weights W (NULL: not given; the XLSERVE_CPU / XLSERVE_KV_DTYPE / XLSERVE_WEIGHTS variables,
 * then the defaults, stand in). */
typedef struct cli_engine_flags {
  const char *model_dir, *cpu, *kv_dtype, *weights;
} cli_engine_flags;

/* 1 when argv[*i] is one of those flags (its value taken, *ok = 0 on a missing value); 0 when
 * it is some other option. */
int cli_engine_arg(const char *cmd, int argc, char **argv, int *i, cli_engine_flags *f, int *ok);

/* Selects the kernel family and sets opts->kv_dtype and opts->weights. Prints "xlserve CMD:
 * --FLAG NAME: problem" (or "ENV=NAME: problem") and returns 0 for a name that is not valid. */
int cli_engine_select(const char *cmd, const cli_engine_flags *f, xl_load_options *opts);

/* "CORE (how it was chosen)": OpenBLAS's kernel family and whether the user, the library or
 * cli_blas_fix chose it (cli_blas.c). Returns the length (as snprintf). */
size_t cli_blas_describe(char *out, size_t cap);

/* The benchmarks' sessions: n random token ids below vocab; a prefill of n tokens in chunks of
 * 512, no outputs (0 with "xlserve CMD: problem" on stderr, else 1); a state of m with a full
 * memory (mem_len random tokens fed), or NULL with the problem on stderr. */
void cli_random_tokens(int32_t *t, int n, int vocab, xl_rng *rng);
int cli_prefill(const char *cmd, xl_model *m, xl_workspace *ws, xl_state *st, const int32_t *t,
                int n);
xl_state *cli_full_state(const char *cmd, xl_model *m, xl_rng *rng);

#endif
