/*
 * api_parse.c: request body validation (see api_parse.h). Thread: any.
 */
#include "api_parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_check.h"
#include "api_fields.h"
#include "buf.h"
#include "util.h"

/* number fields: JSON numbers (integers accepted) in [lo, hi] */
static int get_num(json_t *o, const char *name, double lo, double hi, int lo_open, double *out,
                   api_error *e) {
  json_t *v = json_object_get(o, name);
  if (api_is_null(v)) return 0;
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
  if (api_is_null(v)) return 0;
  if (!json_is_integer(v)) BAD(name, "'%s' must be an integer", name);
  long long x = json_integer_value(v);
  if (x < lo || x > hi) BAD(name, "'%s' must be an integer in [%lld, %lld]", name, lo, hi);
  *out = x;
  return 1;
}

static int get_bool(json_t *o, const char *name, int *out, api_error *e) {
  json_t *v = json_object_get(o, name);
  if (api_is_null(v)) return 0;
  if (!json_is_boolean(v)) BAD(name, "'%s' must be a boolean", name);
  *out = json_is_true(v);
  return 1;
}

static int parse_stop(json_t *root, gen_request *g, api_error *e) {
  json_t *v = json_object_get(root, "stop");
  if (api_is_null(v)) return 0;
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

/* One prompt: a string or an array of token ids. */
static int parse_one_prompt(json_t *p, gen_prompt *out, const parse_limits *lim, const char *param,
                            api_error *e) {
  memset(out, 0, sizeof *out);
  out->text = "";
  if (json_is_string(p)) {
    out->text = json_string_value(p);
    out->len = json_string_length(p);
    return 0;
  }
  if (!json_is_array(p))
    BAD(param, "'%s' must be a string or an array of token ids", param);
  size_t n = json_array_size(p);
  out->ids = xmalloc(sizeof(int32_t) * (n ? n : 1));
  out->n_ids = n;
  for (size_t i = 0; i < n; i++) {
    json_t *t = json_array_get(p, i);
    if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= lim->vocab_size)
      BAD(param, "token ids in '%s' must be integers in [0, %d)", param, lim->vocab_size);
    out->ids[i] = (int32_t)json_integer_value(t);
  }
  return 0;
}

/* prompt: a string, token ids, or a list of those (strings or token-id arrays) */
static int parse_prompt(json_t *root, gen_request *g, const parse_limits *lim, api_error *e) {
  json_t *p = json_object_get(root, "prompt");
  size_t np = 1;
  int list = json_is_array(p) && json_array_size(p) > 0 &&
             (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)));
  if (list) {
    np = json_array_size(p);
    if (np > MAX_PROMPTS) BAD("prompt", "'prompt' may list at most %d prompts", MAX_PROMPTS);
  } else if (!api_is_null(p) && !json_is_string(p) && !json_is_array(p)) {
    BAD("prompt", "'prompt' must be a string, an array of token ids, or an array of those");
  }
  g->prompts = xcalloc(np, sizeof *g->prompts);
  g->n_prompts = (int)np;
  for (size_t i = 0; i < np; i++) {
    char param[32] = "prompt";
    if (list) snprintf(param, sizeof param, "prompt[%zu]", i);
    json_t *one = list ? json_array_get(p, i) : p;
    if (api_is_null(one)) {
      g->prompts[i].text = "";
    } else if (parse_one_prompt(one, &g->prompts[i], lim, param, e)) {
      return -1;
    }
  }
  g->prompt = g->prompts[0].text;
  g->prompt_len = g->prompts[0].len;
  if (g->prompts[0].ids) {
    g->n_prompt_ids = g->prompts[0].n_ids;
    g->prompt_ids = xmalloc(sizeof(int32_t) * (g->n_prompt_ids ? g->n_prompt_ids : 1));
    memcpy(g->prompt_ids, g->prompts[0].ids, sizeof(int32_t) * g->n_prompt_ids);
  }
  return 0;
}

/* n, best_of (completions), session_choice (extension) */
static int parse_choices(json_t *r, gen_request *g, job_kind kind, api_error *e) {
  long long x;
  int rc;
  g->n = 1;
  g->session_choice = -1;
  if ((rc = get_int(r, "n", 1, MAX_CHOICES, &x, e)) < 0) return -1;
  if (rc) g->n = (int)x;
  g->best_of = g->n;
  if (kind == JOB_COMPLETION) {
    if ((rc = get_int(r, "best_of", 1, MAX_CHOICES, &x, e)) < 0) return -1;
    if (rc) {
      if (x < g->n) BAD("best_of", "'best_of' must be at least 'n' (%d)", g->n);
      g->best_of = (int)x;
    }
    if (g->best_of > g->n && g->stream)
      BAD("best_of", "'best_of' greater than 'n' cannot be streamed (the best are known at the end)");
  }
  if (g->n_prompts * g->best_of > MAX_JOBS)
    BAD("best_of", "prompts x best_of (or n) may be at most %d", MAX_JOBS);
  if ((rc = get_int(r, "session_choice", 0, MAX_CHOICES - 1, &x, e)) < 0) return -1;
  if (rc) {
    if (x >= g->n) BAD("session_choice", "'session_choice' must be an index in [0, n)");
    g->session_choice = (int)x;
  }
  return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]} (OpenAI's shape; ids as decimal strings) */
static int parse_logit_bias(json_t *root, gen_request *g, const parse_limits *lim, api_error *e) {
  json_t *v = json_object_get(root, "logit_bias");
  if (api_is_null(v)) return 0;
  if (!json_is_object(v))
    BAD("logit_bias", "'logit_bias' must be an object mapping token ids to numbers in [-100, 100]");
  size_t n = json_object_size(v);
  if (n > (size_t)lim->vocab_size)
    BAD("logit_bias", "'logit_bias' has more entries than the vocabulary (%d)", lim->vocab_size);
  g->bias_ids = xmalloc(sizeof *g->bias_ids * (n ? n : 1));
  g->bias_vals = xmalloc(sizeof *g->bias_vals * (n ? n : 1));
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    char *end = NULL;
    long id = strtol(key, &end, 10);
    if (!*key || *end || key[0] == '-' || key[0] == '+' || key[0] == ' ' || id < 0 ||
        id >= lim->vocab_size)
      BAD("logit_bias", "'logit_bias' keys must be token ids in [0, %d) (got \"%.40s\")",
          lim->vocab_size, key);
    for (int i = 0; i < g->n_bias; i++)
      if (g->bias_ids[i] == (int32_t)id) BAD("logit_bias", "'logit_bias' names token %ld twice", id);
    if (!json_is_number(val) || !isfinite(json_number_value(val)) ||
        json_number_value(val) < -100 || json_number_value(val) > 100)
      BAD("logit_bias", "'logit_bias' values must be numbers in [-100, 100] (token %ld)", id);
    g->bias_ids[g->n_bias] = (int32_t)id;
    g->bias_vals[g->n_bias++] = (float)json_number_value(val);
  }
  return 0;
}

/* Structured output: OpenAI's response_format (json_object, json_schema), llama.cpp's
 * json_schema field (and its response_format json_object + schema), vLLM's guided_json (an
 * object or a JSON string). At most one of them names a schema; it is compiled here. */
static int parse_structured_output(json_t *root, gen_request *g, const parse_limits *lim,
                                   api_error *e) {
  json_t *schema = NULL, *owned = NULL;
  int object_only = 0, given = 0;
  const char *param = NULL;
  json_t *v = json_object_get(root, "response_format");
  if (!api_is_null(v)) {
    json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    const char *ty = json_is_string(t) ? json_string_value(t) : "";
    if (!strcmp(ty, "json_object")) {
      given = 1;
      param = "response_format";
      schema = json_object_get(v, "schema"); /* llama.cpp's form */
      if (api_is_null(schema)) schema = NULL, object_only = 1;
    } else if (!strcmp(ty, "json_schema")) {
      given = 1;
      param = "response_format.json_schema";
      json_t *js = json_object_get(v, "json_schema");
      if (!json_is_object(js))
        BAD(param, "'response_format.json_schema' must be an object {\"name\", \"schema\", \"strict\"}");
      json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
      if (!api_is_null(name) && !json_is_string(name))
        BAD("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
      if (!api_is_null(strict) && !json_is_boolean(strict))
        BAD("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
      schema = json_object_get(js, "schema");
      if (!json_is_object(schema))
        BAD("response_format.json_schema.schema",
            "'response_format.json_schema.schema' must be a JSON schema object");
      param = "response_format.json_schema.schema";
    } else if (strcmp(ty, "text")) {
      BAD("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  static const char *const aliases[] = {"json_schema", "guided_json"};
  for (int i = 0; i < 2; i++) {
    v = json_object_get(root, aliases[i]);
    if (api_is_null(v)) continue;
    if (given) BAD(aliases[i], "'%s' and '%s' both ask for structured output: give one", param, aliases[i]);
    given = 1;
    param = aliases[i];
    if (json_is_string(v) && i == 1) { /* vLLM accepts the schema as a JSON string */
      json_error_t je;
      owned = json_loadb(json_string_value(v), json_string_length(v), JSON_REJECT_DUPLICATES, &je);
      if (!json_is_object(owned)) {
        json_decref(owned);
        BAD(param, "'%s' must be a JSON schema (an object, or a string holding one)", param);
      }
      schema = owned;
    } else if (json_is_object(v)) {
      schema = v;
    } else {
      BAD(param, "'%s' must be a JSON schema object", param);
    }
  }
  if (!given) return 0;
  if (lim->words_tokenizer) {
    json_decref(owned);
    BAD(param, "structured output needs a byte-level model (tokenizer \"bytes\"): this model's "
               "vocabulary cannot spell arbitrary JSON");
  }
  char err[400], where[200], full[256];
  g->constraint = jc_compile_at(schema, object_only, err, sizeof err, where, sizeof where);
  json_decref(owned);
  snprintf(full, sizeof full, "%s%s", param, where); /* the param names the failing keyword */
  if (!g->constraint) BAD(full, "unsupported JSON schema in '%s': %s", param, err);
  g->constraint_param = param;
  return 0;
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
    else if (!strcmp(r, "tool")) g->msgs[i].role = ROLE_TOOL;
    else BAD(pname, "'%s' must be system, developer, user, assistant or tool", pname);
    json_t *c = json_object_get(m, "content");
    json_t *calls = json_object_get(m, "tool_calls");
    if (json_is_array(calls) && json_array_size(calls) == 0) calls = NULL; /* no calls */
    if (g->msgs[i].role == ROLE_TOOL) {
      json_t *id = json_object_get(m, "tool_call_id");
      snprintf(pname, sizeof pname, "messages[%zu].tool_call_id", i);
      if (!json_is_string(id)) BAD(pname, "'%s' must be a string: the id of the call answered", pname);
    }
    if (!api_is_null(calls) && g->msgs[i].role != ROLE_ASSISTANT) {
      snprintf(pname, sizeof pname, "messages[%zu].tool_calls", i);
      BAD(pname, "'%s' belongs to assistant messages", pname);
    }
    snprintf(pname, sizeof pname, "messages[%zu].content", i);
    if (!api_is_null(calls) && api_is_null(c)) {
      g->msgs[i].content = "";
      g->msgs[i].len = 0;
    } else if (json_is_string(c)) {
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
    if (!api_is_null(calls)) { /* the calls in the form they are generated in, after the text */
      char cp[64];
      snprintf(cp, sizeof cp, "messages[%zu].tool_calls", i);
      buf b;
      buf_init(&b);
      if (api_render_tool_calls(calls, g->msgs[i].content, g->msgs[i].len, cp, &b, e)) {
        buf_free(&b);
        return -1;
      }
      g->parts = xrealloc(g->parts, sizeof *g->parts * (size_t)(g->n_parts + 1));
      g->msgs[i].len = b.len;
      g->parts[g->n_parts++] = buf_steal(&b);
      g->msgs[i].content = g->parts[g->n_parts - 1];
    }
  }
  return 0;
}

/* Parses the body into g->root, which must be a JSON object. */
static int parse_body(const char *body, size_t len, gen_request *g, api_error *e) {
  json_error_t je;
  if (!len) {
    api_error_set(e, API_ERR_INVALID_JSON, NULL, "the request body must be a JSON object");
    return -1;
  }
  g->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!g->root) {
    api_error_set(e, API_ERR_INVALID_JSON, NULL, "invalid JSON at line %d column %d: %s", je.line,
                  je.column, je.text);
    return -1;
  }
  if (!json_is_object(g->root)) {
    api_error_set(e, API_ERR_INVALID_JSON, NULL, "the request body must be a JSON object");
    return -1;
  }
  return 0;
}

/* 'model', then the input: 'messages' for chat, 'prompt' for completions. */
static int parse_model_and_input(json_t *r, job_kind kind, const parse_limits *lim,
                                 gen_request *g, api_error *e) {
  json_t *v = json_object_get(r, "model");
  if (!api_is_null(v) && !json_is_string(v)) BAD("model", "'model' must be a string");
  g->model = json_is_string(v) ? json_string_value(v) : NULL;
  if (kind == JOB_CHAT) return parse_messages(r, g, e) ? -1 : 0;
  if (json_object_get(r, "messages")) BAD("messages", "'messages' belongs to /v1/chat/completions");
  return parse_prompt(r, g, lim, e) ? -1 : 0;
}

/* 'stream' and 'stream_options'. */
static int parse_stream_fields(json_t *r, gen_request *g, api_error *e) {
  if (get_bool(r, "stream", &g->stream, e) < 0) return -1;
  json_t *v = json_object_get(r, "stream_options");
  if (!api_is_null(v)) {
    if (!json_is_object(v)) BAD("stream_options", "'stream_options' must be an object");
    if (!g->stream) BAD("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (get_bool(v, "include_usage", &g->include_usage, e) < 0) return -1;
  }
  return 0;
}

/* 'max_tokens' (and chat's 'max_completion_tokens', which wins), then the sampling numbers and
 * 'seed'. */
static int parse_sampling_fields(json_t *r, job_kind kind, const parse_limits *lim,
                                 gen_request *g, api_error *e) {
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
  json_t *v = json_object_get(r, "seed");
  if (!api_is_null(v)) {
    if (!json_is_integer(v)) BAD("seed", "'seed' must be an integer");
    g->seeded = 1;
    g->seed = (uint64_t)json_integer_value(v);
  }
  return 0;
}

/* 'logprobs' (a bool with 'top_logprobs' for chat, a count for completions) and
 * 'prompt_logprobs'. */
static int parse_logprob_fields(json_t *r, job_kind kind, gen_request *g, api_error *e) {
  long long x;
  int rc;
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
  return 0;
}

/* Completions only: 'echo' (not with streaming) and 'suffix' (refused unless empty). */
static int parse_completion_fields(json_t *r, gen_request *g, api_error *e) {
  if (get_bool(r, "echo", &g->echo, e) < 0) return -1;
  if (g->echo && g->stream)
    BAD("echo", "'echo' is not supported with 'stream': true (send the request without stream)");
  json_t *v = json_object_get(r, "suffix");
  if (!api_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
    BAD("suffix", "'suffix' is not supported");
  return 0;
}

/* Refuses 'tools' outside chat and the legacy 'functions'. */
static int refuse_misplaced_tools(json_t *r, job_kind kind, api_error *e) {
  json_t *v = json_object_get(r, "tools");
  if (kind != JOB_CHAT && !api_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
    BAD("tools", "'tools' belong to /v1/chat/completions (and /v1/responses)");
  v = json_object_get(r, "functions");
  if (!api_is_null(v)) BAD("functions", "'functions' are not supported: send 'tools'");
  return 0;
}

/* Chat's 'tools': their grammar becomes the request's constraint (not with another one). */
static int parse_chat_tools(json_t *r, const parse_limits *lim, gen_request *g, api_error *e) {
  if (api_parse_tools(r, !lim->words_tokenizer, &g->tools, e)) return -1;
  if (g->tools.mode != TOOLS_OFF && g->constraint)
    BAD(g->constraint_param, "'%s' cannot be combined with 'tools' (send tool_choice \"none\", "
                             "or describe the output as a tool)", g->constraint_param);
  if (g->tools.mode != TOOLS_OFF) {
    g->constraint = g->tools.grammar;
    g->tools.grammar = NULL;
    g->constraint_param = "tools";
  }
  return 0;
}

/* The extensions: 'session_id' and 'history' (chat only). */
static int parse_session_fields(json_t *r, job_kind kind, gen_request *g, api_error *e) {
  json_t *v = json_object_get(r, "session_id");
  if (!api_is_null(v)) {
    if (!json_is_string(v) || !session_id_valid(json_string_value(v), json_string_length(v)))
      BAD("session_id", "'session_id' must be 1-128 characters of [A-Za-z0-9._-]");
    g->session_id = json_string_value(v);
  }
  g->history = HISTORY_AUTO;
  v = json_object_get(r, "history");
  if (!api_is_null(v)) {
    if (kind != JOB_CHAT) BAD("history", "'history' applies to chat completions only");
    const char *h = json_is_string(v) ? json_string_value(v) : "";
    if (!strcmp(h, "auto")) g->history = HISTORY_AUTO;
    else if (!strcmp(h, "full")) g->history = HISTORY_FULL;
    else if (!strcmp(h, "append")) g->history = HISTORY_APPEND;
    else BAD("history", "'history' must be \"auto\", \"full\" or \"append\"");
  }
  return 0;
}

/* The order of the checks below is the order in which errors are reported: keep it. */
int parse_gen_request(const char *body, size_t len, job_kind kind, const parse_limits *lim,
                      gen_request *g, api_error *e) {
  memset(g, 0, sizeof *g);
  g->kind = kind;
  g->n_top = -1;
  g->max_tokens = lim->default_max_tokens;
  xl_sampling def = XL_SAMPLING_DEFAULT;
  g->sampling = def;
  if (parse_body(body, len, g, e)) return -1;
  json_t *r = g->root;
  if (parse_model_and_input(r, kind, lim, g, e)) return -1;
  if (parse_stream_fields(r, g, e)) return -1;
  if (parse_sampling_fields(r, kind, lim, g, e)) return -1;
  if (parse_stop(r, g, e)) return -1;
  if (parse_logprob_fields(r, kind, g, e)) return -1;
  if (api_refuse_unimplemented(r, kind, e)) return -1;
  if (parse_choices(r, g, kind, e)) return -1;
  /* OpenAI fields we do not implement: refuse instead of ignoring */
  if (kind == JOB_COMPLETION && parse_completion_fields(r, g, e)) return -1;
  if (parse_logit_bias(r, g, lim, e)) return -1;
  if (refuse_misplaced_tools(r, kind, e)) return -1;
  if (parse_structured_output(r, g, lim, e)) return -1;
  if (kind == JOB_CHAT && parse_chat_tools(r, lim, g, e)) return -1;
  if (parse_session_fields(r, kind, g, e)) return -1;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  if (xl_sampling_validate(&g->sampling, &xe) != XL_OK)
    BAD(NULL, "invalid sampling parameters: %s", xe.message);
  return 0;
}

void gen_request_free(gen_request *g) {
  if (g->root) json_decref(g->root);
  free(g->prompt_ids);
  for (int i = 0; i < g->n_prompts; i++) free(g->prompts[i].ids);
  free(g->prompts);
  free(g->bias_ids);
  free(g->bias_vals);
  jc_schema_free(g->constraint);
  tool_request_free(&g->tools);
  free(g->msgs);
  for (int i = 0; i < g->n_parts; i++) free(g->parts[i]);
  free(g->parts);
  memset(g, 0, sizeof *g);
}

int parse_list_limit(const char *s, int *limit, api_error *e) {
  long v = 100;
  if (s) {
    char *end;
    v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 10000) BAD("limit", "'limit' must be an integer in [1, 10000]");
  }
  *limit = (int)v;
  return 0;
}

int parse_session_id(const char *id, size_t n, char out[129], api_error *e) {
  if (!id) id = "";
  if (!session_id_valid(id, n))
    BAD("session_id", "session ids are 1-128 characters of [A-Za-z0-9._-]");
  memcpy(out, id, n);
  out[n] = 0;
  return 0;
}
