/*
 * api_errors.c: the API's error table and its writer (see api_errors.h). Thread: any.
 */
#include "api_errors.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "json_writer.h"

static const api_err_info TABLE[API_ERR_COUNT] = {[API_ERR_NONE] = {0, NULL, NULL, NULL},
#define API_ERR_ROW(name, status, type, code, message)                                             \
  [API_ERR_##name] = {status, type, code, message},
                                                  API_ERRORS(API_ERR_ROW)
#undef API_ERR_ROW
};

const api_err_info *api_err_get(api_err e) {
  if (e <= API_ERR_NONE || e >= API_ERR_COUNT) return NULL;
  return &TABLE[e];
}

int api_err_status(api_err e) {
  const api_err_info *i = api_err_get(e);
  return i ? i->status : 0;
}

const char *api_err_code(api_err e) {
  const api_err_info *i = api_err_get(e);
  return i ? i->code : NULL;
}

void error_body(buf *b, const char *type, const char *code, const char *param,
                const char *message) {
  json_writer w;
  jw_init(&w, b);
  jw_object(&w);
  jw_key(&w, "error");
  jw_object(&w);
  jw_kstring(&w, "message", message);
  jw_kstring(&w, "type", type);
  jw_kstring(&w, "param", param && *param ? param : NULL);
  jw_kstring(&w, "code", code);
  jw_end(&w);
  jw_end(&w);
}

void api_err_body(buf *b, api_err e, const char *param, const char *message) {
  const api_err_info *i = api_err_get(e);
  if (!i) i = &TABLE[API_ERR_GENERATION_FAILED]; /* a caller's bug: still a well-formed body */
  error_body(b, i->type, i->code, param, message ? message : i->message);
}

void api_err_stream_body(buf *b, api_err e, const char *message) {
  const api_err_info *i = api_err_get(e);
  if (!i) i = &TABLE[API_ERR_GENERATION_FAILED];
  error_body(b, "server_error", i->code, NULL, message ? message : i->message);
}

void api_error_set(api_error *e, api_err err, const char *param, const char *fmt, ...) {
  e->err = err;
  e->status = api_err_status(err);
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
}
