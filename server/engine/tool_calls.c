/*
 * tool_calls.c: the tool-call grammar's schema, the reader of replies written under it and
 * their rendering (see tool_calls.h). Thread: any.
 */
#include "tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tool_name_valid(const char *s, size_t n) {
  if (n == 0 || n > TOOL_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.'))
      return 0;
  }
  return 1;
}

/* A "$ref" to "#..." inside a tool's parameters points into that schema: once the schema is
 * placed at `prefix` inside the call schema, it points to "#" + prefix + the rest. */
static void rebase_refs(json_t *v, const char *prefix) {
  if (json_is_array(v)) {
    for (size_t i = 0; i < json_array_size(v); i++) rebase_refs(json_array_get(v, i), prefix);
    return;
  }
  if (!json_is_object(v)) return;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (!strcmp(k, "$ref") && json_is_string(x) && json_string_value(x)[0] == '#') {
      const char *rest = json_string_value(x) + 1;
      size_t n = strlen(prefix) + strlen(rest) + 2;
      char *s = malloc(n);
      if (!s) continue;
      snprintf(s, n, "#%s%s", prefix, rest);
      json_string_set(x, s);
      free(s);
    } else if (strcmp(k, "const") && strcmp(k, "enum") && strcmp(k, "default") &&
               strcmp(k, "examples")) {
      rebase_refs(x, prefix); /* values, not schemas, are left as they are */
    }
  }
}

json_t *tool_call_schema(const char *const *names, json_t *const *params, int n, int max_calls) {
  /* each tool's parameters sit under "$defs" (a $ref inside them is rebased there), so that
   * every pointer into them goes through object keys only */
  json_t *branches = json_array(), *defs = json_object();
  for (int i = 0; i < n; i++) {
    char key[32], prefix[48], ref[64];
    snprintf(key, sizeof key, "xlserve_tool_%d", i);
    snprintf(prefix, sizeof prefix, "/$defs/%s", key);
    snprintf(ref, sizeof ref, "#%s", prefix);
    json_t *args;
    if (params[i]) {
      args = json_deep_copy(params[i]);
      rebase_refs(args, prefix);
    } else {
      args =
          json_pack("{s:s, s:{}, s:b}", "type", "object", "properties", "additionalProperties", 0);
    }
    json_object_set_new(defs, key, args);
    json_t *obj = json_pack("{s:s, s:{s:{s:s}, s:{s:s}}, s:[s,s], s:b}", "type", "object",
                            "properties", "name", "const", names[i], "arguments", "$ref", ref,
                            "required", "name", "arguments", "additionalProperties", 0);
    json_array_append_new(branches, obj);
  }
  json_t *items;
  if (n == 1) {
    items = json_incref(json_array_get(branches, 0));
    json_decref(branches);
  } else {
    items = json_pack("{s:o}", "oneOf", branches);
  }
  return json_pack("{s:s, s:o, s:i, s:i, s:o}", "type", "array", "items", items, "minItems", 1,
                   "maxItems", max_calls, "$defs", defs);
}

enum { KEY_OTHER, KEY_NAME, KEY_ARGS };

int tool_calls_parse(const char *t, size_t n, tool_call_span *calls, int max) {
  int depth = 0, instr = 0, esc = 0, k = -1;
  int expect_key = 0, in_value = 0, cur = KEY_OTHER, str_key = 0, str_name = 0;
  size_t str_start = 0;
  tool_call_span *c = NULL;
  for (size_t i = 0; i < n; i++) {
    char ch = t[i];
    if (instr) {
      if (esc) esc = 0;
      else if (ch == '\\') esc = 1;
      else if (ch == '"') {
        instr = 0;
        size_t len = i - str_start;
        if (str_key) {
          cur = len == 4 && !memcmp(t + str_start, "name", 4)        ? KEY_NAME
                : len == 9 && !memcmp(t + str_start, "arguments", 9) ? KEY_ARGS
                                                                     : KEY_OTHER;
          expect_key = 0;
        } else if (str_name && c) {
          c->name_off = str_start, c->name_len = len;
        }
        str_key = str_name = 0;
      }
      continue;
    }
    if (depth == 2 && (ch == ',' || ch == '}')) { /* the end of a call's value */
      if (in_value && cur == KEY_ARGS && c && c->have_args && !c->args_done) {
        c->args_len = i - c->args_off;
        c->args_done = 1;
      }
      in_value = 0;
      expect_key = ch == ',';
      if (ch == '}') depth--;
      continue;
    }
    if (depth == 2 && ch == ':') {
      in_value = 1;
      continue;
    }
    if (depth == 2 && in_value && cur == KEY_ARGS && c && !c->have_args) {
      c->have_args = 1; /* the arguments' first byte */
      c->args_off = i;
    }
    if (ch == '"') {
      instr = 1;
      str_start = i + 1;
      str_key = depth == 2 && expect_key;
      str_name = depth == 2 && in_value && cur == KEY_NAME;
    } else if (ch == '{' || ch == '[') {
      depth++;
      if (depth == 2 && ch == '{') { /* a call object */
        k++;
        c = k < max ? &calls[k] : NULL;
        if (c) memset(c, 0, sizeof *c);
        expect_key = 1, in_value = 0, cur = KEY_OTHER;
      }
    } else if (ch == '}' || ch == ']') {
      depth--;
    }
  }
  int got = k + 1 < max ? k + 1 : max;
  for (int i = 0; i < got; i++)
    if (calls[i].have_args && !calls[i].args_done) calls[i].args_len = n - calls[i].args_off;
  return got;
}

void tool_calls_render(buf *out, const char *const *names, const size_t *name_lens,
                       const char *const *args, const size_t *args_lens, int n) {
  buf_addc(out, '[');
  for (int i = 0; i < n; i++) {
    buf_adds(out, i ? ",{\"name\":\"" : "{\"name\":\"");
    buf_add(out, names[i], name_lens[i]); /* a valid name needs no escape */
    buf_adds(out, "\",\"arguments\":");
    buf_add(out, args[i], args_lens[i]);
    buf_addc(out, '}');
  }
  buf_addc(out, ']');
}

void tool_call_id(char *out, size_t cap, const char *response_id, int choice, int k) {
  const char *dash = strrchr(response_id, '-'), *us = strrchr(response_id, '_');
  const char *r = dash ? dash + 1 : us ? us + 1 : response_id; /* chatcmpl-HEX, resp_HEX */
  if (choice) snprintf(out, cap, "call_%.40s_%d_%d", r, choice, k);
  else snprintf(out, cap, "call_%.40s_%d", r, k);
}

void tool_calls_canonical(const char *reply, size_t n, buf *out) {
  tool_call_span sp[TOOL_MAX_CALLS];
  int nc = tool_calls_parse(reply, n, sp, TOOL_MAX_CALLS);
  const char *names[TOOL_MAX_CALLS], *args[TOOL_MAX_CALLS];
  size_t nl[TOOL_MAX_CALLS], al[TOOL_MAX_CALLS];
  for (int i = 0; i < nc; i++) {
    names[i] = reply + sp[i].name_off, nl[i] = sp[i].name_len;
    args[i] = reply + sp[i].args_off, al[i] = sp[i].have_args ? sp[i].args_len : 0;
  }
  tool_calls_render(out, names, nl, args, al, nc);
}
