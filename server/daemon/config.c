/*
 * config.c: parsing of the option table (config.h) from the file, XLSERVE_* variables and
 * flags; --help, --dump-config and --config-template. Thread: main thread, at start only.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "default_model.h"
#include "util.h"
#include "xl.h"

typedef struct optdef {
  const char *name;
  opt_type type;
  const char *def;
  long long min, max;
  const char *help;
  size_t off;
} optdef;

static const optdef OPTS[XLS_N_OPTIONS] = {
#define XLS_DEF(name, type, def, mn, mx, help) {#name, type, def, mn, mx, help, offsetof(config, name)},
#define XLS_DEF_INT(name, def, mn, mx, help) XLS_DEF(name, OPT_INT, def, mn, mx, help)
#define XLS_DEF_BOOL(name, def, help) XLS_DEF(name, OPT_BOOL, def, 0, 0, help)
#define XLS_DEF_STR(name, def, help) XLS_DEF(name, OPT_STR, def, 0, 0, help)
#define XLS_DEF_ESC(name, def, help) XLS_DEF(name, OPT_ESC, def, 0, 0, help)
    XLS_OPTIONS(XLS_DEF_INT, XLS_DEF_BOOL, XLS_DEF_STR, XLS_DEF_ESC)
#undef XLS_DEF_INT
#undef XLS_DEF_BOOL
#undef XLS_DEF_STR
#undef XLS_DEF_ESC
#undef XLS_DEF
};

static const optdef *find_opt(const char *name, size_t n) {
  for (int i = 0; i < XLS_N_OPTIONS; i++) {
    const char *o = OPTS[i].name;
    size_t j = 0;
    for (; j < n && o[j]; j++) {
      char c = name[j] == '-' ? '_' : name[j];
      if (c != o[j]) break;
    }
    if (j == n && !o[j]) return &OPTS[i];
  }
  return NULL;
}

static int parse_bool(const char *v, int *out) {
  static const char *T[] = {"1", "true", "yes", "on"}, *F[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(v, T[i])) return *out = 1, 0;
    if (!strcasecmp(v, F[i])) return *out = 0, 0;
  }
  return -1;
}

/* Sets one option from text. quoted: the file gave "..." (escapes decoded for all strings). */
static int set_opt(config *c, const optdef *o, const char *val, int quoted, const char *origin,
                   const char *where, FILE *err) {
  char *field = (char *)c + o->off;
  switch (o->type) {
    case OPT_INT: {
      errno = 0;
      char *end;
      long long v = strtoll(val, &end, 10);
      if (!*val || *end || errno || v < o->min || v > o->max) {
        fprintf(err, "xlserve: option %s (%s): '%s' is not an integer in %lld..%lld\n", o->name,
                where, val, o->min, o->max);
        return -1;
      }
      *(long long *)field = v;
      break;
    }
    case OPT_BOOL: {
      int v;
      if (parse_bool(val, &v)) {
        fprintf(err, "xlserve: option %s (%s): '%s' is not a boolean (true/false)\n", o->name,
                where, val);
        return -1;
      }
      *(int *)field = v;
      break;
    }
    case OPT_STR:
    case OPT_ESC: {
      char *v = (quoted || o->type == OPT_ESC) ? unescape_c(val) : xstrdup(val);
      if (!v) {
        fprintf(err, "xlserve: option %s (%s): bad escape in '%s' (use \\n \\t \\r \\\\ \\\" \\xNN)\n",
                o->name, where, val);
        return -1;
      }
      free(*(char **)field);
      *(char **)field = v;
      break;
    }
  }
  c->origin[o - OPTS] = origin;
  return 0;
}

static void env_name(const optdef *o, char *out, size_t cap) {
  snprintf(out, cap, "XLSERVE_%s", o->name);
  for (char *p = out; *p; p++) *p = (char)toupper((unsigned char)*p);
}

static int load_file(config *c, const char *path, FILE *err) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(err, "xlserve: config file %s: %s\n", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0, rc = 0;
  while (getline(&line, &cap, f) >= 0) {
    lineno++;
    char *s = line;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || isspace((unsigned char)s[n - 1]))) s[--n] = 0;
    while (isspace((unsigned char)*s)) s++;
    if (!*s || *s == '#') continue;
    char *name = s;
    while (*s && !isspace((unsigned char)*s)) s++;
    size_t name_len = (size_t)(s - name);
    while (isspace((unsigned char)*s)) s++;
    char where[64 + 4096];
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    const optdef *o = find_opt(name, name_len);
    if (!o) {
      fprintf(err, "xlserve: %s: unknown option '%.*s'\n", where, (int)name_len, name);
      rc = -1;
      break;
    }
    int quoted = 0;
    size_t vn = strlen(s);
    if (vn >= 2 && s[0] == '"' && s[vn - 1] == '"') {
      s[vn - 1] = 0, s++, quoted = 1;
    } else if (vn && s[0] == '"') {
      fprintf(err, "xlserve: option %s (%s): unterminated quoted value\n", o->name, where);
      rc = -1;
      break;
    }
    if (set_opt(c, o, s, quoted, "file", where, err)) {
      rc = -1;
      break;
    }
  }
  free(line);
  fclose(f);
  return rc;
}

static void wrap(FILE *out, const char *indent, const char *text, int width) {
  const char *p = text;
  while (*p) {
    int n = (int)strlen(p);
    if (n > width) {
      n = width;
      while (n > 0 && p[n] != ' ') n--;
      if (n == 0) n = width;
    }
    fprintf(out, "%s%.*s\n", indent, n, p);
    p += n;
    while (*p == ' ') p++;
  }
}

static void print_value(FILE *out, const config *c, const optdef *o, int redact) {
  const char *field = (const char *)c + o->off;
  switch (o->type) {
    case OPT_INT: fprintf(out, "%lld", *(const long long *)field); break;
    case OPT_BOOL: fputs(*(const int *)field ? "true" : "false", out); break;
    case OPT_STR:
    case OPT_ESC: {
      const char *v = *(char *const *)field;
      if (redact && *v) {
        fputs("\"<redacted>\"", out);
        break;
      }
      int plain = *v != 0 && *v != '"';
      for (const char *q = v; *q; q++)
        if (isspace((unsigned char)*q) || *q == '\\' || (unsigned char)*q < 0x20) plain = 0;
      if (plain) {
        fputs(v, out);
        break;
      }
      fputc('"', out);
      for (const char *q = v; *q; q++) {
        unsigned char ch = (unsigned char)*q;
        if (ch == '\n') fputs("\\n", out);
        else if (ch == '\t') fputs("\\t", out);
        else if (ch == '\r') fputs("\\r", out);
        else if (ch == '\\') fputs("\\\\", out);
        else if (ch == '"') fputs("\\\"", out);
        else if (ch < 0x20) fprintf(out, "\\x%02x", ch);
        else fputc(ch, out);
      }
      fputc('"', out);
      break;
    }
  }
}

static void set_defaults(config *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < XLS_N_OPTIONS; i++) {
    /* the model's default depends on where the binary is (installed or build tree) */
    const char *def = i == OPTI_model ? xl_default_model_dir() : OPTS[i].def;
    int rc = set_opt(c, &OPTS[i], def, 0, "default", "built-in default", stderr);
    (void)rc; /* defaults are valid by construction (a unit test checks) */
  }
}

static void print_help(FILE *out) {
  fprintf(out,
          "usage: xlserve serve [--config FILE] [--OPTION VALUE | --OPTION=VALUE ...]\n"
          "       xlserve serve --dump-config | --config-template | --help\n\n"
          "Runs the HTTP/JSON daemon. Each option below is also an environment variable\n"
          "XLSERVE_<NAME> and a line '<name> <value>' of the config file; a flag beats the\n"
          "environment, which beats the file, which beats the default. Boolean flags: --NAME or\n"
          "--NAME true sets true, --no-NAME or --NAME false sets false.\n\n"
          "  --config FILE          read options from FILE (env XLSERVE_CONFIG)\n"
          "  --dump-config          print the effective configuration and exit\n"
          "  --config-template      print the fully commented default config file and exit\n\n");
  config d;
  set_defaults(&d);
  for (int i = 0; i < XLS_N_OPTIONS; i++) {
    const optdef *o = &OPTS[i];
    char flag[64], env[80];
    snprintf(flag, sizeof flag, "--%s", o->name);
    for (char *p = flag + 2; *p; p++)
      if (*p == '_') *p = '-';
    env_name(o, env, sizeof env);
    const char *meta = o->type == OPT_INT ? " N" : o->type == OPT_BOOL ? "" : " TEXT";
    fprintf(out, "  %s%s   [%s; default ", flag, meta, env);
    if (i == OPTI_model) fputs("the bundled model", out);
    else print_value(out, &d, o, 0);
    if (o->type == OPT_INT) fprintf(out, "; %lld..%lld", o->min, o->max);
    fputs("]\n", out);
    wrap(out, "      ", o->help, 90);
  }
  config_free(&d);
}

void config_free(config *c) {
  for (int i = 0; i < XLS_N_OPTIONS; i++)
    if (OPTS[i].type == OPT_STR || OPTS[i].type == OPT_ESC) {
      char **f = (char **)((char *)c + OPTS[i].off);
      free(*f);
      *f = NULL;
    }
  free(c->config_file);
  c->config_file = NULL;
}

static int validate(const config *c, FILE *err) {
  if (c->default_max_tokens > c->max_tokens_limit) {
    fprintf(err, "xlserve: option default_max_tokens (%lld) exceeds max_tokens_limit (%lld)\n",
            c->default_max_tokens, c->max_tokens_limit);
    return -1;
  }
  if (!*c->model) {
    fprintf(err, "xlserve: option model: no model directory given\n");
    return -1;
  }
  if (strcmp(c->store, "sqlite") && strcmp(c->store, "redis")) {
    fprintf(err, "xlserve: option store: '%s' is not one of sqlite, redis\n", c->store);
    return -1;
  }
  if (strcmp(c->durability, "turn") && strcmp(c->durability, "async") &&
      strcmp(c->durability, "off")) {
    fprintf(err, "xlserve: option durability: '%s' is not one of turn, async, off\n",
            c->durability);
    return -1;
  }
  if (xl_cpu_can_run(c->cpu) != 1) { /* the same check and words as xl_cpu_select */
    xl_error e;
    xl_cpu_select(c->cpu, &e);
    fprintf(err, "xlserve: option cpu: %s\n", e.message);
    return -1;
  }
  xl_kv_dtype kv;
  if (xl_kv_dtype_parse(c->kv_dtype, &kv)) {
    fprintf(err, "xlserve: option kv_dtype: '%s' is not one of f32, bf16, int8\n", c->kv_dtype);
    return -1;
  }
  if (xl_weights_parse(c->weights) < 0) {
    fprintf(err, "xlserve: option weights: '%s' is not one of f32, bf16, int8, int4\n", c->weights);
    return -1;
  }
  if (!*c->host) {
    fprintf(err, "xlserve: option host: empty\n");
    return -1;
  }
  if (*c->path_prefix && (c->path_prefix[0] != '/' || c->path_prefix[strlen(c->path_prefix) - 1] == '/')) {
    fprintf(err, "xlserve: option path_prefix: '%s' must start with '/' and not end with '/'\n",
            c->path_prefix);
    return -1;
  }
  if (!*c->chat_user_prefix && !*c->chat_assistant_suffix && !*c->chat_stop) {
    fprintf(err, "xlserve: option chat_user_prefix: the chat template needs a user prefix, an "
                 "assistant suffix or chat_stop to know where a reply ends\n");
    return -1;
  }
  return 0;
}

config_result config_load(config *c, int argc, char **argv, FILE *out, FILE *err) {
  set_defaults(c);
  const char *file = getenv("XLSERVE_CONFIG");
  int dump = 0;
  /* pass 1: meta flags */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      print_help(out);
      return CONFIG_EXIT_OK;
    }
    if (!strcmp(a, "--config-template")) {
      config_template(out);
      return CONFIG_EXIT_OK;
    }
    if (!strcmp(a, "--dump-config")) dump = 1;
    if (!strcmp(a, "--config")) {
      if (i + 1 >= argc) {
        fprintf(err, "xlserve: --config needs a file name\n");
        return CONFIG_EXIT_USAGE;
      }
      file = argv[++i];
    } else if (!strncmp(a, "--config=", 9)) {
      file = a + 9;
    }
  }
  if (file && *file) {
    c->config_file = xstrdup(file);
    if (load_file(c, file, err)) return CONFIG_EXIT_USAGE;
  }
  for (int i = 0; i < XLS_N_OPTIONS; i++) {
    char env[80];
    env_name(&OPTS[i], env, sizeof env);
    const char *v = getenv(env);
    if (v && set_opt(c, &OPTS[i], v, 0, "env", env, err)) return CONFIG_EXIT_USAGE;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--dump-config")) continue;
    if (!strcmp(a, "--config")) {
      i++;
      continue;
    }
    if (!strncmp(a, "--config=", 9)) continue;
    if (strncmp(a, "--", 2)) {
      fprintf(err, "xlserve: unexpected argument '%s' (options are --name value)\n", a);
      return CONFIG_EXIT_USAGE;
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const optdef *o = find_opt(name, nlen);
    int negated = 0;
    if (!o && nlen > 3 && !strncmp(name, "no-", 3)) {
      o = find_opt(name + 3, nlen - 3);
      if (o && o->type != OPT_BOOL) o = NULL;
      negated = 1;
    }
    if (!o) {
      fprintf(err, "xlserve: unknown option '--%.*s' (see xlserve serve --help)\n", (int)nlen, name);
      return CONFIG_EXIT_USAGE;
    }
    const char *val;
    if (eq) {
      val = eq + 1;
      if (negated) {
        fprintf(err, "xlserve: option %s: --no-%s takes no value\n", o->name, name + 3);
        return CONFIG_EXIT_USAGE;
      }
    } else if (o->type == OPT_BOOL) {
      int b;
      if (!negated && i + 1 < argc && !parse_bool(argv[i + 1], &b)) val = argv[++i];
      else val = negated ? "false" : "true";
    } else {
      if (i + 1 >= argc) {
        fprintf(err, "xlserve: option %s: --%.*s needs a value\n", o->name, (int)nlen, name);
        return CONFIG_EXIT_USAGE;
      }
      val = argv[++i];
    }
    if (set_opt(c, o, val, 0, "flag", "command line", err)) return CONFIG_EXIT_USAGE;
  }
  if (validate(c, err)) return CONFIG_EXIT_USAGE;
  if (dump) {
    config_dump(c, out);
    return CONFIG_EXIT_OK;
  }
  return CONFIG_RUN;
}

void config_dump(const config *c, FILE *out) {
  if (c->config_file)
    fprintf(out, "# xlserve effective configuration (config file: %s)\n", c->config_file);
  else
    fputs("# xlserve effective configuration (no config file)\n", out);
  for (int i = 0; i < XLS_N_OPTIONS; i++) {
    fprintf(out, "%s ", OPTS[i].name);
    print_value(out, c, &OPTS[i],
                i == OPTI_api_keys || (i == OPTI_redis_url && strchr(c->redis_url, '@')));
    fprintf(out, "    # %s\n", c->origin[i] ? c->origin[i] : "default");
  }
}

void config_template(FILE *out) {
  fputs("# xlserve.conf: configuration of the xlserve daemon (xlserve serve --config FILE).\n"
        "#\n"
        "# Generated by `xlserve serve --config-template` from the daemon's one option table;\n"
        "# a test checks that this file matches it. Syntax: one option per line, `name value`.\n"
        "# Lines starting with # are comments. Quote a value to keep leading/trailing spaces\n"
        "# (\"User: \"); inside quotes \\n \\t \\r \\\\ \\\" \\xNN are escapes. Every option is also\n"
        "# a flag (--name value) and an environment variable (XLSERVE_NAME); a flag beats the\n"
        "# environment, which beats this file, which beats the built-in default.\n"
        "#\n"
        "# Every option below is shown commented out at its default value.\n",
        out);
  config d;
  set_defaults(&d);
  for (int i = 0; i < XLS_N_OPTIONS; i++) {
    fputs("\n", out);
    wrap(out, "# ", OPTS[i].help, 92);
    if (OPTS[i].type == OPT_INT)
      fprintf(out, "# (integer, %lld..%lld)\n", OPTS[i].min, OPTS[i].max);
    if (i == OPTI_model) {
      fputs("#model /path/to/model-directory\n", out);
      continue;
    }
    fprintf(out, "#%s ", OPTS[i].name);
    print_value(out, &d, &OPTS[i], 0);
    fputc('\n', out);
  }
  config_free(&d);
}
