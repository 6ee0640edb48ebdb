/*
 * http_cors.h: Cross-Origin Resource Sharing (the cors_origins option): which browser origins
 * may call the API, the headers every response carries for them (errors and streams included),
 * and the answer to a preflight (OPTIONS). Off by default (no CORS header is ever sent).
 * Thread: cors_parse/cors_free on the main thread at start; the rest on the loop thread.
 */
#ifndef XLS_HTTP_CORS_H
#define XLS_HTTP_CORS_H

#include <microhttpd.h>
#include <stddef.h>

typedef struct cors_cfg {
  int any;         /* "*": every origin */
  char **origins;  /* exact origins ("https://chat.example.com"), compared as sent */
  int n_origins;
} cors_cfg;

/* Parses "*" or a comma-separated list of origins (scheme://host[:port], no path); -1 with a
 * message naming the bad entry. */
int cors_parse(cors_cfg *c, const char *list, char *err, size_t errlen);
void cors_free(cors_cfg *c);
int cors_enabled(const cors_cfg *c);
/* Headers of an ordinary response to a request from `origin` (NULL: not a CORS request). */
void cors_add_headers(const cors_cfg *c, const char *origin, struct MHD_Response *resp);
/* Headers of a preflight's answer: the methods of the route (allow) and the request headers
 * the browser asked for (or the API's own when it named none). */
void cors_add_preflight_headers(const cors_cfg *c, const char *origin, const char *allow,
                                const char *req_headers, struct MHD_Response *resp);

#endif
