/*
 * api_head.h: the checks of a request's head (path prefix, route, method, API key, the app's
 * phase, the announced body size) as a verdict, without the HTTP server: api_request.c answers
 * it. Thread: loop thread (it reads the app's phase and key set).
 */
#ifndef XLS_API_HEAD_H
#define XLS_API_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "api_errors.h"
#include "routes.h"

struct app;

/* What the checks read of the head. */
typedef struct head_in {
  const char *path; /* the URL's path, with the app's path prefix */
  const char *method;
  const char *authorization;  /* the Authorization header; NULL: absent */
  const char *content_length; /* the Content-Length header; NULL: absent */
} head_in;

typedef enum {
  HEAD_PASS,      /* the body may come; then the route's handler */
  HEAD_PREFLIGHT, /* OPTIONS on a known path: the CORS preflight (or the Allow list) */
  HEAD_REFUSE     /* answer err at once */
} head_outcome;

typedef struct head_verdict {
  int matched;             /* the path has a route: m.id (and m.allow) are set */
  route_match m;           /* m.row: the row of the method (NULL: 405) */
  size_t body_limit;       /* the body's byte limit: HEAD_PASS, and refused with 413 */
  api_err err;             /* HEAD_REFUSE: the error (405: Allow is m.allow) */
  const char *retry_after; /* refused while draining or loading: Retry-After's value */
  char message[1024];      /* HEAD_REFUSE: the error object's message */
} head_verdict;

/* Checks the head against the routes table and a's options, phase and keys, in this order:
 * path prefix and route (404), OPTIONS (a preflight), method (405), API key (401; sets owner),
 * draining (503), loading (503), Content-Length over the body limit (413). */
head_outcome api_head_check(const struct app *a, const head_in *in, head_verdict *v,
                            uint8_t owner[32]);

#endif
