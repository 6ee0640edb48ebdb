/*
 * routes.h: the daemon's one routes table: which handler answers which method and path, and
 * what a request must bring before its handler runs (an API key, a loaded model) and how large
 * its body may be. The head check (api_request.c) matches a request once, on the server's first
 * call; the matched row and its path parameter stay in the request, so a handler never looks at
 * the method or the path again.
 * Thread: loop thread (the table itself is immutable).
 */
#ifndef XLS_ROUTES_H
#define XLS_ROUTES_H

#include <stddef.h>

typedef struct req req;

/* The label of xlserve_requests_total{route=...}: several rows may share one. */
typedef enum {
  ROUTE_OTHER, /* no row matched (404) */
  ROUTE_HEALTH,
  ROUTE_METRICS,
  ROUTE_MODELS,
  ROUTE_COMPLETIONS,
  ROUTE_CHAT,
  ROUTE_SESSIONS,
  ROUTE_UI,        /* the chat page at / */
  ROUTE_TOKENIZER, /* /tokenize, /detokenize, /tokenizer_info */
  ROUTE_VERSION,
  ROUTE_N
} route_id;

extern const char *const ROUTE_NAMES[ROUTE_N];

typedef enum {
  BODY_DEFAULT,       /* up to max_body_bytes */
  BODY_SESSION_STATE, /* max_body_bytes + a full session state + 1 MiB (an imported envelope) */
} route_body;

typedef struct route {
  const char *methods; /* "GET, HEAD": the methods this row answers, as the Allow header says */
  /* literal text, and at most one parameter: "{id}" is one path segment (it may be empty when
   * text follows, never at the end), "{id*}" is the non-empty rest of the path */
  const char *pattern;
  void (*handler)(req *r);
  route_id id;
  int needs_key;      /* the API key is checked (401 without it) */
  int needs_model;    /* 503 "loading" until the model is loaded */
  int while_draining; /* still answered once a drain began (else 503 "draining") */
  route_body body;
} route;

typedef struct route_match {
  const route *row;  /* NULL: the path exists, the method does not (405 with `allow`) */
  route_id id;       /* the path's route (its first row's) */
  char allow[64];    /* every method of the path's rows, in table order: "GET, HEAD, POST" */
  const char *param; /* the pattern's parameter inside `path` (NULL: none) */
  size_t param_len;
} route_match;

/* Looks up `path` (the path prefix already stripped) and `method`. Returns 0 when no row has
 * this path (404), else 1 with *m filled. */
int routes_match(const char *path, const char *method, route_match *m);

/* The handlers (api_*.c). Each reads its path parameter from the request (req_param). */
void api_ui(req *r);
void api_health(req *r);
void api_metrics(req *r);
void api_models_list(req *r);
void api_model_get(req *r);
void api_tokenize(req *r);
void api_detokenize(req *r);
void api_tokenizer_info(req *r);
void api_version(req *r);
void api_completions(req *r);
void api_chat_completions(req *r);
void api_sessions_list(req *r);
void api_sessions_create(req *r);
void api_session_get(req *r);
void api_session_delete(req *r);
void api_session_fork(req *r);
void api_session_export(req *r);
void api_session_import(req *r);

#endif
