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

#endif
