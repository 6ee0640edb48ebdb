/*
 * api_head.c: the checks of a request's head (see api_head.h). Thread: loop thread.
 */
#include "api_head.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "http_content_length.h"

static head_outcome refuse(head_verdict *v, api_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static head_outcome refuse(head_verdict *v, api_err err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->message, sizeof v->message, fmt, ap);
  va_end(ap);
  v->err = err;
  return HEAD_REFUSE;
}

head_outcome api_head_check(const app *a, const head_in *in, head_verdict *v, uint8_t owner[32]) {
  memset(v, 0, sizeof *v);
  const char *path = in->path;
  const char *pre = a->opt.path_prefix;
  size_t pl = strlen(pre);
  if (pl) {
    if (strncmp(path, pre, pl) || (path[pl] != '/' && path[pl] != 0))
      return refuse(v, API_ERR_NOT_FOUND, "no route for %s", path);
    path += pl;
    if (!*path) path = "/";
  }
  if (!routes_match(path, in->method, &v->m))
    return refuse(v, API_ERR_NOT_FOUND, "no route for %s %s", in->method, path);
  v->matched = 1;
  if (!strcmp(in->method, "OPTIONS")) return HEAD_PREFLIGHT; /* never needs a key */
  const route *rt = v->m.row;
  if (!rt) {
    char msg[160]; /* the message as it always was: cut at 160 bytes */
    snprintf(msg, sizeof msg, "method %s is not allowed here (allowed: %s)", in->method,
             v->m.allow);
    return refuse(v, API_ERR_METHOD_NOT_ALLOWED, "%s", msg);
  }
  if (rt->needs_key && !auth_check(&a->keys, in->authorization, owner))
    return refuse(v, API_ERR_INVALID_API_KEY,
                  "missing or invalid API key (send 'Authorization: Bearer KEY')");
  if (!rt->while_draining && a->phase >= APP_DRAINING) {
    v->retry_after = "5";
    return refuse(v, API_ERR_DRAINING, "the server is shutting down");
  }
  if (rt->needs_model && a->phase == APP_LOADING) {
    v->retry_after = "2";
    return refuse(v, API_ERR_LOADING, "the model is still loading");
  }
  v->body_limit = (size_t)a->opt.max_body_bytes;
  if (rt->body == BODY_SESSION_STATE && a->model) /* a session's envelope: up to a full state
                                                      (of any memory dtype) */
    v->body_limit += xl_model_state_blob_max_bytes(a->model) + ((size_t)1 << 20);
  if (in->content_length) { /* libmicrohttpd has refused what is not a number (http_guard.c) */
    uint64_t n;
    content_length_kind kind =
        content_length_parse(in->content_length, strlen(in->content_length), &n);
    if (kind == CONTENT_LENGTH_NOT_NUMBER)
      return refuse(v, API_ERR_INVALID_CONTENT_LENGTH, "%s", CONTENT_LENGTH_NOT_NUMBER_MESSAGE);
    if (kind == CONTENT_LENGTH_OUT_OF_RANGE || n > (uint64_t)v->body_limit)
      return refuse(v, API_ERR_BODY_TOO_LARGE, "the request body exceeds %zu bytes", v->body_limit);
  }
  return HEAD_PASS;
}
