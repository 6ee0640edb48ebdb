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

/* Chooses the kernel family: `flag` (--cpu) if given, else XLSERVE_CPU, else auto. Prints
 * "xlserve CMD: --cpu NAME: problem" (or "XLSERVE_CPU=NAME: ...") and returns 0 when the name is
 * unknown or this CPU cannot run it. */
int cli_select_cpu(const char *cmd, const char *flag);

/* The memory dtype: `flag` (--kv-dtype) if given, else XLSERVE_KV_DTYPE, else f32. Prints
 * "xlserve CMD: --kv-dtype NAME: ..." and returns 0 for a name that is not f32, bf16, int8. */
int cli_kv_dtype(const char *cmd, const char *flag, xl_kv_dtype *out);

/* Sets opts->weights from `flag` (--weights) if given, else XLSERVE_WEIGHTS, else f32. Prints
 * "xlserve CMD: --weights NAME: unknown weight type ..." and returns 0 for an unknown name. */
int cli_select_weights(const char *cmd, const char *flag, xl_load_options *opts);

#endif
