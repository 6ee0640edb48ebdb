/*
 * cli.h: the entry points of xlserve's subcommands (main thread only).
 * Each returns the process exit status: 0 ok, 1 runtime failure, 2 usage error.
 */
#ifndef XL_CLI_H
#define XL_CLI_H

int cli_info_main(int argc, char **argv);
int cli_generate_main(int argc, char **argv);
int cli_eval_main(int argc, char **argv);
int cli_bench_main(int argc, char **argv);
int cli_tokenize_main(int argc, char **argv);

/* First thing in main(), before anything calls BLAS: when OpenBLAS chose a kernel family weaker
 * than the CPU's and the user did not set OPENBLAS_CORETYPE, runs the program again (once) with
 * the matching one, SGEMM-checked (cli_blas.c); says what it did on stderr unless quiet (the
 * daemon puts it in its ready line). Returns when nothing is to be done, or in the re-run. */
void cli_blas_fix(char **argv, int quiet);

#endif
