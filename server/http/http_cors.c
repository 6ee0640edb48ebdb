/*
 * http_cors.c: CORS headers and preflight answers (see http_cors.h). Thread: as the header says.
 */
#include "http_cors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "util.h"

static int origin_valid(const char *o, size_t n) {
  size_t skip;
  if (n > 7 && !strncmp(o, "http://", 7)) skip = 7;
  else if (n > 8 && !strncmp(o, "https://", 8)) skip = 8;
  else return 0;
  for (size_t i = skip; i < n; i++)
    if (o[i] == '/' || o[i] == ' ' || o[i] == ',' || (unsigned char)o[i] < 0x21 ||
        (unsigned char)o[i] > 0x7e)
      return 0;
  return 1;
}

int cors_parse(cors_cfg *c, const char *list, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    const char *s = p;
    while (n && *s == ' ') s++, n--;
    while (n && s[n - 1] == ' ') n--;
    if (n == 1 && *s == '*') {
      c->any = 1;
    } else if (n) {
      if (!origin_valid(s, n)) {
        snprintf(err, errlen, "'%.*s' is not an origin (scheme://host[:port], no path) or *",
                 (int)(n > 200 ? 200 : n), s);
        cors_free(c);
        return -1;
      }
      c->origins = xrealloc(c->origins, sizeof *c->origins * (size_t)(c->n_origins + 1));
      c->origins[c->n_origins++] = xstrndup(s, n);
    }
    p = e ? e + 1 : p + strlen(p);
  }
  return 0;
}

void cors_free(cors_cfg *c) {
  for (int i = 0; i < c->n_origins; i++) free(c->origins[i]);
  free(c->origins);
  memset(c, 0, sizeof *c);
}

int cors_enabled(const cors_cfg *c) { return c->any || c->n_origins > 0; }

static int allowed(const cors_cfg *c, const char *origin) {
  if (!origin || !cors_enabled(c)) return 0;
  if (c->any) return 1;
  for (int i = 0; i < c->n_origins; i++)
    if (!strcmp(c->origins[i], origin)) return 1;
  return 0;
}

void cors_add_headers(const cors_cfg *c, const char *origin, struct MHD_Response *resp) {
  if (!cors_enabled(c)) return;
  if (!c->any) MHD_add_response_header(resp, "Vary", "Origin"); /* the answer depends on it */
  if (!allowed(c, origin)) return;
  MHD_add_response_header(resp, "Access-Control-Allow-Origin", c->any ? "*" : origin);
  MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                          "X-Request-Id, X-Session-Id, X-Session-Reset, Retry-After, "
                          "Idempotent-Replayed");
}

void cors_add_preflight_headers(const cors_cfg *c, const char *origin, const char *allow,
                                const char *req_headers, struct MHD_Response *resp) {
  if (!allowed(c, origin)) return;
  char methods[128];
  snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
  MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
  MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                          req_headers && *req_headers
                              ? req_headers
                              : "Authorization, Content-Type, X-Session-Id, X-Request-Id");
  MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
}
