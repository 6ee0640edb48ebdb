/*
 * test_server_schema.c: the JSON Schema keywords of structured output (server/engine/
 * json_constraint.c, jc_regex.c) beyond the basics of test_server_json.c: numeric bounds,
 * pattern and format, tuples, records, property counts, unions whose branches start alike, and
 * the refusals (each with the path of the keyword refused). Random walks through the allowed
 * bytes must never dead-end; what they write is checked here by independent means (jansson,
 * POSIX regexec for the patterns ERE can also express, arithmetic for the bounds). Every schema
 * under tests/schemas (zod 4 and pydantic v2 output) must compile and walk to completion; the
 * integration suite validates served generations of the same files with ajv. Single-threaded.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "json_constraint.h"
#include "testlib.h"

static json_t *J(const char *text) {
  json_error_t e;
  json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
  if (!v) fprintf(stderr, "bad test schema: %s: %s\n", e.text, text);
  return v;
}

static jc_schema *C(const char *text) {
  json_t *s = J(text);
  char err[400];
  jc_schema *r = jc_compile(s, 0, err, sizeof err);
  if (!r) fprintf(stderr, "refused: %s: %s\n", text, err);
  json_decref(s);
  return r;
}

static int doc_ok(const jc_schema *s, const char *text) {
  jc_state st;
  jc_init(&st, s);
  for (size_t i = 0; text[i]; i++)
    if (jc_step(&st, (unsigned char)text[i])) return 0;
  return jc_done(&st);
}

/* A random walk through the allowed bytes (structural bytes favoured half of the time so that
 * walks end): 1 complete (text in out), 0 cap reached, -1 a dead end (never allowed). */
static int walk(const jc_schema *s, unsigned seed, char *out, size_t cap) {
  jc_state st;
  jc_init(&st, s);
  srand(seed);
  size_t n = 0;
  uint8_t allowed[256];
  while (!jc_done(&st) && n + 1 < cap) {
    int k = jc_allowed_bytes(&st, allowed);
    if (k == 0) {
      out[n] = 0;
      return -1;
    }
    int pick = -1;
    if (rand() % 2) {
      const char *pref = "\"]},:0t ";
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

/* walks of a schema: each complete document parsed and passed to check; dead ends fail */
static int walks(const char *schema, int n, int (*check)(json_t *v, void *ctx), void *ctx) {
  jc_schema *s = C(schema);
  CHECK(s != NULL);
  if (!s) return 0;
  char *buf = malloc(1 << 16);
  int done = 0, bad = 0, dead = 0;
  for (int seed = 1; seed <= n; seed++) {
    int r = walk(s, (unsigned)seed * 7919u, buf, 1 << 16);
    if (r < 0) {
      if (dead++ < 2) fprintf(stderr, "dead end: %s\n  after: %s\n", schema, buf);
      continue;
    }
    if (!r) continue;
    done++;
    json_error_t e;
    json_t *v = json_loads(buf, JSON_DECODE_ANY, &e);
    if (!v || (check && !check(v, ctx))) {
      if (bad++ < 3) fprintf(stderr, "invalid: %s\n  for: %s\n", buf, schema);
    }
    json_decref(v);
  }
  CHECK(dead == 0);
  CHECK(bad == 0);
  CHECK(done >= n * 8 / 10);
  if (done < n * 8 / 10) fprintf(stderr, "%d of %d walks completed: %s\n", done, n, schema);
  free(buf);
  jc_schema_free(s);
  return done;
}

/* ---- numbers ---- */

typedef struct { double lo, hi; int lo_strict, hi_strict; long long mult; int integer; } range;

static int in_range(json_t *v, void *ctx) {
  const range *r = ctx;
  if (!json_is_number(v)) return 0;
  if (r->integer && !json_is_integer(v)) return 0;
  double x = json_number_value(v);
  if (r->lo_strict ? !(x > r->lo) : !(x >= r->lo)) return 0;
  if (r->hi_strict ? !(x < r->hi) : !(x <= r->hi)) return 0;
  if (r->mult && (!json_is_integer(v) || json_integer_value(v) % r->mult)) return 0;
  return 1;
}

static void test_numeric_bounds(void) {
  /* zod 4's .int(): the safe-integer bounds */
  range r1 = {-9007199254740991.0, 9007199254740991.0, 0, 0, 0, 1};
  walks("{\"type\":\"integer\",\"minimum\":-9007199254740991,\"maximum\":9007199254740991}", 200, in_range, &r1);
  range r2 = {0, 1e300, 1, 0, 0, 0}; /* .positive() */
  walks("{\"type\":\"number\",\"exclusiveMinimum\":0}", 200, in_range, &r2);
  range r3 = {-90, 90, 0, 0, 0, 0};
  walks("{\"type\":\"number\",\"minimum\":-90,\"maximum\":90}", 200, in_range, &r3);
  range r4 = {0, 100, 0, 0, 5, 1};
  walks("{\"type\":\"integer\",\"minimum\":0,\"maximum\":100,\"multipleOf\":5}", 200, in_range, &r4);
  range r5 = {0.1, 0.3, 1, 1, 0, 0};
  walks("{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"exclusiveMaximum\":0.3}", 200, in_range, &r5);
  range r6 = {-17, -3, 0, 0, 7, 1};
  walks("{\"type\":\"integer\",\"minimum\":-17,\"maximum\":-3,\"multipleOf\":7}", 100, in_range, &r6);
  walks("{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":12},\"maxItems\":3}", 100, NULL, NULL);
  jc_schema *s = C("{\"type\":\"integer\",\"minimum\":10,\"maximum\":20}");
  CHECK(doc_ok(s, "10 ") && doc_ok(s, "20 ") && doc_ok(s, "15 "));
  CHECK(!doc_ok(s, "9 ") && !doc_ok(s, "21 ") && !doc_ok(s, "-1") && !doc_ok(s, "100"));
  CHECK(!doc_ok(s, "1 ")); /* "1" can only go on to 10-19 */
  jc_schema_free(s);
  s = C("{\"type\":\"number\",\"minimum\":0.5,\"exclusiveMaximum\":2}");
  CHECK(doc_ok(s, "0.5 ") && doc_ok(s, "1.999999 ") && doc_ok(s, "1 "));
  CHECK(!doc_ok(s, "0.4 ") && !doc_ok(s, "2 ") && !doc_ok(s, "2.0 ") && !doc_ok(s, "1e0 "));
  jc_schema_free(s);
  range r8 = {-2147483648.0, 2147483647.0, 0, 0, 0, 1}; /* format int32 on a number: whole, in range */
  walks("{\"type\":\"number\",\"format\":\"int32\"}", 100, in_range, &r8);
  s = C("{\"type\":\"integer\",\"minimum\":0}");
  CHECK(!doc_ok(s, "-0 ") && doc_ok(s, "0 "));
  jc_schema_free(s);
}

/* ---- strings: pattern and format ---- */

typedef struct { regex_t re; int compiled; long min_len, max_len; } ere;

static int matches(json_t *v, void *ctx) {
  ere *e = ctx;
  if (!json_is_string(v)) return 0;
  long n = (long)strlen(json_string_value(v));
  if (n < e->min_len || (e->max_len >= 0 && n > e->max_len)) return 0;
  return regexec(&e->re, json_string_value(v), 0, NULL, 0) == 0;
}

/* the pattern in both dialects (ERE for regexec, ECMAScript for the schema) */
static void pattern_walks(const char *js, const char *posix, long min_len, long max_len) {
  ere e = {.min_len = min_len, .max_len = max_len};
  CHECK(regcomp(&e.re, posix, REG_EXTENDED | REG_NOSUB) == 0);
  char schema[600];
  int n = snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\"", js);
  if (min_len > 0) n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"minLength\":%ld", min_len);
  if (max_len >= 0) n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"maxLength\":%ld", max_len);
  snprintf(schema + n, sizeof schema - (size_t)n, "}");
  walks(schema, 150, matches, &e);
  regfree(&e.re);
}

static void test_patterns(void) {
  pattern_walks("^[a-z0-9_]+$", "^[a-z0-9_]+$", 3, 20);
  pattern_walks("^ORD-\\\\d{6}$", "^ORD-[0-9]{6}$", 0, -1);
  pattern_walks("^\\\\d{5}(-\\\\d{4})?$", "^[0-9]{5}(-[0-9]{4})?$", 0, -1);
  pattern_walks("^#[0-9a-fA-F]{6}$", "^#[0-9a-fA-F]{6}$", 0, -1);
  pattern_walks("^(?:ab|abc|b+)$", "^(ab|abc|b+)$", 0, -1);
  pattern_walks("^\\\\+?[0-9]{7,15}$", "^[+]?[0-9]{7,15}$", 0, -1);
  pattern_walks("cat", "cat", 0, 12);          /* unanchored: anywhere */
  pattern_walks("^(aa)+$", "^(aa)+$", 3, 5);   /* lengths combine exactly: "aaaa" only */
  pattern_walks("^[^a-y]{2}x?$", "^[^a-y]{2}x?$", 0, -1);
  pattern_walks("^a.c$", "^a.c$", 0, -1);
  pattern_walks("^[\\\\w.-]+@x\\\\.io$", "^[A-Za-z0-9_.-]+@x[.]io$", 0, 10);
  jc_schema *s = C("{\"type\":\"string\",\"pattern\":\"^[a-c]{2}$\"}");
  CHECK(doc_ok(s, "\"ab\"") && !doc_ok(s, "\"abc\"") && !doc_ok(s, "\"a\"") && !doc_ok(s, "\"ad\""));
  jc_schema_free(s);
  s = C("{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\n$\"}"); /* escapes in the JSON text */
  CHECK(doc_ok(s, "\"a\\\"b\\n\"") && !doc_ok(s, "\"a\\u0022b\\n\""));
  jc_schema_free(s);
}

static int format_ok(json_t *v, void *ctx) {
  const char *f = ctx;
  if (!json_is_string(v)) return 0;
  const char *s = json_string_value(v);
  int y, mo, d, h, mi, sec;
  if (!strcmp(f, "date")) {
    if (sscanf(s, "%4d-%2d-%2d", &y, &mo, &d) != 3 || strlen(s) != 10) return 0;
    static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return mo >= 1 && mo <= 12 && d >= 1 && d <= dim[mo - 1];
  }
  if (!strcmp(f, "date-time"))
    return sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) == 6 && h < 24 && mi < 60 &&
           sec < 60 && (s[strlen(s) - 1] == 'Z' || strchr(s + 19, '+') || strchr(s + 19, '-'));
  if (!strcmp(f, "ipv4")) {
    int a[4];
    char tail;
    return sscanf(s, "%d.%d.%d.%d%c", &a[0], &a[1], &a[2], &a[3], &tail) == 4 && a[0] < 256 &&
           a[1] < 256 && a[2] < 256 && a[3] < 256;
  }
  if (!strcmp(f, "uuid"))
    return strlen(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-';
  if (!strcmp(f, "email")) return strchr(s, '@') && strchr(strchr(s, '@'), '.');
  return 1;
}

static void test_formats(void) {
  const char *fs[] = {"date", "date-time", "ipv4", "uuid", "email", "time", "uri", "ipv6"};
  for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) {
    char schema[200];
    snprintf(schema, sizeof schema, "{\"type\":\"string\",\"format\":\"%s\"}", fs[i]);
    walks(schema, 100, format_ok, (void *)fs[i]);
  }
  jc_schema *s = C("{\"type\":\"string\",\"format\":\"date\"}");
  CHECK(doc_ok(s, "\"2024-01-31\"") && !doc_ok(s, "\"2024-02-30\"") && !doc_ok(s, "\"2024-13-01\""));
  jc_schema_free(s);
  /* pattern and format together: both hold (zod's email regex beside format email) */
  s = C("{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"^[a-c]+@b\\\\.io$\"}");
  CHECK(doc_ok(s, "\"abc@b.io\"") && !doc_ok(s, "\"ab@c.io\""));
  jc_schema_free(s);
}

/* ---- arrays and objects ---- */

static int tuple_ok(json_t *v, void *ctx) {
  (void)ctx;
  return json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
         json_is_integer(json_array_get(v, 1)) && json_integer_value(json_array_get(v, 1)) >= 0 &&
         json_integer_value(json_array_get(v, 1)) <= 9;
}

static int record_ok(json_t *v, void *ctx) {
  (void)ctx;
  if (!json_is_object(v) || json_object_size(v) < 1 || json_object_size(v) > 3) return 0;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (strlen(k) < 1 || strlen(k) > 4 || !json_is_integer(x)) return 0;
  }
  return 1;
}

static void test_arrays_and_objects(void) {
  walks("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":\"integer\","
        "\"minimum\":0,\"maximum\":9}],\"items\":false,\"minItems\":2}", 150, tuple_ok, NULL);
  jc_schema *s = C("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}");
  CHECK(doc_ok(s, "[]") && doc_ok(s, "[\"a\"]") && doc_ok(s, "[\"a\",1]"));
  CHECK(!doc_ok(s, "[1]") && !doc_ok(s, "[\"a\",1,2]"));
  jc_schema_free(s);
  s = C("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"null\"}}");
  CHECK(doc_ok(s, "[\"a\",null,null]") && !doc_ok(s, "[\"a\",1]"));
  jc_schema_free(s);
  /* records: additionalProperties as a schema, propertyNames, property counts; never a key twice */
  walks("{\"type\":\"object\",\"propertyNames\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4},"
        "\"additionalProperties\":{\"type\":\"integer\"},\"minProperties\":1,\"maxProperties\":3}",
        150, record_ok, NULL);
  s = C("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":{\"type\":\"integer\"}}");
  CHECK(doc_ok(s, "{\"a\":\"x\",\"b\":1}") && doc_ok(s, "{\"b\":1,\"a\":\"x\"}"));
  CHECK(!doc_ok(s, "{\"a\":1}") && !doc_ok(s, "{\"b\":1,\"b\":2}") && !doc_ok(s, "{\"b\":\"x\"}"));
  CHECK(!doc_ok(s, "{\"a\":\"x\",\"a\":\"y\"}") && !doc_ok(s, "{\"\\u0062\":1}"));
  jc_schema_free(s);
  s = C("{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"x\",\"y\"]},\"additionalProperties\":{\"type\":\"boolean\"},\"required\":[\"x\"]}");
  CHECK(doc_ok(s, "{\"x\":true}") && doc_ok(s, "{\"y\":false,\"x\":true}"));
  CHECK(!doc_ok(s, "{\"y\":true}") && !doc_ok(s, "{\"x\":true,\"z\":true}"));
  jc_schema_free(s);
  /* maxProperties with a required key still to come: optional keys wait */
  s = C("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"null\"},\"c\":{\"type\":\"null\"}},"
        "\"required\":[\"c\"],\"maxProperties\":2}");
  CHECK(doc_ok(s, "{\"a\":null,\"c\":null}") && !doc_ok(s, "{\"a\":null,\"b\":null}"));
  jc_schema_free(s);
  walks("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"null\"},\"c\":{\"type\":\"null\"}},"
        "\"required\":[\"c\"],\"maxProperties\":2,\"minProperties\":2}", 100, NULL, NULL);
}

/* ---- unions ---- */

static int shape_ok(json_t *v, void *ctx) {
  (void)ctx;
  const char *k = json_string_value(json_object_get(v, "kind"));
  if (!k) return 0;
  if (!strcmp(k, "circle")) return json_object_size(v) == 2 && json_is_number(json_object_get(v, "r"));
  if (!strcmp(k, "square")) return json_object_size(v) == 2 && json_is_string(json_object_get(v, "side"));
  return 0;
}

/* {"a": string <= 3} or {"b": boolean, "a"?: integer}, the first key choosing */
static int union_ok(json_t *v, void *ctx) {
  int *seen = ctx;
  json_t *a = json_object_get(v, "a"), *b = json_object_get(v, "b");
  if (json_is_string(a) && !b && json_object_size(v) == 1) return seen[0] = 1;
  if (json_is_boolean(b) && (!a || json_is_integer(a)) && json_object_size(v) == (size_t)(1 + !!a)) return seen[1] = 1;
  return 0;
}

static void test_unions(void) {
  const char *du =
      "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"type\":\"string\",\"const\":\"circle\"},"
      "\"r\":{\"type\":\"number\"}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":false},"
      "{\"type\":\"object\",\"properties\":{\"kind\":{\"type\":\"string\",\"const\":\"square\"},"
      "\"side\":{\"type\":\"string\",\"maxLength\":4}},\"required\":[\"kind\",\"side\"],\"additionalProperties\":false}]}";
  walks(du, 150, shape_ok, NULL);
  jc_schema *s = C(du);
  CHECK(doc_ok(s, "{\"kind\":\"square\",\"side\":\"ab\"}") && !doc_ok(s, "{\"kind\":\"square\",\"r\":1}"));
  CHECK(!doc_ok(s, "{\"r\":1,\"kind\":\"circle\"}")); /* the discriminator comes first */
  jc_schema_free(s);
  /* anyOf with branches that start alike: the first that takes the byte */
  s = C("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},"
        "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"number\"}},\"required\":[\"b\"]},{\"type\":\"null\"}]}");
  CHECK(doc_ok(s, "{\"a\":\"x\"}") && doc_ok(s, "null") && !doc_ok(s, "{\"a\":1}"));
  /* objects that start alike: the first key picks the branch, so each shape can be written */
  int seen[2] = {0, 0};
  CHECK(doc_ok(s, "{\"b\":2}") && !doc_ok(s, "{\"b\":\"x\"}") && !doc_ok(s, "{\"a\":\"x\",\"b\":1}"));
  CHECK(!doc_ok(s, "{}"));
  jc_schema_free(s);
  walks("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"a\"]},"
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}]}",
        150, union_ok, seen);
  CHECK(seen[0] && seen[1]); /* both shapes written */
  walks("{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":5},{\"type\":\"number\"},{\"type\":\"string\",\"format\":\"date\"}]}",
        100, NULL, NULL);
  /* oneOf told apart by a required key the other does not allow */
  s = C("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false},"
        "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}]}");
  CHECK(s != NULL);
  jc_schema_free(s);
}

/* ---- refusals: 400 with the path of the keyword ---- */

static void test_refusals_name_the_path(void) {
  static const char *const cases[][2] = {
      {"{\"type\":[]}", ".type"},
      {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":[]}}}", ".properties.x.type"},
      {"{\"type\":\"integer\",\"enum\":[\"a\"]}", ".enum[0]"},
      {"{\"type\":\"string\",\"const\":5}", ".const"},
      {"{\"type\":\"string\",\"maxLength\":2,\"enum\":[\"ab\",\"abc\"]}", ".enum[1]"},
      {"{\"type\":\"integer\",\"minimum\":3,\"enum\":[1]}", ".enum[0]"},
      {"{\"const\":1,\"enum\":[2]}", ".const"},
      {"{\"type\":\"string\",\"pattern\":\"^(?=a)b\"}", ".pattern"},
      {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", ".pattern"},
      {"{\"type\":\"string\",\"pattern\":\"a\\\\bc\"}", ".pattern"},
      {"{\"type\":\"string\",\"pattern\":\"a^b\"}", ".pattern"},
      {"{\"type\":\"string\",\"pattern\":\"a{100}\"}", ".pattern"},
      {"{\"type\":\"string\",\"pattern\":\"[\"}", ".pattern"},
      {"{\"type\":\"string\",\"format\":\"hostname\"}", ".format"},
      {"{\"type\":\"string\",\"pattern\":\"^a{5}$\",\"maxLength\":3}", ""},
      {"{\"type\":\"string\",\"pattern\":\"^[0-9]+$\",\"format\":\"email\"}", ""},
      {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", ""},
      {"{\"type\":\"integer\",\"minimum\":1,\"maximum\":4,\"multipleOf\":5}", ""},
      {"{\"type\":\"number\",\"multipleOf\":0.01}", ".multipleOf"},
      {"{\"type\":\"number\",\"exclusiveMinimum\":true}", ".exclusiveMinimum"},
      {"{\"type\":\"array\",\"items\":false,\"minItems\":1}", ".minItems"},
      {"{\"type\":\"array\",\"items\":[{\"type\":\"string\"}]}", ".items"},
      {"{\"type\":\"array\",\"uniqueItems\":true}", ".uniqueItems"},
      {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"maxProperties\":0,\"required\":[\"a\"]}", ".maxProperties"},
      {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false,\"minProperties\":2}", ".minProperties"},
      {"{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^a\"}}", ".propertyNames.pattern"},
      {"{\"type\":\"object\",\"properties\":{\"ab\":{}},\"propertyNames\":{\"maxLength\":1}}", ".propertyNames"},
      {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", ".oneOf[1]"},
      {"{\"oneOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{\"a\":{}}}]}", ".oneOf[1]"},
      {"{\"anyOf\":[]}", ".anyOf"},
      {"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1}]}", ".anyOf"},
      {"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":2}]}", ".allOf"},
      {"{\"not\":{}}", ".not"},
      {"{\"properties\":{\"a\":{\"if\":{}}}}", ".properties.a.if"},
      {"{\"items\":{\"$ref\":\"#/$defs/missing\"}}", ".items.$ref"},
      {"{\"$defs\":{\"A\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/A\"},\"minItems\":1}},\"$ref\":\"#/$defs/A\"}", ""},
      {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", ".properties.a"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    json_t *sch = J(cases[i][0]);
    char err[400] = "", path[200] = "?";
    jc_schema *s = jc_compile_at(sch, 0, err, sizeof err, path, sizeof path);
    CHECK(s == NULL && err[0]);
    if (s) fprintf(stderr, "accepted: %s\n", cases[i][0]);
    else if (strcmp(path, cases[i][1]))
      fprintf(stderr, "%s: path \"%s\", expected \"%s\" (%s)\n", cases[i][0], path, cases[i][1], err);
    CHECK(!s && !strcmp(path, cases[i][1]));
    jc_schema_free(s);
    json_decref(sch);
  }
}

/* ---- the fixtures: zod 4 and pydantic v2 output ---- */

static void test_fixtures_compile_and_walk(void) {
  /* tests/schemas beside this file's directory (cmake compiles it by its absolute path) */
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", __FILE__);
  char *slash = strrchr(dir, '/');
  snprintf(slash ? slash + 1 : dir, sizeof dir - (size_t)(slash ? slash + 1 - dir : 0), "../schemas");
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  if (!d) return;
  int n = 0;
  char *buf = malloc(1 << 17);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    json_error_t je;
    json_t *sch = json_load_file(path, 0, &je);
    CHECK(sch != NULL);
    char err[400];
    jc_schema *s = sch ? jc_compile(sch, 0, err, sizeof err) : NULL;
    CHECK(s != NULL);
    if (!s) {
      fprintf(stderr, "%s refused: %s\n", e->d_name, sch ? err : je.text);
      json_decref(sch);
      continue;
    }
    n++;
    int done = 0, dead = 0, bad = 0;
    for (unsigned seed = 1; seed <= 40; seed++) {
      int r = walk(s, seed * 104729u + (unsigned)len, buf, 1 << 17);
      if (r < 0 && dead++ < 1) fprintf(stderr, "%s: dead end after %s\n", e->d_name, buf);
      if (r != 1) continue;
      done++;
      json_t *v = json_loads(buf, JSON_DECODE_ANY, &je);
      if (!v && bad++ < 1) fprintf(stderr, "%s: does not parse: %s\n", e->d_name, buf);
      json_decref(v);
    }
    CHECK(dead == 0 && bad == 0 && done >= 30);
    if (done < 30) fprintf(stderr, "%s: %d of 40 walks completed\n", e->d_name, done);
    jc_schema_free(s);
    json_decref(sch);
  }
  closedir(d);
  free(buf);
  CHECK(n >= 40);
  fprintf(stderr, "%d fixture schemas compiled and walked\n", n);
}

static int depth_of(json_t *v) {
  int d = 0;
  size_t i;
  json_t *x;
  const char *k;
  int e;
  if (json_is_array(v))
    json_array_foreach(v, i, x) if ((e = depth_of(x)) > d) d = e;
  if (json_is_object(v))
    json_object_foreach(v, k, x) if ((e = depth_of(x)) > d) d = e;
  return d + (json_is_array(v) || json_is_object(v));
}

static int tree_ok(json_t *v, void *ctx) {
  int *deepest = ctx;
  if (!json_is_object(v) || !json_is_string(json_object_get(v, "name"))) return 0;
  json_t *c = json_object_get(v, "kids");
  for (size_t i = 0; c && i < json_array_size(c); i++)
    if (!tree_ok(json_array_get(c, i), NULL)) return 0;
  int d = depth_of(v);
  if (deepest && d > *deepest) *deepest = d;
  return d <= JC_MAX_DEPTH;
}

/* recursive $ref: compiled once and referred back to; nesting ends in time at any depth */
static void test_recursive_refs(void) {
  int deepest = 0;
  const char *tree = "{\"$defs\":{\"T\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":2},"
                     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/T\"},\"minItems\":1}},\"required\":[\"name\"]}},"
                     "\"$ref\":\"#/$defs/T\"}";
  walks(tree, 200, tree_ok, &deepest);
  CHECK(deepest >= 4);
  /* walks that always open another level: the deepest allowed, then the values end */
  jc_schema *s = C(tree);
  jc_state st;
  jc_init(&st, s);
  int guard = 0;
  uint8_t allowed[256];
  while (!jc_done(&st) && guard++ < 100000) {
    int k = jc_allowed_bytes(&st, allowed);
    CHECK(k > 0);
    if (!k) break;
    const char *pref = "{[\"k]},:a\"";
    int pick = -1;
    for (const char *p = pref; *p && pick < 0; p++)
      if (allowed[(unsigned char)*p]) pick = (unsigned char)*p;
    for (int c = 0; c < 256 && pick < 0; c++)
      if (allowed[c]) pick = c;
    jc_step(&st, (unsigned char)pick);
  }
  CHECK(jc_done(&st));
  jc_schema_free(s);
  /* zod's $ref "#" (the root) */
  walks("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
        "\"sub\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":2}},\"required\":[\"n\",\"sub\"]}", 150, NULL, NULL);
  /* each definition used twice by the one before: shared, not expanded 2^13 times */
  char big[4096];
  int n = snprintf(big, sizeof big, "{\"$defs\":{");
  for (int i = 0; i < 13; i++)
    n += snprintf(big + n, sizeof big - (size_t)n, "\"d%d\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/d%d\"},"
                  "\"b\":{\"$ref\":\"#/$defs/d%d\"}},\"required\":[\"a\",\"b\"]},", i, i + 1, i + 1);
  snprintf(big + n, sizeof big - (size_t)n, "\"d13\":{\"type\":\"null\"}},\"$ref\":\"#/$defs/d0\"}");
  s = C(big); /* (its one document has 2^13 nulls: compiled, not walked) */
  CHECK(s != NULL);
  jc_schema_free(s);
  /* refused: required at every level, or nested deeper than the limit at the least */
  json_t *j = J("{\"type\":\"object\",\"properties\":{\"c\":{\"$ref\":\"#\"}},\"required\":[\"c\"]}");
  char err[400], path[200];
  s = jc_compile_at(j, 0, err, sizeof err, path, sizeof path);
  CHECK(!s && strstr(err, "nested containers") && !strcmp(path, ""));
  json_decref(j);
}

/* patterns whose automata are large: refused once the schema's budget is spent, so that a
 * request cannot hold the event loop for long */
static void test_pattern_budget(void) {
  char *sch = malloc(1 << 14);
  int n = snprintf(sch, 1 << 14, "{\"type\":\"object\",\"properties\":{");
  for (int i = 0; i < 60; i++)
    n += snprintf(sch + n, (size_t)(1 << 14) - (size_t)n, "%s\"p%d\":{\"type\":\"string\",\"pattern\":\"[a-z]*a[a-z]{9}b\"}",
                  i ? "," : "", i);
  snprintf(sch + n, (size_t)(1 << 14) - (size_t)n, "}}");
  json_t *j = J(sch);
  char err[400] = "", path[200] = "";
  jc_schema *s = jc_compile_at(j, 0, err, sizeof err, path, sizeof path);
  CHECK(s == NULL && strstr(err, "budget") && !strncmp(path, ".properties.p", 13));
  jc_schema_free(s);
  json_decref(j);
  free(sch);
}

int main(void) {
  RUN(test_numeric_bounds);
  RUN(test_patterns);
  RUN(test_formats);
  RUN(test_arrays_and_objects);
  RUN(test_unions);
  RUN(test_refusals_name_the_path);
  RUN(test_pattern_budget);
  RUN(test_recursive_refs);
  RUN(test_fixtures_compile_and_walk);
  return tl_summary();
}
