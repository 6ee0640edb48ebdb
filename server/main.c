/*
 * main.c: the xlserve binary; dispatches to a subcommand (main thread).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifdef XL_NO_SERVER /* -DXL_WITH_SERVER=OFF: the CLI tools only */
static int serve_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "xlserve serve: this build has no server (configured with XL_WITH_SERVER=OFF)\n");
  return 2;
}
#else
#include "serve_main.h"
#endif

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} subcommand;

static const subcommand SUBCOMMANDS[] = {
    {"serve", serve_main, "run the HTTP/JSON daemon"},
    {"generate", cli_generate_main, "generate text from a prompt, streamed to stdout"},
    {"eval", cli_eval_main, "evaluate a text segment by segment with memory (bpc / perplexity)"},
    {"bench", cli_bench_main, "measure decode, segment evaluation and recurrence speed"},
    {"tokenize", cli_tokenize_main, "run the model's tokenizer on stdin lines (JSON out; --decode, --bench)"},
    {"info", cli_info_main, "print a model's configuration, size and per-session state size"},
};

static void usage(FILE *out) {
  fprintf(out, "usage: xlserve <command> [options]   (xlserve <command> --help)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0]; i++)
    fprintf(out, "  %-9s %s\n", SUBCOMMANDS[i].name, SUBCOMMANDS[i].summary);
}

int main(int argc, char **argv) {
  cli_blas_fix(argv, argc > 1 && !strcmp(argv[1], "serve")); /* before anything calls BLAS */
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("xlserve %s\n", XL_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0]; i++)
    if (!strcmp(argv[1], SUBCOMMANDS[i].name)) return SUBCOMMANDS[i].run(argc - 1, argv + 1);
  fprintf(stderr, "xlserve: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
