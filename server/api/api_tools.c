/*
 * api_tools.c: tools, tool_choice, parallel_tool_calls and tool messages (see api_tools.h).
 * Thread: any.
 */
#include "api_tools.h"

#include <stdio.h>
#include <string.h>

#include "tool_calls.h"

#define BAD(param, ...)                                                                            \
  do {                                                                                             \
    api_error_set(e, API_ERR_INVALID_VALUE, param, __VA_ARGS__);                                   \
    return -1;                                                                                     \
  } while (0)

static int is_null(json_t *v) { return !v || json_is_null(v); }

/* One tool: its name and parameters schema (NULL: none), checked; fn: where they are (the
 * "function" object, or the tool itself in the Responses shape). */
static int read_tool(json_t *tool, int i, const char **name, json_t **params, api_error *e) {
  char p[96];
  snprintf(p, sizeof p, "tools[%d]", i);
  if (!json_is_object(tool)) BAD(p, "'%s' must be an object {\"type\": \"function\", ...}", p);
  json_t *type = json_object_get(tool, "type");
  snprintf(p, sizeof p, "tools[%d].type", i);
  if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
    BAD(p, "'%s' must be \"function\" (the only kind of tool this server runs)", p);
  json_t *fn = json_object_get(tool, "function");
  const char *base = "function.";
  if (is_null(fn) && json_object_get(tool, "name")) fn = tool, base = ""; /* Responses' shape */
  else if (!json_is_object(fn)) {
    snprintf(p, sizeof p, "tools[%d].function", i);
    BAD(p, "'%s' must be an object {\"name\", \"description\", \"parameters\", \"strict\"}", p);
  }
  json_t *n = json_object_get(fn, "name");
  snprintf(p, sizeof p, "tools[%d].%sname", i, base);
  if (!json_is_string(n) || !tool_name_valid(json_string_value(n), json_string_length(n)))
    BAD(p, "'%s' must be 1-%d characters of [A-Za-z0-9_.-]", p, TOOL_NAME_MAX);
  *name = json_string_value(n);
  json_t *d = json_object_get(fn, "description");
  snprintf(p, sizeof p, "tools[%d].%sdescription", i, base);
  if (!is_null(d) && !json_is_string(d)) BAD(p, "'%s' must be a string", p);
  json_t *s = json_object_get(fn, "strict");
  snprintf(p, sizeof p, "tools[%d].%sstrict", i, base);
  if (!is_null(s) && !json_is_boolean(s)) BAD(p, "'%s' must be a boolean", p);
  json_t *ps = json_object_get(fn, "parameters");
  snprintf(p, sizeof p, "tools[%d].%sparameters", i, base);
  if (!is_null(ps) && !json_is_object(ps)) BAD(p, "'%s' must be a JSON schema object", p);
  *params = is_null(ps) ? NULL : ps;
  if (*params) { /* compiled alone first: an error names the keyword's path in this tool */
    char err[400], where[200], full[300];
    jc_schema *c = jc_compile_at(*params, 0, err, sizeof err, where, sizeof where);
    if (!c) {
      snprintf(full, sizeof full, "%s%s", p, where);
      BAD(full, "unsupported JSON schema in '%s': %s", p, err);
    }
    jc_schema_free(c);
  }
  return 0;
}

/* tool_choice: "none" | "auto" | "required" | {"type":"function","function":{"name"}} (or the
 * Responses shape {"type":"function","name"}); *forced: the named tool's index, else -1. */
static int read_choice(json_t *root, const char *const *names, int n, tool_request *t, int *forced,
                       api_error *e) {
  json_t *c = json_object_get(root, "tool_choice");
  *forced = -1;
  t->mode = TOOLS_AUTO;
  if (is_null(c)) return 0;
  if (json_is_string(c)) {
    const char *s = json_string_value(c);
    if (!strcmp(s, "none")) t->mode = TOOLS_OFF;
    else if (!strcmp(s, "required")) t->mode = TOOLS_FORCED;
    else if (strcmp(s, "auto"))
      BAD("tool_choice",
          "'tool_choice' must be \"none\", \"auto\", \"required\" or "
          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    return 0;
  }
  json_t *type = json_is_object(c) ? json_object_get(c, "type") : NULL;
  if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
    BAD("tool_choice",
        "'tool_choice' must be \"none\", \"auto\", \"required\" or "
        "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  json_t *fn = json_object_get(c, "function");
  json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : json_object_get(c, "name");
  const char *param = json_is_object(fn) ? "tool_choice.function.name" : "tool_choice.name";
  if (!json_is_string(name)) BAD(param, "'%s' must be a string naming one of 'tools'", param);
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], json_string_value(name))) *forced = i;
  if (*forced < 0)
    BAD(param, "'%s' names \"%.64s\", which is not one of 'tools'", param, json_string_value(name));
  t->mode = TOOLS_FORCED;
  return 0;
}

int api_parse_tools(json_t *root, int byte_model, tool_request *t, api_error *e) {
  memset(t, 0, sizeof *t);
  t->parallel = 1;
  json_t *tools = json_object_get(root, "tools");
  json_t *par = json_object_get(root, "parallel_tool_calls");
  if (!is_null(par) && !json_is_boolean(par))
    BAD("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
  if (json_is_false(par)) t->parallel = 0;
  if (is_null(tools)) return 0; /* tool_choice without tools: api_fields.c answers */
  if (!json_is_array(tools)) BAD("tools", "'tools' must be an array of function tools");
  size_t n = json_array_size(tools);
  if (n == 0) return 0; /* OpenAI accepts an empty list: no tools */
  if (n > TOOL_MAX_TOOLS) BAD("tools", "'tools' may list at most %d tools", TOOL_MAX_TOOLS);
  const char *names[TOOL_MAX_TOOLS];
  json_t *params[TOOL_MAX_TOOLS];
  for (size_t i = 0; i < n; i++) {
    if (read_tool(json_array_get(tools, i), (int)i, &names[i], &params[i], e)) return -1;
    for (size_t k = 0; k < i; k++)
      if (!strcmp(names[k], names[i])) {
        char p[96];
        snprintf(p, sizeof p, "tools[%zu]", i);
        BAD(p, "tools %zu and %zu are both named \"%s\": tool names must differ", k, i, names[i]);
      }
  }
  int forced;
  if (read_choice(root, names, (int)n, t, &forced, e)) return -1;
  if (t->mode == TOOLS_OFF) return 0;
  if (!byte_model)
    BAD("tools",
        "tool calls are generated under a JSON grammar and need a byte-level model "
        "(tokenizer \"bytes\"): this model's vocabulary cannot spell arbitrary JSON");
  json_t *schema =
      forced >= 0
          ? tool_call_schema(&names[forced], &params[forced], 1, t->parallel ? TOOL_MAX_CALLS : 1)
          : tool_call_schema(names, params, (int)n, t->parallel ? TOOL_MAX_CALLS : 1);
  char err[400], where[200];
  t->grammar = jc_compile_at(schema, 0, err, sizeof err, where, sizeof where);
  json_decref(schema);
  if (!t->grammar)
    BAD("tools", "the tools cannot be combined into one call grammar: %s (at %s)", err, where);
  t->n_tools = (int)n;
  return 0;
}

void tool_request_free(tool_request *t) {
  jc_schema_free(t->grammar);
  t->grammar = NULL;
}

int api_render_tool_calls(json_t *calls, const char *text, size_t text_len, const char *param,
                          buf *out, api_error *e) {
  char p[160];
  if (!json_is_array(calls) || json_array_size(calls) == 0 ||
      json_array_size(calls) > TOOL_MAX_CALLS)
    BAD(param, "'%s' must be an array of 1 to %d tool calls", param, TOOL_MAX_CALLS);
  size_t n = json_array_size(calls);
  const char *names[TOOL_MAX_CALLS], *args[TOOL_MAX_CALLS];
  size_t nl[TOOL_MAX_CALLS], al[TOOL_MAX_CALLS];
  for (size_t i = 0; i < n; i++) {
    json_t *c = json_array_get(calls, i);
    json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
    json_t *type = json_is_object(c) ? json_object_get(c, "type") : NULL;
    snprintf(p, sizeof p, "%s[%zu]", param, i);
    if (!json_is_object(fn) ||
        (!is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))))
      BAD(p,
          "'%s' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
          p);
    json_t *name = json_object_get(fn, "name"), *a = json_object_get(fn, "arguments");
    snprintf(p, sizeof p, "%s[%zu].function.name", param, i);
    if (!json_is_string(name) ||
        !tool_name_valid(json_string_value(name), json_string_length(name)))
      BAD(p, "'%s' must be 1-%d characters of [A-Za-z0-9_.-]", p, TOOL_NAME_MAX);
    snprintf(p, sizeof p, "%s[%zu].function.arguments", param, i);
    /* rendered as sent, JSON or not: a call cut by max_tokens comes back as it was answered */
    if (!json_is_string(a)) BAD(p, "'%s' must be a string holding the arguments' JSON", p);
    if (memchr(json_string_value(a), 0, json_string_length(a)))
      BAD(p, "'%s' must not contain NUL", p);
    names[i] = json_string_value(name), nl[i] = json_string_length(name);
    args[i] = json_string_value(a), al[i] = json_string_length(a);
  }
  buf_add(out, text, text_len);
  tool_calls_render(out, names, nl, args, al, (int)n);
  return 0;
}

void api_tool_calls_json(json_writer *w, const job *c, tool_calls_shape shape) {
  tool_call_span sp[TOOL_MAX_CALLS];
  const char *t = c->text.reply.p ? c->text.reply.p : "";
  int n = tool_calls_parse(t, c->text.reply.len, sp, TOOL_MAX_CALLS);
  jw_array(w);
  for (int k = 0; k < n && sp[k].name_len; k++) {
    char id[96];
    tool_call_id(id, sizeof id, c->params->id, c->index, k);
    jw_object(w);
    if (shape == TOOL_CALLS_RESPONSES) {
      char fc[100];
      snprintf(fc, sizeof fc, "fc_%s", id + 5); /* the call id's part after "call_" */
      jw_kstring(w, "type", "function_call");
      jw_kstring(w, "id", fc);
      jw_kstring(w, "call_id", id);
    } else {
      jw_kstring(w, "id", id);
      jw_kstring(w, "type", "function");
      jw_key(w, "function");
      jw_object(w);
    }
    jw_key(w, "name");
    jw_string_n(w, t + sp[k].name_off, sp[k].name_len);
    jw_key(w, "arguments");
    jw_string_n(w, t + sp[k].args_off, sp[k].have_args ? sp[k].args_len : 0);
    if (shape == TOOL_CALLS_RESPONSES)
      jw_kstring(w, "status", sp[k].args_done ? "completed" : "incomplete");
    else jw_end(w);
    jw_end(w);
  }
  jw_end(w);
}
