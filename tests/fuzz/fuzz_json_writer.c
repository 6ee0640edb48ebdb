/*
 * fuzz_json_writer.c: libFuzzer target for the JSON written outside the token hot path
 * (base/json_writer.c, the error object of http/api_errors.c) and the stream chunks
 * (engine/job.c): for arbitrary field content, and for any sequence of writer calls the input
 * spells, every document the writer calls whole (jw_ok) parses with jansson, and the strings
 * read back are the ones written (bytes that are not UTF-8 come back as U+FFFD). Never a crash,
 * never a leak.
 * Input: fields, each a length byte and that many bytes, then writer operations, one byte each
 * (fields feed their strings in turn).
 */
#define _GNU_SOURCE /* memmem */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "buf.h"
#include "job.h"
#include "json_writer.h"
#include "util.h"

typedef struct input {
  const uint8_t *p;
  size_t n, i;
} input;

/* The next field: a length byte and up to that many bytes. */
static const char *field(input *in, size_t *len) {
  if (in->i >= in->n) {
    *len = 0;
    return "";
  }
  size_t want = in->p[in->i++];
  size_t have = in->n - in->i < want ? in->n - in->i : want;
  const char *s = (const char *)in->p + in->i;
  in->i += have;
  *len = have;
  return s;
}

/* s[0..n) up to its first NUL, as a malloc'd C string (reads nothing past s + n: the fuzzer's
 * buffer ends there, and strndup may look one byte further for the NUL). */
static char *copy_cstr(const char *s, size_t n) {
  const char *nul = memchr(s, 0, n);
  if (nul) n = (size_t)(nul - s);
  char *c = malloc(n + 1);
  if (!c) abort();
  memcpy(c, s, n);
  c[n] = 0;
  return c;
}

/* The field as a C string (up to its first NUL): malloc'd. */
static char *cstr(input *in) {
  size_t n;
  const char *s = field(in, &n);
  return copy_cstr(s, n);
}

static json_t *parse_or_die(const char *text, size_t n) {
  json_error_t e;
  json_t *v = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
  if (!v) {
    fprintf(stderr, "not JSON (%s at %d): %.*s\n", e.text, e.position, (int)n, text);
    abort();
  }
  return v;
}

/* What json_escape makes of s: the string jansson must read back. */
static void expected(const char *s, size_t n, buf *out) {
  buf q;
  buf_init(&q);
  json_escape(&q, s, n);
  json_t *v = parse_or_die(q.p, q.len);
  buf_add(out, json_string_value(v), json_string_length(v));
  json_decref(v);
  buf_free(&q);
}

static void string_is(json_t *v, const char *s, size_t n) {
  buf want;
  buf_init(&want);
  expected(s, n, &want);
  if (!json_is_string(v) || json_string_length(v) != want.len ||
      memcmp(json_string_value(v), want.p, want.len))
    abort();
  buf_free(&want);
}

static void error_object(input *in) {
  char *type = cstr(in), *code = cstr(in), *param = cstr(in), *msg = cstr(in);
  buf b;
  buf_init(&b);
  error_body(&b, type, *code ? code : NULL, param, msg);
  json_t *v = parse_or_die(b.p, b.len);
  json_t *e = json_object_get(v, "error");
  string_is(json_object_get(e, "message"), msg, strlen(msg));
  string_is(json_object_get(e, "type"), type, strlen(type));
  if (*param) string_is(json_object_get(e, "param"), param, strlen(param));
  else if (!json_is_null(json_object_get(e, "param"))) abort();
  if (json_object_size(e) != 4) abort();
  json_decref(v);
  buf_free(&b);
  free(type), free(code), free(param), free(msg);
}

/* Writer calls spelled by the input's operation bytes; a value in an object gets its key. */
static void writer_document(input *in) {
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  jw_object(&w);
  size_t n;
  const char *s;
  while (in->i < in->n) {
    uint8_t op = in->p[in->i++];
    int kind = op % 8;
    if (kind <= 1 && w.depth >= JW_MAX_DEPTH - 2) kind = 7; /* no deeper: a null instead */
    int in_obj = w.is_obj >> w.depth & 1;
    if (in_obj && kind != 2) {
      s = field(in, &n);
      char *k = copy_cstr(s, n);
      jw_key(&w, k);
      free(k);
    }
    switch (kind) {
      case 0: jw_object(&w); break;
      case 1: jw_array(&w); break;
      case 2: if (w.depth > 1) jw_end(&w); break;
      case 3: s = field(in, &n); jw_string_n(&w, s, n); break;
      case 4: jw_int(&w, (long long)op * -1234567 + ((long long)op << 40)); break;
      case 5: jw_uint(&w, (unsigned long long)op * 1000003u); break;
      case 6: jw_bool(&w, op & 16); break;
      default: jw_null(&w); break;
    }
  }
  while (w.depth && !w.bad) jw_end(&w);
  if (!jw_ok(&w)) abort(); /* the calls above never misuse the writer */
  json_decref(parse_or_die(b.p, b.len));
  buf_free(&b);
}

/* A stream's chunks: each "data: " + one JSON object + a blank line. */
static void stream_chunks(input *in, int chat) {
  gen_params *gp = gen_params_new();
  gp->kind = chat ? JOB_CHAT : JOB_COMPLETION;
  size_t n;
  const char *s = field(in, &n);
  snprintf(gp->id, sizeof gp->id, "%.*s", (int)(n < sizeof gp->id ? n : sizeof gp->id - 1), s);
  gp->model_name = cstr(in);
  gp->fingerprint = "fp_00";
  gp->include_usage = chat;
  job *j = job_new(gp, NULL, 0, -1, NULL, 0, NULL);
  gen_params_unref(gp);
  j->run.finish = FINISH_STOP;
  s = field(in, &n);
  buf_add(&j->text.reply, s, n);
  job_emit_stream(j, 1);
  size_t i = 0;
  int events = 0;
  while (i < j->stream.out.len) {
    const char *p = j->stream.out.p + i;
    const char *end = memmem(p, j->stream.out.len - i, "\n\n", 2);
    if (!end || strncmp(p, "data: ", 6)) abort();
    json_t *v = parse_or_die(p + 6, (size_t)(end - p - 6));
    json_t *c = json_array_get(json_object_get(v, "choices"), 0);
    json_t *t = chat ? json_object_get(json_object_get(c, "delta"), "content")
                     : json_object_get(c, "text");
    if (events == 0 && n) string_is(t, s, n);
    string_is(json_object_get(v, "model"), j->params->model_name, strlen(j->params->model_name));
    json_decref(v);
    events++;
    i = (size_t)(end - j->stream.out.p) + 2;
  }
  if (events != (n ? 2 : 1)) abort();
  job_free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  input in = {data, len, 0};
  if (!len) return 0;
  int which = data[in.i++] % 4;
  if (which == 0) error_object(&in);
  else if (which == 1) writer_document(&in);
  else stream_chunks(&in, which == 3);
  return 0;
}
