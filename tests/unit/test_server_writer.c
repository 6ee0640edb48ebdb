/*
 * test_server_writer.c: the JSON writer of the once-per-request bodies (base/json_writer.c) and
 * the per-token stream chunks (engine/job.c's job_emit_stream): exact bytes for known input,
 * and every document, whatever its strings hold (quotes, control bytes, NUL, invalid UTF-8),
 * parses with jansson to the values written. The error object (http/api_errors.c's api_err_body)
 * keeps the OpenAI shape byte for byte. Single-threaded.
 */
#define _GNU_SOURCE /* memmem */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "buf.h"
#include "job.h"
#include "json_writer.h"
#include "testlib.h"

static json_t *parse(const char *text, size_t n) {
  json_error_t e;
  json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
  if (!v) fprintf(stderr, "not JSON (%s at %d): %.*s\n", e.text, e.position, (int)n, text);
  return v;
}

static int str_is(json_t *v, const char *s, size_t n) {
  return json_is_string(v) && json_string_length(v) == n && !memcmp(json_string_value(v), s, n);
}

static void test_writer_bytes(void) {
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  jw_object(&w);
  jw_kstring(&w, "id", "s-1");
  jw_kint(&w, "created", -5);
  jw_kuint(&w, "tokens", 4294967296ULL);
  jw_kbool(&w, "busy", 0);
  jw_knull(&w, "param");
  jw_kstring(&w, "code", NULL);
  jw_key(&w, "data");
  jw_array(&w);
  jw_int(&w, 1);
  jw_object(&w);
  jw_end(&w);
  jw_array(&w);
  jw_end(&w);
  jw_string(&w, "x");
  jw_raw(&w, "{\"a\":[]}", 8);
  jw_end(&w);
  jw_end(&w);
  CHECK(jw_ok(&w));
  const char *want = "{\"id\":\"s-1\",\"created\":-5,\"tokens\":4294967296,\"busy\":false,"
                     "\"param\":null,\"code\":null,\"data\":[1,{},[],\"x\",{\"a\":[]}]}";
  CHECK(b.len == strlen(want) && !memcmp(b.p, want, b.len));
  json_t *v = parse(b.p, b.len);
  CHECK(v && json_array_size(json_object_get(v, "data")) == 5);
  json_decref(v);
  buf_free(&b);
}

static void test_writer_escapes(void) {
  /* a quote, a backslash, control bytes, NUL, DEL, valid UTF-8, a lone continuation byte */
  const char s[] = "q\"b\\n\n\r\t\x01\x1f\0z\x7f\xc3\xa9\x80!";
  size_t n = sizeof s - 1;
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  jw_object(&w);
  jw_key(&w, "k\"\n");
  jw_string_n(&w, s, n);
  jw_end(&w);
  CHECK(jw_ok(&w));
  const char *want = "{\"k\\\"\\n\":\"q\\\"b\\\\n\\n\\r\\t\\u0001\\u001f\\u0000z\x7f\xc3\xa9\xef\xbf\xbd!\"}";
  CHECK(b.len == strlen(want) && !memcmp(b.p, want, b.len));
  json_t *v = parse(b.p, b.len);
  /* what jansson reads back: the bytes written, the invalid byte as U+FFFD */
  const char back[] = "q\"b\\n\n\r\t\x01\x1f\0z\x7f\xc3\xa9\xef\xbf\xbd!";
  CHECK(v && str_is(json_object_get(v, "k\"\n"), back, sizeof back - 1));
  json_decref(v);
  buf_free(&b);
}

/* Each misuse marks the writer (jw_ok 0) and writes nothing more. */
static void test_writer_misuse(void) {
  buf b;
  buf_init(&b);
  json_writer w;

  jw_init(&w, &b); /* a value where a key belongs */
  jw_object(&w);
  jw_int(&w, 1);
  size_t len = b.len;
  jw_end(&w);
  CHECK(!jw_ok(&w) && b.len == len);

  b.len = 0; /* a key inside an array */
  jw_init(&w, &b);
  jw_array(&w);
  jw_key(&w, "k");
  CHECK(!jw_ok(&w) && b.len == 1);

  b.len = 0; /* two keys in a row */
  jw_init(&w, &b);
  jw_object(&w);
  jw_key(&w, "a");
  jw_key(&w, "b");
  CHECK(!jw_ok(&w));

  b.len = 0; /* closing what is not open; a key left without its value */
  jw_init(&w, &b);
  jw_end(&w);
  CHECK(!jw_ok(&w) && b.len == 0);
  jw_init(&w, &b);
  jw_object(&w);
  jw_key(&w, "a");
  jw_end(&w);
  CHECK(!jw_ok(&w));

  b.len = 0; /* unbalanced, two top-level values, nothing at all */
  jw_init(&w, &b);
  jw_array(&w);
  CHECK(!jw_ok(&w));
  jw_init(&w, &b);
  jw_int(&w, 1);
  CHECK(jw_ok(&w));
  jw_int(&w, 2);
  CHECK(!jw_ok(&w));
  jw_init(&w, &b);
  CHECK(!jw_ok(&w));

  b.len = 0; /* deeper than JW_MAX_DEPTH */
  jw_init(&w, &b);
  for (int i = 0; i < JW_MAX_DEPTH + 1; i++) jw_array(&w);
  CHECK(!jw_ok(&w) && b.len < JW_MAX_DEPTH);
  buf_free(&b);
}

/* error_body: {"error":{"message","type","param","code"}}, param "" and NULL are null */
static void test_error_body(void) {
  buf b;
  buf_init(&b);
  error_body(&b, "invalid_request_error", "bad \"code\"", "max_tokens", "must be <= 5\n");
  const char *want = "{\"error\":{\"message\":\"must be <= 5\\n\",\"type\":\"invalid_request_error\","
                     "\"param\":\"max_tokens\",\"code\":\"bad \\\"code\\\"\"}}";
  CHECK(b.len == strlen(want) && !memcmp(b.p, want, b.len));
  b.len = 0;
  error_body(&b, "server_error", NULL, "", "m");
  want = "{\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
  CHECK(b.len == strlen(want) && !memcmp(b.p, want, b.len));
  buf_free(&b);
}

/* The stream's chunks: "data: {json}\n\n" each; returns how many parsed into evs. */
static int sse_events(const buf *out, json_t **evs, int cap) {
  int n = 0;
  size_t i = 0;
  while (i < out->len && n < cap) {
    const char *p = out->p + i;
    const char *end = memmem(p, out->len - i, "\n\n", 2);
    if (!end || strncmp(p, "data: ", 6)) return -1;
    evs[n] = parse(p + 6, (size_t)(end - p - 6));
    if (!evs[n]) return -1;
    n++;
    i = (size_t)(end - out->p) + 2;
  }
  return n;
}

static job *stream_job(job_kind kind, const char *text, size_t n, int include_usage) {
  gen_params *p = gen_params_new();
  p->kind = kind;
  snprintf(p->id, sizeof p->id, "%s", kind == JOB_CHAT ? "chatcmpl-\"7\"" : "cmpl-7");
  p->model_name = strdup("austen\n\x80");
  p->fingerprint = "fp_0123";
  p->created = 1700000000;
  p->stream = 1;
  p->include_usage = include_usage;
  job *j = job_new(p, NULL, 0, -1, NULL, 0, NULL);
  gen_params_unref(p);
  buf_add(&j->text.reply, text, n);
  return j;
}

static void test_sse_chunks_bytes(void) {
  job *j = stream_job(JOB_COMPLETION, "Hi", 2, 0);
  j->run.finish = FINISH_LENGTH;
  job_emit_stream(j, 1);
  const char *want =
      "data: {\"id\":\"cmpl-7\",\"object\":\"text_completion\",\"created\":1700000000,"
      "\"model\":\"austen\\n\xef\xbf\xbd\",\"choices\":[{\"index\":0,\"text\":\"Hi\",\"logprobs\":null,"
      "\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"cmpl-7\",\"object\":\"text_completion\",\"created\":1700000000,"
      "\"model\":\"austen\\n\xef\xbf\xbd\",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
      "\"finish_reason\":\"length\"}]}\n\n";
  CHECK(j->stream.out.len == strlen(want) && !memcmp(j->stream.out.p, want, j->stream.out.len));
  job_free(j);
}

static void test_sse_chunks_parse(void) {
  const char text[] = "say \"hi\"\\\n\0\x01\xff end";
  for (int kind = 0; kind < 2; kind++) {
    job *j = stream_job(kind ? JOB_CHAT : JOB_COMPLETION, text, sizeof text - 1, 1);
    j->run.finish = FINISH_STOP;
    job_emit_stream(j, 0); /* the text so far */
    job_emit_stream(j, 1); /* nothing new: only the final chunk */
    json_t *evs[4] = {0};
    int n = sse_events(&j->stream.out, evs, 4);
    CHECK(n == 2);
    if (n == 2) {
      json_t *c0 = json_array_get(json_object_get(evs[0], "choices"), 0);
      json_t *t = kind ? json_object_get(json_object_get(c0, "delta"), "content")
                       : json_object_get(c0, "text");
      const char back[] = "say \"hi\"\\\n\0\x01\xef\xbf\xbd end";
      CHECK(str_is(t, back, sizeof back - 1));
      CHECK(str_is(json_object_get(evs[0], "id"), j->params->id, strlen(j->params->id)));
      CHECK(json_is_null(json_object_get(evs[0], "usage")));
      CHECK(str_is(json_object_get(evs[0], "object"),
                   kind ? "chat.completion.chunk" : "text_completion",
                   strlen(kind ? "chat.completion.chunk" : "text_completion")));
      CHECK(!kind || str_is(json_object_get(evs[0], "system_fingerprint"), "fp_0123", 7));
      json_t *c1 = json_array_get(json_object_get(evs[1], "choices"), 0);
      CHECK(str_is(json_object_get(c1, "finish_reason"), "stop", 4));
    }
    for (int i = 0; i < 4; i++) json_decref(evs[i]);
    job_free(j);
  }
}

int main(void) {
  RUN(test_writer_bytes);
  RUN(test_writer_escapes);
  RUN(test_writer_misuse);
  RUN(test_error_body);
  RUN(test_sse_chunks_bytes);
  RUN(test_sse_chunks_parse);
  return tl_summary();
}
