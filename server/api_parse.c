/*
 * api_parse.c: request body validation (see api_parse.h). Thread: any.
 */
#include "api_parse.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "util.h"

void api_error_set(api_error *e, int status, const char *type, const char *code, const char *param,
                   const char *fmt, ...) {
  e->status = status;
  e->type = type;
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
}

#define BAD(param, ...)                                                                   \
  do {                                                                                    \
    api_error_set(e, 400, "invalid_request_error", "invalid_value", param, __VA_ARGS__); \
    return -1;                                                                            \
  } while (0)

static int is_null(json_t *v) { return !v || json_is_null(v); }

/* number fields: JSON numbers (integers accepted) in [lo, hi] */
static int get_num(json_t *o, const char *name, double lo, double hi, int lo_open, double *out,
                   api_error *e) {
  json_t *v = json_object_get(o, name);
  if (is_null(v)) return 0;
  if (!json_is_number(v)) BAD(name, "'%s' must be a number", name);
  double d = json_number_value(v);
  if (!isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
    BAD(name, "'%s' must be in %s%g, %g]", name, lo_open ? "(" : "[", lo, hi);
  *out = d;
  return 1;
}

static int get_int(json_t *o, const char *name, long long lo, long long hi, long long *out,
                   api_error *e) {
  json_t *v = json_object_get(o, name);
  if (is_null(v)) return 0;
  if (!json_is_integer(v)) BAD(name, "'%s' must be an integer", name);
  long long x = json_integer_value(v);
  if (x < lo || x > hi) BAD(name, "'%s' must be an integer in [%lld, %lld]", name, lo, hi);
  *out = x;
  return 1;
}

static int get_bool(json_t *o, const char *name, int *out, api_error *e) {
  json_t *v = json_object_get(o, name);
  if (is_null(v)) return 0;
  if (!json_is_boolean(v)) BAD(name, "'%s' must be a boolean", name);
  *out = json_is_true(v);
  return 1;
}

static int parse_stop(json_t *root, gen_request *g, api_error *e) {
  json_t *v = json_object_get(root, "stop");
  if (is_null(v)) return 0;
  json_t *one[1] = {v};
  json_t **items = one;
  size_t n = 1;
  if (json_is_array(v)) {
    n = json_array_size(v);
    if (n > MAX_STOPS) BAD("stop", "'stop' may hold at most %d strings", MAX_STOPS);
    items = NULL;
  } else if (!json_is_string(v)) {
    BAD("stop", "'stop' must be a string or an array of strings");
  }
  for (size_t i = 0; i < n; i++) {
    json_t *s = items ? items[i] : json_array_get(v, i);
    if (!json_is_string(s)) BAD("stop", "'stop' must be a string or an array of strings");
    size_t l = json_string_length(s);
    if (l == 0 || l > MAX_STOP_BYTES)
      BAD("stop", "each stop string must be 1 to %d bytes long", MAX_STOP_BYTES);
    if (memchr(json_string_value(s), 0, l)) BAD("stop", "stop strings must not contain NUL");
    g->stops[g->n_stops] = json_string_value(s);
    g->stop_lens[g->n_stops++] = l;
  }
  return 0;
}

static int parse_prompt(json_t *root, gen_request *g, const parse_limits *lim, api_error *e) {
  json_t *p = json_object_get(root, "prompt");
  if (is_null(p)) {
    g->prompt = "";
    return 0;
  }
  if (json_is_array(p) && json_array_size(p) == 1 &&
      (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
    p = json_array_get(p, 0); /* a batch of one prompt */
  if (json_is_string(p)) {
    g->prompt = json_string_value(p);
    g->prompt_len = json_string_length(p);
    return 0;
  }
  if (json_is_array(p)) {
    size_t n = json_array_size(p);
    g->prompt_ids = xmalloc(sizeof(int32_t) * (n ? n : 1));
    g->n_prompt_ids = n;
    g->prompt = "";
    for (size_t i = 0; i < n; i++) {
      json_t *t = json_array_get(p, i);
      if (json_is_string(t) || json_is_array(t))
        BAD("prompt", "several prompts in one request are not supported (send one)");
      if (!json_is_integer(t) || json_integer_value(t) < 0 ||
          json_integer_value(t) >= lim->vocab_size)
        BAD("prompt", "token ids in 'prompt' must be integers in [0, %d)", lim->vocab_size);
      g->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    return 0;
  }
  BAD("prompt", "'prompt' must be a string, an array of token ids, or an array of one of those");
}

static int parse_messages(json_t *root, gen_request *g, api_error *e) {
  json_t *ms = json_object_get(root, "messages");
  if (!ms) BAD("messages", "'messages' is required");
  if (!json_is_array(ms) || json_array_size(ms) == 0)
    BAD("messages", "'messages' must be a non-empty array");
  size_t n = json_array_size(ms);
  if (n > 100000) BAD("messages", "too many messages");
  g->msgs = xcalloc(n, sizeof *g->msgs);
  g->n_msgs = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_t *m = json_array_get(ms, i);
    char pname[64];
    snprintf(pname, sizeof pname, "messages[%zu]", i);
    if (!json_is_object(m)) BAD(pname, "'%s' must be an object", pname);
    json_t *role = json_object_get(m, "role");
    snprintf(pname, sizeof pname, "messages[%zu].role", i);
    if (!json_is_string(role)) BAD(pname, "'%s' must be a string", pname);
    const char *r = json_string_value(role);
    if (!strcmp(r, "system") || !strcmp(r, "developer")) g->msgs[i].role = ROLE_SYSTEM;
    else if (!strcmp(r, "user")) g->msgs[i].role = ROLE_USER;
    else if (!strcmp(r, "assistant")) g->msgs[i].role = ROLE_ASSISTANT;
    else BAD(pname, "'%s' must be system, developer, user or assistant (tools are not supported)", pname);
    json_t *c = json_object_get(m, "content");
    snprintf(pname, sizeof pname, "messages[%zu].content", i);
    if (json_is_string(c)) {
      g->msgs[i].content = json_string_value(c);
      g->msgs[i].len = json_string_length(c);
    } else if (json_is_array(c)) {
      buf b;
      buf_init(&b);
      for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        json_t *text = json_is_object(part) ? json_object_get(part, "text") : NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text)) {
          buf_free(&b);
          BAD(pname, "'%s' parts must be {\"type\": \"text\", \"text\": \"...\"}", pname);
        }
        buf_add(&b, json_string_value(text), json_string_length(text));
      }
      g->parts = xrealloc(g->parts, sizeof *g->parts * (size_t)(g->n_parts + 1));
      g->msgs[i].len = b.len;
      g->parts[g->n_parts++] = buf_steal(&b);
      g->msgs[i].content = g->parts[g->n_parts - 1];
    } else {
      BAD(pname, "'%s' must be a string or an array of text parts", pname);
    }
    if (memchr(g->msgs[i].content, 0, g->msgs[i].len)) BAD(pname, "'%s' must not contain NUL", pname);
  }
  return 0;
}

int parse_gen_request(const char *body, size_t len, job_kind kind, const parse_limits *lim,
                      gen_request *g, api_error *e) {
  memset(g, 0, sizeof *g);
  g->kind = kind;
  g->n_top = -1;
  g->max_tokens = lim->default_max_tokens;
  xl_sampling def = XL_SAMPLING_DEFAULT;
  g->sampling = def;
  json_error_t je;
  if (!len) {
    api_error_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                  "the request body must be a JSON object");
    return -1;
  }
  g->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!g->root) {
    api_error_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                  "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
    return -1;
  }
  json_t *r = g->root;
  if (!json_is_object(r)) {
    api_error_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                  "the request body must be a JSON object");
    return -1;
  }
  json_t *v = json_object_get(r, "model");
  if (!is_null(v) && !json_is_string(v)) BAD("model", "'model' must be a string");
  g->model = json_is_string(v) ? json_string_value(v) : NULL;

  if (kind == JOB_CHAT) {
    if (parse_messages(r, g, e)) return -1;
  } else {
    if (json_object_get(r, "messages")) BAD("messages", "'messages' belongs to /v1/chat/completions");
    if (parse_prompt(r, g, lim, e)) return -1;
  }
  if (get_bool(r, "stream", &g->stream, e) < 0) return -1;
  v = json_object_get(r, "stream_options");
  if (!is_null(v)) {
    if (!json_is_object(v)) BAD("stream_options", "'stream_options' must be an object");
    if (!g->stream) BAD("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (get_bool(v, "include_usage", &g->include_usage, e) < 0) return -1;
  }
  long long x;
  int rc;
  if ((rc = get_int(r, "max_tokens", 0, lim->max_tokens_limit, &x, e)) < 0) return -1;
  if (rc) g->max_tokens = x;
  if (kind == JOB_CHAT) {
    if ((rc = get_int(r, "max_completion_tokens", 0, lim->max_tokens_limit, &x, e)) < 0) return -1;
    if (rc) g->max_tokens = x;
  }
  double d;
  if ((rc = get_num(r, "temperature", 0, 2, 0, &d, e)) < 0) return -1;
  if (rc) g->sampling.temperature = (float)d;
  if ((rc = get_num(r, "top_p", 0, 1, 1, &d, e)) < 0) return -1;
  if (rc) g->sampling.top_p = (float)d;
  if ((rc = get_int(r, "top_k", 0, lim->vocab_size, &x, e)) < 0) return -1;
  if (rc) g->sampling.top_k = (int)x;
  if ((rc = get_num(r, "min_p", 0, 1, 0, &d, e)) < 0) return -1;
  if (rc) g->sampling.min_p = (float)d;
  if ((rc = get_num(r, "presence_penalty", -2, 2, 0, &d, e)) < 0) return -1;
  if (rc) g->sampling.presence_penalty = (float)d;
  if ((rc = get_num(r, "frequency_penalty", -2, 2, 0, &d, e)) < 0) return -1;
  if (rc) g->sampling.frequency_penalty = (float)d;
  if ((rc = get_num(r, "repetition_penalty", 0, 10, 1, &d, e)) < 0) return -1;
  if (rc) g->sampling.repetition_penalty = (float)d;
  v = json_object_get(r, "seed");
  if (!is_null(v)) {
    if (!json_is_integer(v)) BAD("seed", "'seed' must be an integer");
    g->seeded = 1;
    g->seed = (uint64_t)json_integer_value(v);
  }
  if (parse_stop(r, g, e)) return -1;
  if (kind == JOB_CHAT) {
    int lp = 0;
    if (get_bool(r, "logprobs", &lp, e) < 0) return -1;
    long long top = 0;
    if ((rc = get_int(r, "top_logprobs", 0, JOB_MAX_TOP, &top, e)) < 0) return -1;
    if (rc && !lp) BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (lp) g->n_top = (int)top;
  } else {
    if ((rc = get_int(r, "logprobs", 0, JOB_MAX_TOP, &x, e)) < 0) return -1;
    if (rc) g->n_top = (int)x;
  }
  g->prompt_logprobs = -1;
  if ((rc = get_int(r, "prompt_logprobs", 0, JOB_MAX_TOP, &x, e)) < 0) return -1;
  if (rc) {
    if (g->stream) BAD("prompt_logprobs", "'prompt_logprobs' is not supported with 'stream': true");
    g->prompt_logprobs = (int)x;
  }
  if (api_refuse_unimplemented(r, kind, e)) return -1;
  /* OpenAI fields we do not implement: refuse instead of ignoring */
  if ((rc = get_int(r, "n", 1, 1, &x, e)) < 0) {
    snprintf(e->message, sizeof e->message, "'n' must be 1 (one choice per request)");
    return -1;
  }
  if (kind == JOB_COMPLETION) {
    if ((rc = get_int(r, "best_of", 1, 1, &x, e)) < 0) {
      snprintf(e->message, sizeof e->message, "'best_of' must be 1");
      return -1;
    }
    if (get_bool(r, "echo", &g->echo, e) < 0) return -1;
    if (g->echo && g->stream)
      BAD("echo", "'echo' is not supported with 'stream': true (send the request without stream)");
    v = json_object_get(r, "suffix");
    if (!is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
      BAD("suffix", "'suffix' is not supported");
  }
  v = json_object_get(r, "logit_bias");
  if (!is_null(v) && !(json_is_object(v) && json_object_size(v) == 0))
    BAD("logit_bias", "'logit_bias' is not supported");
  v = json_object_get(r, "tools");
  if (!is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
    BAD("tools", "'tools' are not supported");
  v = json_object_get(r, "functions");
  if (!is_null(v)) BAD("functions", "'functions' are not supported");
  v = json_object_get(r, "response_format");
  if (!is_null(v)) {
    json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(t) || strcmp(json_string_value(t), "text"))
      BAD("response_format", "only 'response_format': {\"type\": \"text\"} is supported");
  }
  /* extensions */
  v = json_object_get(r, "session_id");
  if (!is_null(v)) {
    if (!json_is_string(v) || !session_id_valid(json_string_value(v), json_string_length(v)))
      BAD("session_id", "'session_id' must be 1-128 characters of [A-Za-z0-9._-]");
    g->session_id = json_string_value(v);
  }
  g->history = HISTORY_AUTO;
  v = json_object_get(r, "history");
  if (!is_null(v)) {
    if (kind != JOB_CHAT) BAD("history", "'history' applies to chat completions only");
    const char *h = json_is_string(v) ? json_string_value(v) : "";
    if (!strcmp(h, "auto")) g->history = HISTORY_AUTO;
    else if (!strcmp(h, "full")) g->history = HISTORY_FULL;
    else if (!strcmp(h, "append")) g->history = HISTORY_APPEND;
    else BAD("history", "'history' must be \"auto\", \"full\" or \"append\"");
  }
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  if (xl_sampling_validate(&g->sampling, &xe) != XL_OK)
    BAD(NULL, "invalid sampling parameters: %s", xe.message);
  return 0;
}

void gen_request_free(gen_request *g) {
  if (g->root) json_decref(g->root);
  free(g->prompt_ids);
  free(g->msgs);
  for (int i = 0; i < g->n_parts; i++) free(g->parts[i]);
  free(g->parts);
  memset(g, 0, sizeof *g);
}
