/*
 * api_ctx.h: the handlers' context of one request (req.ctx): what the API hangs on a request
 * beyond its transport: the store lookup it waits for, the session its answer names, and the
 * generation it runs (api_generate.c's context and its hooks). Made on first use, freed with
 * the request through one path (api_ctx_free), which the HTTP server reaches through its hooks
 * without knowing what is inside.
 * Thread: loop thread.
 */
#ifndef XLS_API_CTX_H
#define XLS_API_CTX_H

#include <microhttpd.h>

#include "http_server.h"
#include "json_writer.h"
#include "session_table.h"

typedef struct api_ctx {
  /* the session store's answer to this request's lookup (api_sessions.c) */
  int lk_have; /* the store answered (the request waited in REQ_RESTORING) */
  st_status lk_status;
  char *lk_msg;
  int lk_loops;
  int list_limit; /* GET /v1/sessions: the page size */
  int replacing;  /* PUT state over an existing (or refused) session: 200, not 201 */
  /* the session the answer names (X-Session-Id, X-Session-Reset, the access log) */
  char session_id[129];
  int sess_reset;    /* X-Session-Reset: 1 */
  int idem_replayed; /* Idempotent-Replayed: true (api_idem.c) */
  /* the generation (api_generate.c): its context and hooks (NULL: none) */
  void *gen;
  int job_running;           /* submitted, its DONE not yet processed (drain cancels) */
  void (*gen_close)(req *r); /* the client left or MHD ended the request: stop the work */
  void (*gen_free)(req *r);  /* release the generation's context */
  /* the access log's work fields, from "tokens_in" to "finish" (dur: the request's seconds) */
  void (*gen_log)(req *r, json_writer *line, double dur);
} api_ctx;

/* r's context, made on first use (never NULL). */
api_ctx *api_ctx_get(req *r);
#define ACTX(r) api_ctx_get((req *)(r))
/* A generation of r's runs (its DONE not yet processed); makes no context. */
int api_ctx_running(const req *r);

/* The HTTP server's hooks (http_server.h): they read the context when there is one. */
void api_ctx_close(req *r);
void api_ctx_free(req *r);
void api_ctx_headers(req *r, struct MHD_Response *resp);
void api_ctx_log(req *r, json_writer *line, double dur);
void api_ctx_log_end(req *r, json_writer *line);

#endif
