/*
 * routes.c: the routes table and its matcher (see routes.h). Thread: loop thread; pure.
 */
#include "routes.h"

#include <stdio.h>
#include <string.h>

#include "metrics.h"

const char *const ROUTE_NAMES[ROUTE_N] = {"other",       "health",           "metrics", "models",
                                          "completions", "chat_completions", "sessions", "ui",
                                          "tokenizer",   "version",          "responses"};
_Static_assert(ROUTE_N <= METRICS_ROUTES_MAX, "metrics count requests of at most this many routes");

/* The rows of one path stand together, in the order their methods are listed in Allow. */
static const route ROUTES[] = {
    /* the page; the API calls it makes need the key */
    {"GET, HEAD", "/", api_ui, ROUTE_UI, 0, 0, 0, BODY_DEFAULT},
    {"GET, HEAD", "/health", api_health, ROUTE_HEALTH, 0, 0, 1, BODY_DEFAULT},
    {"GET, HEAD", "/metrics", api_metrics, ROUTE_METRICS, 0, 0, 1, BODY_DEFAULT},
    {"GET, HEAD", "/v1/models", api_models_list, ROUTE_MODELS, 1, 0, 0, BODY_DEFAULT},
    {"GET, HEAD", "/v1/models/{id*}", api_model_get, ROUTE_MODELS, 1, 0, 0, BODY_DEFAULT},
    {"POST", "/tokenize", api_tokenize, ROUTE_TOKENIZER, 1, 1, 0, BODY_DEFAULT},
    {"POST", "/v1/tokenize", api_tokenize, ROUTE_TOKENIZER, 1, 1, 0, BODY_DEFAULT},
    {"POST", "/detokenize", api_detokenize, ROUTE_TOKENIZER, 1, 1, 0, BODY_DEFAULT},
    {"POST", "/v1/detokenize", api_detokenize, ROUTE_TOKENIZER, 1, 1, 0, BODY_DEFAULT},
    {"GET, HEAD", "/tokenizer_info", api_tokenizer_info, ROUTE_TOKENIZER, 1, 1, 0, BODY_DEFAULT},
    {"GET, HEAD", "/v1/tokenizer_info", api_tokenizer_info, ROUTE_TOKENIZER, 1, 1, 0,
     BODY_DEFAULT},
    {"GET, HEAD", "/version", api_version, ROUTE_VERSION, 0, 0, 0, BODY_DEFAULT},
    {"GET, HEAD", "/v1/version", api_version, ROUTE_VERSION, 0, 0, 0, BODY_DEFAULT},
    {"POST", "/v1/completions", api_completions, ROUTE_COMPLETIONS, 1, 1, 0, BODY_DEFAULT},
    {"POST", "/v1/chat/completions", api_chat_completions, ROUTE_CHAT, 1, 1, 0, BODY_DEFAULT},
    {"GET, HEAD", "/v1/sessions", api_sessions_list, ROUTE_SESSIONS, 1, 1, 0, BODY_DEFAULT},
    {"POST", "/v1/sessions", api_sessions_create, ROUTE_SESSIONS, 1, 1, 0, BODY_DEFAULT},
    {"GET, HEAD", "/v1/sessions/{id}", api_session_get, ROUTE_SESSIONS, 1, 1, 0, BODY_DEFAULT},
    {"DELETE", "/v1/sessions/{id}", api_session_delete, ROUTE_SESSIONS, 1, 1, 0, BODY_DEFAULT},
    {"POST", "/v1/sessions/{id}/fork", api_session_fork, ROUTE_SESSIONS, 1, 1, 0, BODY_DEFAULT},
    {"GET", "/v1/sessions/{id}/state", api_session_export, ROUTE_SESSIONS, 1, 1, 0, BODY_DEFAULT},
    {"PUT", "/v1/sessions/{id}/state", api_session_import, ROUTE_SESSIONS, 1, 1, 0,
     BODY_SESSION_STATE},
    {"POST", "/v1/responses", api_responses_create, ROUTE_RESPONSES, 1, 1, 0, BODY_DEFAULT},
    {"GET, HEAD", "/v1/responses/{id}", api_response_get, ROUTE_RESPONSES, 1, 1, 0, BODY_DEFAULT},
    {"DELETE", "/v1/responses/{id}", api_response_delete, ROUTE_RESPONSES, 1, 1, 0, BODY_DEFAULT},
    {"GET, HEAD", "/v1/responses/{id}/input_items", api_response_input_items, ROUTE_RESPONSES, 1,
     1, 0, BODY_DEFAULT},
    {"POST", "/v1/responses/{id}/cancel", api_response_cancel, ROUTE_RESPONSES, 1, 1, 0,
     BODY_DEFAULT},
};

/* Does `path` fit `pattern`? Sets the parameter's place in path. */
static int fits(const char *pattern, const char *path, const char **param, size_t *param_len) {
  *param = NULL;
  *param_len = 0;
  const char *open = strchr(pattern, '{');
  if (!open) return !strcmp(pattern, path);
  size_t lit = (size_t)(open - pattern);
  if (strncmp(pattern, path, lit)) return 0;
  const char *close = strchr(open, '}');
  const char *p = path + lit, *after = close + 1;
  if (close[-1] == '*') { /* the rest of the path */
    *param = p;
    *param_len = strlen(p);
    return *param_len > 0;
  }
  size_t n = strcspn(p, "/");
  if (!*after && n == 0) return 0; /* a trailing segment is never empty */
  *param = p;
  *param_len = n;
  return !strcmp(after, p + n);
}

/* Is `m` one of the words of `allow` ("GET, HEAD")? */
static int method_in(const char *allow, const char *m) {
  size_t n = strlen(m);
  for (const char *p = allow; (p = strstr(p, m)); p += n)
    if ((p == allow || p[-1] == ' ') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

int routes_match(const char *path, const char *method, route_match *m) {
  memset(m, 0, sizeof *m);
  int found = 0;
  size_t used = 0;
  for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
    const route *rt = &ROUTES[i];
    const char *param;
    size_t param_len;
    if (!fits(rt->pattern, path, &param, &param_len)) continue;
    if (!found) m->id = rt->id;
    int w = snprintf(m->allow + used, sizeof m->allow - used, "%s%s", found ? ", " : "",
                     rt->methods);
    if (w > 0) used += (size_t)w < sizeof m->allow - used ? (size_t)w : sizeof m->allow - used - 1;
    found = 1;
    if (!m->row && method_in(rt->methods, method)) {
      m->row = rt;
      m->param = param;
      m->param_len = param_len;
    }
  }
  return found;
}
