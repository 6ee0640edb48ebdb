/*
 * test_server_tool_calls.c: the tool-call grammar (engine's tool_calls.c compiled by
 * json_constraint): a synthesized schema accepts exactly calls of the listed tools with valid
 * arguments ($refs rebased, max_calls honoured); the reader finds names and argument spans in
 * every prefix of a reply, as a stream sees it, agreeing with jansson on the whole reply; the
 * canonical rendering puts the name first. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include "json_constraint.h"
#include "testlib.h"
#include "tool_calls.h"

static jc_schema *grammar(int max_calls) {
  json_t *w = json_loads(
      "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
      "\"maxLength\":4},\"n\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"city\"],"
      "\"$defs\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}}}",
      0, NULL);
  json_t *s = json_loads(
      "{\"type\":\"object\",\"properties\":{\"q\":{\"enum\":[\"a\",\"b\"]}},"
      "\"required\":[\"q\"]}",
      0, NULL);
  const char *names[3] = {"weather", "search", "now"};
  json_t *params[3] = {w, s, NULL};
  json_t *schema = tool_call_schema(names, params, 3, max_calls);
  char err[300];
  jc_schema *g = jc_compile(schema, 0, err, sizeof err);
  if (!g) fprintf(stderr, "compile: %s\n", err);
  json_decref(schema);
  json_decref(w);
  json_decref(s);
  return g;
}

/* 1 when the whole text is a complete document under g */
static int accepts(const jc_schema *g, const char *text) {
  jc_state st;
  jc_init(&st, g);
  for (const char *p = text; *p; p++)
    if (jc_step(&st, (unsigned char)*p)) return 0;
  return jc_done(&st);
}

static void test_grammar(void) {
  jc_schema *g = grammar(2);
  CHECK(g != NULL);
  if (!g) return;
  CHECK(accepts(g, "[{\"name\":\"weather\",\"arguments\":{\"city\":\"Bath\",\"n\":3}}]"));
  CHECK(accepts(g,
                "[{\"name\":\"search\",\"arguments\":{\"q\":\"b\"}},"
                "{\"name\":\"now\",\"arguments\":{}}]"));
  CHECK(!accepts(g, "[{\"name\":\"other\",\"arguments\":{}}]")); /* no such tool */
  CHECK(!accepts(g, "[{\"name\":\"weather\",\"arguments\":{\"city\":\"Bath!\"}}]")); /* too long */
  CHECK(!accepts(g, "[{\"name\":\"weather\",\"arguments\":{\"city\":\"a\",\"n\":10}}]")); /* $ref */
  CHECK(!accepts(g, "[{\"name\":\"search\",\"arguments\":{\"city\":\"a\"}}]")); /* another's args */
  CHECK(!accepts(g, "[{\"name\":\"now\",\"arguments\":{\"x\":1}}]"));           /* no parameters */
  CHECK(!accepts(g, "[]"));                                                     /* at least one */
  CHECK(!accepts(g,
                 "[{\"name\":\"now\",\"arguments\":{}},{\"name\":\"now\",\"arguments\":{}},"
                 "{\"name\":\"now\",\"arguments\":{}}]"));   /* max_calls 2 */
  CHECK(!accepts(g, "{\"name\":\"now\",\"arguments\":{}}")); /* an array of calls */
  jc_schema_free(g);
  g = grammar(1);
  CHECK(g &&
        !accepts(g, "[{\"name\":\"now\",\"arguments\":{}},{\"name\":\"now\",\"arguments\":{}}]"));
  jc_schema_free(g);
}

static void test_reader_on_every_prefix(void) {
  const char *t =
      "[{\"arguments\":{\"a\":\"x,}\\\"\",\"b\":[1,{\"c\":2}]},\"name\":\"f\"},"
      "{\"name\":\"g.h-1\",\"arguments\":{}}]";
  size_t n = strlen(t);
  tool_call_span sp[4];
  size_t prev_args = 0;
  for (size_t k = 0; k <= n; k++) {
    int c = tool_calls_parse(t, k, sp, 4);
    CHECK(c >= 0 && c <= 2);
    if (c >= 1 && sp[0].have_args) { /* the arguments grow, never shrink, within the prefix */
      CHECK(sp[0].args_len >= prev_args && sp[0].args_off + sp[0].args_len <= k);
      prev_args = sp[0].args_len;
    }
  }
  int c = tool_calls_parse(t, n, sp, 4);
  CHECK(c == 2);
  json_t *doc = json_loads(t, 0, NULL);
  for (int i = 0; i < c && doc; i++) {
    json_t *call = json_array_get(doc, (size_t)i);
    const char *name = json_string_value(json_object_get(call, "name"));
    CHECK(sp[i].name_len == strlen(name) && !memcmp(t + sp[i].name_off, name, sp[i].name_len));
    CHECK(sp[i].args_done);
    json_t *args = json_loadb(t + sp[i].args_off, sp[i].args_len, 0, NULL);
    CHECK(args && json_equal(args, json_object_get(call, "arguments")));
    json_decref(args);
  }
  json_decref(doc);
  /* the canonical form: name first, arguments as written */
  buf b;
  buf_init(&b);
  tool_calls_canonical(t, n, &b);
  const char *want =
      "[{\"name\":\"f\",\"arguments\":{\"a\":\"x,}\\\"\",\"b\":[1,{\"c\":2}]}},"
      "{\"name\":\"g.h-1\",\"arguments\":{}}]";
  CHECK(b.len == strlen(want) && !memcmp(b.p, want, b.len));
  buf_free(&b);
  /* at most max calls are read */
  CHECK(tool_calls_parse(t, n, sp, 1) == 1);
}

static void test_names_and_ids(void) {
  CHECK(tool_name_valid("get_weather", 11));
  CHECK(tool_name_valid("a.b-c_9", 7));
  CHECK(!tool_name_valid("", 0));
  CHECK(!tool_name_valid("a b", 3));
  CHECK(!tool_name_valid("\"x\"", 3));
  char id[96];
  tool_call_id(id, sizeof id, "chatcmpl-abc123", 0, 2);
  CHECK(!strcmp(id, "call_abc123_2"));
  tool_call_id(id, sizeof id, "chatcmpl-abc123", 1, 0);
  CHECK(!strcmp(id, "call_abc123_1_0"));
  tool_call_id(id, sizeof id, "resp_f00d", 0, 1);
  CHECK(!strcmp(id, "call_f00d_1"));
}

int main(void) {
  RUN(test_grammar);
  RUN(test_reader_on_every_prefix);
  RUN(test_names_and_ids);
  return tl_summary();
}
