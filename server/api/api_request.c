/*
 * api_request.c: what the HTTP server (http_server.h) calls for the API: the checks of a
 * request's head against the routes table, the dispatch to the matched row's handler, and the
 * hooks of the handlers' context (api_ctx.h).
 * Thread: loop thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_ctx.h"
#include "app.h"

/* The server's first call for a request, with its head only: matches the route, checks what
 * the row asks for (key, model, not draining) and the announced body size, and answers at once
 * when the request cannot succeed. */
static void api_head(req *r) {
  app *a = r->a;
  const char *path = r->path;
  const char *pre = a->opt.path_prefix;
  size_t pl = strlen(pre);
  if (pl) {
    if (strncmp(path, pre, pl) || (path[pl] != '/' && path[pl] != 0)) {
      req_error(r, API_ERR_NOT_FOUND, NULL, "no route for %s", path);
      return;
    }
    path += pl;
    if (!*path) path = "/";
  }
  route_match m;
  if (!routes_match(path, r->method, &m)) {
    req_error(r, API_ERR_NOT_FOUND, NULL, "no route for %s %s", r->method, path);
    return;
  }
  r->route = m.id;
  if (!strcmp(r->method, "OPTIONS")) { /* a CORS preflight (never needs a key), or a plain query */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    char allow[128];
    snprintf(allow, sizeof allow, "%s, OPTIONS", m.allow);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    cors_add_preflight_headers(&a->cors, req_header(r, "Origin"), m.allow,
                               req_header(r, "Access-Control-Request-Headers"), resp);
    req_queue_response(r, 204, resp);
    return;
  }
  const route *rt = m.row;
  if (!rt) {
    char msg[160];
    snprintf(msg, sizeof msg, "method %s is not allowed here (allowed: %s)", r->method, m.allow);
    req_error_header(r, API_ERR_METHOD_NOT_ALLOWED, MHD_HTTP_HEADER_ALLOW, m.allow, msg);
    return;
  }
  r->rt = rt;
  r->param = m.param;
  r->param_len = m.param_len;
  if (rt->needs_key &&
      !auth_check(&a->keys, req_header(r, MHD_HTTP_HEADER_AUTHORIZATION), r->owner)) {
    req_error(r, API_ERR_INVALID_API_KEY, NULL,
              "missing or invalid API key (send 'Authorization: Bearer KEY')");
    return;
  }
  if (!rt->while_draining && a->phase >= APP_DRAINING) {
    r->retry_after = "5";
    req_error(r, API_ERR_DRAINING, NULL, "the server is shutting down");
    return;
  }
  if (rt->needs_model && a->phase == APP_LOADING) {
    r->retry_after = "2";
    req_error(r, API_ERR_LOADING, NULL, "the model is still loading");
    return;
  }
  r->body_limit = (size_t)a->opt.max_body_bytes;
  if (rt->body == BODY_SESSION_STATE && a->model) /* a session's envelope: up to a full state
                                                      (of any memory dtype) */
    r->body_limit += xl_model_state_blob_max_bytes(a->model) + ((size_t)1 << 20);
  const char *cl = req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    if (errno || *end || n > (unsigned long long)r->body_limit) {
      req_error(r, API_ERR_BODY_TOO_LARGE, NULL, "the request body exceeds %zu bytes",
                r->body_limit);
      return;
    }
  }
}

/* The handler of the row api_head matched (a request that reaches here has one). */
static void api_dispatch(req *r) {
  if (r->rt) r->rt->handler(r);
  else req_error(r, API_ERR_NOT_FOUND, NULL, "no route");
}

static void api_request_freed(void *arg) {
  app *a = arg;
  a->check_drained(a);
}

http_hooks api_http_hooks(app *a) {
  http_hooks h = {.head = api_head,
                  .dispatch = api_dispatch,
                  .close = api_ctx_close,
                  .free_ctx = api_ctx_free,
                  .headers = api_ctx_headers,
                  .log_fields = api_ctx_log,
                  .log_end = api_ctx_log_end,
                  .request_freed = api_request_freed,
                  .arg = a};
  return h;
}
