/*
 * test_server_config.c: the option table: defaults are valid, precedence flag > env > file >
 * default, quoting and escapes, invalid values refused naming the option, and the generated
 * template loads back to the defaults. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "testlib.h"

static config_result load(config *c, int argc, char **argv, char *errbuf, size_t cap) {
  FILE *out = fopen("/dev/null", "w");
  FILE *err = fmemopen(errbuf, cap, "w");
  config_result r = config_load(c, argc, argv, out, err);
  fclose(err);
  fclose(out);
  return r;
}

static const char *write_conf(const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/x.conf", tl_tmpdir("server_config"));
  tl_write_file(path, text, strlen(text));
  return path;
}

static void test_defaults(void) {
  config c;
  char err[512] = "";
  char *argv[] = {"serve"};
  CHECK(load(&c, 1, argv, err, sizeof err) == CONFIG_RUN);
  CHECK(c.port == 8080 && c.workers == 2 && c.access_log == 1);
  CHECK(!strcmp(c.host, "127.0.0.1"));
  CHECK(!strcmp(c.chat_user_prefix, "User: ") && !strcmp(c.chat_system_suffix, "\n\n"));
  CHECK(!strcmp(c.origin[OPTI_port], "default"));
  config_free(&c);
}

static void test_precedence_and_quoting(void) {
  const char *path = write_conf("# a comment\n  port 1111\nmax_batch 7\nworkers 2\n"
                                "chat_user_prefix \"Q:\\t \"\nmodel_name \"a b\"\n"
                                "access_log no\n");
  setenv("XLSERVE_MAX_BATCH", "8", 1);
  setenv("XLSERVE_WORKERS", "3", 1);
  config c;
  char err[512] = "";
  char *argv[] = {"serve", "--config", (char *)path, "--workers=4", "--no-access-log"};
  CHECK(load(&c, 5, argv, err, sizeof err) == CONFIG_RUN);
  CHECK(c.port == 1111 && !strcmp(c.origin[OPTI_port], "file"));
  CHECK(c.max_batch == 8 && !strcmp(c.origin[OPTI_max_batch], "env"));
  CHECK(c.workers == 4 && !strcmp(c.origin[OPTI_workers], "flag"));
  CHECK(!strcmp(c.chat_user_prefix, "Q:\t "));
  CHECK(!strcmp(c.model_name, "a b"));
  CHECK(c.access_log == 0 && !strcmp(c.origin[OPTI_access_log], "flag"));
  config_free(&c);
  unsetenv("XLSERVE_MAX_BATCH");
  unsetenv("XLSERVE_WORKERS");
}

static void refused(const char *what, int argc, char **argv, const char *name) {
  config c;
  char err[1024] = "";
  config_result r = load(&c, argc, argv, err, sizeof err);
  config_free(&c);
  if (r != CONFIG_EXIT_USAGE || !strstr(err, name)) {
    fprintf(stderr, "%s: result %d, message '%s' (wanted the name %s)\n", what, r, err, name);
    CHECK(0);
  } else {
    CHECK(1);
  }
}

static void test_invalid(void) {
  char *a1[] = {"serve", "--max-batch", "0"};
  refused("range", 3, a1, "max_batch");
  char *a2[] = {"serve", "--port", "12x"};
  refused("not a number", 3, a2, "port");
  char *a3[] = {"serve", "--bogus", "1"};
  refused("unknown flag", 3, a3, "bogus");
  char *a4[] = {"serve", "--workers"};
  refused("missing value", 2, a4, "workers");
  char *a5[] = {"serve", "--chat-stop", "\\q"};
  refused("bad escape", 3, a5, "chat_stop");
  const char *p = write_conf("max_queue 10\nnot_an_option 3\n");
  char *a6[] = {"serve", "--config", (char *)p};
  refused("unknown in file", 3, a6, "not_an_option");
  p = write_conf("model_name \"unterminated\n");
  char *a7[] = {"serve", "--config", (char *)p};
  refused("unterminated quote", 3, a7, "model_name");
  setenv("XLSERVE_ACCESS_LOG", "perhaps", 1);
  char *a8[] = {"serve"};
  refused("bad env bool", 1, a8, "access_log");
  unsetenv("XLSERVE_ACCESS_LOG");
  char *a9[] = {"serve", "--default-max-tokens", "9", "--max-tokens-limit", "5"};
  refused("cross check", 5, a9, "default_max_tokens");
  char *a10[] = {"serve", "--config", "/nonexistent/x.conf"};
  refused("missing file", 3, a10, "/nonexistent/x.conf");
}

/* cpu: the kernel family; a name the engine does not know or a family this CPU (or build)
 * cannot run is refused at start, naming the option and the paths this CPU runs. */
static void test_cpu_option(void) {
#if defined(__x86_64__)
  char *foreign = "neon";
#else
  char *foreign = "avx2";
#endif
  char *a1[] = {"serve", "--cpu", foreign};
  refused("cpu path of another architecture", 3, a1, "option cpu: CPU path");
  refused("cpu path of another architecture", 3, a1, "this CPU runs: ");
  setenv("XLSERVE_CPU", "sse9", 1);
  char *a2[] = {"serve"};
  refused("unknown cpu path from the environment", 1, a2, "option cpu: unknown CPU path 'sse9'");
  config c;
  char err[512] = "";
  char *a3[] = {"serve", "--cpu", "portable"}; /* the flag wins over the environment */
  CHECK(load(&c, 3, a3, err, sizeof err) == CONFIG_RUN);
  CHECK(!strcmp(c.cpu, "portable") && !strcmp(c.origin[OPTI_cpu], "flag"));
  config_free(&c);
  unsetenv("XLSERVE_CPU");
  CHECK(load(&c, 1, a2, err, sizeof err) == CONFIG_RUN);
  CHECK(!strcmp(c.cpu, "auto") && !strcmp(c.origin[OPTI_cpu], "default"));
  config_free(&c);
}

static void test_template_loads_to_defaults(void) {
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  config_template(f);
  fclose(f);
  const char *p = write_conf(text);
  free(text);
  config c;
  char err[512] = "";
  char *argv[] = {"serve", "--config", (char *)p};
  CHECK(load(&c, 3, argv, err, sizeof err) == CONFIG_RUN);
  int all_default = 1;
  for (int i = 0; i < XLS_N_OPTIONS; i++)
    if (strcmp(c.origin[i], "default")) all_default = 0;
  CHECK(all_default);
  config_free(&c);
}

int main(void) {
  RUN(test_defaults);
  RUN(test_precedence_and_quoting);
  RUN(test_invalid);
  RUN(test_cpu_option);
  RUN(test_template_loads_to_defaults);
  return tl_summary();
}
