/*
 * api_request.c: what the HTTP server (http_server.h) calls for the API: the answer to the
 * checks of a request's head (api_head.h), the dispatch to the matched row's handler, and the
 * hooks of the handlers' context (api_ctx.h).
 * Thread: loop thread.
 */
#include <stdio.h>

#include "api_ctx.h"
#include "api_head.h"
#include "app.h"

/* The server's first call for a request, with its head only: the checks of api_head.h (route,
 * key, model, not draining, the announced body size); answers at once when the request cannot
 * succeed. */
static void api_head(req *r) {
  app *a = r->a;
  head_in in = {r->path, r->method, req_header(r, MHD_HTTP_HEADER_AUTHORIZATION),
                req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH)};
  head_verdict v;
  head_outcome o = api_head_check(a, &in, &v, r->owner);
  if (v.matched) r->route = v.m.id;
  if (o == HEAD_PREFLIGHT) { /* a CORS preflight (never needs a key), or a plain query */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    char allow[128];
    snprintf(allow, sizeof allow, "%s, OPTIONS", v.m.allow);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    cors_add_preflight_headers(&a->cors, req_header(r, "Origin"), v.m.allow,
                               req_header(r, "Access-Control-Request-Headers"), resp);
    req_queue_response(r, 204, resp);
    return;
  }
  if (v.m.row) {
    r->rt = v.m.row;
    r->param = v.m.param;
    r->param_len = v.m.param_len;
  }
  if (o == HEAD_PASS || v.err == API_ERR_BODY_TOO_LARGE) r->body_limit = v.body_limit;
  if (v.retry_after) r->retry_after = v.retry_after;
  if (o != HEAD_REFUSE) return;
  if (v.err == API_ERR_METHOD_NOT_ALLOWED)
    req_error_header(r, v.err, MHD_HTTP_HEADER_ALLOW, v.m.allow, v.message);
  else req_error(r, v.err, NULL, "%s", v.message);
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
