/*
 * api_ctx.c: the handlers' context of a request (api_ctx.h): made on first use, freed once.
 * Thread: loop thread.
 */
#include "api_ctx.h"

#include <stdlib.h>

#include "util.h"

api_ctx *api_ctx_get(req *r) {
  if (!r->ctx) r->ctx = xcalloc(1, sizeof(api_ctx));
  return r->ctx;
}

int api_ctx_running(const req *r) {
  const api_ctx *c = r->ctx;
  return c && c->job_running;
}

void api_ctx_close(req *r) {
  api_ctx *c = r->ctx;
  if (c && c->gen_close) c->gen_close(r);
}

void api_ctx_free(req *r) {
  api_ctx *c = r->ctx;
  if (!c) return;
  if (c->gen_free) c->gen_free(r);
  free(c->lk_msg);
  free(c);
  r->ctx = NULL;
}

void api_ctx_headers(req *r, struct MHD_Response *resp) {
  api_ctx *c = r->ctx;
  if (!c) return;
  if (c->session_id[0]) MHD_add_response_header(resp, "X-Session-Id", c->session_id);
  if (c->sess_reset) MHD_add_response_header(resp, "X-Session-Reset", "1");
  if (c->idem_replayed) MHD_add_response_header(resp, "Idempotent-Replayed", "true");
}

void api_ctx_log(req *r, json_writer *w, double dur) {
  api_ctx *c = r->ctx;
  jw_kstring(w, "session", c && c->session_id[0] ? c->session_id : NULL);
  if (c && c->gen_log) {
    c->gen_log(r, w, dur);
  } else { /* no work was done for it */
    jw_kint(w, "tokens_in", 0);
    jw_kint(w, "tokens_out", 0);
    jw_knull(w, "queue_ms");
    jw_knull(w, "ttft_ms");
    jw_kfixed(w, "duration_ms", dur * 1e3, 3);
  }
}

void api_ctx_log_end(req *r, json_writer *w) {
  api_ctx *c = r->ctx;
  if (c && c->sess_reset) jw_kbool(w, "session_reset", 1);
}
