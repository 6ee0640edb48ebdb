/*
 * test_server_json.c: the structured-output automaton (server/engine/json_constraint.c). Documents
 * that are valid (and validate) are accepted byte by byte and end complete; invalid ones are
 * refused at the first byte that cannot continue them; unsupported schemas are refused with a
 * message; and random walks through the allowed bytes always produce documents that jansson
 * parses and that a small validator written here (independent of the automaton) accepts.
 * Single-threaded.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "json_constraint.h"
#include "testlib.h"

static json_t *J(const char *text) {
  json_error_t e;
  json_t *v = json_loads(text, 0, &e);
  if (!v) fprintf(stderr, "bad test schema: %s\n", e.text);
  return v;
}

/* 1: the whole text is accepted and the document is complete at its end; 0: refused (or not
 * complete) */
static int doc_ok(const jc_schema *s, const char *text) {
  jc_state st;
  jc_init(&st, s);
  for (size_t i = 0; text[i]; i++)
    if (jc_step(&st, (unsigned char)text[i])) return 0;
  return jc_done(&st);
}

/* ---- an independent validator of the schema subset ---- */
static int validate(json_t *v, json_t *sch, json_t *root);

static int type_ok(json_t *v, const char *t) {
  if (!strcmp(t, "null")) return json_is_null(v);
  if (!strcmp(t, "boolean")) return json_is_boolean(v);
  if (!strcmp(t, "integer")) return json_is_integer(v);
  if (!strcmp(t, "number")) return json_is_number(v);
  if (!strcmp(t, "string")) return json_is_string(v);
  if (!strcmp(t, "array")) return json_is_array(v);
  if (!strcmp(t, "object")) return json_is_object(v);
  return 0;
}

static size_t utf8_len(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
  return k;
}

static int validate(json_t *v, json_t *sch, json_t *root) {
  json_t *x;
  if ((x = json_object_get(sch, "$ref"))) {
    const char *r = json_string_value(x) + 2; /* "#/" */
    char a[64], b[64];
    if (sscanf(r, "%63[^/]/%63s", a, b) != 2) return 0;
    return validate(v, json_object_get(json_object_get(root, a), b), root);
  }
  if ((x = json_object_get(sch, "anyOf"))) {
    for (size_t i = 0; i < json_array_size(x); i++)
      if (validate(v, json_array_get(x, i), root)) return 1;
    return 0;
  }
  if ((x = json_object_get(sch, "const"))) return json_equal(v, x);
  if ((x = json_object_get(sch, "enum"))) {
    for (size_t i = 0; i < json_array_size(x); i++)
      if (json_equal(v, json_array_get(x, i))) return 1;
    return 0;
  }
  if ((x = json_object_get(sch, "type"))) {
    int ok = 0;
    if (json_is_string(x)) ok = type_ok(v, json_string_value(x));
    for (size_t i = 0; json_is_array(x) && i < json_array_size(x); i++)
      ok |= type_ok(v, json_string_value(json_array_get(x, i)));
    if (!ok) return 0;
  }
  if (json_is_string(v)) {
    size_t n = utf8_len(json_string_value(v), json_string_length(v));
    if ((x = json_object_get(sch, "maxLength")) && n > (size_t)json_integer_value(x)) return 0;
    if ((x = json_object_get(sch, "minLength")) && n < (size_t)json_integer_value(x)) return 0;
  }
  if (json_is_array(v)) {
    size_t n = json_array_size(v);
    if ((x = json_object_get(sch, "maxItems")) && n > (size_t)json_integer_value(x)) return 0;
    if ((x = json_object_get(sch, "minItems")) && n < (size_t)json_integer_value(x)) return 0;
    json_t *it = json_object_get(sch, "items");
    for (size_t i = 0; it && i < n; i++)
      if (!validate(json_array_get(v, i), it, root)) return 0;
  }
  if (json_is_object(v)) {
    json_t *props = json_object_get(sch, "properties");
    json_t *req = json_object_get(sch, "required");
    for (size_t i = 0; req && i < json_array_size(req); i++)
      if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return 0;
    const char *k;
    json_t *pv;
    json_object_foreach(v, k, pv) {
      if (!props || !json_object_size(props)) continue;
      json_t *ps = json_object_get(props, k);
      if (!ps || !validate(pv, ps, root)) return 0;
    }
  }
  return 1;
}

/* A random walk through the allowed bytes; structural bytes are favoured half of the time so
 * that walks end. Returns 1 when the document completed within the cap, text in out. */
static int walk(const jc_schema *s, unsigned seed, char *out, size_t cap) {
  jc_state st;
  jc_init(&st, s);
  srand(seed);
  size_t n = 0;
  uint8_t allowed[256];
  while (!jc_done(&st) && n + 1 < cap) {
    int k = jc_allowed_bytes(&st, allowed);
    if (k == 0) return -1; /* a dead end: must never happen */
    int pick = -1;
    if (rand() % 2) {
      const char *pref = "\"]},:0t";
      for (const char *p = pref; *p && pick < 0; p++)
        if (allowed[(unsigned char)*p] && rand() % 3) pick = (unsigned char)*p;
    }
    if (pick < 0) {
      int r = rand() % k;
      for (int c = 0; c < 256; c++)
        if (allowed[c] && r-- == 0) pick = c;
    }
    if (jc_step(&st, (unsigned char)pick)) return -1;
    out[n++] = (char)pick;
  }
  out[n] = 0;
  return jc_done(&st) ? 1 : 0;
}

static const char *SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"]}",
    "{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\","
    "\"b\",\"ab\",1,12,null]},\"minItems\":1,\"maxItems\":4},\"score\":{\"type\":\"number\"},"
    "\"note\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":5},{\"type\":\"null\"}]}},"
    "\"required\":[\"tags\",\"score\",\"note\"],\"additionalProperties\":false}",
    "{\"$defs\":{\"P\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":"
    "{\"const\":\"fixed\"}},\"required\":[\"x\",\"y\"]}},\"type\":\"object\",\"properties\":{"
    "\"points\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/P\"},\"maxItems\":3},"
    "\"meta\":{\"type\":\"object\"}},\"required\":[\"points\"]}",
    "{\"type\":[\"integer\",\"null\"]}",
    "{}",
};

static void test_random_walks_parse_and_validate(void) {
  char *buf = malloc(1 << 16);
  for (size_t k = 0; k < sizeof SCHEMAS / sizeof *SCHEMAS; k++) {
    json_t *sch = J(SCHEMAS[k]);
    char err[300];
    jc_schema *s = jc_compile(sch, 0, err, sizeof err);
    CHECK(s != NULL);
    if (!s) {
      fprintf(stderr, "%s\n", err);
      continue;
    }
    int done = 0, bad = 0, dead = 0;
    for (unsigned seed = 1; seed <= 300; seed++) {
      int r = walk(s, seed * 7919 + (unsigned)k, buf, 1 << 16);
      if (r < 0) {
        dead++;
        continue;
      }
      if (!r) continue;
      done++;
      json_error_t e;
      json_t *v = json_loads(buf, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
      if (!v || !validate(v, sch, sch)) {
        if (bad++ < 3) fprintf(stderr, "schema %zu: invalid document: %s\n", k, buf);
      }
      json_decref(v);
    }
    CHECK(dead == 0);
    CHECK(bad == 0);
    CHECK(done >= 250);
    if (done < 250) fprintf(stderr, "schema %zu: %d of 300 walks completed\n", k, done);
    jc_schema_free(s);
    json_decref(sch);
  }
  free(buf);
}

static void test_documents(void) {
  char err[300];
  jc_schema *any = jc_compile(NULL, 0, err, sizeof err);
  CHECK(doc_ok(any, "{\"a\":[1,-2.5e+10,true,null,\"x\\u00e9\\n\"],\"b\":{}}"));
  CHECK(doc_ok(any, "\"caf\xc3\xa9\""));
  CHECK(doc_ok(any, "[]"));
  CHECK(doc_ok(any, "12 "));     /* a root number ends with one whitespace byte */
  CHECK(!doc_ok(any, "12"));     /* not complete yet: 123 could follow */
  CHECK(!doc_ok(any, "{\"a\" :1}")); /* compact: no whitespace */
  CHECK(!doc_ok(any, "01"));
  CHECK(!doc_ok(any, "[1,]"));
  CHECK(!doc_ok(any, "\"\xc3\x28\""));     /* invalid UTF-8 */
  CHECK(!doc_ok(any, "\"\\ud800\""));      /* lone surrogate */
  CHECK(!doc_ok(any, "\"a\x01\""));        /* control character */
  CHECK(!doc_ok(any, "{\"a\":1}}"));       /* nothing after the end */
  CHECK(!doc_ok(any, "1e999 "));           /* exponent of at most 2 digits */
  jc_schema *obj = jc_compile(NULL, 1, err, sizeof err);
  CHECK(doc_ok(obj, "{\"k\":[1]}"));
  CHECK(!doc_ok(obj, "[1]"));
  jc_schema_free(obj);
  /* nesting limit: JC_MAX_DEPTH containers, then scalars only */
  char deep[200];
  memset(deep, '[', JC_MAX_DEPTH + 1);
  deep[JC_MAX_DEPTH + 1] = 0;
  jc_state st;
  jc_init(&st, any);
  int refused = 0;
  for (int i = 0; deep[i]; i++) refused |= jc_step(&st, '[') != 0;
  CHECK(refused);
  jc_schema_free(any);

  json_t *sch = J(SCHEMAS[0]);
  jc_schema *p = jc_compile(sch, 0, err, sizeof err);
  CHECK(doc_ok(p, "{\"name\":\"Ann\",\"age\":30}"));
  CHECK(doc_ok(p, "{\"age\":-1,\"ok\":false,\"name\":\"\"}"));
  CHECK(!doc_ok(p, "{\"name\":\"Ann\"}"));                 /* age is required */
  CHECK(!doc_ok(p, "{\"name\":\"Ann\",\"age\":3.5}"));     /* an integer */
  CHECK(!doc_ok(p, "{\"name\":\"Annabelle!\",\"age\":3}")); /* maxLength 8 */
  CHECK(!doc_ok(p, "{\"name\":\"A\",\"age\":3,\"name\":\"B\"}")); /* no key twice */
  CHECK(!doc_ok(p, "{\"nick\":\"A\",\"age\":3}"));         /* only the properties */
  /* maxLength in UTF-16 units (JavaScript's count), minLength in code points */
  CHECK(doc_ok(p, "{\"name\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\",\"age\":1}"));
  CHECK(doc_ok(p, "{\"name\":\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\",\"age\":1}"));
  CHECK(!doc_ok(p, "{\"name\":\"a\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\",\"age\":1}"));
  jc_schema_free(p);
  json_decref(sch);
  sch = J(SCHEMAS[1]);
  p = jc_compile(sch, 0, err, sizeof err);
  CHECK(doc_ok(p, "{\"tags\":[\"ab\",12,1,null],\"score\":0.5,\"note\":null}"));
  CHECK(!doc_ok(p, "{\"tags\":[],\"score\":0.5,\"note\":null}"));          /* minItems */
  CHECK(!doc_ok(p, "{\"tags\":[\"c\"],\"score\":0.5,\"note\":null}"));     /* enum */
  CHECK(!doc_ok(p, "{\"tags\":[1,1,1,1,1],\"score\":1,\"note\":\"x\"}")); /* maxItems */
  jc_schema_free(p);
  json_decref(sch);
  sch = J("{\"enum\":[1,12]}");
  p = jc_compile(sch, 0, err, sizeof err);
  CHECK(doc_ok(p, "1 ") && doc_ok(p, "12") && !doc_ok(p, "123"));
  jc_schema_free(p);
  json_decref(sch);
}

static void test_unsupported_schemas_are_refused(void) {
  const char *bad[] = {
      "{\"type\":\"string\",\"pattern\":\"^(?=a)\"}",
      "{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}",
      "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
      "{\"oneOf\":[{\"type\":\"string\"},{\"enum\":[\"x\"]}]}",
      "{\"$ref\":\"#/$defs/nope\"}",
      /* recursive and required at every level: no value ends */
      "{\"$defs\":{\"T\":{\"properties\":{\"c\":{\"$ref\":\"#/$defs/T\"}},\"required\":[\"c\"]}},\"$ref\":\"#/$defs/T\"}",
      "{\"type\":\"strng\"}",
      "{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    json_t *sch = J(bad[i]);
    char err[300] = "";
    jc_schema *s = jc_compile(sch, 0, err, sizeof err);
    CHECK(s == NULL && err[0]);
    if (s) fprintf(stderr, "accepted: %s\n", bad[i]);
    jc_schema_free(s);
    json_decref(sch);
  }
}

int main(void) {
  RUN(test_documents);
  RUN(test_unsupported_schemas_are_refused);
  RUN(test_random_walks_parse_and_validate);
  return tl_summary();
}
