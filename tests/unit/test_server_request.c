/*
 * test_server_request.c: the API's checks before a handler runs, without a socket: a request's
 * head (api_head.h: path prefix, route, method, API key, draining and loading, the announced
 * body size) and the tokenizer endpoints' bodies (api_tokenizer_body.h), each case to the
 * exact error code, status, field and message. Single-threaded.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api_head.h"
#include "api_tokenizer_body.h"
#include "app.h"
#include "http_content_length.h"
#include "testlib.h"

/* ---- the head ---- */

static app A;

static void app_reset(const char *prefix, app_phase phase) {
  auth_free(&A.keys);
  memset(&A, 0, sizeof A);
  A.opt.path_prefix = prefix;
  A.opt.max_body_bytes = 1000;
  A.phase = phase;
  char err[256];
  CHECK(auth_load(&A.keys, "k1,k2", NULL, err, sizeof err) == 0);
}

static head_outcome head(const char *method, const char *path, const char *auth, const char *len,
                         head_verdict *v) {
  head_in in = {path, method, auth, len};
  uint8_t owner[32] = {0};
  head_outcome o = api_head_check(&A, &in, v, owner);
  if (o == HEAD_REFUSE) CHECK(v->message[0] && api_err_status(v->err) >= 400);
  return o;
}

/* A refusal: its code, its status and its message. */
static int refused(head_outcome o, const head_verdict *v, api_err err, int status,
                   const char *message) {
  return o == HEAD_REFUSE && v->err == err && api_err_status(v->err) == status &&
         !strcmp(v->message, message);
}

static void test_head_routes(void) {
  head_verdict v;
  app_reset("", APP_READY);
  head_outcome o = head("GET", "/nope", NULL, NULL, &v);
  CHECK(refused(o, &v, API_ERR_NOT_FOUND, 404, "no route for GET /nope") && !v.matched);
  o = head("GET", "/v1/completions", "Bearer k1", NULL, &v);
  CHECK(refused(o, &v, API_ERR_METHOD_NOT_ALLOWED, 405,
                "method GET is not allowed here (allowed: POST)"));
  CHECK(v.matched && v.m.id == ROUTE_COMPLETIONS && !v.m.row && !strcmp(v.m.allow, "POST"));
  o = head("OPTIONS", "/v1/completions", NULL, NULL, &v); /* a preflight: no key needed */
  CHECK(o == HEAD_PREFLIGHT && v.matched && !strcmp(v.m.allow, "POST"));
  o = head("GET", "/health", NULL, NULL, &v);
  CHECK(o == HEAD_PASS && v.m.row && v.m.id == ROUTE_HEALTH && v.body_limit == 1000);
  o = head("GET", "/v1/models/org/a.b", "Bearer k2", NULL, &v);
  CHECK(o == HEAD_PASS && v.m.param_len == 7 && !memcmp(v.m.param, "org/a.b", 7));
  /* the path prefix: only under it, and its bare form is "/" */
  app_reset("/api", APP_READY);
  o = head("GET", "/health", NULL, NULL, &v);
  CHECK(refused(o, &v, API_ERR_NOT_FOUND, 404, "no route for /health"));
  o = head("GET", "/apix/health", NULL, NULL, &v);
  CHECK(refused(o, &v, API_ERR_NOT_FOUND, 404, "no route for /apix/health"));
  o = head("GET", "/api/health", NULL, NULL, &v);
  CHECK(o == HEAD_PASS && v.m.id == ROUTE_HEALTH);
  o = head("GET", "/api", NULL, NULL, &v);
  CHECK(o == HEAD_PASS && v.m.id == ROUTE_UI);
  o = head("DELETE", "/api/nope", NULL, NULL, &v);
  CHECK(refused(o, &v, API_ERR_NOT_FOUND, 404, "no route for DELETE /nope"));
  auth_free(&A.keys);
}

static void test_head_key(void) {
  head_verdict v;
  app_reset("", APP_READY);
  const char *no_key = "missing or invalid API key (send 'Authorization: Bearer KEY')";
  CHECK(refused(head("POST", "/v1/completions", NULL, NULL, &v), &v, API_ERR_INVALID_API_KEY, 401,
                no_key));
  CHECK(v.m.row && v.m.id == ROUTE_COMPLETIONS); /* the route is known: its metrics label */
  CHECK(refused(head("POST", "/v1/completions", "Bearer k3", NULL, &v), &v, API_ERR_INVALID_API_KEY,
                401, no_key));
  CHECK(refused(head("POST", "/v1/completions", "k1", NULL, &v), &v, API_ERR_INVALID_API_KEY, 401,
                no_key));
  CHECK(head("POST", "/v1/completions", "Bearer k2", NULL, &v) == HEAD_PASS);
  CHECK(head("GET", "/health", NULL, NULL, &v) == HEAD_PASS); /* needs no key */
  /* the key is checked before the route's method is: an unknown path is 404 with or without */
  CHECK(head("GET", "/nope", NULL, NULL, &v) == HEAD_REFUSE && v.err == API_ERR_NOT_FOUND);
  /* a key owns its sessions: two keys, two owners */
  head_in in = {"/v1/completions", "POST", "Bearer k1", NULL};
  uint8_t o1[32] = {0}, o2[32] = {0}, zero[32] = {0};
  CHECK(api_head_check(&A, &in, &v, o1) == HEAD_PASS);
  in.authorization = "Bearer k2";
  CHECK(api_head_check(&A, &in, &v, o2) == HEAD_PASS);
  CHECK(memcmp(o1, zero, 32) && memcmp(o2, zero, 32) && memcmp(o1, o2, 32));
  /* no keys configured: every request passes */
  auth_free(&A.keys);
  memset(&A.keys, 0, sizeof A.keys);
  CHECK(head("POST", "/v1/completions", NULL, NULL, &v) == HEAD_PASS);
}

static void test_head_phase(void) {
  head_verdict v;
  app_reset("", APP_DRAINING);
  head_outcome o = head("POST", "/v1/completions", "Bearer k1", NULL, &v);
  CHECK(refused(o, &v, API_ERR_DRAINING, 503, "the server is shutting down"));
  CHECK(v.retry_after && !strcmp(v.retry_after, "5"));
  o = head("POST", "/v1/completions", NULL, NULL, &v); /* the key comes first */
  CHECK(o == HEAD_REFUSE && v.err == API_ERR_INVALID_API_KEY && !v.retry_after);
  CHECK(head("GET", "/health", NULL, NULL, &v) == HEAD_PASS); /* answered while draining */
  CHECK(head("GET", "/metrics", NULL, NULL, &v) == HEAD_PASS);
  A.phase = APP_STOPPING;
  CHECK(refused(head("GET", "/v1/models", "Bearer k1", NULL, &v), &v, API_ERR_DRAINING, 503,
                "the server is shutting down"));
  app_reset("", APP_LOADING);
  o = head("POST", "/v1/chat/completions", "Bearer k1", NULL, &v);
  CHECK(refused(o, &v, API_ERR_LOADING, 503, "the model is still loading"));
  CHECK(v.retry_after && !strcmp(v.retry_after, "2"));
  CHECK(head("GET", "/v1/models", "Bearer k1", NULL, &v) == HEAD_PASS); /* needs no model */
  auth_free(&A.keys);
}

static void test_content_length_parse(void) {
  uint64_t n = 7;
  CHECK(content_length_parse("0", 1, &n) == CONTENT_LENGTH_NUMBER && n == 0);
  CHECK(content_length_parse("1000", 4, &n) == CONTENT_LENGTH_NUMBER && n == 1000);
  CHECK(content_length_parse("00012", 5, &n) == CONTENT_LENGTH_NUMBER && n == 12);
  CHECK(content_length_parse("18446744073709551615", 20, &n) == CONTENT_LENGTH_NUMBER &&
        n == UINT64_MAX);
  CHECK(content_length_parse("18446744073709551616", 20, &n) == CONTENT_LENGTH_OUT_OF_RANGE && !n);
  CHECK(content_length_parse("123456789012345678901234567890", 30, &n) ==
        CONTENT_LENGTH_OUT_OF_RANGE);
  const char *bad[] = {"", "-1", "+1", "1 ", " 1", "1x", "0x10", "1.0", "1,2"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK(content_length_parse(bad[i], strlen(bad[i]), &n) == CONTENT_LENGTH_NOT_NUMBER && !n);
  CHECK(content_length_parse("12", 1, &n) == CONTENT_LENGTH_NUMBER && n == 1); /* n bytes only */
}

static void test_head_body_size(void) {
  head_verdict v;
  app_reset("", APP_READY);
  const char *big = "the request body exceeds 1000 bytes";
  CHECK(head("POST", "/v1/completions", "Bearer k1", "1000", &v) == HEAD_PASS);
  CHECK(v.body_limit == 1000);
  CHECK(head("POST", "/v1/completions", "Bearer k1", "0", &v) == HEAD_PASS);
  head_outcome o = head("POST", "/v1/completions", "Bearer k1", "1001", &v);
  CHECK(refused(o, &v, API_ERR_BODY_TOO_LARGE, 413, big) && v.body_limit == 1000);
  /* past 2^64 - 1: too large; not a plain decimal number: invalid (the values libmicrohttpd
   * refuses before the head is checked, judged by the same parser) */
  CHECK(refused(head("POST", "/v1/completions", "Bearer k1", "99999999999999999999999", &v), &v,
                API_ERR_BODY_TOO_LARGE, 413, big));
  CHECK(refused(head("POST", "/v1/completions", "Bearer k1", "18446744073709551615", &v), &v,
                API_ERR_BODY_TOO_LARGE, 413, big));
  const char *not_number = "the Content-Length header's value is not a plain decimal number";
  CHECK(refused(head("POST", "/v1/completions", "Bearer k1", "12x", &v), &v,
                API_ERR_INVALID_CONTENT_LENGTH, 400, not_number));
  CHECK(refused(head("POST", "/v1/completions", "Bearer k1", "-1", &v), &v,
                API_ERR_INVALID_CONTENT_LENGTH, 400, not_number));
  CHECK(refused(head("POST", "/v1/completions", "Bearer k1", "", &v), &v,
                API_ERR_INVALID_CONTENT_LENGTH, 400, not_number));
  A.opt.max_body_bytes = 10;
  CHECK(refused(head("POST", "/tokenize", "Bearer k1", "11", &v), &v, API_ERR_BODY_TOO_LARGE, 413,
                "the request body exceeds 10 bytes"));
  /* a refusal before the size check leaves the body limit unset */
  CHECK(head("POST", "/tokenize", NULL, "11", &v) == HEAD_REFUSE &&
        v.err == API_ERR_INVALID_API_KEY && v.body_limit == 0);
  auth_free(&A.keys);
}

/* ---- the tokenizer bodies ---- */

/* The body's error: its code, status and field ("" for null); API_ERR_NONE when it parses. */
static api_err body_err(const char *body, char *param, size_t cap) {
  api_error e;
  memset(&e, 0, sizeof e);
  json_t *root = parse_tokenizer_body(body, strlen(body), &e);
  if (root) {
    json_decref(root);
    return API_ERR_NONE;
  }
  CHECK(e.status == api_err_status(e.err) && e.message[0]);
  snprintf(param, cap, "%s", e.param);
  return e.err;
}

static void test_tokenizer_body(void) {
  char param[256];
  CHECK(body_err("{}", param, sizeof param) == API_ERR_NONE);
  CHECK(body_err("{\"model\": null}", param, sizeof param) == API_ERR_NONE);
  CHECK(body_err("{\"model\": \"any\"}", param, sizeof param) == API_ERR_NONE);
  const char *bad_json[] = {"", "[1]", "\"s\"", "{", "{\"a\": 1, \"a\": 2}", "null"};
  for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
    CHECK(body_err(bad_json[i], param, sizeof param) == API_ERR_INVALID_JSON && !param[0]);
    CHECK(api_err_status(API_ERR_INVALID_JSON) == 400);
  }
  CHECK(body_err("{\"model\": 5}", param, sizeof param) == API_ERR_INVALID_VALUE &&
        !strcmp(param, "model"));
  api_error e;
  CHECK(parse_tokenizer_body("{\"model\": []}", 13, &e) == NULL);
  CHECK(e.status == 400 && !strcmp(e.message, "'model' must be a string"));
}

/* parse_tokenize on body: API_ERR_NONE with *t, or the error with *e. */
static api_err tokenize(const char *body, tokenize_body *t, api_error *e) {
  memset(e, 0, sizeof *e);
  json_t *root = parse_tokenizer_body(body, strlen(body), e);
  CHECK(root != NULL);
  if (!root) return e->err;
  api_err err = API_ERR_NONE;
  if (parse_tokenize(root, t, e)) {
    CHECK(e->status == api_err_status(e->err) && e->message[0]);
    err = e->err;
  } else {
    CHECK(json_is_string(t->text));
  }
  json_decref(root); /* t->text was borrowed from it: the callers read only *e */
  return err;
}

static void test_tokenize_body(void) {
  tokenize_body t;
  api_error e;
  json_t *root = json_loads("{\"prompt\": \"hi\"}", 0, NULL);
  CHECK(parse_tokenize(root, &t, &e) == 0 && !strcmp(t.field, "prompt"));
  CHECK(!strcmp(json_string_value(t.text), "hi") && !t.pieces && !t.strs);
  json_decref(root);
  root = json_loads(
      "{\"content\": \"x\", \"with_pieces\": true, \"return_token_strs\": true,"
      " \"add_special_tokens\": false, \"add_special\": null}",
      0, NULL);
  CHECK(parse_tokenize(root, &t, &e) == 0 && !strcmp(t.field, "content"));
  CHECK(!strcmp(json_string_value(t.text), "x") && t.pieces == 1 && t.strs == 1);
  json_decref(root);
  root = json_loads("{\"prompt\": \"p\", \"content\": \"c\", \"with_pieces\": null}", 0, NULL);
  CHECK(parse_tokenize(root, &t, &e) == 0 && !strcmp(json_string_value(t.text), "p"));
  CHECK(!t.pieces);
  json_decref(root);
  CHECK(tokenize("{\"prompt\": \"\"}", &t, &e) == API_ERR_NONE); /* empty: no tokens */

  CHECK(tokenize("{\"messages\": [], \"prompt\": \"x\"}", &t, &e) == API_ERR_UNSUPPORTED_FIELD);
  CHECK(e.status == 400 && !strcmp(e.param, "messages"));
  CHECK(!strcmp(e.message,
                "tokenizing chat 'messages' is not supported: send the rendered text as 'prompt'"));
  CHECK(tokenize("{\"prompt\": 3}", &t, &e) == API_ERR_INVALID_VALUE && e.status == 400);
  CHECK(!strcmp(e.param, "prompt") &&
        !strcmp(e.message, "'prompt' (or llama.cpp's 'content') must be a string"));
  CHECK(tokenize("{\"prompt\": null, \"content\": \"c\"}", &t, &e) == API_ERR_INVALID_VALUE);
  CHECK(!strcmp(e.param, "prompt")); /* "prompt" present (even null) is the field */
  CHECK(tokenize("{}", &t, &e) == API_ERR_INVALID_VALUE && !strcmp(e.param, "content"));
  CHECK(tokenize("{\"content\": [\"a\"]}", &t, &e) == API_ERR_INVALID_VALUE);
  CHECK(!strcmp(e.param, "content"));
  const char *flags[] = {"with_pieces", "return_token_strs", "add_special_tokens", "add_special"};
  for (size_t i = 0; i < 4; i++) {
    char body[128];
    snprintf(body, sizeof body, "{\"prompt\": \"x\", \"%s\": 1}", flags[i]);
    CHECK(tokenize(body, &t, &e) == API_ERR_INVALID_VALUE && e.status == 400);
    CHECK(!strcmp(e.param, flags[i]));
    char want[64];
    snprintf(want, sizeof want, "'%s' must be a boolean", flags[i]);
    CHECK(!strcmp(e.message, want));
  }
  /* the first bad flag in that order is the one named */
  CHECK(tokenize("{\"prompt\": \"x\", \"add_special\": \"y\", \"with_pieces\": 0}", &t, &e) ==
        API_ERR_INVALID_VALUE);
  CHECK(!strcmp(e.param, "with_pieces"));
}

/* parse_detokenize on body with a vocabulary of 10 and at most 3 ids. */
static api_err detokenize(const char *body, int32_t **ids, size_t *n, api_error *e) {
  memset(e, 0, sizeof *e);
  json_t *root = json_loads(body, 0, NULL);
  CHECK(root != NULL);
  if (!root) return API_ERR_COUNT;
  api_err err = API_ERR_NONE;
  if (parse_detokenize(root, 10, 3, ids, n, e)) {
    CHECK(*ids == NULL && e->status == api_err_status(e->err) && e->message[0]);
    err = e->err;
  }
  json_decref(root);
  return err;
}

static void test_detokenize_body(void) {
  int32_t *ids;
  size_t n;
  api_error e;
  CHECK(detokenize("{\"tokens\": [0, 9, 4]}", &ids, &n, &e) == API_ERR_NONE);
  CHECK(n == 3 && ids && ids[0] == 0 && ids[1] == 9 && ids[2] == 4);
  free(ids);
  /* llama.cpp's with_pieces shape */
  CHECK(detokenize("{\"tokens\": [{\"id\": 7, \"piece\": \"a\"}, 2]}", &ids, &n, &e) ==
        API_ERR_NONE);
  CHECK(n == 2 && ids && ids[0] == 7 && ids[1] == 2);
  free(ids);
  CHECK(detokenize("{\"tokens\": []}", &ids, &n, &e) == API_ERR_NONE && n == 0 && ids);
  free(ids);

  const char *bad[] = {"{}",
                       "{\"tokens\": null}",
                       "{\"tokens\": \"1\"}",
                       "{\"tokens\": [10]}",
                       "{\"tokens\": [-1]}",
                       "{\"tokens\": [1.0]}",
                       "{\"tokens\": [1, \"2\"]}",
                       "{\"tokens\": [{\"piece\": \"a\"}]}",
                       "{\"tokens\": [[1]]}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(detokenize(bad[i], &ids, &n, &e) == API_ERR_INVALID_VALUE && e.status == 400);
    CHECK(!strcmp(e.param, "tokens") &&
          !strcmp(e.message, "'tokens' must be an array of token ids in [0, 10)"));
  }
  /* more ids than the limit: 422, before the ids are looked at */
  CHECK(detokenize("{\"tokens\": [1, 2, 3, \"x\"]}", &ids, &n, &e) == API_ERR_PROMPT_TOO_LONG);
  CHECK(e.status == 422 && !strcmp(e.param, "tokens"));
  CHECK(!strcmp(e.message, "'tokens' has 4 ids; the limit is 3 (max_prompt_tokens)"));
}

int main(void) {
  RUN(test_head_routes);
  RUN(test_head_key);
  RUN(test_head_phase);
  RUN(test_content_length_parse);
  RUN(test_head_body_size);
  RUN(test_tokenizer_body);
  RUN(test_tokenize_body);
  RUN(test_detokenize_body);
  return tl_summary();
}
